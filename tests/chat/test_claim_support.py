"""The citation support rule (chat.claim_support) and how an unsupported sentence is shown."""

from __future__ import annotations

from dataclasses import dataclass

from chat.citations import render_html
from chat.claim_support import claim_spans, quoted_at, unsupported_claims

QUOTES = {
    1: "Exports larger than 50,000 rows are emailed to you as a link instead of downloading at once.",
    2: "The filter bar above the table has a Status dropdown, a Carrier field and a Date range picker.",
}


@dataclass
class Cite:
    link: str
    label: str


def test_a_citation_whose_quote_lacks_the_claim_is_flagged() -> None:
    text = ("Exports larger than 50,000 rows are emailed to you as a link [1]. "
            "Exports are kept for 30 days on the server [2].")
    flagged = unsupported_claims(text, QUOTES)
    assert [c["sentence"] for c in flagged] == ["Exports are kept for 30 days on the server [2]."]
    assert flagged[0]["numbers"] == [2] and flagged[0]["missing"][0] == "30"


def test_a_wrong_number_is_flagged_even_when_the_words_match() -> None:
    flagged = unsupported_claims("Exports larger than 5,000 rows are emailed to you as a link [1].", QUOTES)
    assert flagged and "5" in flagged[0]["missing"]


def test_a_copied_or_lightly_reworded_sentence_is_supported_and_uncited_sentences_are_not_checked() -> None:
    text = ("The filter bar has a Status dropdown, a Carrier field and a Date range picker [2]. "
            "Big exports arrive by email as a link [1]. I hope this helps.")
    assert unsupported_claims(text, QUOTES) == []


def test_markers_after_the_full_stop_belong_to_the_sentence_before() -> None:
    text = "The filter bar has a Status dropdown. [2] Exports are kept for 30 days. [1]"
    assert [text[a:b] for a, b in claim_spans(text)] == [
        "The filter bar has a Status dropdown. [2]", "Exports are kept for 30 days. [1]"]
    assert [c["numbers"] for c in unsupported_claims(text, QUOTES)] == [[1]]


def test_an_unsupported_sentence_is_marked_subtly_in_the_html() -> None:
    text = "Exports are emailed as a link [1]. Exports are kept for 30 days [1]."
    flagged = unsupported_claims(text, QUOTES)
    html = render_html(text, {1: Cite("/documents/1/#char=0,10", "Doc")}, unsupported=flagged)
    assert html.count('class="unsupported"') == 1
    assert 'not found in source [1]</small>' in html
    assert html.index("Exports are kept") > html.index('<span class="unsupported"')
    assert "\ue000" not in html and "\ue001" not in html


def test_the_quoted_sentence_is_found_in_its_source_whitespace_aside_and_only_for_its_own_number() -> None:
    quote = ("Carriers file their notes by date.\nThe spare keys of the cold store are kept in the grey\n"
             "cabinet behind the loading office. Nothing else is kept there.")
    answer = ("Keys are an everyday matter [2]. The spare keys of the cold store are kept in the grey cabinet "
              "behind the loading office [1]. Ask the shift lead [1].")
    start, end = quoted_at(answer, 1, quote) or (0, 0)
    assert quote[start:end] == ("The spare keys of the cold store are kept in the grey\n"
                                "cabinet behind the loading office.")
    assert quoted_at(answer.replace("office [1].", "office. [1]"), 1, quote) == (start, end)
    assert quoted_at(answer, 2, quote) is None  # [2]'s sentence is not in this quote
    assert quoted_at("The spare keys of the cold store are kept in the grey cabinet … [1]", 1, quote) == (
        quote.index("The spare"), quote.index(" behind"))  # a sentence cut short is found by what it kept


def test_a_paraphrase_or_a_short_common_sentence_is_not_placed() -> None:
    quote = "Yes. The spare keys of the cold store are kept in the grey cabinet behind the loading office."
    assert quoted_at("The cold store's spare keys sit in a grey cabinet by the loading office [1].", 1, quote) is None
    assert quoted_at("Yes. [1]", 1, quote) is None
