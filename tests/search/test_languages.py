"""Full-text search in each chunk's language (kb.text.language): German stemmed by PostgreSQL's `german`,
Polish folded and stemmed over `simple`, Chinese as character bigrams; the question read in its own language,
and a question in a language no readable chunk is in left to the dense spaces. Real pipeline, real PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from kb.library.models import Chunk, Document
from kb.text import language
from search import answerability
from search.retrieval import SearchOptions, hybrid_search, lexical_configs
from tests.factories import ingested_document

GERMAN = (
    "# Reisekosten\n\n## Erstattung\n\n"
    "Die Reisekosten werden innerhalb von zwei Wochen erstattet, sobald die Belege im Portal hochgeladen sind. "
    "Für Hotelübernachtungen gilt eine Obergrenze von 150 Euro pro Nacht.\n"
)
POLISH = (
    "# Urlop\n\n## Wniosek urlopowy\n\n"
    "Wniosek o urlop należy złożyć w systemie kadrowym co najmniej dwa tygodnie wcześniej. "
    "Kierownik zespołu zatwierdza wnioski w ciągu trzech dni roboczych.\n"
)
CHINESE = (
    "# 密码\n\n## 重置密码\n\n"
    "如果忘记了密码，请打开自助服务门户，点击重置密码，然后按照邮件中的说明设置新密码。新密码至少需要十二个字符。\n"
)
ENGLISH = (
    "# Parking\n\n## Visitors\n\n"
    "Visitors park on level minus two; the barrier opens with the code printed on their badge. "
    "Staff cars use the upper levels and must display the yearly permit behind the windscreen.\n"
)
# The lexical list alone; in a corpus of four chunks every word is in a quarter of them, which the share limit
# (KB_SEARCH_LEXICAL_MAX_SHARE) would count as too common to select candidates.
LEXICAL_ONLY = {"dense": False, "identifiers": False, "late_depth": 0, "rerank": False, "answerability": False,
                "lexical_max_share": 1.0}


@pytest.fixture
def corpus(db: None) -> dict[str, Document]:
    return {lang: ingested_document(text, f"{lang}.md")
            for lang, text in (("de", GERMAN), ("pl", POLISH), ("zh", CHINESE), ("en", ENGLISH))}


def lexical_top(user: Any, question: str) -> int | None:
    """The document the lexical list ranks first for `question` (None: the list is empty)."""
    options = SearchOptions(**LEXICAL_ONLY, multilingual=False)
    result = hybrid_search(user=user, query=question, options=options)
    first = [h for h in result.hits if h.ranks.get("lexical") == 1]
    return first[0].document_id if first else None


def test_each_document_and_its_chunks_are_read_in_their_language(corpus: dict[str, Document]) -> None:
    for lang, document in corpus.items():
        assert document.language == document.language_detected == lang
        configs = set(Chunk.objects.filter(document=document).values_list("search_config", flat=True))
        assert configs == {language.config_for(lang)}
    assert language.config_for("de") == "german" and language.config_for("pl") == language.config_for("zh") == "simple"
    polish = Chunk.objects.filter(document=corpus["pl"]).last()
    assert polish is not None and "wniosk" in polish.search_text and "urlop" in polish.search_text
    assert not Chunk.objects.filter(document=corpus["en"], search_text__gt="").exists(), "English is read as written"


@pytest.mark.parametrize(("lang", "question"), [
    ("de", "Wohin muss ich meinen Beleg laden?"),  # "Beleg" finds "Belege" only by German stemming
    ("pl", "Ile dni wcześniej trzeba złożyć wniosku o urlopu?"),  # inflected: "wniosku", "urlopu"
    ("pl", "Kto zatwierdza wniosek?"),
    ("zh", "怎么重置密码？"),  # no spaces: found as bigrams
    ("en", "Where do visitors park their car?"),
])
def test_a_question_finds_its_languages_passage_by_full_text(corpus: dict[str, Document], people: dict[str, Any],
                                                            lang: str, question: str) -> None:
    assert lexical_top(people["carol"], question) == corpus[lang].pk


def test_stemming_and_folding_match_inflected_words(db: None) -> None:
    for forms in (["hasło", "hasła", "haśle"], ["urlop", "urlopu", "urlopie"], ["wniosek", "Wniosek"]):
        assert len({language.analysed(f, "simple") for f in forms}) == 1, forms
    assert language.analysed("Zażółć", "simple") == "zazolc"
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_tsvector('german', 'Belege') @@ to_tsquery('german', 'Beleg')")
        assert cursor.fetchone()[0]


def test_a_question_in_a_language_no_readable_chunk_is_in_leaves_the_lexical_list_empty(
        corpus: dict[str, Document], people: dict[str, Any]) -> None:
    principals = ["everyone"]
    assert [c for c, _ in lexical_configs("Wie hoch ist die Obergrenze für Hotels?", principals)] == ["german"]
    Document.objects.filter(pk=corpus["en"].pk).delete()  # no English chunk left
    from search.stats import lexeme_stats_refresh

    lexeme_stats_refresh()
    assert lexical_configs("What is the hotel limit per night when travelling?", principals) == []
    assert lexical_top(people["carol"], "What is the hotel limit per night when travelling?") is None
    stats = answerability.word_statistics(["hotel", "limit"], principals=principals, configs=[])
    assert answerability.unknown_words(stats) == ([], 0), "no word of another language counts as unknown"


def test_word_statistics_follow_the_chunks_configuration(corpus: dict[str, Document]) -> None:
    german = answerability.word_statistics(["Reisekosten", "die", "Hotelübernachtungen"], principals=["everyone"],
                                           configs=["german"])
    assert [(s.lexemes > 0, s.ndoc > 0) for s in german] == [(True, True), (False, False), (True, True)]
    polish = answerability.word_statistics(["urlopu", "wnioski"], principals=["everyone"], configs=["simple"])
    assert all(s.ndoc > 0 for s in polish), "inflected Polish words are known words"
    chinese = answerability.word_statistics(["重置密码"], principals=["everyone"], configs=["simple"])
    assert chinese[0].ndoc > 0


def test_trigram_search_finds_a_chinese_word(corpus: dict[str, Document]) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT DISTINCT document_id FROM kb_chunk WHERE %s <%% text", ["重置密码"])
        assert [row[0] for row in cursor.fetchall()] == [corpus["zh"].pk]


def test_questions_are_read_in_their_own_language() -> None:
    present = {"en", "de", "pl", "zh"}
    assert language.question_languages("Czy mogę pracować zdalnie w piątki?", present) == ["pl"]
    assert language.question_languages("Wie setze ich mein Passwort zurück?", present) == ["de"]
    assert language.question_languages("如何重置密码？", present) == ["zh"]
    assert language.question_languages("How do I reset my password?", {"en"}) == ["en"]
    assert language.question_languages("How do I reset my password?", {"de", "zh"}) == []
    assert set(language.question_languages("VPN", present)) == present, "too short to tell: every language"
    assert language.bigrams("配置文件") == "配置 置文 文件" and language.bigrams("是") == "是"
    assert language.fold("Zażółć gęślą jaźń") == "zazolc gesla jazn"
    assert language.light_stem("hasla") == language.light_stem("haslo") == "hasl"
