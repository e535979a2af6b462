"""Where a remembered question puts its passage (search.retrieval._remembered_first): first, only when retrieval
agrees closely enough — among the first KB_MEMORY_RANK hits and within KB_MEMORY_MARGIN of the first one's distance
(docs/LEARNING.md) — and the nearest remembered question wins among those that qualify."""

from __future__ import annotations

from kb.text import language
from search.retrieval import Hit, SearchOptions, _remembered_first, names_missing, unknown_names

OPTIONS = SearchOptions(memory_rank=3, memory_margin=0.2)


def _hit(chunk_id: int, distance: float, remembered: float | None = None) -> Hit:
    return Hit(chunk_id=chunk_id, document_id=1, document_title="t", mime_type="text/markdown", ordinal=chunk_id,
               breadcrumb="", content=f"passage {chunk_id}", start=0, end=1, page=None, kind="section",
               audience="", part=None, parts=None, split_group="", distance=distance, score=0.0, ranks={},
               remembered_distance=remembered, remembered=(chunk_id * 10,) if remembered is not None else ())


def order(hits: list[Hit]) -> tuple[list[int], int | None]:
    ordered, pinned = _remembered_first(hits, OPTIONS)
    return [h.chunk_id for h in ordered], pinned.chunk_id if pinned else None


def test_a_remembered_passage_close_behind_the_first_goes_first() -> None:
    assert order([_hit(1, 0.40), _hit(2, 0.45, remembered=0.4), _hit(3, 0.5)]) == ([2, 1, 3], 2)


def test_the_nearest_remembered_question_wins_among_those_that_qualify() -> None:
    hits = [_hit(1, 0.40, remembered=0.5), _hit(2, 0.45, remembered=0.3), _hit(3, 0.5, remembered=0.1)]
    assert order(hits) == ([3, 1, 2], 3)


def test_retrieval_must_agree_a_remembered_passage_too_far_down_or_too_far_away_stays_put() -> None:
    below = [_hit(1, 0.40), _hit(2, 0.41), _hit(3, 0.42), _hit(4, 0.43, remembered=0.05)]
    assert order(below) == ([1, 2, 3, 4], None)  # fourth: past memory_rank
    farther = [_hit(1, 0.30), _hit(2, 0.55, remembered=0.05)]
    assert order(farther) == ([1, 2], None)  # 0.25 farther than the first: past memory_margin
    assert order([]) == ([], None)
    assert order([_hit(1, 0.3), _hit(2, 0.35)]) == ([1, 2], None)  # nothing remembered


def test_a_name_no_readable_passage_mentions_is_another_question() -> None:
    """A remembered "daily allowance for a trip to Hamburg" does not answer "the per diem for Madrid": an unknown word
    written as a name blocks the memory's say; the word opening the question and lower-case slang do not."""
    assert unknown_names("What is the per diem for a business trip to Madrid?", ["diem", "Madrid"]) == ["Madrid"]
    assert unknown_names("Bookmark a row: how?", ["Bookmark"]) == []  # opens the question: not a name
    assert unknown_names("got a really heavy pallet, can it go on top?", ["got", "heavy"]) == []


def test_a_name_the_answering_passage_mentions_is_not_missing_whatever_the_statistics_say() -> None:
    """Word statistics lag a new document until their refresh: the passage that would answer is read directly."""
    passage = "The daily allowance for a trip to Hamburg is 24 EUR;   the hotel cap is 130 EUR."
    assert names_missing(["Madrid"], [passage]) == ["Madrid"]
    assert names_missing(["hamburg", "Madrid"], ["nothing", passage]) == ["Madrid"]
    assert names_missing([], [passage]) == []


def test_a_question_in_another_language_is_held_to_the_stricter_distance() -> None:
    """MiniLM finds questions in other languages nearer to one another: they are held to KB_MEMORY_DISTANCE_OTHER."""
    assert language.detect("My laptop screen cracked, what should I do?")[0] == "en"  # what retrieval reads
    assert language.detect("Que fait la commande « Enlever les fichiers périmés » du menu Actions ?")[0] != "en"
    assert language.detect("Jak zgłosić uszkodzony ekran laptopa?")[0] != "en"
    assert OPTIONS.memory_distance_other < OPTIONS.memory_distance
