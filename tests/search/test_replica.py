"""Retrieval on a real streaming replica (pg_basebackup of the test server, hot standby): a revocation
holds at once while the replica lags, and a replica that goes away sends reads to the primary."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.db import connection, connections

from kb.library.models import Document
from kb.library.services import document_delete, document_set_access
from kb.runtime import embedded
from search import replica
from search.retrieval import hybrid_search
from tests.factories import ingested_document

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, databases="__all__")]

SECRET = (
    "# Cold store\n\n## Keys\n\n"
    "The spare keys of the Bergen cold store hang in the locked cabinet behind the dispatch desk, tag CS-0931. "
    "The night supervisor signs them out in the key ledger and returns them before the shift ends.\n"
)
QUESTION = "Where are the spare keys of the Bergen cold store kept?"


@pytest.fixture(scope="module")
def standby(django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[embedded.Service]:
    """A hot standby of the session's PostgreSQL, named `replica` to Django for this module's tests."""
    with django_db_blocker.unblock():
        primary = connection.settings_dict
        url = f"postgresql://{primary['USER']}@{primary['HOST']}:{primary['PORT']}/{primary['NAME']}"
    pgdata = tmp_path_factory.mktemp("standby") / "pg"
    service = embedded.start_standby(url, pgdata)
    port = int(service.url.rsplit(":", 1)[1].split("/")[0])
    options = {k: v for k, v in primary["OPTIONS"].items() if k != "pool"}
    connections.settings[replica.REPLICA] = {**primary, "PORT": port, "OPTIONS": options, "TEST": {"MIRROR": "default"}}
    try:
        yield service
    finally:
        connections[replica.REPLICA].close()
        del connections[replica.REPLICA]
        del connections.settings[replica.REPLICA]
        embedded.stop_pgdata(pgdata)


def on_standby(standby: embedded.Service, sql: str, params: list[Any] | None = None) -> Any:
    """A statement on the standby outside Django (replay control, direct reads)."""
    with psycopg.connect(standby.url, autocommit=True) as conn:
        row = conn.execute(sql, params).fetchone()
        return row[0] if row else None


def eventually(check: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "the replica did not catch up"
        time.sleep(0.1)


def found(user: Any, document: Document) -> bool:
    return document.pk in {hit.document_id for hit in hybrid_search(user=user, query=QUESTION).hits}


def lsn(text: str) -> int:
    """A WAL position ("16/B374D848") as a number: as text, "0/10081FA8" sorts before "0/EAFD988"."""
    high, low = text.split("/")
    return int(high, 16) << 32 | int(low, 16)


def test_access_changes_move_the_recorded_position_and_nothing_else_does(standby: embedded.Service, people: dict[str, Any]) -> None:
    document = ingested_document(SECRET, "keys.md", public=False, groups=[people["groups"]["engineering"]])
    before = replica.access_lsn("default")
    document.chunks.update(kind="note")  # not the ACL: nothing to wait for
    assert replica.access_lsn("default") == before
    document_set_access(document=document, inherit=False, groups=[people["groups"]["finance"]])
    narrowed = replica.access_lsn("default")
    assert lsn(narrowed) > lsn(before)
    document_delete(document=document)
    assert lsn(replica.access_lsn("default")) > lsn(narrowed)


def test_a_revocation_holds_at_once_while_the_replica_lags(standby: embedded.Service, people: dict[str, Any],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    alice = people["alice"]
    document = ingested_document(SECRET, "keys.md", public=False, groups=[people["groups"]["engineering"]])
    eventually(lambda: replica.read_alias() == replica.REPLICA)
    assert found(alice, document)  # read on the replica

    on_standby(standby, "SELECT pg_wal_replay_pause()")
    try:
        document_set_access(document=document, inherit=False, groups=[people["groups"]["finance"]])
        chunk = document.chunks.values_list("pk", flat=True).first()
        # The lag is real: the standby still lists the chunk for engineering.
        assert on_standby(standby, "SELECT acl FROM kb_chunk WHERE id = %s", [chunk]) == [
            f"g:{people['groups']['engineering'].pk}"]
        assert replica.read_alias() == "default"
        assert replica.state()["replica"] == "behind the last access change" and replica.state()["reads"] == "default"
        assert not found(alice, document)
        assert found(people["bob"], document)

        # Reading the lagging replica as if it were current is the leak this rule prevents.
        with monkeypatch.context() as patched:
            patched.setattr(replica, "caught_up", lambda primary=None: True)
            assert found(alice, document)
    finally:
        on_standby(standby, "SELECT pg_wal_replay_resume()")

    eventually(lambda: replica.read_alias() == replica.REPLICA)
    assert replica.state()["replica"] == "caught up" and replica.state()["reads"] == replica.REPLICA
    assert not found(alice, document) and found(people["bob"], document)


def test_reads_go_to_the_primary_while_the_replica_is_down_and_come_back(standby: embedded.Service, people: dict[str, Any],
                                                                       settings: Any, tmp_path: Path) -> None:
    settings.KB_REPLICA_RETRY_SECONDS = 2.0
    document = ingested_document(SECRET, "keys.md", public=False, groups=[people["groups"]["engineering"]])
    eventually(lambda: replica.read_alias() == replica.REPLICA)
    pgdata = Path(on_standby(standby, "SHOW data_directory"))
    embedded.stop_pgdata(pgdata)

    started = time.monotonic()
    assert found(people["alice"], document)  # the replica's connection fails; the primary answers
    assert time.monotonic() - started < 10
    assert replica.read_alias() == "default"
    assert replica.state()["replica"].startswith("unreachable") and replica.state()["reads"] == "default"

    embedded.start_standby(standby.url, pgdata, port=connections.settings[replica.REPLICA]["PORT"])  # as it was
    eventually(lambda: replica.read_alias() == replica.REPLICA)
    assert found(people["alice"], document) and not found(people["carol"], document)
