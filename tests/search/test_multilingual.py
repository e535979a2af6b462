"""The multilingual space (kb.text.multilingual): a question in one language finds a passage in another,
through the real pipeline, the real multilingual-e5-small and PostgreSQL, inside the permission filter."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kb.library.ingest.pipeline import ingest
from kb.library.ingest.version import current_index_version
from kb.library.models import Chunk, Document
from kb.library.selectors import document_is_stale, documents_stale
from kb.text import multilingual
from search.retrieval import Hit, SearchOptions, _late_rerank, hybrid_search
from tests.factories import ingested_document

LEAVE = (
    "# Urlaub\n\n## Urlaubsantrag\n\n"
    "Urlaub muss mindestens drei Wochen vorher im Personalportal beantragt werden. "
    "Die Teamleitung genehmigt den Antrag innerhalb von fünf Arbeitstagen.\n"
)
OTHERS = {
    "kantine.md": "# Kantine\n\n## Öffnungszeiten\n\nDie Kantine im Erdgeschoss öffnet um halb zwölf und schließt um "
                  "vierzehn Uhr. Freitags gibt es Fisch.\n",
    "drucker.md": "# Drucker\n\n## Toner wechseln\n\nDer Toner des Druckers im dritten Stock wird vom Hausmeister "
                  "gewechselt. Leere Kartuschen kommen in den grauen Behälter.\n",
    "parking.md": "# Parking\n\n## Visitors\n\nVisitors park on level minus two; the barrier opens with the code "
                  "printed on their badge.\n",
}
QUESTION = "How far in advance do I have to request my holidays?"


def reindexed(document: Document) -> Document:
    """Indexed again by the real pipeline, as a re-index of a stale document queues it."""
    Document.objects.filter(pk=document.pk).update(status=Document.Status.QUEUED)
    assert ingest(document.pk) == Document.Status.READY
    document.refresh_from_db()
    return document


@pytest.fixture
def office(db: None) -> dict[str, Document]:
    return {name: ingested_document(text, name) for name, text in OTHERS.items()}


def test_an_english_question_finds_a_german_passage(office: dict[str, Document], people: dict[str, Any]) -> None:
    leave = ingested_document(LEAVE, "urlaub.md")
    assert not Chunk.objects.filter(document=leave, multilingual_embedding__isnull=True).exists()
    # English chunks stay in MiniLM's space alone (KB_MULTILINGUAL_ENGLISH off): the slower encoder only where needed.
    assert not Chunk.objects.filter(document=office["parking.md"], multilingual_embedding__isnull=False).exists()
    result = hybrid_search(user=people["carol"], query=QUESTION)
    top = result.hits[0]
    assert top.document_id == leave.pk and "drei Wochen" in top.content and top.space == result.space == "multilingual"
    assert top.ranks.get("multilingual") == 1 and top.multilingual_distance is not None
    # Its distance is the multilingual one on MiniLM's scale, which the threshold gates; for an English question, a
    # translation placed `multilingual_cross` nearer. A German question is answered, its German passage not moved.
    offset, scale = multilingual.ENGLISH_SCALE
    cross = SearchOptions().multilingual_cross
    assert cross > 0 and top.cross_language
    assert top.distance == pytest.approx(offset + scale * (top.multilingual_distance - cross))
    german = hybrid_search(user=people["carol"], query="Wie früh muss ich meinen Urlaub beantragen?")
    assert german.answerable and german.passed[0].document_id == leave.pk and german.space == "multilingual"
    assert not german.passed[0].cross_language
    assert german.passed[0].distance == pytest.approx(offset + scale * german.passed[0].multilingual_distance)
    # MiniLM's English space alone does not rank it first: the multilingual list is what finds it.
    english = hybrid_search(user=people["carol"], query=QUESTION, options=SearchOptions(multilingual=False))
    assert english.hits[0].document_id != leave.pk or not english.hits[0].passed
    assert all("multilingual" not in hit.ranks and hit.multilingual_distance is None for hit in english.hits)
    # A question MiniLM serves stays in its space: an English question about an English passage.
    parking = hybrid_search(user=people["carol"], query="Where do visitors park?")
    assert parking.space == "english" and parking.hits[0].document_id == office["parking.md"].pk


def test_the_multilingual_space_has_a_threshold_of_its_own(office: dict[str, Document], people: dict[str, Any]) -> None:
    """Where the nearest passage is in the multilingual space, KB_SEARCH_MULTILINGUAL_THRESHOLD decides (the
    answerability model is fitted on MiniLM's signals), whatever KB_SEARCH_THRESHOLD says; the refusal names it."""
    ingested_document(LEAVE, "urlaub.md")
    nearest = hybrid_search(user=people["carol"], query=QUESTION).nearest_distance
    assert nearest is not None

    def search(own: float, english: float) -> Any:
        return hybrid_search(user=people["carol"], query=QUESTION,
                             options=SearchOptions(multilingual_threshold=own, threshold=english))

    below, above = search(nearest - 0.01, 1.0), search(nearest + 0.01, 0.0)
    assert below.space == above.space == "multilingual"
    assert not below.answerable and below.threshold == pytest.approx(nearest - 0.01)
    assert above.answerable and above.threshold == pytest.approx(nearest + 0.01)
    # Without the correction the same translation sits farther: the English passages would win the comparison.
    plain = hybrid_search(user=people["carol"], query=QUESTION, options=SearchOptions(multilingual_cross=0.0))
    moved = {h.chunk_id: h.distance for h in plain.hits if h.space == "multilingual"}
    corrected = hybrid_search(user=people["carol"], query=QUESTION)
    scale, cross = multilingual.ENGLISH_SCALE[1], SearchOptions().multilingual_cross
    assert moved and all(moved[h.chunk_id] == pytest.approx(h.distance + scale * cross)
                         for h in corrected.hits if h.chunk_id in moved)


def test_a_restricted_german_passage_never_reaches_an_outsider_even_as_the_best_match(
    office: dict[str, Document], people: dict[str, Any]
) -> None:
    leave = ingested_document(LEAVE, "urlaub.md", public=False, groups=[people["groups"]["hr"]])
    assert hybrid_search(user=people["dave"], query=QUESTION).hits[0].document_id == leave.pk  # the best match
    for outsider in ("carol", "alice", "bob"):
        result = hybrid_search(user=people[outsider], query=QUESTION)
        assert leave.pk not in {hit.document_id for hit in result.hits}
        assert any(hit.ranks.get("multilingual") for hit in result.hits)  # the list ran, over what they may read


def test_the_multilingual_space_is_part_of_the_index_version(db: None, settings: Any) -> None:
    document = ingested_document(LEAVE, "urlaub.md")
    assert document.multilingual_model == multilingual.MODEL == current_index_version().multilingual_model
    assert multilingual.MODEL in current_index_version().label() and not document_is_stale(document)
    # A deployment indexed before the space existed: its documents are stale, and re-indexing adds the vectors.
    Document.objects.filter(pk=document.pk).update(multilingual_model="")
    Chunk.objects.filter(document=document).update(multilingual_embedding=None)
    assert list(documents_stale()) == [document]
    document = reindexed(document)
    assert not document_is_stale(document) and document.chunks_reused == 0  # no vector of the old index kept
    assert not Chunk.objects.filter(document=document, multilingual_embedding__isnull=True).exists()
    # Turned off, the index built with it is stale too, and a new one has no multilingual vectors.
    settings.KB_MULTILINGUAL = False
    assert current_index_version().multilingual_model == "" and list(documents_stale()) == [document]
    reindexed(document)
    assert not Chunk.objects.filter(document=document, multilingual_embedding__isnull=False).exists()
    # English chunks in the space too is another index: stale again.
    settings.KB_MULTILINGUAL, settings.KB_MULTILINGUAL_ENGLISH = True, True
    assert current_index_version().multilingual_model == multilingual.MODEL + "+en"
    assert list(documents_stale()) == [document]


def test_an_unchanged_chunk_keeps_its_multilingual_vector_on_re_index(db: None) -> None:
    document = ingested_document(LEAVE, "urlaub.md")
    before = {c.text: np.asarray(c.multilingual_embedding) for c in Chunk.objects.filter(document=document)}
    assert reindexed(document).chunks_reused == len(before)
    for chunk in Chunk.objects.filter(document=document):
        assert np.array_equal(np.asarray(chunk.multilingual_embedding), before[chunk.text])


def test_query_and_passage_vectors_are_unit_length_and_prefixed_differently(db: None) -> None:
    query = multilingual.embed_query("Urlaubsantrag")
    passage = multilingual.embed_passages(["Urlaubsantrag", "Toner"])
    assert passage.shape == (2, multilingual.DIMENSIONS)
    assert np.allclose(np.linalg.norm(passage, axis=1), 1, atol=1e-4) and abs(np.linalg.norm(query) - 1) < 1e-4
    assert 0.9 < float(query @ passage[0]) < 0.9999  # "query: " and "passage: " make the same words differ a little


def test_a_reader_of_english_alone_is_spared_the_multilingual_encoder(
    db: None, people: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The space holds no English chunk: someone who may read only English passages pays no e5 encoding, while a
    reader of the German one does (what encodes is counted, the model itself runs)."""
    ingested_document(OTHERS["parking.md"], "parking.md")
    ingested_document(LEAVE, "urlaub.md", public=False, groups=[people["groups"]["hr"]])
    encoded: list[str] = []
    real = multilingual.embed_query.__wrapped__

    def counted(text: str) -> np.ndarray:
        encoded.append(text)
        return real(text)

    monkeypatch.setattr(multilingual, "embed_query", counted)
    carol = hybrid_search(user=people["carol"], query=QUESTION)
    assert encoded == [] and all(h.space == "english" for h in carol.hits)
    dave = hybrid_search(user=people["dave"], query=QUESTION)
    assert encoded == [QUESTION] and dave.hits[0].space == "multilingual" and "drei Wochen" in dave.hits[0].content


def _hit(chunk_id: int, distance: float, space: str, **ranks: int) -> Hit:
    return Hit(chunk_id=chunk_id, document_id=1, document_title="t", mime_type="text/markdown", ordinal=chunk_id,
               breadcrumb="", content=f"passage {chunk_id}", start=0, end=1, page=None, kind="section",
               audience="", part=None, parts=None, split_group="", distance=distance, score=0.0, ranks=ranks,
               space=space)


def test_the_late_stage_orders_other_languages_by_nearness_with_a_full_text_bonus() -> None:
    """Rank fusion alone ignores how near a passage is: the multilingual space's passages in the head are ordered by
    cosine similarity, a full-text match adding lexical_bonus / sqrt(its rank); MiniLM's keep their own order
    (late score plus similarity) in the places they hold, and the tail is left alone."""
    fused = [
        _hit(1, 0.50, "multilingual", multilingual=2, lexical=1),  # the fusion's first: both lists rank it
        _hit(2, 0.40, "english", dense=1),
        _hit(3, 0.45, "multilingual", multilingual=1),  # the nearest foreign passage, no full-text match
        _hit(4, 0.47, "multilingual", lexical=9),
        _hit(5, 0.30, "multilingual", multilingual=3),  # beyond the depth: stays last whatever its distance
    ]
    late = {h.chunk_id: (0.0, 0.0) for h in fused}
    ordered = _late_rerank(fused, late, depth=4, weight=1.0, lexical_bonus=0.1)
    # 1: 0.50 + 0.1 = 0.60, then 4: 0.53 + 0.1 / 3 = 0.563 ahead of the nearest, 3 (0.55), which no full text matched.
    assert [h.chunk_id for h in ordered] == [1, 2, 4, 3, 5]
    nearer = _late_rerank(fused, late, depth=4, weight=1.0, lexical_bonus=0.02)
    assert [h.chunk_id for h in nearer] == [3, 2, 4, 1, 5]  # 3: 0.55; 4: 0.53 + 0.0067; 1: 0.50 + 0.02
    assert [h.chunk_id for h in _late_rerank(fused, late, depth=4, weight=1.0, lexical_bonus=0.0)] == [3, 2, 4, 1, 5]
    english_first = [_hit(6, 0.60, "english", dense=2), *fused[:2]]
    scored = {6: (0.5, 0.0), 1: (0.0, 0.0), 2: (0.0, 0.0)}
    assert [h.chunk_id for h in _late_rerank(english_first, scored, depth=3, weight=1.0, lexical_bonus=0.1)] == [6, 1, 2]


RUSSIAN = "# Регламент\n\n## Обновления\n\n" + " ".join([
    "Автоматическое обновление пакетов на тестовых и нестабильных серверах запрещено, потому что новая версия может "
    "неожиданно удалить зависимые пакеты без предупреждения администратора и изменить формат конфигурационных "
    "файлов служб.",
    "Обновления на рабочих серверах устанавливаются только в согласованное окно обслуживания, которое дежурный "
    "инженер заранее публикует в общем календаре отдела эксплуатации.",
    "Перед каждым обновлением базы данных дежурный инженер проверяет, что свежая резервная копия восстановилась на "
    "отдельном стенде и что журнал восстановления не содержит ошибок.",
    "Если после обновления сервис не отвечает дольше пятнадцати минут, инженер откатывает изменения по инструкции и "
    "сообщает о происшествии руководителю смены.",
]) + "\n"


def test_a_russian_chunk_is_budgeted_in_the_tokens_of_the_model_that_embeds_it(db: None) -> None:
    """MiniLM's word pieces cut Cyrillic almost letter by letter (~0.85 a character, e5 ~0.22): budgeted in them, a
    chunk held ~200 characters and a longer sentence was cut in two. Counted in e5's tokens (the model that embeds a
    Russian chunk for retrieval) within the budget, and MiniLM's within its whole window (it reads the chunk too),
    every sentence stays whole in one chunk."""
    from kb.library.ingest import chunking, extract
    from kb.text import tokens

    document = ingested_document(RUSSIAN, "reglament.md")
    assert document.language == "ru"
    chunks = list(Chunk.objects.filter(document=document).order_by("ordinal"))
    sentences = RUSSIAN.split("\n")[4].split(". ")
    assert all(any(s.rstrip(".") in c.content for c in chunks) for s in sentences)
    assert all(multilingual.token_count(c.text) <= chunking.MAX_TOKENS for c in chunks)
    assert all(tokens.count_tokens(c.text) <= tokens.WINDOW for c in chunks)  # nothing MiniLM would truncate
    # The old budget, in MiniLM's pieces, cut at least one of them (the control that the test can fail).
    data = RUSSIAN.encode()
    old = chunking.split(extract.extract(data=data, mime="text/markdown", filename="reglament.md"), title="Регламент",
                         count=tokens.count_tokens)
    assert not all(any(s.rstrip(".") in draft.content for draft in old) for s in sentences)
    # An English document is still counted in MiniLM's pieces, which embed it.
    parking = ingested_document(OTHERS["parking.md"], "parking.md")
    assert all(tokens.count_tokens(c.text) <= chunking.MAX_TOKENS for c in Chunk.objects.filter(document=parking))
