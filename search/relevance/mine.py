"""Training pairs for the relevance model, mined from HTML manuals that Debian packages ship.

A manual's section headings are the questions its sections answer, so each (heading, section)
is a positive pair, and the other sections of the same page — same product, same vocabulary,
another answer — are the hard negatives that teach "on the topic" apart from "answers it". No
evaluation document is mined: the manuals are listed in `SOURCES` and none is a product of
../shared/eval or demo/eval.

    apt-get install python3.11-doc postgresql-doc-15 debian-handbook gnucash-docs gimp-help-en \
        libreoffice-help-en-us
    python -m search.relevance.mine pairs.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from lxml import etree  # type: ignore[import-untyped]
from lxml import html as lxml_html

SOURCES = {  # manual -> where its Debian package puts the HTML
    "python": "/usr/share/doc/python3.11/html",
    "postgresql": "/usr/share/doc/postgresql-doc-15/html",
    "debian-handbook": "/usr/share/doc/debian-handbook/html/en-US",
    "gnucash-guide": "/usr/share/doc/gnucash-docs/gnucash-guide-en",
    "gnucash-help": "/usr/share/doc/gnucash-docs/gnucash-help-en",
    "gimp": "/usr/share/gimp/2.0/help/en",
    "libreoffice": "/usr/share/libreoffice/help/en-US",
}
HEADINGS = {"h1", "h2", "h3", "h4", "h5"}
BLOCKS = {"p", "li", "pre", "dd", "dt", "td", "th", "caption", "blockquote"}
# Headings that name a kind of section rather than what it answers.
GENERIC = {"introduction", "overview", "description", "see also", "examples", "example", "notes", "note",
           "parameters", "synopsis", "summary", "contents", "table of contents", "related topics",
           "navigation", "footnotes", "options", "compatibility", "outputs", "diagnostics", "usage",
           "prerequisites", "index", "search page", "copyright", "history", "license", "bugs", "files",
           "environment", "return value", "exit status", "authors", "references", "further reading"}
NUMBERING = re.compile(r"^\s*(?:chapter\s+|section\s+|appendix\s+)?[\dA-Z]{0,3}(?:\.\d+)*\.?\s+", re.I)
SPACE = re.compile(r"\s+")
UTF8 = lxml_html.HTMLParser(encoding="utf-8")
MIN_WORDS, MAX_WORDS = 25, 130  # a section shorter than this answers nothing; longer is cut like a chunk


@dataclass
class Section:
    title: str  # the page's title
    parent: str  # the heading this section sits under ('' at the top)
    heading: str
    body: str


def _text(element: lxml_html.HtmlElement) -> str:
    return SPACE.sub(" ", element.text_content()).replace("¶", "").strip()


def _heading(text: str) -> str:
    return NUMBERING.sub("", text).strip(" :.")


def sections(path: Path) -> list[Section]:
    """A page's sections: each heading with the block text up to the next heading."""
    try:  # the packages' manuals are UTF-8, whether or not a page says so
        root = lxml_html.document_fromstring(path.read_bytes(), parser=UTF8)
    except (OSError, ValueError, etree.ParserError):
        return []
    for junk in root.xpath("//script|//style|//nav|//*[@role='navigation']|//*[contains(@class,'sphinxsidebar')]"
                           "|//*[contains(@class,'related')]|//*[contains(@class,'navheader')]"
                           "|//*[contains(@class,'navfooter')]|//*[contains(@class,'toc')]"):
        junk.drop_tree()
    titles = root.xpath("//title")
    title = _heading(_text(titles[0]).split("—")[0].split(" - ")[0]) if titles else ""
    found: list[Section] = []
    levels: dict[int, str] = {}
    current: Section | None = None
    body: list[str] = []

    def close() -> None:
        if current is not None and body:
            current.body = " ".join(body)
            found.append(current)

    for element in root.iter():
        tag = element.tag if isinstance(element.tag, str) else ""
        if tag in HEADINGS:
            close()
            level = int(tag[1])
            heading = _heading(_text(element))
            levels = {k: v for k, v in levels.items() if k < level}
            parent = levels[max(levels)] if levels else ""
            levels[level] = heading
            current, body = Section(title, parent, heading, ""), []
        elif tag in BLOCKS and current is not None and not any(a.tag in BLOCKS for a in element.iterancestors()):
            text = _text(element)
            if text:
                body.append(text)
    close()
    return found


def usable(section: Section) -> bool:
    words = section.heading.split()
    return (2 <= len(words) <= 14 and section.heading.lower() not in GENERIC
            and len(section.body.split()) >= MIN_WORDS and not section.heading.startswith(("http", "/")))


def passage(section: Section) -> str:
    """The section as a chunk reads: a breadcrumb without its own heading (the model must read the
    body, not match the heading), then the body cut to `MAX_WORDS` words."""
    crumbs = list(dict.fromkeys(c for c in (section.title, section.parent) if c and c != section.heading))
    body = " ".join(section.body.split()[:MAX_WORDS])
    return f"[{' > '.join(crumbs)}]\n{body}" if crumbs else body


def query(section: Section, rng: random.Random) -> str:
    """The heading as a person might ask it: alone, with the product's name, or as a question."""
    heading = section.heading
    if heading.endswith("?"):
        return heading
    lowered = heading[0].lower() + heading[1:]
    product = section.title if section.title and section.title != heading else ""
    suffix = f" in {product}" if product and rng.random() < 0.4 else ""
    roll = rng.random()
    if roll < 0.25:
        return f"{product}: {heading}" if product and rng.random() < 0.5 else heading
    if heading.split()[0].lower().endswith("ing"):
        return rng.choice(("How do I go about ", "Help with ", "I need help ", "Question about ")) + lowered + suffix + "?"
    return rng.choice(("What is ", "How does ", "Where do I find ", "Tell me about ", "How do I use ",
                       "What should I know about ")) + lowered + suffix + "?"


def pairs(pages: list[list[Section]], rng: random.Random, *, negatives: int = 4) -> Iterator[dict[str, object]]:
    """One group per usable section: its query, its passage, and `negatives` other passages —
    two siblings of the same page (hard), then random sections of other pages. Every group has the
    same size (training stacks them), so a section without enough others is left out."""
    for p, page in enumerate(pages):
        kept = [s for s in page if usable(s)]
        others = [other for other in pages if other is not page and other]
        for i, section in enumerate(kept):
            siblings = [s for j, s in enumerate(kept) if j != i and s.heading != section.heading]
            rng.shuffle(siblings)
            chosen = siblings[:2]
            while len(chosen) < negatives and others:
                other = others[rng.randrange(len(others))]
                chosen.append(other[rng.randrange(len(other))])
            if len(chosen) < negatives:
                continue
            yield {"page": p, "query": query(section, rng), "positive": passage(section),
                   "negatives": [passage(s) for s in chosen]}


def html_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.html") if "genindex" not in p.name and "search" != p.stem)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    written = 0
    with args.out.open("w") as out:
        for name, where in SOURCES.items():
            root = Path(where)
            if not root.is_dir():
                print(f"{name}: {where} is missing; install its package", file=sys.stderr)
                return 2
            pages = [s for s in (sections(p) for p in html_files(root)) if s]
            count = 0
            for group in pairs(pages, rng):
                out.write(json.dumps({"source": name, **group}) + "\n")
                count += 1
            print(f"{name}: {len(pages)} pages, {count} groups", file=sys.stderr)
            written += count
    print(f"{written} groups -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
