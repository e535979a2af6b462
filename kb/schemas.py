"""What every API operation shares: its error bodies, the statuses it may answer, strict bodies.

Every error is JSON `{"detail": ...}`: ninja's own (401 without valid credentials, 400 for a
body that is not JSON, 422 for parameters that fail validation, whose detail lists the fields),
every HttpError and domain error mapped in kb/api.py, and the 413 of the ASGI edge (kb/edge.py).
Operations spread these into their `response=` so /api/openapi.json names every status they return.
"""

from __future__ import annotations

from typing import Any

from ninja import Schema
from pydantic import ConfigDict, Field


class ErrorOut(Schema):
    detail: str = Field(examples=["no such conversation"])


class FieldErrorOut(Schema):
    type: str = Field(examples=["missing"])
    loc: list[str | int] = Field(description="Where: path, query or body, then the field", examples=[["query", "q"]])
    msg: str = Field(examples=["Field required"])


class InvalidOut(Schema):
    detail: list[FieldErrorOut] | str = Field(
        description="The fields that failed validation, or in words why the request cannot be carried out"
    )


# Any operation: 401 without a valid token or session; 403 for a token without the operation's scope,
# or a session without CSRF; 503 while the database cannot be reached (kb/api.py; retry after a moment).
ANY: dict[int, Any] = {401: ErrorOut, 403: ErrorOut, 503: ErrorOut}
# Operations with path or query parameters: 422 names the ones that fail validation.
PARAMS: dict[int, Any] = {**ANY, 422: InvalidOut}
# Operations with a body: also 400 (unreadable JSON or form) and 413 (over the size limit).
BODY: dict[int, Any] = {**PARAMS, 400: ErrorOut, 413: ErrorOut}
NOT_FOUND: dict[int, Any] = {404: ErrorOut}

# Text that is stored or compared in PostgreSQL, which holds no NUL character (one was a 500): a 422.
NO_NUL = r"^[^\x00]*$"


class TypedIn(Schema):
    """A JSON body whose values must have their JSON type (422 naming the field): `"1"`, `1.0` and
    `true` are not the number 1, and `0` is not `false`."""

    model_config = ConfigDict(strict=True)


class StrictIn(TypedIn):
    """A typed body that also refuses fields it does not know. With every field optional, a misspelt
    `groups` or a JSON array would otherwise pass as "all defaults" and, for access, quietly take
    every reader away."""

    model_config = ConfigDict(extra="forbid", strict=True)
