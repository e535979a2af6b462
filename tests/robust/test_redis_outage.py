"""Fault drill: Redis (the job queue and the channel layer) is down while people ask and upload.

A real Daphne on its own embedded servers; the test stops Redis and then asks a question and
uploads a file through the API. Neither may be a 500 page or lose anything:
- the question is kept, its answer fails at once with the reason, and the asker gets a JSON
  503 that says to ask again (not a 202 for an answer nothing will produce);
- the upload is accepted and the document stays queued: the sweeper sends its job again once
  the broker is back (tests/robust/test_sweeper.py shows that part).

Before: both requests were 500 pages, and the answer stayed pending until its lease ran out.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from kb.runtime import embedded
from tests.robust.test_postgres_restart import drill
from tests.robust.test_zoo import Specimen, multipart

pytestmark = pytest.mark.slow

FAST = 15.0  # seconds: the broker's refusal comes back in well under this (its connect timeout is 5 s)


def request(base: str, token: str, method: str, path: str, body: bytes | None = None,
            content_type: str = "application/json") -> tuple[int, dict[str, str], Any, float]:
    sent = urllib.request.Request(f"{base}{path}", data=body, method=method,
                                  headers={"Authorization": f"Bearer {token}", "Content-Type": content_type})
    began = time.monotonic()
    try:
        with urllib.request.urlopen(sent, timeout=60) as response:
            status, headers, raw = response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        status, headers, raw = error.code, dict(error.headers), error.read()
    assert headers.get("Content-Type", "").startswith("application/json"), (status, raw[:500])
    return status, headers, json.loads(raw), time.monotonic() - began


def test_asking_and_uploading_while_redis_is_down_fail_cleanly_and_lose_nothing(tmp_path: Path) -> None:
    with drill(tmp_path, "redis-outage-daphne", admin=True) as server:
        base, token = server.base, server.token
        ask = json.dumps({"question": "How many days of holiday do we get?"}).encode()
        status, _, body, _ = request(base, token, "POST", "/api/ask", ask)
        assert status == 202, body  # with Redis up, the answer is queued
        embedded.stop_redis(server.var_dir)

        status, headers, body, seconds = request(base, token, "POST", "/api/ask", ask)
        assert status == 503 and headers.get("Retry-After"), body
        assert "ask again" in body["detail"] and seconds < FAST, (body, seconds)
        # The question is kept, and its answer says why it failed instead of pending until its lease runs out.
        status, _, listed, _ = request(base, token, "GET", "/api/conversations")
        assert status == 200 and len(listed) == 2, listed
        status, _, conversation, _ = request(base, token, "GET", f"/api/conversations/{listed[0]['id']}")
        question, answer = conversation["messages"][-2:]
        assert question["text"] == "How many days of holiday do we get?", conversation
        assert answer["status"] == "failed" and "ask again" in answer["error"], answer

        files, content_type = multipart([Specimen("guide.md", b"# Guide\n\nEveryone gets 28 days of holiday.\n",
                                                  "ready")])
        status, _, body, seconds = request(base, token, "POST", "/api/documents", files, content_type)
        assert status in (200, 201) and seconds < FAST, (status, body, seconds)
        [uploaded] = body["items"]
        assert uploaded["error"] is None and uploaded["queued"], uploaded
        status, _, document, _ = request(base, token, "GET", f"/api/documents/{uploaded['document']['id']}")
        assert status == 200 and document["status"] == "queued", document
