"""Push webhooks: a forge tells a Git source that its repository changed, and a run starts at once; the schedule
stays the safety net (docs/SOURCES.md, "Push webhooks").

A delivery is believed only as its forge signs it, with the source's webhook secret (kb.library.sources.secrets),
every comparison in constant time:

- GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>` (the SHA-1 `X-Hub-Signature` is not
  accepted);
- Gitea (and Forgejo): `X-Gitea-Signature` (`X-Forgejo-Signature`): the bare hex HMAC-SHA256 of the body. Gitea
  sends `X-Hub-Signature-256` too, and GitHub's event headers: its own headers decide that it is Gitea;
- GitLab: `X-Gitlab-Token`: the secret itself (GitLab signs nothing; the token is compared as it is).

Replays: the SHA-256 of a delivery's body (kb.library.models.SourcePush.digest) is remembered for
KB_SOURCE_WEBHOOK_WINDOW seconds, and a delivery whose own time is older than that is refused, so a captured
delivery is refused whenever it comes back. A delivery's own time is the newest one its signed body carries:
GitHub's `repository.pushed_at` (when the push happened), else the newest of `head_commit.timestamp` and the
`commits[].timestamp` (Gitea and GitLab carry nothing else; a push comes after its commits, so it is at least
that recent). Every refusal changes nothing: no row, no run, no `last_push_at`.

A verified push of another branch than the source's is accepted and ignored, and so is one whose body carries
no time (a push that only moved a branch back): the schedule picks those up.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, transaction
from django.utils import timezone

from kb import queues
from kb.library.models import Source, SourcePush
from kb.library.sources.schedule import sources_running
from kb.library.sources.secrets import webhook_secret

log = logging.getLogger(__name__)

GITHUB, GITLAB, GITEA, WATCH = (SourcePush.Origin.GITHUB, SourcePush.Origin.GITLAB, SourcePush.Origin.GITEA,
                                SourcePush.Origin.WATCH)
QUEUED, FOLLOWING, IGNORED, PONG = "queued", "following", "ignored", "pong"  # what an accepted delivery did
_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")


class WebhookRefused(Exception):
    """A delivery that is not believed (401): the message says why, never with the secret."""


class QueueUnavailable(Exception):
    """The push was verified but no run could be queued (the broker is out of reach): the forge may deliver it
    again (503)."""


@dataclass(frozen=True)
class Outcome:
    """What a delivery that was believed did: a run queued or following the current one, ignored, or a ping."""

    status: str  # QUEUED, FOLLOWING, IGNORED or PONG
    detail: str

    @property
    def http_status(self) -> int:
        return 200 if self.status == PONG else 202


def webhook_sign(secret: str, body: bytes) -> str:
    """The hex HMAC-SHA256 of `body` under `secret`: what GitHub (after `sha256=`) and Gitea send."""
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def webhook_path(source: Source) -> str:
    """Where a forge posts the source's pushes, on this server's address (kb.library.sources_api)."""
    return f"/api/sources/{source.pk}/webhook"


def webhook_secret_set(*, source: Source, secret: str) -> None:
    """Store the source's webhook secret ("" removes it); KB_SOURCE_<NAME>_WEBHOOK_SECRET still takes precedence."""
    source.webhook_secret = secret
    source.save(update_fields=["webhook_secret"])


# --------------------------------------------------------------------------- verification


def delivery_verify(*, secret: str, headers: Mapping[str, str], body: bytes) -> str:
    """The forge that signed `body` with `secret` (GITHUB, GITEA or GITLAB), or WebhookRefused. `headers` are
    lower-cased. The forge's own headers choose the check: a Gitea delivery is checked as Gitea signs it."""
    expected = webhook_sign(secret, body)
    gitea = headers.get("x-forgejo-signature") or headers.get("x-gitea-signature")
    if gitea is not None or "x-gitea-event" in headers or "x-forgejo-event" in headers:
        if gitea is None:  # a Gitea that sent no signature of its own: its GitHub-style one
            gitea = headers.get("x-hub-signature-256", "").removeprefix("sha256=")
        if not gitea:
            raise WebhookRefused("the Gitea delivery carries no signature: set the webhook's secret in Gitea")
        _compare(gitea.strip().lower(), expected)
        return GITEA
    if "x-gitlab-token" in headers or "x-gitlab-event" in headers:
        token = headers.get("x-gitlab-token", "")
        if not token:
            raise WebhookRefused("the GitLab delivery carries no X-Gitlab-Token: set the webhook's secret token in GitLab")
        if not hmac.compare_digest(token.encode(), secret.encode()):
            raise WebhookRefused("the GitLab delivery's secret token is not this source's webhook secret")
        return GITLAB
    signature = headers.get("x-hub-signature-256")
    if signature is None:
        if "x-hub-signature" in headers:
            raise WebhookRefused("only X-Hub-Signature-256 (HMAC-SHA256) is accepted, not the SHA-1 X-Hub-Signature")
        raise WebhookRefused("no signature: a delivery needs X-Hub-Signature-256 (GitHub), X-Gitea-Signature (Gitea) "
                             "or X-Gitlab-Token (GitLab)")
    if not signature.startswith("sha256="):
        raise WebhookRefused("X-Hub-Signature-256 must read sha256=<hex HMAC-SHA256 of the body>")
    _compare(signature.removeprefix("sha256=").strip().lower(), expected)
    return GITHUB


