"""Refusal signals come from what the asker may read (issue 47 item 5): carol's confidence, decision, reason and
every field of /api/search stay the same when an HR-only document using the question's words is added, while
dave, who reads HR, sees the document move his signals (the positive control)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from django.test import Client

from chat.answering import refusal_text
from kb.library.models import Document
from search import answerability
from search.retrieval import SearchResult, hybrid_search
from tests.factories import ingested_document
from tests.search.test_answerability import DEPOT, LEAVE

QUESTION = "What is the parental leave policy for adoptive parents?"
HR_ONLY = (
    "# Parental leave\n\n## Adoptive parents\n\n"
    "Adoptive parents receive twelve weeks of paid parental leave from the day the child is placed with them. "
    "The parental leave policy applies to foster parents who adopt as well.\n"
)


@pytest.fixture
def corpus(people: dict[str, Any]) -> list[Document]:
    return [ingested_document(LEAVE, "leave.md"), ingested_document(DEPOT, "depot.md")]


def seen_by(user: Any) -> tuple[SearchResult, dict[str, Any], str]:
    """What the user gets for QUESTION: the search (its signals, confidence and reason), the API's JSON, and
    the refusal the chat would show."""
    result = hybrid_search(user=user, query=QUESTION)
    client = Client()
    client.force_login(user)
    response = client.get("/api/search", {"q": QUESTION, "k": 20})
    assert response.status_code == 200
    return result, response.json(), refusal_text(result)


def test_a_restricted_document_moves_no_signal_an_outsider_sees(corpus: list[Document], people: dict[str, Any]) -> None:
    carol, dave = people["carol"], people["dave"]
    before, api_before, text_before = seen_by(carol)
    dave_before = hybrid_search(user=dave, query=QUESTION)
    assert before.signals is not None and before.probability is not None, "the model decides"
    assert not before.answerable and "adoptive" in before.signals.unknown_words

    ingested_document(HR_ONLY, "parental.md", public=False, groups=[people["groups"]["hr"]])

    after, api_after, text_after = seen_by(carol)
    assert after.signals is not None
    assert after.signals.as_json() == before.signals.as_json()
    assert (after.probability, after.cutoff, after.answerable) == (before.probability, before.cutoff, False)
    assert after.refusal_reason == before.refusal_reason and text_after == text_before
    assert api_after == api_before, "every field of /api/search, the hits' order and ranks included"

    # Positive control: for a reader of the new document its words are known now and its passage is found.
    dave_after = hybrid_search(user=dave, query=QUESTION)
    assert dave_before.signals is not None and dave_after.signals is not None
    assert "adoptive" in dave_before.signals.unknown_words and not dave_after.signals.unknown_words
    assert dave_after.signals.unknown_share < dave_before.signals.unknown_share
    assert "Adoptive parents receive" in dave_after.hits[0].content


def test_word_statistics_count_only_readable_chunks(corpus: list[Document], people: dict[str, Any]) -> None:
    ingested_document(HR_ONLY, "parental.md", public=False, groups=[people["groups"]["hr"]])
    words = ["the", "adoptive", "leave"]
    public = answerability.word_statistics(words, principals=["everyone"])
    hr = answerability.word_statistics(words, principals=["everyone", f"g:{people['groups']['hr'].pk}"])
    assert [(s.lexemes, s.ndoc > 0) for s in public] == [(0, False), (1, False), (1, True)]
    assert [(s.lexemes, s.ndoc > 0) for s in hr] == [(0, False), (1, True), (1, True)]
    assert hr[2].ndoc > public[2].ndoc, "the HR chunk that says leave counts for its readers only"
    assert public[0].idf == 0.0 and public[1].idf > public[2].idf > 0, "a word nobody readable uses is rarest"
    assert answerability.unknown_words(public) == (["adoptive"], 2)
    unseen = math.log(1 + (1 + 0.5) / 0.5)  # no readable chunk: the total counts as 1
    assert answerability.word_statistics(words, principals=["nobody"])[1:] == [
        answerability.WordStat("adoptive", 1, 0, pytest.approx(unseen)),
        answerability.WordStat("leave", 1, 0, pytest.approx(unseen)),
    ]


def test_a_revocation_takes_the_words_out_of_the_outsiders_statistics(
    corpus: list[Document], people: dict[str, Any], django_capture_on_commit_callbacks: Any
) -> None:
    """The statistics are kept per access list: once a document is restricted, a refresh is scheduled (after the
    commit) and carol's counts no longer hold its words."""
    import redis
    from django.conf import settings

    from kb.library.services import document_set_access
    from search.stats import lexeme_stats_refresh

    parental = ingested_document(HR_ONLY, "parental.md")  # public at first
    assert not answerability.unknown_words(answerability.word_statistics(["adoptive"], principals=["everyone"]))[0]
    pending = redis.Redis.from_url(settings.REDIS_URL)
    pending.delete("kb:lexeme-stats:pending")
    with django_capture_on_commit_callbacks(execute=True):
        document_set_access(document=parental, inherit=False, public=False, groups=[people["groups"]["hr"]])
    assert pending.exists("kb:lexeme-stats:pending"), "a refresh is scheduled once the restriction commits"
    lexeme_stats_refresh()  # what the scheduled task runs
    assert answerability.unknown_words(answerability.word_statistics(["adoptive"], principals=["everyone"]))[0] == [
        "adoptive"]
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        document_set_access(document=parental, inherit=False, public=False, groups=[people["groups"]["hr"]])
    assert not callbacks, "the same access again moves no chunk and schedules nothing"
