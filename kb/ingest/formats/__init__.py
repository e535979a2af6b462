"""One module per file format beyond the built-in Markdown, text, HTML, PDF and DOCX readers.

Each reduces its format to the shared canonical text + heading tree of kb.ingest.extract
(blocks joined by blank lines, headings as `#` lines), so chunking, citations and the
viewer treat every format alike. Parser libraries are imported inside the functions.
"""

from kb.ingest.formats import epub, mail, ocr, odt, rst, rtf, sheets, slides

__all__ = ["epub", "mail", "ocr", "odt", "rst", "rtf", "sheets", "slides"]
