"""Worker upkeep: work that a worker dies holding is ended by the others, and each worker process gets ready.

Work a worker claims lives in a database row that names the worker (an answer, a document). Each app describes
its rows as a Lease and registers it from its AppConfig.ready (chat.apps, kb.library.apps); this module
imports none of the apps. Three passes end leased work that nobody will finish, each through the lease's own
`end` (an answer fails and its readers are told; a document is queued again, or fails after
KB_INGEST_MAX_ATTEMPTS tries):

- the sweep, every KB_SWEEP_SECONDS: work whose lease ran out, running that long (its worker died) or waiting
  that long (its job was lost);
- the heartbeat, every KB_WORKER_HEARTBEAT_SECONDS: each worker renews a key in Redis that expires after three
  beats, and ends the running work of any worker whose key has expired. A worker killed outright (main
  process and all) is noticed in about three beats, not after the lease; a thread, not the task loop,
  beats, so a busy worker stays alive;
- a worker starting: the work its name claimed before it started, which it died with.

A pool process lost under a living worker is reported job by job instead (kb.celery.when_job_lost). Both
passes run in daemon threads of every Celery worker (started on `worker_ready`), so they need no process of
their own; every end is a conditional update, so several workers doing the same pass do each thing once.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import redis
from celery.signals import worker_process_init, worker_ready
from django.conf import settings
from django.db import connection
from django.db.models import Model, Q, QuerySet
from django.utils import timezone

from kb import queues
from kb.celery import app
from kb.text import embedding

log = logging.getLogger(__name__)

Ended = Counter[str]  # how many rows ended, by outcome ("failed", "queued again"); no zero counts


@dataclass(frozen=True)
class Lease:
    """Rows of `model` that a worker claims, naming itself in their `worker` field, and may die holding."""

    work: str  # what the rows are, in reports and the log: "answers", "documents"
    model: type[Model]
    running: Q  # claimed by a worker and not finished
    moved: str  # the field that says when a running row's claim last moved
    waiting: Q  # queued for a job that no worker has claimed yet
    waited: str  # the field that says since when a waiting row waits
    seconds: Callable[[], float]  # the lease: work that has not moved for that long was lost (read at each pass)
    end: Callable[[QuerySet[Any], str], Ended]  # end these rows, lost for the reason given; how many, by outcome

    def rows(self, *conditions: Q, **fields: Any) -> QuerySet[Any]:
        return self.model._default_manager.filter(*conditions, **fields)

    def lapsed(self, now: datetime) -> Q:
        """Running rows whose lease ran out at `now`: their worker died, and another may claim them again."""
        return self.running & Q(**{f"{self.moved}__lt": now - timedelta(seconds=self.seconds())})


_leases: list[Lease] = []


def lease_register(lease: Lease) -> None:
    """Have the sweep, the heartbeat and a starting worker end `lease`'s lost work. Called from an AppConfig.ready;
    registering the same work again replaces it."""
    _leases[:] = [*(known for known in _leases if known.work != lease.work), lease]


def leases() -> list[Lease]:
    return list(_leases)


def _named(lease: Lease, ended: Ended) -> Ended:
    return Counter({f"{lease.work} {outcome}": n for outcome, n in ended.items() if n})


def expire(lease: Lease, *, now: datetime | None = None) -> Ended:
    """End `lease`'s work that has not moved for the lease: running that long (its worker died) or waiting that
    long (its job was lost)."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=lease.seconds())
    lost = lease.lapsed(now) | (lease.waiting & Q(**{f"{lease.waited}__lt": cutoff}))
    return _named(lease, lease.end(lease.rows(lost), "lease expired"))


def orphaned(lease: Lease, *, worker: str, before: datetime) -> Ended:
    """End the running work `worker` claimed before `before` (its start): the worker died with it and has just been
    started again under its name, so nothing else will finish it."""
    if not worker:
        return Counter()
    running = lease.rows(lease.running, worker=worker, **{f"{lease.moved}__lt": before})
    return _named(lease, lease.end(running, "worker lost"))


def of_silent_workers(lease: Lease, *, alive: Callable[[str], bool], before: datetime) -> Ended:
    """End the running work, claimed before `before`, of every worker that has stopped saying it is alive: a worker
    killed outright, main process and all, ends nothing itself and may never be started again under its name."""
    running = lease.rows(lease.running, **{f"{lease.moved}__lt": before}).exclude(worker="")
    silent = [worker for worker in running.values_list("worker", flat=True).order_by().distinct() if not alive(worker)]
    ended: Ended = Counter()
    for worker in silent:
        ended += lease.end(running.filter(worker=worker), f"worker lost ({worker} stopped)")
    return _named(lease, ended)


