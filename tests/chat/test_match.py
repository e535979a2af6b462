"""How well an answer matches (chat.match): the label is decided from the answer's own text and retrieval's gap,
stored with the answer, replayed, returned by the API, and never sends the numbers behind it to the reader.

Real models and a real index; the thresholds are the settings the development sets chose (docs/CHAT.md)."""

from __future__ import annotations

from typing import Any

import pytest

from chat import match
from chat.models import Message
from chat.selectors import conversation_replay
from chat.services import answer_produce, question_ask
from kb.library.models import Document
from tests.chat.conftest import EXPORT_QUESTION

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(("similarity", "gap", "level"), [
    (0.90, 0.20, match.QUOTED),
    (0.85, 0.20, match.CLOSEST),  # the answer's text is far from the question
    (0.90, 0.03, match.CLOSEST),  # no passage stood out from its look-alikes
    (0.90, None, match.QUOTED),  # no retrieval signals recorded: the text decides alone
])
def test_the_level_is_closest_below_either_line(similarity: float, gap: float | None, level: str, settings: Any) -> None:
    settings.KB_ANSWER_MATCH_SIMILARITY, settings.KB_ANSWER_MATCH_GAP = 0.86, 0.06
    assert match.MatchSignals(similarity=similarity, gap=gap).level() == level


def test_a_stand_in_makes_an_answer_closest_whatever_its_similarity(settings: Any) -> None:
    settings.KB_ANSWER_MATCH_SIMILARITY, settings.KB_ANSWER_MATCH_GAP = 0.86, 0.06
    swapped = match.MatchSignals(similarity=0.92, gap=0.2, stand_in="sick leave → carer's leave")
    assert swapped.level() == match.CLOSEST


LEAVE = ("Northwind Lumen pays full salary during sickness absence for up to 30 working days in any rolling 12-month "
         "period. Sick leave is for your own illness. If a child or another dependant is ill, you can take up to "
         "five days of paid carer's leave per calendar year.")
CARERS = ("If a child or another dependant is ill, you can take up to five days of paid carer's leave per calendar "
          "year [2]. Sick leave is for your own illness [2].")


@pytest.mark.parametrize(("question", "answer", "found"), [
    # The lead sentence names the question's "sick leave" as "carer's leave"; "sick" only comes after it.
    ("How many days of sick leave do I get?", CARERS, "sick leave → carer's leave"),
    # The sentence that answers holds the question's qualifier ("sick" of "sickness"): no stand-in.
    ("How many days of sick leave do I get?", "Northwind Lumen pays full salary during sickness absence for up to 30 "
     "working days in any rolling 12-month period [1].", None),
    # Asked about carer's leave, the same answer is on the question's thing.
    ("How many days of carer's leave do I get?", CARERS, None),
    # "many days" / "five days": the passages never write "many days", so it names nothing.
    ("How many days do I get?", CARERS, None),
    # "sick leave" is not a thing these passages name: nothing is known to be swapped.
    ("How much medical leave is there?", CARERS, None),
])
def test_a_stand_in_is_the_questions_thing_named_with_another_qualifier(
    question: str, answer: str, found: str | None
) -> None:
    assert match.stand_in(question, answer, [LEAVE]) == found


def test_a_lead_on_one_of_the_questions_things_or_a_question_not_in_english_has_no_stand_in() -> None:
    travel = "Use the time zone at departure to calculate elapsed time. Travel comp time hours are based on it."
    # "elapsed time" for "comp time", but the lead names the question's "time zone" as the question does.
    assert match.stand_in("Which time zone is used when calculating travel comp time?",
                          "Use the time zone at departure to calculate elapsed time [1].", [travel]) is None
    assert match.stand_in("Which clock is used when calculating travel comp time?",
                          "Use the time zone at departure to calculate elapsed time [1].", [travel]) == (
        "comp time → elapsed time")
    # Stop words and stems are English: "une composante" / "chaque composante" is no qualified thing.
    composante = "Chaque composante élémentaire peut être multipliée par un facteur [1]."
    assert match.stand_in("À quoi sert le facteur placé devant une composante de coût ?", composante,
                          ["Une composante de coût. Chaque composante élémentaire peut être multipliée."]) is None


def test_similarity_reads_the_answers_words_across_languages_not_its_markers() -> None:
    question = "How long does the company pay full salary during sickness absence?"
    right = "Northwind Lumen pays full salary during sickness absence for up to 30 working days [1]."
    off = "Press Add carrier above the list to open the new-carrier wizard [3]."
    polish = "Firma wypłaca pełne wynagrodzenie podczas nieobecności chorobowej do 30 dni roboczych [1]."
    assert match.similarity(question, right) == pytest.approx(match.similarity(question, right.replace(" [1]", "")))
    assert match.similarity(question, right) > 0.86 > match.similarity(question, off)
    assert match.similarity(question, polish) > match.similarity(question, off) + 0.05


def test_the_label_is_stored_replayed_and_returned_without_its_numbers(
    corpus: dict[str, Document], people: dict[str, Any], settings: Any, client: Any
) -> None:
    asked = question_ask(user=people["carol"], question=EXPORT_QUESTION, enqueue=False)
    answer_produce(message_id=asked.answer.pk)
    answer = Message.objects.get(pk=asked.answer.pk)
    assert answer.match == match.QUOTED, answer.text  # the Export dialog's own sentence answers it
    # The same question where no answer could be close enough: the label says so, everywhere the answer goes.
    settings.KB_ANSWER_MATCH_SIMILARITY = 0.999
    again = question_ask(user=people["carol"], question=EXPORT_QUESTION, conversation_id=asked.conversation.pk,
                         enqueue=False)
    answer_produce(message_id=again.answer.pk)
    assert Message.objects.get(pk=again.answer.pk).match == match.CLOSEST
    done = [e for e in conversation_replay(asked.conversation, viewer=people["carol"]) if e["type"] == "done"]
    assert [e.get("match") for e in done] == [match.QUOTED, match.CLOSEST]
    assert all("match_signals" not in e for e in done)
    client.force_login(people["carol"])
    messages = client.get(f"/api/conversations/{asked.conversation.pk}").json()["messages"]
    assert [m["match"] for m in messages if m["role"] == "assistant"] == [match.QUOTED, match.CLOSEST]


def test_a_reader_who_arrives_while_the_match_is_read_gets_the_citations_already_sent(
    corpus: dict[str, Document], people: dict[str, Any]
) -> None:
    """The stream sends `citations`, then reads the match level (~0.25 s), then `done`: a page that connects in
    between is brought up to date from the store, and must not get a `done` with no sources to show."""
    done = Message.objects.get(pk=_produced(people["carol"]))
    # The same answer as it stands between the two events: text and citations stored, still running.
    Message.objects.filter(pk=done.pk).update(status=Message.Status.RUNNING, match="")
    replay = conversation_replay(done.conversation, viewer=people["carol"])
    kinds = [e["type"] for e in replay if e.get("message") == done.pk]
    assert kinds == ["status", "token", "citations"], kinds
    cited = next(e for e in replay if e["type"] == "citations")["citations"]
    assert [c["number"] for c in cited] == [c.number for c in done.citations.all()] and cited


def _produced(user: Any) -> int:
    asked = question_ask(user=user, question=EXPORT_QUESTION, enqueue=False)
    answer_produce(message_id=asked.answer.pk)
    return int(asked.answer.pk)
