#!/usr/bin/env python3
"""Build the demo corpus PDFs from their Markdown sources.

Usage (from the project root):
    .venv/bin/python demo/build_pdfs.py

Every demo/pdf_sources/<group>/<name>.md becomes demo/corpus/<group>/<name>.pdf.
Only a tiny Markdown subset is understood, which is all the sources use:
"#", "##", "###" headings, "- " bullet items, "1. " numbered items and
paragraphs separated by blank lines. Consecutive lines of one paragraph are
joined with a space.

The PDFs use the standard Helvetica fonts, left-aligned text (no justification,
no hyphenation) and a fixed creation date, so that pypdf extracts the words
cleanly and a rebuild gives the same text.
"""
import os
import re
import sys
from xml.sax.saxutils import escape

from reportlab.lib import colors
from reportlab.lib.enums import TA_LEFT
from reportlab.lib.pagesizes import A4
from reportlab.lib.styles import ParagraphStyle
from reportlab.lib.units import mm
from reportlab.platypus import BaseDocTemplate, Frame, ListFlowable, ListItem, PageTemplate, Paragraph, Spacer

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "pdf_sources")
OUT = os.path.join(HERE, "corpus")

BODY = ParagraphStyle("body", fontName="Helvetica", fontSize=10.5, leading=14.5,
                      alignment=TA_LEFT, spaceAfter=6)
H1 = ParagraphStyle("h1", parent=BODY, fontName="Helvetica-Bold", fontSize=20, leading=24,
                    spaceBefore=0, spaceAfter=12, keepWithNext=True)
H2 = ParagraphStyle("h2", parent=BODY, fontName="Helvetica-Bold", fontSize=14.5, leading=18,
                    spaceBefore=12, spaceAfter=6, keepWithNext=True,
                    textColor=colors.HexColor("#0b5563"))
H3 = ParagraphStyle("h3", parent=BODY, fontName="Helvetica-Bold", fontSize=12, leading=15,
                    spaceBefore=8, spaceAfter=4, keepWithNext=True)
ITEM = ParagraphStyle("item", parent=BODY, spaceAfter=2)


def parse(md):
    """Yield blocks: ("h1"|"h2"|"h3"|"p", text) or ("ul"|"ol", [items])."""
    blocks, para, items, kind = [], [], [], None

    def flush():
        nonlocal para, items, kind
        if para:
            blocks.append(("p", " ".join(para)))
        if items:
            blocks.append((kind, items))
        para, items, kind = [], [], None

    for line in md.splitlines():
        s = line.strip()
        m_h = re.match(r"^(#{1,3})\s+(.*)$", s)
        m_ul = re.match(r"^[-*]\s+(.*)$", s)
        m_ol = re.match(r"^\d+\.\s+(.*)$", s)
        if not s:
            flush()
        elif m_h:
            flush()
            blocks.append((f"h{len(m_h.group(1))}", m_h.group(2)))
        elif m_ul or m_ol:
            new_kind = "ul" if m_ul else "ol"
            if para or (items and kind != new_kind):
                flush()
            kind = new_kind
            items.append((m_ul or m_ol).group(1))
        elif items:
            items[-1] += " " + s  # continuation line of a list item
        else:
            para.append(s)
    flush()
    return blocks


def build(src_path, pdf_path):
    with open(src_path, encoding="utf-8") as f:
        blocks = parse(f.read())
    title = next((t for k, t in blocks if k == "h1"), os.path.basename(src_path))
    story = []
    for kind, content in blocks:
        if kind in ("h1", "h2", "h3"):
            story.append(Paragraph(escape(content), {"h1": H1, "h2": H2, "h3": H3}[kind]))
        elif kind == "p":
            story.append(Paragraph(escape(content), BODY))
        else:
            flow = [ListItem(Paragraph(escape(t), ITEM), leftIndent=14) for t in content]
            if kind == "ul":
                lst = ListFlowable(flow, bulletType="bullet", start="-", leftIndent=14,
                                   bulletFontName="Helvetica")
            else:
                lst = ListFlowable(flow, bulletType="1", leftIndent=14, bulletFontName="Helvetica")
            story.append(lst)
            story.append(Spacer(1, 4))

    def footer(canvas, doc):
        canvas.saveState()
        canvas.setFont("Helvetica", 8)
        canvas.setFillColor(colors.grey)
        canvas.drawString(20 * mm, 12 * mm, "Northwind Lumen - internal")
        canvas.drawRightString(A4[0] - 20 * mm, 12 * mm, f"Page {doc.page}")
        canvas.restoreState()

    os.makedirs(os.path.dirname(pdf_path), exist_ok=True)
    doc = BaseDocTemplate(pdf_path, pagesize=A4, title=title, author="Northwind Lumen",
                          leftMargin=22 * mm, rightMargin=22 * mm,
                          topMargin=20 * mm, bottomMargin=22 * mm,
                          invariant=1)  # fixed dates and ids: reproducible output
    frame = Frame(doc.leftMargin, doc.bottomMargin, doc.width, doc.height, id="body")
    # The footer is drawn when a page is finished, so it comes after the page's
    # body text in the content stream (and in the extracted text).
    doc.addPageTemplates([PageTemplate(id="page", frames=[frame], onPageEnd=footer)])
    doc.build(story)


def main():
    built = 0
    for group in sorted(os.listdir(SRC)):
        gdir = os.path.join(SRC, group)
        if not os.path.isdir(gdir):
            continue
        for name in sorted(os.listdir(gdir)):
            if not name.endswith(".md"):
                continue
            pdf = os.path.join(OUT, group, name[:-3] + ".pdf")
            build(os.path.join(gdir, name), pdf)
            print("built", os.path.relpath(pdf, HERE))
            built += 1
    if not built:
        print("no sources found under", SRC, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
