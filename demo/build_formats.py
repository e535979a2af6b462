#!/usr/bin/env python3
"""Build the documents of demo/eval-formats/corpus that are written by a script, and check the set.

Usage (from the project root):
    .venv/bin/python demo/build_formats.py           # (re)build the generated documents, then check
    .venv/bin/python demo/build_formats.py --check   # only check

The text of the generated documents is written for this project (the fictional Northwind
Lumen company of demo/README.md); the files are written by the libraries people's tools
use (python-pptx, openpyxl, odfpy, ebooklib, the standard library's email package,
reportlab), RTF by hand. The real documents of the set (docutils .rst pages, matplotlib's
msft.csv) are committed as they were published; see demo/eval-formats/README.md.

The check extracts every document with the knowledge base's own extractor and verifies
that each needle occurs exactly once in the whole corpus, in its document, and not in a heading.
"""

from __future__ import annotations

import io
import json
import sys
import textwrap
from email.message import EmailMessage
from pathlib import Path

HERE = Path(__file__).resolve().parent
SET = HERE / "eval-formats"
CORPUS = SET / "corpus"
sys.path.insert(0, str(HERE.parent))

# --------------------------------------------------------------------------- PowerPoint

DECK = [
    ("Incident review: the Rotterdam tracking outage", [
        "Tracking updates for the Rotterdam hub stopped for 47 minutes on 3 March.",
        "Customers saw stale positions; no shipment data was lost.",
    ], "Open with the customer impact, not the root cause."),
    ("Timeline", [
        "09:12 the ingest queue started to grow.",
        "09:31 the on-call engineer paged the platform team.",
        "09:59 tracking updates flowed again after the consumer restart.",
    ], ""),
    ("Root cause", [
        "A certificate on the carrier feed expired, so every message from that carrier was retried forever and blocked the queue.",
    ], "The certificate had been renewed in staging only; production still held the old one."),
    ("Actions", [
        "Certificate expiry is now checked daily by the cert-watch job, which alerts 21 days before a certificate expires.",
        "Poison messages move to the dead-letter queue after five failed attempts.",
    ], "Ask Dana to present the dead-letter dashboard next week."),
]


def build_pptx(path: Path) -> None:
    import pptx

    deck = pptx.Presentation()
    deck.core_properties.title = "Incident review: Rotterdam tracking outage"
    for title, bullets, notes in DECK:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        frame = slide.placeholders[1].text_frame
        frame.text = bullets[0]
        for line in bullets[1:]:
            frame.add_paragraph().text = line
        if notes:
            slide.notes_slide.notes_text_frame.text = notes
    deck.save(str(path))


# --------------------------------------------------------------------------- Excel

RATES_HEADER = ["City", "Country", "Daily allowance (EUR)", "Hotel cap per night (EUR)", "Approver"]
RATES = [
    ["Lisbon", "Portugal", 62, 140, "Team lead"],
    ["Rotterdam", "Netherlands", 71, 165, "Team lead"],
    ["Hamburg", "Germany", 68, 150, "Team lead"],
    ["Warsaw", "Poland", 55, 120, "Team lead"],
    ["London", "United Kingdom", 85, 210, "Finance director"],
    ["New York", "United States", 95, 290, "Finance director"],
    ["Singapore", "Singapore", 80, 240, "Finance director"],
]
MILEAGE_HEADER = ["Vehicle", "Rate per km (EUR)", "Notes"]
MILEAGE = [
    ["Private car", 0.30, "Claim the shortest route; parking is claimed separately with a receipt."],
    ["Electric car", 0.25, "Charging at home is included in the rate."],
    ["Bicycle", 0.19, "Also paid for commuting between two Northwind sites on the same day."],
]


def build_xlsx(path: Path) -> None:
    import openpyxl

    book = openpyxl.Workbook()
    book.properties.title = "Travel rates 2026"
    rates = book.active
    rates.title = "Per diem"
    rates.append(RATES_HEADER)
    for row in RATES:
        rates.append(row)
    mileage = book.create_sheet("Mileage")
    mileage.append(MILEAGE_HEADER)
    for row in MILEAGE:
        mileage.append(row)
    book.save(str(path))


# --------------------------------------------------------------------------- OpenDocument

