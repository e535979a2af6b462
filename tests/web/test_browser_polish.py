"""Issue 48 in Chromium against the real Daphne: a Polish-speaking employee (the browser's locale pl-PL) reads
every page an employee can reach in Polish, with no English label left, and so does a support reviewer on the
review desk; answers over documents in Polish, Chinese and German (written here, in our own words, and indexed by
the real pipeline) cite the sentence that answers, and the viewer highlights exactly that sentence.

Answers are produced in this process by the service a worker runs (chat.services.answer_produce): the pages
under test are the same, and no worker has to start."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

import pytest

from tests.factories import ingested_document
from tests.web.conftest import assert_clean, assert_labelled, screenshot

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

REMOTE_WORK = """# Zasady pracy zdalnej

## Kto może pracować zdalnie

Pracę zdalną mogą wykonywać osoby zatrudnione w firmie co najmniej od trzech miesięcy. Stanowiska, które wymagają \
obecności w magazynie albo w recepcji, są z niej wyłączone.

## Ile dni w tygodniu

Pracownik może pracować zdalnie najwyżej trzy dni w tygodniu. Dni pracy zdalnej ustala się z przełożonym na \
początku każdego miesiąca.

## Sprzęt i bezpieczeństwo

Firma wypożycza laptop i słuchawki na cały okres zatrudnienia. Z siecią firmową łączymy się wyłącznie przez VPN.

## Zgłaszanie awarii

Awarie sprzętu zgłasza się w portalu pomocy technicznej. Pilne sprawy obsługuje dyżurny informatyk pod numerem \
wewnętrznym 4040.
"""
REMOTE_QUESTION = "Ile dni w tygodniu mogę pracować zdalnie?"
REMOTE_ANSWER = "Pracownik może pracować zdalnie najwyżej trzy dni w tygodniu."

PASSWORDS = """# 密码与账户安全规定

## 密码要求

登录密码至少包含十二个字符，并且必须同时使用字母和数字。不要把密码写在纸上，也不要通过聊天工具发送密码！

## 更换周期

为什么要定期更换密码？因为泄露的密码往往很久以后才会被发现！所有员工的登录密码每九十天必须更换一次。\
新密码不能与最近五次用过的密码相同。

## 账户锁定

连续输错密码五次后，账户会被锁定三十分钟。需要立即解锁的话，请联系信息技术服务台。
"""
PASSWORD_QUESTION = "登录密码多久必须更换一次？"
PASSWORD_ANSWER = "所有员工的登录密码每九十天必须更换一次。"

TRAVEL = """# Reisekostenrichtlinie

## Verpflegung

Bei Dienstreisen im Inland erhalten Mitarbeitende eine Verpflegungspauschale von 28 Euro pro Tag. Belege für \
einzelne Mahlzeiten müssen nicht eingereicht werden.

## Unterkunft

Hotels bucht das Reisebüro der Firma. Die Übernachtung darf in Großstädten höchstens 150 Euro kosten.

## Fahrtkosten

Bahnfahrten werden in der zweiten Klasse erstattet. Wer mit dem eigenen Auto fährt, bekommt 30 Cent pro Kilometer.
"""
PARKING = """# Parking

## Visitors