def _every_lease(end: Callable[[Lease], Ended], why: str) -> Ended:
    """`end` applied to every registered lease, what it ended logged under `why`."""
    ended: Ended = sum((end(lease) for lease in leases()), Counter())
    if ended:
        log.warning("%s: %s", why, dict(ended))
    return ended


def sweep() -> Ended:
    """Expire every registered lease once."""
    return _every_lease(expire, "sweep")


def worker_started(worker: str, started: datetime) -> Ended:
    """End what `worker` was doing when it died, if it did: the work its name claimed before `started`."""
    return _every_lease(lambda lease: orphaned(lease, worker=worker, before=started), f"{worker} started again")


PRESENCE = "kb:worker-alive:{}"


def _presence(client: Any) -> Callable[[str], bool]:
    return lambda worker: bool(client.exists(PRESENCE.format(worker)))


def heartbeat(client: Any, worker: str, interval: float) -> Ended:
    """Say `worker` is alive for three beats; end the running work of the workers that stopped saying so."""
    silence = 3 * interval
    client.set(PRESENCE.format(worker), "1", px=int(silence * 1000))
    if int(client.info("server")["uptime_in_seconds"]) <= silence:
        # Redis started again lately, without the keys: a live worker may not have beaten since.
        return Counter()
    before, alive = timezone.now() - timedelta(seconds=silence), _presence(client)
    return _every_lease(lambda lease: of_silent_workers(lease, alive=alive, before=before),
                        f"workers silent for {silence:.0f} s")


def _sweep_forever(interval: float, stop: threading.Event) -> None:
    while not stop.wait(interval):
        try:
            sweep()
        except Exception:  # the database may be restarting: try again next time
            log.exception("sweep failed")
        finally:
            connection.close()  # back to the pool between sweeps


def start_sweeper(stop: threading.Event | None = None) -> threading.Thread | None:
    """Sweep every KB_SWEEP_SECONDS in a daemon thread; None when sweeping is switched off (0)."""
    interval = float(settings.KB_SWEEP_SECONDS)
    if interval <= 0:
        return None
    thread = threading.Thread(target=_sweep_forever, args=(interval, stop or threading.Event()), name="kb-sweeper",
                              daemon=True)
    thread.start()
    return thread


def _beat_forever(worker: str, interval: float, stop: threading.Event) -> None:
    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    while True:
        try:
            heartbeat(client, worker, interval)
        except Exception:  # Redis or the database may be restarting: beat again next time
            log.exception("heartbeat failed")
        finally:
            connection.close()
        if stop.wait(interval):
            return


def start_heartbeat(worker: str, stop: threading.Event | None = None) -> threading.Thread | None:
    """Beat every KB_WORKER_HEARTBEAT_SECONDS in a daemon thread; None when switched off (0)."""
    interval = float(settings.KB_WORKER_HEARTBEAT_SECONDS)
    if interval <= 0 or not worker:
        return None
    thread = threading.Thread(target=_beat_forever, args=(worker, interval, stop or threading.Event()),
                              name="kb-heartbeat", daemon=True)
    thread.start()
    return thread


@worker_ready.connect
def _worker_ready(sender: Any = None, **_: object) -> None:
    """Every worker heals lost work, starting with what it was doing when it died, if it did (the work its name
    claimed before it started); then it beats, and sweeps."""
    controller = getattr(sender, "controller", None)  # sent by the worker's consumer; its controller is the worker
    if controller is not None:
        try:
            worker_started(controller.hostname, controller.startup_time)
        except Exception:  # the database may be restarting too: the lease still ends that work
            log.exception("could not end the work this worker was doing when it stopped")
        start_heartbeat(controller.hostname)
    start_sweeper()


@worker_process_init.connect
def _load_the_embedding_model(**_: Any) -> None:
    """Each worker process loads the model as it starts (after the fork: torch's thread pools are not
    fork-safe), and one that serves answers traces its query encoder and makes the bf16 copy for passages
    too (57 and 22 MiB more, which an ingest process would never use), so no question waits seconds for
    them on a process's first answer."""
    embedding.model()
    if queues.ANSWERS in app.amqp.queues.consume_from:  # the worker's --queues, which its pool processes inherit
        embedding.query_encoder()
        if embedding.use_bf16():
            embedding.bf16_model()