ONBOARDING = [
    ("h", 1, "Onboarding guide for new warehouse staff"),
    ("p", 0, "This guide walks you through your first two weeks at a Northwind Lumen warehouse."),
    ("h", 2, "Your first day"),
    ("p", 0, "Report to the site office at 08:00, where the shift coordinator hands you your badge, "
             "safety shoes and a locker key."),
    ("p", 0, "You spend the morning with the safety officer, who shows you the emergency exits, "
             "the assembly point and the first-aid stations."),
    ("h", 2, "Forklift certificate"),
    ("p", 0, "Nobody drives a forklift at Northwind without the internal FL-2 certificate, even with a licence "
             "from a previous employer."),
    ("p", 0, "The FL-2 course takes three half-days and ends with a practical test on the training lane "
             "behind dock 6."),
    ("h", 2, "Buddy system"),
    ("p", 0, "Every new colleague gets a buddy from the same shift for the first two weeks; "
             "your buddy signs off each item of the onboarding checklist with you."),
]


def build_odt(path: Path) -> None:
    from odf.opendocument import OpenDocumentText
    from odf.text import H, P

    document = OpenDocumentText()
    for kind, level, text in ONBOARDING:
        element = H(outlinelevel=level, text=text) if kind == "h" else P(text=text)
        document.text.addElement(element)
    out = io.BytesIO()
    document.write(out)
    path.write_bytes(out.getvalue())


# --------------------------------------------------------------------------- EPUB

MANUAL = [
    ("Arriving at a depot", "<h1>Arriving at a depot</h1>"
     "<p>Drivers announce themselves at the gatehouse intercom and give the booking reference "
     "printed on the transport order.</p>"
     "<h2>Waiting area</h2>"
     "<p>Trucks that arrive more than 30 minutes before their slot wait in the lay-by on the access road, "
     "not on the yard.</p>"),
    ("Loading and unloading", "<h1>Loading and unloading</h1>"
     "<p>The dock master assigns a door on the yard screen; the door number also appears on the driver app.</p>"
     "<h2>Seals</h2>"
     "<p>The driver checks that the seal number on the trailer matches the number on the CMR "
     "before the doors are opened.</p>"),
    ("Leaving the depot", "<p>Before leaving, drivers return the visitor badge at the gatehouse and collect "
     "the signed delivery note from the dock office.</p>"),
]


def build_epub(path: Path) -> None:
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("northwind-driver-manual-2026")
    book.set_title("Driver manual")
    book.set_language("en")
    chapters = []
    for n, (title, html) in enumerate(MANUAL, start=1):
        chapter = epub.EpubHtml(title=title, file_name=f"chapter{n}.xhtml", lang="en")
        chapter.content = html
        book.add_item(chapter)
        chapters.append(chapter)
    book.toc = tuple(chapters)
    book.spine = chapters
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    epub.write_epub(str(path), book)


# --------------------------------------------------------------------------- e-mail

NOTICE = """Hello all,

The planning database moves to the new cluster on Saturday night. Lumen Console is read-only \
from 22:00 to 02:00 CET while the data is copied; tracking keeps running.

If you need to change a booking during the window, call the duty planner on extension 4410 \
instead of using the console.

Thanks,
Platform team
"""


def build_eml(path: Path) -> None:
    message = EmailMessage()
    message["From"] = "Platform team <platform@northwind-lumen.example>"
    message["To"] = "all-engineering@northwind-lumen.example"
    message["Date"] = "Thu, 12 Nov 2026 16:05:00 +0100"
    message["Subject"] = "Planning database migration on Saturday"
    message.set_content(NOTICE)
    message.add_alternative("<html><body><p>" + NOTICE.replace("\n\n", "</p><p>") + "</p></body></html>", subtype="html")
    message.add_attachment(b"window,start,end\nread-only,22:00,02:00\n", maintype="text", subtype="csv",
                           filename="migration-window.csv")
    path.write_bytes(bytes(message))


# --------------------------------------------------------------------------- RTF

MEMO = [
    "Canteen and coffee rules at the Hamburg office",
    "The canteen on the ground floor serves lunch from 11:30 to 14:00 on working days.",
    "Pay with your badge; the amount is deducted from your salary at the end of the month.",
    "The caf\u00e9 corner on the second floor is self-service: rinse your cup and put it in the dishwasher.",
]


def _rtf_escape(text: str) -> str:
    return "".join(c if ord(c) < 128 and c not in "\\{}" else f"\\'{ord(c):02x}" if ord(c) < 256 else "?" for c in text)


def build_rtf(path: Path) -> None:
    body = "\\par\\par ".join(_rtf_escape(line) for line in MEMO)
    path.write_bytes(
        ("{\\rtf1\\ansi\\ansicpg1252\\deff0{\\fonttbl{\\f0\\fswiss Arial;}}"
         "{\\info{\\title Canteen memo}}\\f0\\fs22 " + body + "\\par}").encode("ascii")
    )


