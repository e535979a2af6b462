"""Identifier search: the chunks holding a code, key or file name the question quotes, in any case."""

from __future__ import annotations

from typing import Any

from kb.text.identifiers import identifiers
from search.retrieval import hybrid_search
from tests.factories import ingested_document


def test_an_identifier_matches_literally_and_in_any_case(people: dict[str, Any]) -> None:
    """Chunks are picked with one regular expression of every identifier: its "." must stay a dot
    ("lexapy" is not "lex.py") and its case must not matter."""
    named = ingested_document("# Lexer\n\n## Files\n\nThe lexer writes its tables to lex.py beside the grammar.\n",
                              "lexer.md")
    decoy = ingested_document("# Lexing\n\n## Notes\n\nThe lexapy module reads lexicons and nothing else.\n",
                              "decoy.md")
    question = "Where does LEX.PY (the tables) go?"
    assert identifiers(question) == ["LEX.PY"]
    found = {hit.document_id for hit in hybrid_search(user=people["carol"], query=question).hits if "ident" in hit.ranks}
    assert named.pk in found and decoy.pk not in found