Visitors park on level minus two; the barrier opens with the code printed on their badge.
"""
TRAVEL_QUESTION = "How much is the daily meal allowance on a business trip?"
TRAVEL_ANSWER = "Bei Dienstreisen im Inland erhalten Mitarbeitende eine Verpflegungspauschale von 28 Euro pro Tag."

# Labels of the English templates and scripts: none may be left on a page read in Polish (text, titles,
# aria-labels, placeholders; hidden parts such as the closed user menu included).
ENGLISH = [
    "Knowledge base", "Skip to content", "Signed in as", "Log out", "Account menu", "Ask the knowledge base",
    "Your question", "Conversations", "New conversation", "Sources", "Answer", "Press Enter", "Quoted from sources",
    "Rate this", "Library", "Documents you can read", "Search titles", "Search", "Download original",
    "On this page", "Show passage", "Clear", "Showing the cited passage", "We can't find that page",
    "Go to the library", "Ask a question", "Not found", "Review answers", "Recent answers", "Flagged",
    "Loading answers", "Flag citation", "Flag", "Note for", "asked by", "Helpful", "Wrong", "Should have answered",
    "Wrong source", "Unsupported claim", "Outdated", "What is wrong", "This answer cites no sources",
]
PAGE_TEXT = """() => {
  const body = document.body.cloneNode(true);
  body.querySelectorAll("script, style").forEach(n => n.remove());
  const texts = [document.title, body.textContent];
  for (const el of document.querySelectorAll("[aria-label], [placeholder], [title]")) {
    for (const name of ["aria-label", "placeholder", "title"]) if (el.hasAttribute(name)) texts.push(el.getAttribute(name));
  }
  return texts.join("\\n");
}"""
FOCUSED = "Array.from(document.querySelectorAll('#doc-text mark.hl-focus')).map(m => m.textContent).join('')"


def english_left(page: Any, allowed: tuple[str, ...] = ()) -> list[str]:
    """The English labels on the page, as whole words; `allowed`: text the page shows that is not ours (a title)."""
    text = page.evaluate(PAGE_TEXT)
    for words in allowed:
        text = text.replace(words, "")
    return [label for label in ENGLISH if re.search(rf"(?<![\w-]){re.escape(label)}(?![\w-])", text)]


def answered(user: Any, question: str) -> Any:
    """The question asked and answered as a worker answers it; the finished answer."""
    from chat.models import Message
    from chat.services import answer_produce, question_ask

    asked = question_ask(user=user, question=question, enqueue=False)
    answer_produce(message_id=asked.answer.pk, job_id=str(asked.answer.job_id))
    return Message.objects.get(pk=asked.answer.pk)


def cited(answer: Any, document: Any) -> Any:
    """The answer's first citation of `document`, with the sentence it quotes (the link's `focus`)."""
    citation = answer.citations.filter(document=document).order_by("number").first()
    found = [(c.number, c.document.title, c.quote[:80]) for c in answer.citations.select_related("document")]
    assert citation is not None, f"{answer.status}: {answer.text!r} cites {found}"
    return citation


def focus_of(citation: Any) -> tuple[int, int]:
    start, end = parse_qs(citation.link.split("#", 1)[1])["focus"][0].split(",")
    return int(start), int(end)


def open_citation(page: Any, answer: Any, citation: Any) -> None:
    """The conversation on the Ask page, then the answer's citation chip, into the viewer."""
    page.goto(f"/?c={answer.conversation_id}")
    page.wait_for_selector("#ask[data-state=connected] #answer .cite-chip")
    page.locator(f"#answer .cite-chip[href^='/documents/{citation.document_id}/']").first.click()
    page.wait_for_url(f"**/documents/{citation.document_id}/#char=*")
    page.wait_for_selector("#doc-text mark.hl-focus")


# --------------------------------------------------------------------------- (a) every page in Polish


