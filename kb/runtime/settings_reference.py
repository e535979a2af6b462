"""docs/SETTINGS.md, generated from the code: every environment variable the product reads, with its
default and the comment written beside it, so the reference cannot drift from what the code does.

`python -m kb.runtime.settings_reference --write` rewrites the page; tests/kb/test_settings_reference.py
fails when the page is out of date or a setting has no comment to explain it. A setting is a read with
a literal name: `env_*("NAME", default)` (kb.env) or `os.environ.get("NAME")`, `os.environ["NAME"]`,
`os.getenv("NAME")`. Its meaning is the comment block directly above the statement and the comment at the
end of its lines. In kb/settings.py a comment line ending in dashes (`# Answers ----`) starts a section.
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import sys
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "SETTINGS.md"
SETTINGS = Path("kb/settings.py")
# Serving code only: the lab, the tests and the benchmarks read variables of their own.
PACKAGES = ("kb", "accounts", "search", "chat")
READERS = {"env_str", "env_bool", "env_int", "env_float", "env_list", "env_secret", "env_choice", "env_networks"}
_SECTION = re.compile(r"^#\s*(.+?)\s*-{3,}\s*$")
_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


@dataclass
class Setting:
    name: str
    default: str
    secret: bool
    meaning: list[str] = field(default_factory=list)
    places: list[str] = field(default_factory=list)


def _comments(source: str) -> dict[int, tuple[str, bool]]:
    """Line number → (comment text, whether the comment is the whole line)."""
    found: dict[int, tuple[str, bool]] = {}
    lines = source.splitlines()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            row, col = token.start
            found[row] = (token.string.lstrip("#").strip(), not lines[row - 1][:col].strip())
    return found


def _read_name(node: ast.AST) -> tuple[str, ast.expr | None, bool] | None:
    """(variable, default expression, secret) when `node` reads an environment variable by a literal name."""
    if isinstance(node, ast.Call):
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        environ_get = (isinstance(func, ast.Attribute) and func.attr == "get"
                       and isinstance(func.value, ast.Attribute) and func.value.attr == "environ")
        if name in READERS or environ_get or name == "getenv":
            if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                default = node.args[1] if len(node.args) > 1 else None
                return node.args[0].value, default, name == "env_secret"
    if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "environ"
            and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)
            and isinstance(getattr(node, "ctx", None), ast.Load)):
        return node.slice.value, None, False
    return None


def _statement_lines(tree: ast.Module) -> list[tuple[int, ast.stmt]]:
    """Every simple statement with its first line (compound statements are entered)."""
    out: list[tuple[int, ast.stmt]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and not isinstance(
            node, ast.If | ast.For | ast.While | ast.With | ast.Try | ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef
        ):
            out.append((node.lineno, node))
    return sorted(out, key=lambda item: item[0])


def _block_above(line: int, comments: dict[int, tuple[str, bool]]) -> list[str]:
    """The comment lines directly above `line` (a section header is not one)."""
    row = line - 1
    block: list[str] = []
    while row in comments and comments[row][1] and not _SECTION.match("# " + comments[row][0]):
        block.insert(0, comments[row][0])
        row -= 1
    return block


def _section_of(line: int, comments: dict[int, tuple[str, bool]]) -> str:
    headers = [(row, m.group(1)) for row, (text, whole) in comments.items()
               if whole and row < line and (m := _SECTION.match("# " + text))]
    return max(headers)[1] if headers else ""


def collect(root: Path = ROOT) -> dict[str, dict[str, Setting]]:
    """Section → variable → Setting, over kb/settings.py first and then every other serving module."""
    files = [root / SETTINGS] + sorted(
        p for package in PACKAGES for p in (root / package).rglob("*.py")
        if p != root / SETTINGS and "migrations" not in p.parts and p.name != Path(__file__).name
    )
    sections: dict[str, dict[str, Setting]] = {}
    seen: dict[str, Setting] = {}
    for path in files:
        source = path.read_text()
        comments = _comments(source)
        relative = path.relative_to(root).as_posix()
        for first, statement in _statement_lines(ast.parse(source)):
            for node in ast.walk(statement):
                read = _read_name(node)
                if read is None or not _NAME.match(read[0]):
                    continue
                name, default, secret = read
                setting = seen.get(name)
                if setting is None:
                    section = _section_of(first, comments) if path == root / SETTINGS else f"Read in {relative}"
                    setting = Setting(name, ast.get_source_segment(source, default) or "" if default else "", secret)
                    seen[name] = setting
                    sections.setdefault(section or "General", {})[name] = setting
                # The block above the statement, and end-of-line comments on the read's own lines (a list of
                # several reads in one statement gives each its own).
                start = getattr(node, "lineno", first)
                own = range(start, (getattr(node, "end_lineno", None) or start) + 1)
                block = _block_above(start, comments) or _block_above(first, comments)
                notes = [*block, *(comments[row][0] for row in own if row in comments and not comments[row][1])]
                setting.meaning += [note for note in notes if note not in setting.meaning]
                if relative not in setting.places:
                    setting.places.append(relative)
    return sections


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(sections: dict[str, dict[str, Setting]]) -> str:
    out = [
        "# Settings reference",
        "",
        "Every environment variable the product reads, generated from the code by",
        "`python -m kb.runtime.settings_reference --write` (do not edit by hand: a test fails when this page",
        "is out of date or a setting has no comment in the code to explain it). A secret also reads from a file",
        "named by `NAME_FILE` (Docker and Kubernetes secrets). Defaults are as written in the code.",
        "",
        "A source's credential has a setting named after the source: `KB_SOURCE_<NAME>_TOKEN` (or its `_FILE`),",
        "and a Git source's push webhook secret `KB_SOURCE_<NAME>_WEBHOOK_SECRET` (or its `_FILE`), NAME in",
        "capitals with other characters as `_` (kb/library/sources/secrets.py; docs/SOURCES.md).",
        "",
    ]
    for section, settings in sections.items():
        out += [f"## {section}", "", "| variable | default | meaning | read in |", "| --- | --- | --- | --- |"]
        for s in settings.values():
            name = f"`{s.name}` (or `{s.name}_FILE`)" if s.secret else f"`{s.name}`"
            default = f"`{_cell(s.default)}`" if s.default else "—"
            places = ", ".join(f"`{p}`" for p in s.places)
            out.append(f"| {name} | {default} | {_cell(' '.join(s.meaning))} | {places} |")
        out.append("")
    return "\n".join(out)


def unexplained(sections: dict[str, dict[str, Setting]]) -> list[str]:
    return [s.name for settings in sections.values() for s in settings.values() if not s.meaning]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite {PAGE.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    text = render(collect())
    if args.write:
        PAGE.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
