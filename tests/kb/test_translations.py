"""The interface's catalogs (locale/<language>/LC_MESSAGES/django.po and djangojs.po): every entry translated and
none fuzzy, each translation keeping the %(name)s placeholders of its source, and the committed .mo files
compiled from the .po files as they are (CI may have no msgfmt: Django reads the .mo files, so a stale one
would show an old or English sentence without any test noticing)."""

from __future__ import annotations

import ast
import gettext
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.conf import settings

LOCALE = Path(__file__).resolve().parents[2] / "locale"
LANGUAGES = ["pl", "de", "zh_Hans"]
DOMAINS = ["django", "djangojs"]
CATALOGS = [LOCALE / language / "LC_MESSAGES" / f"{domain}.po" for language in LANGUAGES for domain in DOMAINS]
PLACEHOLDER = re.compile(r"%\((\w+)\)[sd]")


@dataclass
class Entry:
    flags: set[str] = field(default_factory=set)
    fields: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """As gettext stores it: "context\\x04msgid"."""
        context = self.fields.get("msgctxt")
        return f"{context}\x04{self.fields['msgid']}" if context is not None else self.fields["msgid"]

    @property
    def translations(self) -> dict[int, str]:
        plural = {int(k[7:-1]): v for k, v in self.fields.items() if k.startswith("msgstr[")}
        return plural or {0: self.fields.get("msgstr", "")}


def po_entries(path: Path) -> list[Entry]:
    """The entries of a .po file (obsolete `#~` ones left out), the header first."""
    entries: list[Entry] = []
    for block in path.read_text(encoding="utf-8").strip().split("\n\n"):
        entry, key = Entry(), ""
        for line in block.splitlines():
            if line.startswith("#,"):
                entry.flags |= {flag.strip() for flag in line[2:].split(",")}
            elif line.startswith("#"):
                continue
            elif line.startswith('"'):
                entry.fields[key] += ast.literal_eval(line)
            else:
                key, _, value = line.partition(" ")
                entry.fields[key] = ast.literal_eval(value)
        if "msgid" in entry.fields:
            entries.append(entry)
    return entries


def test_every_language_the_interface_offers_has_its_catalogs() -> None:
    offered = {code for code, _ in settings.LANGUAGES} - {"en"}
    assert offered == {"pl", "de", "zh-hans"} and settings.LOCALE_PATHS == [LOCALE]
    assert all(path.exists() and path.with_suffix(".mo").exists() for path in CATALOGS)


@pytest.mark.parametrize("path", CATALOGS, ids=lambda p: f"{p.parts[-3]}/{p.name}")
def test_the_catalog_is_fully_translated_with_the_sources_placeholders(path: Path) -> None:
    entries = po_entries(path)
    header, messages = entries[0], entries[1:]
    assert header.fields["msgid"] == "" and "fuzzy" not in header.flags
    assert f"Language: {path.parts[-3]}\n" in header.fields["msgstr"]
    assert len(messages) > 50
    untranslated = [m.key for m in messages if any(not text for text in m.translations.values())]
    assert untranslated == [], f"{path}: untranslated {untranslated}"
    fuzzy = [m.key for m in messages if "fuzzy" in m.flags]
    assert fuzzy == [], f"{path}: fuzzy {fuzzy}"
    for message in messages:
        sources = {frozenset(PLACEHOLDER.findall(message.fields["msgid"]))}
        if "msgid_plural" in message.fields:
            sources.add(frozenset(PLACEHOLDER.findall(message.fields["msgid_plural"])))
        for text in message.translations.values():
            assert frozenset(PLACEHOLDER.findall(text)) in sources, (path, message.key, text)


@pytest.mark.parametrize("path", CATALOGS, ids=lambda p: f"{p.parts[-3]}/{p.name}")
def test_the_committed_mo_is_compiled_from_the_po_as_it_is(path: Path) -> None:
    with path.with_suffix(".mo").open("rb") as handle:
        compiled = gettext.GNUTranslations(handle)
    catalog = {k: v for k, v in compiled._catalog.items() if k not in ("", ("", 0))}  # type: ignore[attr-defined]
    expected: dict[object, str] = {}
    for message in po_entries(path)[1:]:
        if "msgid_plural" in message.fields:
            expected |= {(message.key, n): text for n, text in message.translations.items()}
        else:
            expected[message.key] = message.fields["msgstr"]
    assert catalog == expected, f"{path.with_suffix('.mo')} is stale: compile it (msgfmt -o {path.with_suffix('.mo').name})"