def test_an_employee_and_a_reviewer_read_every_page_in_polish(reader: Callable[..., Any], people: dict[str, Any]) -> None:
    from django.utils import translation

    document = ingested_document(REMOTE_WORK, "praca-zdalna.md")
    answer = answered(people["alice"], REMOTE_QUESTION)
    assert answer.status == "done", answer.text
    with translation.override("pl"):
        polish = {english: translation.gettext(english) for english in ENGLISH}
    allowed = (document.title, REMOTE_QUESTION)

    page = reader(people["alice"])
    page.goto(f"/?c={answer.conversation_id}")
    page.wait_for_selector("#ask[data-state=connected] #answer .cite-chip")
    assert page.evaluate("document.documentElement.lang") == "pl"
    assert page.locator("#ask-title").inner_text() == "Zapytaj bazę wiedzy"
    assert page.get_by_label("Twoje pytanie").is_visible()
    assert page.locator(".backend-badge").inner_text() == "Cytowane ze źródeł"
    assert english_left(page, allowed) == []
    assert_labelled(page)
    screenshot(page, "polish-ask")

    page.goto("/library/")
    assert page.evaluate("document.documentElement.lang") == "pl"
    assert page.locator("h1").inner_text() == polish["Library"] == "Biblioteka"
    assert page.get_by_placeholder(polish["Search titles"]).is_visible()
    assert page.locator(".doc-row-title").all_inner_texts() == [document.title]
    assert english_left(page, allowed) == []
    screenshot(page, "polish-library")

    page.goto(f"/documents/{document.pk}/")
    page.wait_for_selector("#doc-text")
    assert page.evaluate("document.documentElement.lang") == "pl"
    assert page.get_by_role("link", name=polish["Download original"]).is_visible()
    assert english_left(page, allowed) == []

    for missing in ("/nie-ma-takiej-strony/", "/gaps/", "/review/"):  # gaps and review do not exist for her
        response = page.goto(missing)
        assert response is not None and response.status == 404, missing
        assert page.locator("h1").inner_text() == polish["We can't find that page"] == "Nie możemy znaleźć tej strony"
        assert english_left(page) == [], missing
    screenshot(page, "polish-404")
    assert_clean(page)

    # sam (support) reviews the answer on the review desk: the page and review.js's items in Polish.
    desk = reader(people["sam"])
    desk.goto("/review/")
    desk.wait_for_selector("#review-list[data-loaded=true] .review-item")
    assert desk.evaluate("document.documentElement.lang") == "pl"
    assert desk.locator("h1").inner_text() == "Przegląd odpowiedzi"
    with translation.override("pl"):
        unreviewed = translation.gettext("Unreviewed")
    current = desk.locator("nav.review-queues a[aria-current=page]")
    assert current.get_attribute("data-queue") == "unreviewed" and current.inner_text().startswith(unreviewed)
    assert unreviewed != "Unreviewed"
    # A citation's flag form opens from its button, named as review.js names it (the scripts' own catalog).
    opener = desk.evaluate("interpolate(gettext('Flag [%(number)s]'), {number: 1}, true)")
    assert opener != "Flag [1]", opener
    desk.get_by_role("button", name=opener).first.click()
    assert desk.get_by_label("Oznacz [1] jako").locator("option").all_inner_texts() == [
        "Złe źródło", "Twierdzenie bez pokrycia", "Nieaktualne"]
    assert desk.get_by_role("button", name="Oznacz cytat").first.is_visible()
    assert "zadane przez alice" in desk.locator(".review-meta").first.inner_text()
    assert english_left(desk, (*allowed, answer.text, *(c.quote for c in answer.citations.all()))) == []
    assert_labelled(desk)
    screenshot(desk, "polish-review")

    # A flag saved from the desk reads back in Polish.
    desk.get_by_label("Notatka do [1]").first.fill("Zdanie jest poprawne, sprawdzam tylko formularz.")
    desk.get_by_role("button", name="Oznacz cytat").first.click()
    desk.wait_for_selector(".flag-done")
    assert desk.locator(".flag-done").first.inner_text() == "Oznaczono. Jest na liście „Oznaczone”."
    assert desk.locator(".review-status").first.text_content() == "Oznaczone"
    assert_clean(desk)


# --------------------------------------------------------------------------- (b)-(d) answers across languages


@pytest.mark.parametrize(("documents", "question", "sentence", "locale", "lang"), [
    # A Polish question over a Polish policy: quoted in the answer, highlighted in the viewer.
    ((("praca-zdalna.md", REMOTE_WORK), ("hasla.md", PASSWORDS)), REMOTE_QUESTION, REMOTE_ANSWER, "pl-PL", "pl"),
    # A Chinese one: exactly the sentence, not the question or the exclamation before it (they end in ？ and ！).
    ((("mima.md", PASSWORDS), ("praca-zdalna.md", REMOTE_WORK)), PASSWORD_QUESTION, PASSWORD_ANSWER, "zh-CN",
     "zh-hans"),
    # An English question over a German travel policy, an English document beside it.
    ((("reisekosten.md", TRAVEL), ("parking.md", PARKING)), TRAVEL_QUESTION, TRAVEL_ANSWER, "en-GB", "en"),
], ids=["polish", "chinese", "english-over-german"])
def test_the_answer_cites_and_the_viewer_highlights_exactly_the_sentence(
    reader: Callable[..., Any], people: dict[str, Any], documents: tuple[tuple[str, str], ...], question: str,
    sentence: str, locale: str, lang: str,
) -> None:
    document, *_ = [ingested_document(text, name) for name, text in documents]
    answer = answered(people["alice"], question)
    citation = cited(answer, document)
    start, end = focus_of(citation)
    assert document.canonical_text[start:end] == sentence
    assert sentence.rstrip(".。") in answer.text  # quoted, with its citation mark before the full stop

    page = reader(people["alice"], locale=locale)
    open_citation(page, answer, citation)
    assert page.evaluate("document.documentElement.lang") == lang
    assert page.evaluate(FOCUSED) == sentence
    assert page.locator("#passage-bar").is_visible()
    screenshot(page, f"citation-{lang}")
    assert_clean(page)