# --------------------------------------------------------------------------- PDF across a page break

HANDBOOK_FILLER = (
    "Aisle {n} of the Hamburg warehouse holds {what}; pickers scan the aisle label before the first pick "
    "of a wave so that the handheld can plan the shortest walk."
)
HANDBOOK_ANSWER = (
    "Pallets heavier than 900 kilograms are never stored above the second rack level, and the reach truck "
    "driver must confirm the weight on the handheld before lifting."
)


def build_pdf(path: Path) -> None:
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    goods = ["spare parts", "packaging", "returns", "textiles", "electronics", "furniture", "tyres", "books",
             "food in dry storage", "garden tools", "paint", "toys", "sports goods", "office supplies"]
    paragraphs = [HANDBOOK_FILLER.format(n=n, what=what) for n, what in enumerate(goods, start=1)]
    lines: list[str] = []
    for paragraph in paragraphs[:10]:
        lines += _wrap(paragraph)
    answer = _wrap(HANDBOOK_ANSWER, width=52)
    pages = [lines + answer[:1], answer[1:]]
    for paragraph in paragraphs[10:]:
        pages[1] += _wrap(paragraph)
    pdf = canvas.Canvas(str(path), pagesize=A4, invariant=True)
    pdf.setTitle("Hamburg warehouse handbook")
    _, height = A4
    for number, page in enumerate(pages, start=1):
        pdf.setFont("Helvetica", 10)
        pdf.drawString(56, height - 40, "Northwind Lumen - Hamburg warehouse handbook")
        y = height - 80
        for line in page:
            pdf.drawString(56, y, line)
            y -= 14
        pdf.drawString(290, 30, f"Page {number} of {len(pages)}")
        pdf.showPage()
    pdf.save()


def _wrap(text: str, width: int = 92) -> list[str]:
    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False)


BUILDERS = {
    "engineering/incident-review-rotterdam.pptx": build_pptx,
    "finance/travel-rates-2026.xlsx": build_xlsx,
    "hr/onboarding-warehouse-staff.odt": build_odt,
    "everyone/driver-manual.epub": build_epub,
    "engineering/planning-db-migration.eml": build_eml,
    "everyone/canteen-memo.rtf": build_rtf,
    "everyone/hamburg-warehouse-handbook.pdf": build_pdf,
}


# --------------------------------------------------------------------------- check


def check() -> list[str]:
    from kb.library.ingest.extract import detect_mime, extract

    def norm(text: str) -> str:
        return " ".join(text.split())

    texts, heading_texts = {}, {}
    for path in sorted(p for p in CORPUS.rglob("*") if p.is_file()):
        data = path.read_bytes()
        rel = path.relative_to(CORPUS).as_posix()
        extracted = extract(data=data, mime=detect_mime(filename=path.name, head=data[:8192]), filename=path.name)
        texts[rel] = norm(extracted.text)
        heading_texts[rel] = [norm(h.title) for h in extracted.headings]
    problems = []
    questions = [json.loads(line) for line in (SET / "questions.jsonl").read_text().splitlines()]
    by_gt: dict[str, list[dict[str, object]]] = {}
    for q in questions:
        by_gt.setdefault(str(q["gt"]), []).append(q)
        needle, doc = str(q["needle"]), str(q["doc"])
        if not 40 <= len(needle) <= 250:
            problems.append(f"{q['id']}: needle length {len(needle)}")
        if doc not in texts or needle not in texts[doc]:
            problems.append(f"{q['id']}: needle not in {doc}")
        total = sum(t.count(needle) for t in texts.values())
        if total != 1:
            problems.append(f"{q['id']}: needle occurs {total} times in the corpus")
        if any(needle in h for h in heading_texts.get(doc, [])):
            problems.append(f"{q['id']}: needle is a heading")
    for gt, pair in by_gt.items():
        if sorted(str(q["phrasing"]) for q in pair) != ["doc", "ticket"]:
            problems.append(f"{gt}: needs one doc and one ticket phrasing")
    acl = json.loads((SET / "acl.json").read_text())
    if set(acl["groups"]) != set(texts):
        problems.append("acl.json groups do not list exactly the corpus documents")
    return problems


def main() -> int:
    if "--check" not in sys.argv:
        for rel, build in BUILDERS.items():
            target = CORPUS / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            build(target)
    problems = check()
    for problem in problems:
        print(problem)
    print("OK: all checks passed" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
