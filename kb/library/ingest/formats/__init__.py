"""One module per file format; each registers its reader with `kb.library.ingest.canonical.reads` on import.

Each reduces its format to the shared canonical text + heading tree of kb.library.ingest.canonical
(blocks joined by blank lines, headings as `#` lines), so chunking, citations and the
viewer treat every format alike. Parser libraries are imported inside the functions.
A new format is one module here and its name below.
"""

from kb.library.ingest.formats import docx, epub, html, mail, ocr, odt, pdf, rst, rtf, sheets, slides, text

__all__ = ["docx", "epub", "html", "mail", "ocr", "odt", "pdf", "rst", "rtf", "sheets", "slides", "text"]