def _compare(given: str, expected: str) -> None:
    if not _SHA256_HEX.match(given):
        raise WebhookRefused("the signature is not a hex HMAC-SHA256")
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise WebhookRefused("the signature does not match the body under this source's webhook secret")


# --------------------------------------------------------------------------- the signed body


def payload_of(body: bytes) -> dict[str, Any]:
    """The delivery's JSON object, sent as JSON or (GitHub's and Gitea's other content type) as a form's `payload`."""
    text = body.decode("utf-8", errors="strict")
    if text.lstrip().startswith("payload="):
        text = (parse_qs(text).get("payload") or [""])[0]
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


def delivery_time(payload: Mapping[str, Any]) -> datetime | None:
    """The newest time the signed body carries (see the module's docstring), or None when it carries none."""
    commits = payload.get("commits")
    found = [_time(_part(payload, "repository").get("pushed_at")), _time(_part(payload, "head_commit").get("timestamp"))]
    found += [_time(commit.get("timestamp")) for commit in (commits if isinstance(commits, list) else [])
              if isinstance(commit, dict)]
    times = [t for t in found if t is not None]
    return max(times) if times else None


def _part(payload: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """payload[key] when it is an object, else an empty one: a signed body is still read defensively."""
    value = payload.get(key)
    return value if isinstance(value, dict) else {}


def _time(value: Any) -> datetime | None:
    """A Unix time (GitHub's pushed_at in push events) or an ISO 8601 one with its offset; None otherwise."""
    try:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return datetime.fromtimestamp(value, tz=UTC)
        if isinstance(value, str) and value:
            parsed = datetime.fromisoformat(value)
            return parsed if parsed.tzinfo is not None else None
    except (ValueError, OverflowError, OSError):
        return None
    return None


def _repository_urls(payload: Mapping[str, Any]) -> Iterator[str]:
    """Every URL a forge gives for the pushed repository (GitHub and Gitea: repository.*; GitLab: project.*)."""
    for part in ("repository", "project"):
        found = _part(payload, part)
        for key in ("clone_url", "git_url", "ssh_url", "html_url", "url", "git_http_url", "git_ssh_url", "web_url",
                    "http_url", "homepage"):
            if isinstance(found.get(key), str) and found[key]:
                yield found[key]


def _path_parts(location: str) -> list[str]:
    """A repository location's path, lower-cased, without `.git`: https://h/Docs/Handbook.git, git@h:docs/handbook
    and /srv/git/docs/handbook.git all end in [docs, handbook]. The host is left out: a forge's clone URL and the
    source's may name the same server differently (an internal name, a mirror)."""
    value = location.strip()
    if "://" in value:
        value = urlsplit(value).path
    elif ":" in value.split("/", 1)[0]:  # [user@]host:path, as ssh and git write it
        value = value.split(":", 1)[1]
    parts = [p for p in value.lower().split("/") if p]
    if parts and parts[-1].endswith(".git"):
        parts[-1] = parts[-1][:-4]
    return [p for p in parts if p]


def repository_matches(source: Source, payload: Mapping[str, Any]) -> bool:
    """Whether the delivery is for the source's repository: one of its URLs and the source's location end in the
    same path (owner/name on a forge), the shorter of the two whole."""
    mine = _path_parts(source.location)
    for url in _repository_urls(payload):
        theirs = _path_parts(url)
        shorter = min(len(mine), len(theirs))
        if shorter and mine[-shorter:] == theirs[-shorter:]:
            return True
    return False


def _pushed_branch(payload: Mapping[str, Any]) -> str | None:
    ref = payload.get("ref")
    return ref.removeprefix("refs/heads/") if isinstance(ref, str) and ref.startswith("refs/heads/") else None


def _default_branch(payload: Mapping[str, Any]) -> str:
    for part in ("repository", "project"):
        branch = _part(payload, part).get("default_branch")
        if isinstance(branch, str):
            return branch
    return ""


# --------------------------------------------------------------------------- receiving


def _window() -> timedelta:
    return timedelta(seconds=settings.KB_SOURCE_WEBHOOK_WINDOW)


def _event(origin: str, headers: Mapping[str, str]) -> str:
    """The event the forge names in its (unsigned) header: "push", "ping" or another, lower-cased."""
    if origin == GITLAB:
        return headers.get("x-gitlab-event", "").lower().removesuffix(" hook")
    return (headers.get("x-gitea-event") or headers.get("x-forgejo-event") or headers.get("x-github-event") or "").lower()


def webhook_receive(*, source: Source, headers: Mapping[str, str], body: bytes, now: datetime | None = None) -> Outcome:
    """Verify a delivery to `source` and, for a push of its branch, record it and start a run (`push_received`).
    WebhookRefused (401) for anything not believed: no secret, a forged or missing signature, a replay, a delivery
    older than the window, another repository. `headers` in any case. Raises ValueError for a signed body that
    is not a JSON object (400)."""
    headers = {name.lower(): value for name, value in headers.items()}
    try:
        secret = webhook_secret(source)
    except ImproperlyConfigured as exc:
        log.error("webhook for source %s refused: %s", source.name, exc)
        raise WebhookRefused("the server's webhook secret setting for this source cannot be read (see its log)") from None
    if not secret:
        raise WebhookRefused("this source has no webhook secret: set one (manage.py source webhook-secret) first")
    origin = delivery_verify(secret=secret, headers=headers, body=body)
    event = _event(origin, headers)
    if event == "ping":  # GitHub's and Gitea's test when a hook is made: verified, nothing to do
        return Outcome(PONG, "the signature holds; pushes to this source start a run")
    payload = payload_of(body)
    branch = _pushed_branch(payload)
    if event not in ("push", "") or (payload.get("object_kind") not in (None, "push")) or "ref" not in payload:
        return Outcome(IGNORED, f"not a push ({event or 'no event named'}): nothing to do")
    digest = hashlib.sha256(body).hexdigest()
    now = now or timezone.now()
    if SourcePush.objects.filter(source=source, digest=digest).exists():
        raise WebhookRefused("this delivery was received already: a replay is refused")
    sent = delivery_time(payload)
    if sent is not None and sent < now - _window():
        raise WebhookRefused(f"the delivery is from {sent.isoformat(timespec='seconds')}, older than the "
                             f"{settings.KB_SOURCE_WEBHOOK_WINDOW} s replay window")
    if not repository_matches(source, payload):
        raise WebhookRefused("the delivery is for another repository than this source's location")
    wanted = source.branch or _default_branch(payload)
    if branch is None or (wanted and branch != wanted):
        return Outcome(IGNORED, f"a push of {payload.get('ref')!r}; this source follows "
                                f"{('refs/heads/' + wanted) if wanted else 'its default branch'}: no run")
    if sent is None:
        return Outcome(IGNORED, "the delivery carries no time to check it against replays (a push without commits): "
                                "the schedule picks it up")
    return push_received(source, origin, digest, now=now)


def push_received(source: Source, origin: str, digest: str, *, now: datetime | None = None) -> Outcome:
    """Record a verified push (a webhook, or a save in a watched folder: origin WATCH, digest of its paths and time)
    and start a run: queued now, or, while a run is under way, one more after it (`sync_follow_up`), so a push
    that came too late for the current run's listing is never lost. WebhookRefused when the same digest was
    recorded already (a replay); QueueUnavailable, its record removed, when the broker is out of reach."""
    now = now or timezone.now()
    try:
        with transaction.atomic():
            SourcePush.objects.filter(received_at__lt=now - _window()).delete()  # past the window: kept no longer
            push = SourcePush.objects.create(source=source, origin=origin, digest=digest, received_at=now)
            Source.objects.filter(pk=source.pk).update(last_push_at=now, last_push_origin=origin)
    except IntegrityError:
        raise WebhookRefused("this delivery was received already: a replay is refused") from None
    source.last_push_at, source.last_push_origin = now, origin
    # After the commit: a run that ends from now on sees this row (sync_follow_up), one under way now is followed.
    if source.pk in sources_running():
        return Outcome(FOLLOWING, "a run of this source is under way: another starts when it ends")
    if not queues.send("kb.sync_source", source.pk):
        push.delete()  # so that the forge's next delivery of it is not taken for a replay
        raise QueueUnavailable("the task queue is out of reach; deliver the push again in a moment")
    return Outcome(QUEUED, "a run of this source is queued")


def sync_follow_up(source_id: int) -> bool:
    """After a run (kb.library.tasks.sync_source, once the run's lock is released): queue one more run when a push
    came after this run started, since its listing may have missed it. Whether one was queued. (The web server's
    clock stamps the push and the worker's the run: on separate machines, keep them in time.)"""
    started = Source.objects.filter(pk=source_id).values_list("last_started_at", flat=True).first()
    if started is None or not SourcePush.objects.filter(source_id=source_id, received_at__gt=started).exists():
        return False
    if source_id in sources_running():  # another run started since: it lists after the push
        return False
    return queues.send("kb.sync_source", source_id)
