"""reStructuredText through docutils: section titles become the heading tree.

Sphinx documentation is full of roles and directives docutils does not know
(`:ref:`, `:pep:`, `.. versionadded::`, `.. toctree::`). They must not cost the
document: an unknown role is rendered as its text, an unknown directive as its
arguments and body, and docutils' own complaints are never part of the text.
Include directives and raw passthrough are disabled: an upload never reads the server's files.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator
from typing import TYPE_CHECKING

from kb.library.ingest.canonical import (
    RST,
    Block,
    Extracted,
    ExtractionError,
    ReadOptions,
    decode,
    from_blocks,
    heading_block,
    reading,
    reads,
)

if TYPE_CHECKING:
    from docutils import nodes

_SETTINGS = {
    "report_level": 5,  # quiet: problems are handled below, not printed
    "halt_level": 5,  # never stop on an error
    "file_insertion_enabled": False,
    "raw_enabled": False,
    "doctitle_xform": False,  # keep the top title a heading (level 1) like every other format
    "sectsubtitle_xform": False,
    "input_encoding": "unicode",
    "_disable_config": True,
    "warning_stream": False,
    "syntax_highlight": "none",
    "line_length_limit": 100_000,
}
# `:role:`text <target>`` or `:role:`text``: what a reader sees is the text.
_ROLE = re.compile(r"^:[\w.:+-]+:`(?P<body>.*)`$", re.DOTALL)
_ROLE_TARGET = re.compile(r"^(?P<text>.*?)\s*<[^<>]*>$", re.DOTALL)
_DIRECTIVE = re.compile(r"^\.\.\s+(?P<name>[\w.:+-]+)::[ \t]*(?P<args>.*)$")
_NAVIGATION = {"toctree", "autosummary", "index"}  # lists of other pages, not content
_OPTION = re.compile(r"^\s*:[\w -]+:")


@reads(RST)
def extract(data: bytes, name: str, options: ReadOptions) -> Extracted:
    return _extract(decode(data, name), name)


def _extract(text: str, name: str) -> Extracted:
    from docutils.core import publish_doctree

    if not text.strip():
        raise ExtractionError(f"{name}: the file is empty")
    with reading(name, "reStructuredText"):
        tree = publish_doctree(text, settings_overrides=_SETTINGS)
        blocks = list(_blocks(tree, depth=0))
    return from_blocks(blocks, title=None)


def _blocks(node: nodes.Node, *, depth: int, prefix: str = "") -> Iterator[Block]:
    from docutils import nodes

    for child in node.children:
        if isinstance(child, nodes.section):
            yield from _blocks(child, depth=depth + 1)
        elif isinstance(child, nodes.title):
            title = " ".join(_inline(child).split())
            if title and isinstance(node, nodes.section):
                yield heading_block(min(depth, 6), title)
            elif title:  # the title of an admonition, topic or sidebar
                yield Block(text=title)
        elif isinstance(child, nodes.system_message):
            yield from _unknown_directive(child)
        elif isinstance(child, (nodes.comment, nodes.target, nodes.substitution_definition, nodes.raw)):
            continue
        elif isinstance(child, nodes.topic) and "contents" in child["classes"]:
            continue  # the generated table of contents repeats the headings
        elif isinstance(child, nodes.field):
            field = " ".join(_inline(child.children[0]).split())
            body = " ".join(_inline(child.children[1]).split()) if len(child.children) > 1 else ""
            if field or body:
                yield Block(text=f"{field}: {body}")
        elif isinstance(child, (nodes.literal_block, nodes.doctest_block)):
            code = child.astext().strip("\n").rstrip()
            if code.strip():
                yield Block(text=code)
        elif isinstance(child, nodes.image):
            alt = " ".join(str(child.get("alt", "")).split())
            if alt:
                yield Block(text=f"![{alt}]({child.get('uri', '')})")
        elif isinstance(child, (nodes.bullet_list, nodes.enumerated_list)):
            for i, item in enumerate(child.children, start=1):
                mark = f"{i}. " if isinstance(child, nodes.enumerated_list) else "- "
                yield from _blocks(item, depth=depth, prefix=mark)
        elif isinstance(child, nodes.table):
            rows = [" | ".join(" ".join(_inline(e).split()) for e in row.children) for row in child.findall(nodes.row)]
            if rows:
                yield Block(text="\n".join(rows))
        elif isinstance(child, nodes.Admonition) and not isinstance(child, nodes.admonition):
            # note, warning, tip...: their kind is part of the meaning ("Warning: never ...")
            yield from _blocks(child, depth=depth, prefix=child.tagname.capitalize() + ": ")
        elif isinstance(child, nodes.TextElement):
            text = _inline(child).strip()
            if text:
                yield Block(text=prefix + re.sub(r"\n{2,}", "\n", text))
                prefix = ""
        elif isinstance(child, nodes.Element):
            yield from _blocks(child, depth=depth, prefix=prefix)
            prefix = ""


def _inline(node: nodes.Node) -> str:
    """The text of an inline run; unknown roles (docutils 'problematic' nodes) degrade to their text."""
    from docutils import nodes

    if isinstance(node, nodes.Text):
        return str(node.astext())  # not str(node): that keeps docutils' NUL markers of backslash escapes
    if isinstance(node, nodes.problematic):
        raw = str(node.astext())
        if m := _ROLE.match(raw):
            body = m.group("body")
            target = _ROLE_TARGET.match(body)
            return (target.group("text") or body) if target else body
        return raw
    if isinstance(node, (nodes.system_message, nodes.footnote, nodes.citation)):
        return ""
    return "".join(_inline(child) for child in node.children) if isinstance(node, nodes.Element) else node.astext()


def _unknown_directive(message: nodes.system_message) -> Iterator[Block]:
    """An unknown directive's arguments and body as text (docutils keeps the source in the message)."""
    from docutils import nodes

    source = next(iter(message.findall(nodes.literal_block)), None)
    if source is None or "Unknown directive type" not in message.astext():
        return
    first, _, rest = source.astext().partition("\n")
    m = _DIRECTIVE.match(first.strip())
    if m and m.group("name") in _NAVIGATION:
        return
    lines = textwrap.dedent(rest).splitlines()
    while lines and (_OPTION.match(lines[0]) or not lines[0].strip()):  # the directive's options
        lines.pop(0)
    text = "\n".join(([m.group("args")] if m and m.group("args") else []) + lines).strip()
    for paragraph in re.split(r"\n\s*\n", text):
        if paragraph.strip():
            yield Block(text=paragraph.strip())
