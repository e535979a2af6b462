"""Issue 12 item 7 (in part): one user cannot ask without limit (each question costs an
embedding, searches and a generation); the API says 429 and the question is not stored."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from chat.models import Message
from chat.services import TooManyQuestions, question_ask

pytestmark = pytest.mark.django_db


def test_the_budget_is_per_user_and_per_minute(people: dict[str, Any], settings: Any) -> None:
    settings.KB_ASKS_PER_MINUTE = 3
    for n in range(3):
        question_ask(user=people["alice"], question=f"question {n}?", enqueue=False)
    with pytest.raises(TooManyQuestions, match="more than 3 questions in a minute"):
        question_ask(user=people["alice"], question="one too many?", enqueue=False)
    question_ask(user=people["bob"], question="bob has his own budget?", enqueue=False)
    assert Message.objects.filter(role="user", conversation__owner=people["alice"]).count() == 3


def test_the_api_answers_429(people: dict[str, Any], settings: Any) -> None:
    settings.KB_ASKS_PER_MINUTE = 1
    client = Client()
    client.force_login(people["carol"])
    first = client.post("/api/ask", {"question": "first?"}, content_type="application/json")
    second = client.post("/api/ask", {"question": "second?"}, content_type="application/json")
    assert (first.status_code, second.status_code) == (202, 429)
    assert "wait a moment" in second.json()["detail"]
