"""Two admins accepting answerability models at the same moment: one decides, and reverts walk back in order.

Before: both accepts read the same active model (none here), and the second broke the one-active index when
the first committed (a server error in the admin)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connection, transaction

from search.answerability import model_accept, model_propose, model_revert
from search.models import AnswerabilityModel


@pytest.mark.django_db(transaction=True)
def test_two_accepts_at_once_leave_one_active_model_and_reverts_walk_back(people: dict[str, Any], settings: Any) -> None:
    admin = people["admin"]
    first, second = (model_propose(model=settings.KB_ANSWERABILITY, fitted_on={}, candidates=[], user=admin)
                     for _ in range(2))
    first_uncommitted = threading.Event()
    errors: list[BaseException] = []

    def accept(pk: int, hold: bool) -> None:
        try:
            with transaction.atomic():
                model_accept(pk=pk, user=admin)
                if hold:  # the second accept runs while this one is not yet committed
                    first_uncommitted.set()
                    time.sleep(1.5)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    holder = threading.Thread(target=accept, args=(first.pk, True))
    holder.start()
    assert first_uncommitted.wait(30)
    racer = threading.Thread(target=accept, args=(second.pk, False))
    racer.start()
    holder.join(60)
    racer.join(60)

    assert errors == []
    assert list(AnswerabilityModel.objects.filter(active=True).values_list("pk", flat=True)) == [second.pk]
    assert AnswerabilityModel.objects.get(pk=second.pk).previous_id == first.pk
    assert model_revert(user=admin) == first
    assert model_revert(user=admin) is None
    assert not AnswerabilityModel.objects.filter(active=True).exists()
