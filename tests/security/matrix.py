"""The permission matrix's machinery: which permission sets to try, what a probe is, what counts as
a leak or an escalation, and how the admin's own forms are filled in to send plausible writes.

Every probe runs in a savepoint that is rolled back, so each probe starts from the same fixtures;
a write probe compares a snapshot of everything the attacker may not manage before and after it.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from html import escape
from html.parser import HTMLParser
from itertools import combinations
from typing import Any
from urllib.parse import parse_qsl, quote, quote_plus, urlsplit

from django.contrib.auth.models import Group, Permission, User
from django.db import connection, transaction
from django.db.models import Q
from django.http import HttpResponse
from django.test import Client

from accounts.acl import user_principals
from accounts.models import ApiToken, OidcIdentity
from chat.models import (
    Conversation,
    CuratedAnswer,
    CuratedCitation,
    CuratedQuestion,
    Feedback,
    Judgement,
    Message,
    ReviewAccess,
    ReviewGrant,
)
from kb.library.models import Chunk, Document, Folder, Source
from search.models import RememberedQuestion, RetrievalAdjustment

# The models whose Django permissions the admin and the API check, as (app label, model name).
MODELS = (
    ("kb", "document"), ("kb", "folder"), ("kb", "chunk"), ("kb", "source"),
    ("chat", "conversation"), ("chat", "message"), ("chat", "citation"), ("chat", "feedback"),
    ("chat", "reviewgrant"), ("chat", "reviewaccess"), ("chat", "curatedanswer"),
    ("search", "rememberedquestion"), ("search", "retrievaladjustment"),
    ("accounts", "apitoken"), ("accounts", "oidcidentity"),
    ("auth", "group"), ("auth", "user"),
)
ACTIONS = ("view", "add", "change", "delete")
# Permissions of our own beside the four of each model, with the model whose pages they open.
CURATE = "chat.curate_answer"  # write, approve, retire and delete curated answers (/review/curated/, /api/curated)
CUSTOM = {CURATE: "curatedanswer", "chat.view_contentgaps": "message"}
CONTENT_MANAGER = "content manager"

@dataclass(frozen=True)
class PermissionSet:
    name: str
    codenames: tuple[str, ...]  # "app.action_model"
    support: bool = False  # also in the review group (support), which is none of the restricted groups
    wide: bool = False  # a bundle: probed on every restricted row, not a sample rotating over the sets

    @property
    def models(self) -> set[str]:
        return {CUSTOM.get(c) or c.split(".")[1].split("_", 1)[1] for c in self.codenames}


def permission_sets() -> list[PermissionSet]:
    """No permission; every single permission (and curating answers); every pair within one model of kb and chat
    (the permissions the document, folder and review surfaces check); wide bundles, three of them also in the review
    group; the content manager."""
    sets = [PermissionSet("none", ())]
    for app, model in MODELS:
        mine = [f"{app}.{action}_{model}" for action in ACTIONS]
        sets += [PermissionSet(p, (p,)) for p in mine]
        if app in ("kb", "chat"):
            sets += [PermissionSet(f"{a}+{b}", (a, b)) for a, b in combinations(mine, 2)]
    sets.append(PermissionSet(CURATE, (CURATE,)))
    every = [f"{app}.{action}_{model}" for app, model in MODELS for action in ACTIONS]

    def only(*actions: str, apps: Iterable[str] = ("kb", "chat", "search", "accounts", "auth")) -> tuple[str, ...]:
        return tuple(p for p in every if p.split(".")[1].split("_")[0] in actions and p.split(".")[0] in apps)

    bundles = {
        "all view": only("view"),
        "all view+change": only("view", "change"),
        "kb+search all": only(*ACTIONS, apps=["kb", "search"]),
        "chat all": (*only(*ACTIONS, apps=["chat"]), *CUSTOM),
        "accounts+auth all": only(*ACTIONS, apps=["accounts", "auth"]),
        "message change + feedback add/change": ("chat.change_message", "chat.add_feedback", "chat.change_feedback",
                                                 "chat.view_citation"),
        "everything": (*every, *CUSTOM),
    }
    sets += [PermissionSet(name, codenames, wide=True) for name, codenames in bundles.items()]
    # Staff who keep the sources (issue 47): view, add and change them, reading only what everyone reads.
    sets.append(PermissionSet(CONTENT_MANAGER, ("kb.view_source", "kb.add_source", "kb.change_source"), wide=True))
    sets += [PermissionSet(f"{name} +support", bundles.get(name, ()), support=True, wide=True)
             for name in ("none", "all view", "everything")]
    return sets


def permissions_of(codenames: Iterable[str]) -> list[Permission]:
    wanted = [tuple(c.split(".")) for c in codenames]
    found = [Permission.objects.get(content_type__app_label=app, codename=codename) for app, codename in wanted]
    assert len(found) == len(wanted)
    return found


# --------------------------------------------------------------------------- what an attacker must never get


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# One query over every guarded row; the detailed snapshot below names what moved once this differs.
FINGERPRINT = """
SELECT md5(concat_ws('#',
  (SELECT string_agg(concat_ws(',', id, title, folder_id, inherit_access, public, acl::text, pending_acl::text, version,
          sha256, status, filename, md5(canonical_text)), '|' ORDER BY id) FROM kb_document WHERE id = ANY(%(docs)s)),
  (SELECT string_agg(concat_ws(',', document_id, group_id), '|' ORDER BY document_id, group_id)
     FROM kb_document_groups WHERE document_id = ANY(%(docs)s)),
  (SELECT string_agg(concat_ws(',', document_id, user_id), '|' ORDER BY document_id, user_id)
     FROM kb_document_users WHERE document_id = ANY(%(docs)s)),
  (SELECT string_agg(concat_ws(',', id, acl::text, md5(content)), '|' ORDER BY id) FROM kb_chunk
     WHERE document_id = ANY(%(docs)s)),
  (SELECT string_agg(concat_ws(',', id, name, public), '|' ORDER BY id) FROM kb_folder WHERE id = ANY(%(folders)s)),
  (SELECT string_agg(concat_ws(',', folder_id, group_id), '|' ORDER BY folder_id, group_id)
     FROM kb_folder_groups WHERE folder_id = ANY(%(folders)s)),
  (SELECT string_agg(concat_ws(',', folder_id, user_id), '|' ORDER BY folder_id, user_id)
     FROM kb_folder_users WHERE folder_id = ANY(%(folders)s)),
  (SELECT string_agg(concat_ws(',', id, folder_id), '|' ORDER BY id) FROM kb_document WHERE folder_id = ANY(%(folders)s)),
  (SELECT string_agg(concat_ws(',', id, title, owner_id), '|' ORDER BY id) FROM chat_conversation
     WHERE id = ANY(%(conversations)s)),
  (SELECT string_agg(concat_ws(',', id, role, md5(text), status, rating, unsupported::text, source_documents::text,
          curated_id), '|' ORDER BY id) FROM chat_message WHERE conversation_id = ANY(%(conversations)s)),
  (SELECT string_agg(concat_ws(',', id, label, document_id), '|' ORDER BY id) FROM chat_citation
     WHERE message_id = ANY(%(answers)s)),
  (SELECT string_agg(concat_ws(',', id, kind, note, citation_id), '|' ORDER BY id) FROM chat_feedback
     WHERE message_id = ANY(%(answers)s)),
  (SELECT string_agg(concat_ws(',', id, username, is_superuser, is_staff, is_active,
          CASE WHEN id = %(attacker)s THEN '' ELSE password END), '|' ORDER BY id) FROM auth_user
     WHERE id = ANY(%(users)s)),
  (SELECT string_agg(concat_ws(',', user_id, group_id), '|' ORDER BY user_id, group_id) FROM auth_user_groups
     WHERE user_id = ANY(%(users)s)),
  (SELECT string_agg(concat_ws(',', user_id, permission_id), '|' ORDER BY user_id, permission_id)
     FROM auth_user_user_permissions WHERE user_id = ANY(%(users)s)),
  (SELECT string_agg(concat_ws(',', group_id, permission_id), '|' ORDER BY group_id, permission_id)
     FROM auth_group_permissions WHERE group_id = ANY(%(groups)s)),
  (SELECT string_agg(concat_ws(',', user_id, issuer, subject), '|' ORDER BY user_id, issuer, subject)
     FROM accounts_oidcidentity WHERE user_id <> %(attacker)s),
  (SELECT string_agg(concat_ws(',', id, name, kind, location, branch, path, folder_id, include::text, exclude::text,
          every, shrink_guard, last_status, watch::text, md5(secret), md5(webhook_secret)), '|' ORDER BY id)
     FROM kb_source WHERE folder_id = ANY(%(folders)s)),
  (SELECT string_agg(concat_ws(',', id, reviewer_id, group_id, folder_id), '|' ORDER BY id) FROM chat_reviewgrant
     WHERE group_id = ANY(%(groups)s) OR folder_id = ANY(%(folders)s) OR reviewer_id = %(attacker)s),
  (SELECT string_agg(concat_ws(',', id, reviewer_id, reviewer_name, answer, surface, grants, at), '|' ORDER BY id)
     FROM chat_reviewaccess),
  (SELECT count(*) FROM accounts_apitoken WHERE concat_ws(',', id, user_id, digest, scopes::text) <> ALL(%(tokens)s)
     AND user_id <> %(attacker)s),
  (SELECT string_agg(concat_ws(',', id, message_id, judge_id, role, kind, document_id, passage, start, "end", note),
          '|' ORDER BY id) FROM chat_judgement WHERE message_id = ANY(%(answers)s) OR document_id = ANY(%(docs)s)),
  (SELECT string_agg(concat_ws(',', id, document_id, stable_id, span_start, span_end, md5(question), kind, judgement_id,
          message_id, judge_id), '|' ORDER BY id) FROM search_rememberedquestion WHERE document_id = ANY(%(docs)s)),
  (SELECT string_agg(concat_ws(',', id, document_id, stable_id, action, reason, created_by_id, revoked_by_id,
          revoked_at), '|' ORDER BY id) FROM search_retrievaladjustment WHERE document_id = ANY(%(docs)s)),
  (SELECT string_agg(concat_ws(',', id, md5(text), md5(statement), state, stale_reason, from_message_id, from_topic,
          created_by_id, approved_by_id, approved_at), '|' ORDER BY id) FROM chat_curatedanswer
     WHERE id = ANY(%(curated)s) OR from_message_id = ANY(%(answers)s)
        OR id IN (SELECT answer_id FROM chat_curatedcitation WHERE document_id = ANY(%(docs)s))),
  (SELECT string_agg(concat_ws(',', id, answer_id, number, document_id, stable_id, start, "end", md5(quote)),
          '|' ORDER BY id) FROM chat_curatedcitation WHERE answer_id = ANY(%(curated)s) OR document_id = ANY(%(docs)s)),
  (SELECT string_agg(concat_ws(',', id, answer_id, md5(text)), '|' ORDER BY id) FROM chat_curatedquestion
     WHERE answer_id = ANY(%(curated)s))
))
"""


@dataclass
class Guarded:
    """The rows a staff attacker may neither read nor manage: restricted documents and folders, and
    readers' conversations, answers, citations, flags and verdicts drawn from them; review grants of the guarded
    groups and folders (or to the attacker) and the review access log; what verdicts and staff taught retrieval about
    restricted documents (remembered questions, boosts and hides) and the curated answers citing them (or written
    from a reader's answer); plus every account's powers."""

    documents: list[int]
    folders: list[int]
    conversations: list[int]
    answers: list[int]
    users: list[int]  # every account but those an attacker creates (creating one gives nobody access)
    groups: list[int]
    curated: list[int] = field(default_factory=list)  # the curated answers citing restricted passages
    tokens: list[str] = field(default_factory=list)  # revoking or deleting one is what the permission is for

    def __post_init__(self) -> None:
        self.tokens = [self._token(*row) for row in ApiToken.objects.values_list("pk", "user_id", "digest", "scopes")]

    @staticmethod
    def _token(pk: int, user_id: int, digest: str, scopes: list[str]) -> str:
        return f"{pk},{user_id},{digest},{{{','.join(scopes)}}}"

    def fingerprint(self, attacker: User) -> str:
        with connection.cursor() as cursor:
            cursor.execute(FINGERPRINT, {"docs": self.documents, "folders": self.folders,
                                         "conversations": self.conversations, "answers": self.answers,
                                         "users": [*self.users, attacker.pk], "groups": self.groups,
                                         "tokens": self.tokens, "curated": self.curated,
                                         "attacker": attacker.pk})
            return str(cursor.fetchone()[0])

    def snapshot(self, attacker: User) -> dict[str, Any]:
        docs = {
            d.pk: (d.title, d.folder_id, d.inherit_access, d.public, d.acl, d.pending_acl, d.version, d.sha256,
                   d.status, d.filename, _digest(d.canonical_text),
                   sorted(d.groups.values_list("pk", flat=True)), sorted(d.users.values_list("pk", flat=True)))
            for d in Document.objects.filter(pk__in=self.documents).prefetch_related("groups", "users")
        }
        chunks = sorted(Chunk.objects.filter(document_id__in=self.documents).values_list("pk", "acl", "content"))
        folders = {
            f.pk: (f.name, f.public, sorted(g.pk for g in f.groups.all()), sorted(u.pk for u in f.users.all()),
                   sorted(Document.objects.filter(folder=f).values_list("pk", flat=True)))
            for f in Folder.objects.filter(pk__in=self.folders).prefetch_related("groups", "users")
        }
        sources = sorted(Source.objects.filter(folder_id__in=self.folders).values_list(
            "pk", "name", "kind", "location", "branch", "path", "include", "exclude", "every", "shrink_guard", "last_status",
            "watch"))
        conversations = sorted(Conversation.objects.filter(pk__in=self.conversations).values_list("pk", "title", "owner"))
        messages = sorted(
            (m.pk, m.role, _digest(m.text), m.status, m.rating, json.dumps(m.unsupported, sort_keys=True),
             m.source_documents, m.curated_id)
            for m in Message.objects.filter(conversation_id__in=self.conversations)
        )
        citations = sorted(
            Message.objects.filter(pk__in=self.answers).values_list("citations__pk", "citations__label",
                                                                    "citations__document_id")
        )
        feedback = sorted(Feedback.objects.filter(message_id__in=self.answers).values_list("pk", "kind", "note",
                                                                                         "citation_id"))
        accounts = {
            u.pk: (u.username, u.is_superuser, u.is_staff, u.is_active, u.password if u.pk != attacker.pk else "",
                   sorted(g.pk for g in u.groups.all()), sorted(p.pk for p in u.user_permissions.all()))
            for u in User.objects.filter(pk__in=[*self.users, attacker.pk]).prefetch_related("groups", "user_permissions")
        }
        groups = {g.pk: (g.name, sorted(p.pk for p in g.permissions.all()))
                  for g in Group.objects.filter(pk__in=self.groups).prefetch_related("permissions")}
        identities = sorted(OidcIdentity.objects.exclude(user=attacker).values_list("user_id", "issuer", "subject"))
        tokens = sorted(self._token(*row) for row in ApiToken.objects.exclude(user=attacker).values_list(
            "pk", "user_id", "digest", "scopes") if self._token(*row) not in self.tokens)
        grants = sorted(ReviewGrant.objects.filter(Q(group_id__in=self.groups) | Q(folder_id__in=self.folders) |
                                                   Q(reviewer=attacker)).values_list("pk", "reviewer", "group", "folder"))
        access_log = sorted(ReviewAccess.objects.values_list("pk", "reviewer", "reviewer_name", "answer", "surface",
                                                             "grants", "at"))
        judgements = sorted(Judgement.objects.filter(Q(message_id__in=self.answers) | Q(document_id__in=self.documents))
                            .values_list("pk", "message", "judge", "role", "kind", "document", "passage", "start",
                                         "end", "note"))
        remembered = sorted((r.pk, r.document_id, r.stable_id, r.span_start, r.span_end, _digest(r.question), r.kind,
                             r.judgement_id, r.message_id, r.judge_id)
                            for r in RememberedQuestion.objects.filter(document_id__in=self.documents).defer("embedding"))
        adjustments = sorted(RetrievalAdjustment.objects.filter(document_id__in=self.documents).values_list(
            "pk", "document", "stable_id", "action", "reason", "created_by", "revoked_by", "revoked_at"))
        cited = CuratedCitation.objects.filter(Q(answer_id__in=self.curated) | Q(document_id__in=self.documents))
        curated = sorted(
            (a.pk, _digest(a.text), _digest(a.statement), a.state, a.stale_reason, a.from_message_id, a.from_topic,
             a.created_by_id, a.approved_by_id, a.approved_at)
            for a in CuratedAnswer.objects.filter(Q(pk__in=self.curated) | Q(from_message_id__in=self.answers) |
                                                  Q(pk__in=cited.values("answer_id"))))
        curated_citations = sorted((c.pk, c.answer_id, c.number, c.document_id, c.stable_id, c.start, c.end,
                                    _digest(c.quote)) for c in cited)
        curated_questions = sorted(CuratedQuestion.objects.filter(answer_id__in=self.curated).values_list(
            "pk", "answer", "text"))
        fresh = User.objects.get(pk=attacker.pk)
        powers = (sorted(user_principals(fresh)), fresh.is_superuser, sorted(fresh.get_all_permissions()))
        return {
            "documents": docs, "chunks": chunks, "folders": folders, "sources": sources, "conversations": conversations,
            "messages": messages, "citations": citations, "feedback": feedback, "accounts": accounts,
            "groups": groups, "review grants": grants, "review access log": access_log, "oidc identities": identities,
            "new or changed api tokens": tokens, "judgements": judgements, "remembered questions": remembered,
            "boosts and hides": adjustments, "curated answers": curated, "curated citations": curated_citations,
            "curated example questions": curated_questions, "attacker's powers": powers,
        }


def changed(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    return [key for key in before if before[key] != after[key]]


# --------------------------------------------------------------------------- probes


@dataclass
class Finding:
    kind: str  # "leak" or "escalation"
    surface: str
    method: str
    url: str
    permissions: str
    what: str
    status: int

    def key(self) -> tuple[str, str, str, str, str]:
        """Findings of one probe shape (ids folded), for a short report."""
        return self.kind, self.surface, self.method, re.sub(r"\d+", "<id>", self.url), self.what


@dataclass
class Matrix:
    """Counts probes by surface; collects leaks (a marker in a response) and escalations (a guarded row changed)."""

    markers: list[str]
    guarded: Guarded
    counts: Counter[str] = field(default_factory=Counter)
    seconds: dict[str, float] = field(default_factory=dict)
    statuses: Counter[str] = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    operations: set[tuple[str, str]] = field(default_factory=set)  # (method, path template) of the API probed

    def leaked(self, text: str, sent: Iterable[str]) -> list[str]:
        for typed in sent:
            for form in {typed, quote(typed), quote(typed, safe=""), quote_plus(typed), escape(typed)}:
                if form:
                    text = text.replace(form, "")
        return [m for m in self.markers if re.search(re.escape(m) + (r"(?!\d)" if m[-1].isdigit() else ""), text)]

    def probe(
        self, surface: str, who: PermissionSet, attacker: User, client: Client, method: str, url: str, *,
        data: Any = None, content_type: str | None = None, baseline: str | None = None,
        after_write: Callable[[], Iterator[tuple[str, str]]] | None = None,
    ) -> HttpResponse:
        """One request in a savepoint rolled back afterwards. With `baseline` (the guarded rows' fingerprint)
        it is a write: the rows must be as they were; `after_write` names reads to make in the same
        savepoint when it succeeded."""
        self.counts[surface] += 1
        started = time.process_time()
        moved: dict[str, Any] | None = None
        with transaction.atomic():
            args = () if data is None else (data,)
            kwargs: dict[str, Any] = {} if content_type is None else {"content_type": content_type}
            response: HttpResponse = getattr(client, method.lower())(url, *args, **kwargs)
            self.statuses[f"{surface} {response.status_code}"] += 1
            if response.status_code >= 500:
                self.errors.append(f"{surface} {method} {url} as [{who.name}]: {response.status_code}")
            self._leaks(surface, who, method, url, response, data)
            if baseline is not None:
                if self.guarded.fingerprint(attacker) != baseline:
                    moved = self.guarded.snapshot(attacker)
                if response.status_code < 400 and after_write is not None:
                    for read_surface, read_url in after_write():
                        self.counts[read_surface] += 1
                        self._leaks(read_surface, who, "GET", f"{read_url} (after {method} {url})",
                                    client.get(read_url), None)
            transaction.set_rollback(True)
        if moved is not None:  # named against the rows as they are again, outside the rolled-back write
            what = ", ".join(changed(self.guarded.snapshot(attacker), moved)) or "rows outside the snapshot"
            self.findings.append(Finding("escalation", surface, method, url, who.name, what, response.status_code))
        self.seconds[surface] = self.seconds.get(surface, 0.0) + time.process_time() - started
        return response

    def _leaks(self, surface: str, who: PermissionSet, method: str, url: str, response: HttpResponse,
               data: Any) -> None:
        body = b"".join(response.streaming_content) if response.streaming else response.content  # type: ignore[attr-defined]
        text = body.decode(errors="replace") + " " + response.get("Location", "")
        query = parse_qsl(urlsplit(url).query)
        sent = [url, *(value for _, value in query), *(_strings(data))]
        for marker in self.leaked(text, sent):
            self.findings.append(Finding("leak", surface, method, url, who.name, repr(marker), response.status_code))

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def of(self, kind: str) -> list[Finding]:
        return [f for f in self.findings if f.kind == kind]

    def report(self, limit: int = 60) -> str:
        lines = [f"{self.total} probes over {len(self.counts)} surfaces: {len(self.of('leak'))} leaks, "
                 f"{len(self.of('escalation'))} escalations, {len(self.errors)} server errors"]
        lines += [f"  {surface}: {n} ({self.seconds.get(surface, 0.0):.1f} s of CPU)" for surface, n in sorted(self.counts.items())]
        grouped: dict[tuple[str, ...], list[Finding]] = {}
        for finding in self.findings:
            grouped.setdefault(finding.key(), []).append(finding)
        for (kind, surface, method, url, what), found in sorted(grouped.items())[:limit]:
            sets = sorted({f.permissions for f in found})
            shown = ", ".join(sets[:6]) + (f" … ({len(sets)} sets)" if len(sets) > 6 else "")
            lines.append(f"  {kind.upper()} {surface} {method} {url} [{what}] status {found[0].status} as: {shown}")
        lines += [f"  ERROR {e}" for e in self.errors[:20]]
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        return {
            "probes": self.total,
            "by_surface": dict(sorted(self.counts.items())),
            "statuses": dict(sorted(self.statuses.items())),
            "leaks": [f.__dict__ for f in self.of("leak")],
            "escalations": [f.__dict__ for f in self.of("escalation")],
            "server_errors": self.errors,
        }


def _strings(data: Any) -> list[str]:
    """What the attacker sent in a body: a page may echo it back, which tells them nothing."""
    if isinstance(data, str):
        try:
            return _strings(json.loads(data))
        except ValueError:
            return [data]
    if isinstance(data, dict):
        return [s for value in data.values() for s in _strings(value)]
    if isinstance(data, list | tuple):
        return [s for value in data for s in _strings(value)]
    return []


# --------------------------------------------------------------------------- the admin's forms


class FormFields(HTMLParser):
    """The fields a browser would submit from a Django admin change or add form, as a dict."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: dict[str, Any] = {}
        self._select: str | None = None
        self._multiple = False
        self._first: str | None = None
        self._textarea: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        name = a.get("name", "")
        if tag == "input" and name and a.get("type", "text") not in ("submit", "button", "file", "image", "reset"):
            if a.get("type") in ("checkbox", "radio") and "checked" not in a:
                return
            self._add(name, a.get("value", "on" if a.get("type") == "checkbox" else ""), multiple=False)
        elif tag == "select" and name:
            self._select, self._multiple, self._first = name, "multiple" in a, None
            if self._multiple:
                self.fields.setdefault(name, [])
        elif tag == "option" and self._select:
            value = a.get("value", "")
            if self._first is None:
                self._first = value
            if "selected" in a:
                self._add(self._select, value, multiple=self._multiple)
        elif tag == "textarea" and name:
            self._textarea = name
            self.fields[name] = ""

    def handle_data(self, data: str) -> None:
        if self._textarea:
            self.fields[self._textarea] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "select" and self._select:
            if not self._multiple and self._select not in self.fields:
                self.fields[self._select] = self._first or ""
            self._select = None
        elif tag == "textarea":
            self._textarea = None

    def _add(self, name: str, value: str, *, multiple: bool) -> None:
        if multiple:
            self.fields.setdefault(name, []).append(value)
        else:
            self.fields[name] = value


def form_fields(html: str) -> dict[str, Any]:
    parser = FormFields()
    parser.feed(html)
    parser.fields.pop("csrfmiddlewaretoken", None)
    return parser.fields
