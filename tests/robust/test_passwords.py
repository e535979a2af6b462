"""Issue 12 item 7 (in part): passwords that a list or a digit run would guess are refused."""

from __future__ import annotations

import pytest
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError


@pytest.mark.parametrize("password", ["password123", "qwertyuiop", "20261201123456", "short1!"])
def test_guessable_passwords_are_refused(password: str) -> None:
    with pytest.raises(ValidationError):
        validate_password(password)


def test_a_long_uncommon_password_is_accepted() -> None:
    validate_password("ledger-walrus-umbrella-42")
