"""Tokens shaped like codes, keys, flags or names, where exact text matters more than meaning: a question's
(`identifiers`) and a passage's (`searchable`), so the identifier list finds a question's codes in passages
through a small trigram index over the passages' own (kb.library.models.Chunk.identifiers)."""

from __future__ import annotations

import re

IDENTIFIER = re.compile(r"-{1,2}[A-Za-z][\w-]+|[A-Za-z0-9_][\w.:/-]*[\w]")
SHORTEST = 4


def _tokens(text: str) -> list[str]:
    return [token.strip(".:/-") if not token.startswith("-") else token.rstrip(".:/")
            for token in IDENTIFIER.findall(text)]


def identifiers(query: str) -> list[str]:
    """The question's tokens that look like identifiers.

    Ordinary capitalised words and product names (one or two humps: "OpenRefine") are not
    identifiers; they would reward every chunk of a manual instead of the one that matters.
    """
    found: list[str] = []
    for token in _tokens(query):
        if len(token) < SHORTEST or token.lower() in (f.lower() for f in found):
            continue
        humps = len(re.findall(r"[A-Z]", token))
        shaped = (
            token.startswith("-")
            or any(c in token for c in "_.:/")
            or (any(c.isdigit() for c in token) and any(c.isalpha() for c in token))
            or ("-" in token and any(c.isupper() or c.isdigit() for c in token))
            or (token[0].islower() and humps >= 1)  # etcdMembersDown, p_expression
            or humps >= 3  # KubePodCrashLooping
            or (token.isupper() and len(token) >= 5)  # ECONNREFUSED
        )
        if shaped:
            found.append(token)
    return found[:6]


def searchable(text: str) -> str:
    """A passage's tokens a question's identifier could be found in, once each, space-separated: every token but
    plain words (a question's identifier is never one). Wider than `identifiers` (two humps, short capitals), since
    the question's identifier is matched as a substring of them, case-insensitively."""
    kept = dict.fromkeys(token for token in _tokens(text) if len(token) >= SHORTEST and not _plain(token))
    return " ".join(kept)


def _plain(token: str) -> bool:
    """A word of letters only, lower-case after its first: never shaped like an identifier in any question."""
    return token.isalpha() and token[1:] == token[1:].lower()
