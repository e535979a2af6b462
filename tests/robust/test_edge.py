"""Issue 12 item 5: request bodies and websocket messages are bounded at the ASGI edge.

Before, any body was read in full before a view ran (the upload limit was checked after
the bytes were on disk; `/accounts/login/` took any size) and websocket messages had no cap.
This runs `manage.py runserver`, which serves through stock Daphne (its app, loaded for that command only), so
the 413s come from the ASGI layer, kb.edge; test_edge_body.py holds the web server that `make run` starts,
which refuses earlier.
"""

from __future__ import annotations

import http.client
import json
import sys
from typing import Any

import pytest
from django.test import Client
from websockets.exceptions import ConnectionClosed

from kb.edge import CLOSE_TOO_BIG
from kb.runtime.embedded import free_port
from tests.conftest import child, listening, service_env, wait_until, ws

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def post(port: int, path: str, body: bytes, *, chunked: bool = False) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        if chunked:
            connection.request("POST", path, body=iter([body[i : i + 65536] for i in range(0, len(body), 65536)]),
                               headers={"Content-Type": "application/json"}, encode_chunked=True)
        else:
            connection.request("POST", path, body=body, headers={"Content-Type": "application/x-www-form-urlencoded"})
        return connection.getresponse().status
    except (BrokenPipeError, ConnectionResetError):
        return -1  # the server hung up before reading everything
    finally:
        connection.close()


def test_bodies_and_messages_over_the_limit_are_refused(people: dict[str, Any], settings: Any) -> None:
    port = free_port()
    env = service_env(SECRET_KEY=settings.SECRET_KEY, KB_MAX_BODY_KB="256", KB_MAX_UPLOAD_MB="1",
                      KB_MAX_WS_MESSAGE_KB="16")
    argv = [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"]
    with child("edge-runserver", argv, env) as web:
        wait_until(lambda: listening(port), "runserver", [web])
        big = b"x" * (300 * 1024)
        assert post(port, "/accounts/login/", big) == 413
        assert post(port, "/api/ask", big, chunked=True) == 413  # no Content-Length: counted as it streams
        assert post(port, "/accounts/login/", b"username=a&password=b") == 403  # small: reaches Django (CSRF)
        assert post(port, "/library/upload", big) != 413  # uploads have their own, larger limit...
        assert post(port, "/library/upload", b"x" * (2 * 2**20 + 1)) == 413  # ...which holds too

        browser = Client()
        browser.force_login(people["alice"])
        with ws(port, "/ws/library/", browser.cookies["sessionid"].value) as socket:
            socket.send(json.dumps({"text": "y" * 17 * 1024}))  # over the cap: closed before any consumer parses it
            with pytest.raises(ConnectionClosed) as closed:
                while True:
                    socket.recv(timeout=10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == CLOSE_TOO_BIG
