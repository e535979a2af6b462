"""The leak suite as a permission matrix (issue 28): staff accounts holding no permission, each single Django
permission of our models (kb, chat, search, accounts, auth) and chat.curate_answer, every pair within one model of
kb and chat, wide bundles (some also in the review group) and a content manager (view, add and change sources;
issue 47), none of them in a restricted document's groups, against every operation of the OpenAPI schema, every
admin page of the models they hold (bundles: of all models), the review and curated answers desks, content gaps,
library and viewer. Restricted rows are sampled one per set, rotating over the sets. `make test` probes a sample of
the sets (sampled_sets; KB_MATRIX_FULL=1 probes all of them, some minutes more).

Each restricted passage also carries what use taught (issue 50): a remembered question, an approved curated answer
(served to its reader) and a boost, each with its own marker. A probe LEAKS when any response carries a restricted
document's code, title, file name, link or id, a restricted folder's name, or one of those markers; it ESCALATES
when after a write a restricted document, folder, chunk, reader's conversation, answer, citation, flag or verdict
changed, a remembered question, boost or hide of a restricted document, or a curated answer citing one (or written
from a reader's answer), or any account's (or the attacker's own) powers did. Every probe runs in a savepoint that
is rolled back, so each starts from the same fixtures; paginated lists are walked to their last page (the admin at
3 rows a page, so every list has several). Positive controls: the reader is served the curated answer, and an
insider of the groups sees every learned row where the attackers must not.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import product
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import Group, User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import models, transaction
from django.test import Client

from accounts.models import ApiToken, OidcIdentity
from accounts.tokens import token_create
from chat.models import Citation, CuratedAnswer, Feedback, Message, ReviewAccess, ReviewGrant
from chat.review.curated import curated_create
from chat.review.feedback import feedback_add
from chat.services import answer_produce, question_ask
from kb.library.models import Chunk, Document, Folder, Source
from search.adjustments import adjustment_add
from search.memory import passage_at, remember
from search.models import RememberedQuestion, RetrievalAdjustment
from tests.conftest import OUTPUT
from tests.security.fortress import Restricted, build
from tests.security.matrix import (
    CONTENT_MANAGER,
    CURATE,
    MODELS,
    Guarded,
    Matrix,
    PermissionSet,
    form_fields,
    permission_sets,
    permissions_of,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

MIN_PROBES = 3000  # all the sets (KB_MATRIX_FULL=1)
MIN_SAMPLED_PROBES = 800
PER_PAGE = 3  # admin rows per page: every changelist has several pages to walk


class World:
    """The fixtures every permission set is probed against, and the probes themselves."""

    def __init__(self, people: dict[str, Any], corpus: list[Restricted]) -> None:
        self.people = people
        self.corpus = corpus
        self.docs = [item.document.pk for item in corpus if item.document is not None]
        self.folders = list(Folder.objects.filter(name__in=RESTRICTED_FOLDERS).values_list("pk", flat=True))
        self.answers: list[int] = []
        self.conversations: list[int] = []
        self.ranges: dict[int, tuple[int, int]] = {}  # each restricted document's first secret sentence
        for item in corpus:
            reader = people[sorted(item.readers)[0]]
            secret = item.secrets[0]
            asked = question_ask(user=reader, question=secret.questions[0], enqueue=False)
            answer_produce(message_id=asked.answer.pk)
            answer = Message.objects.get(pk=asked.answer.pk)
            assert secret.code in answer.text, f"positive control: {reader}'s answer lacks {secret.code}"
            feedback_add(reviewer=reader, message=answer, kind="unsupported", citation_number=1,
                         note=f"Quoted: {secret.sentence}")
            claim = {"start": 0, "end": len(answer.text), "sentence": secret.sentence, "numbers": [1],
                     "missing": [secret.code], "verdict": "open"}
            Message.objects.filter(pk=answer.pk).update(unsupported=[claim])
            self.answers.append(answer.pk)
            self.conversations.append(asked.conversation.pk)
            token_create(user=reader, name=f"{item.key} laptop")
            OidcIdentity.objects.get_or_create(user=reader, issuer="https://idp.example", subject=f"sub-{reader.pk}")
        self.learned = [self._learn(item) for item in self.corpus]
        self.curated = [learned.curated for learned in self.learned]
        self.sources = [Source.objects.create(name=name, kind=Source.Kind.FOLDER, location=f"/srv/{name}", folder_id=pk).pk
                        for name, pk in zip(RESTRICTED_SOURCES, self.folders, strict=True)]
        self.handbook = Folder.objects.get(name="Handbook")  # public: the content manager's
        handbook = Document.objects.get(folder=self.handbook, filename="handbook.md")
        start = handbook.canonical_text.index(PUBLIC_SENTENCE)
        self.public = handbook.pk, (start, start + len(PUBLIC_SENTENCE))  # what anyone may cite
        self.mirror = Source.objects.create(name="Handbook mirror", kind=Source.Kind.GIT, folder=self.handbook,
                                            location="https://git.example.com/handbook.git", branch="main").pk
        # sam reviews engineering's answers; the log holds one of his reads: rows to view, change, revoke, export.
        grant = ReviewGrant.objects.create(reviewer=people["sam"], group=people["groups"]["engineering"])
        read = ReviewAccess.objects.create(reviewer=people["sam"], reviewer_name="sam", answer=self.answers[0],
                                           surface=ReviewAccess.Surface.REVIEW_API, grants=grant.scope)
        self.viewed = 0
        self.guarded = Guarded(self.docs, self.folders, self.conversations, self.answers,
                               list(User.objects.values_list("pk", flat=True)),
                               list(Group.objects.values_list("pk", flat=True)), curated=self.curated)
        self.rows: dict[type[models.Model], list[int]] = {
            Document: self.docs,
            Folder: self.folders,
            Source: self.sources,
            Chunk: [Chunk.objects.filter(document_id=pk).values_list("pk", flat=True)[0] for pk in self.docs],
            Message: sorted(Message.objects.filter(conversation_id__in=self.conversations).values_list("pk", flat=True)),
            Citation: sorted(Citation.objects.filter(message_id__in=self.answers).values_list("pk", flat=True)),
            Feedback: sorted(Feedback.objects.filter(message_id__in=self.answers).values_list("pk", flat=True)),
            OidcIdentity: sorted(OidcIdentity.objects.values_list("pk", flat=True)),
            User: [people[name].pk for name in ("admin", "dave", "bob")],
            Group: [people["groups"][name].pk for name in ("engineering", "finance", "hr")],
        }
        self.rows[ApiToken] = sorted(ApiToken.objects.values_list("pk", flat=True))
        self.rows[ReviewGrant], self.rows[ReviewAccess] = [grant.pk], [read.pk]
        self.rows[CuratedAnswer] = self.curated
        self.rows[RememberedQuestion] = [learned.remembered for learned in self.learned]
        self.rows[RetrievalAdjustment] = [learned.adjustment for learned in self.learned]
        markers = [m for item in corpus for m in item.markers()] + [*RESTRICTED_FOLDERS, *RESTRICTED_SOURCES]
        markers += [m for learned in self.learned for m in learned.markers]
        self.matrix = Matrix(markers, self.guarded)
        superuser = Client()
        superuser.force_login(people["admin"])
        self.schema = superuser.get("/api/openapi.json").json()

    def _learn(self, item: Restricted) -> Learned:
        """What use taught about the item's first restricted passage, each with its own marker: a remembered question
        (from the reader's answer), an approved curated answer written by the reader (marked in its text, statement
        and an example question; the other example is the question an attacker asks), and a boost with a reason.
        The reader asks again and is served the curated answer: the positive control of ask, and an answer the
        review desk shows with support's statement."""
        assert item.document is not None
        reader, secret, doc = self.people[sorted(item.readers)[0]], item.secrets[0], item.document
        start = doc.canonical_text.index(secret.sentence)
        end = start + len(secret.sentence)
        passage = passage_at(doc.pk, start, end)
        assert passage is not None
        n = 100 + len(self.ranges)
        tag = secret.code.split("-")[0]
        memo, text, statement, example, reason = (f"{tag}-{kind}-{n}" for kind in ("MEMO", "CURT", "CURS", "CURQ", "ADJ"))
        self.ranges[doc.pk] = (start, end)
        remembered = remember(document_id=doc.pk, stable_id=passage.stable_id, question=f"{secret.questions[2]} {memo}",
                              kind=RememberedQuestion.Kind.HELPFUL, message_id=self.answers[self.corpus.index(item)],
                              judge=reader,
                              span=(start, end))
        assert remembered is not None
        reader.user_permissions.add(*permissions_of([CURATE]))
        reader = User.objects.get(pk=reader.pk)
        curated = curated_create(author=reader, text=f"{text} is kept by the owning team [1].",
                                 questions=[secret.questions[0], f"Where is {example} kept?"],
                                 statement=f"Support never sends {statement} by email.",
                                 citations=[(doc.pk, start, end)], approve=True)
        adjustment = adjustment_add(user=self.people["admin"], document_id=doc.pk, action="boost",
                                    reason=f"The owning team's page {reason}", start=start, end=end)
        asked = question_ask(user=reader, question=secret.questions[0], enqueue=False)
        answer_produce(message_id=asked.answer.pk)
        served = Message.objects.get(pk=asked.answer.pk)
        assert served.curated_id == curated.pk and text in served.text, f"positive control: {reader} not served {text}"
        self.answers.append(served.pk)
        self.conversations.append(asked.conversation.pk)
        return Learned(remembered.pk, curated.pk, adjustment.pk, [memo, text, statement, example, reason])

    def insiders(self) -> None:
        """Positive controls: a member of every restricted group holding the permissions sees each learned row of
        the last item (the newest, so on the admin's first page) where the attackers must not, so a page that
        shows an attacker nothing is a page that would have shown it. Rolled back."""
        item, learned = self.corpus[-1], self.learned[-1]
        memo, text, statement, example, reason = learned.markers
        expected = {
            "/api/curated": [text, statement, example],
            "/admin/chat/curatedanswer/": [text],
            f"/admin/chat/curatedanswer/{learned.curated}/change/": [text, statement],
            "/admin/search/rememberedquestion/": [memo],
            f"/admin/search/rememberedquestion/{learned.remembered}/change/": [memo],
            "/admin/search/retrievaladjustment/": [reason],
            "/api/search/adjustments": [reason],
        }
        assert item.readers & {"alice", "dave"}, "the insider reads the last item through engineering"
        with transaction.atomic():
            insider = User.objects.create_user("matrix-insider", password="x", is_staff=True)
            insider.groups.set([self.people["groups"][name] for name in ("engineering", "finance", "hr")])
            insider.user_permissions.set(permissions_of(INSIDER))
            client = Client(raise_request_exception=False)
            client.force_login(insider)
            for url, wanted in expected.items():
                response = client.get(url)
                seen = self.matrix.leaked(response.content.decode(errors="replace"), [])
                missing = [m for m in wanted if m not in seen]
                assert not missing, f"positive control: {url} ({response.status_code}) lacks {missing} for the insider"
            transaction.set_rollback(True)

    def own_answer(self, attacker: User) -> int:
        """An answer of the attacker's own, from the public handbook: a verdict on it may name a document and pick a
        passage, which must be one they may read."""
        asked = question_ask(user=attacker, question="Who decides the bonus pools?", enqueue=False)
        answer_produce(message_id=asked.answer.pk)
        return asked.answer.pk

    # ----------------------------------------------------------------- API

    def api_operations(self) -> list[tuple[str, str]]:
        return [(method.upper(), path) for path, item in self.schema["paths"].items() for method in item
                if method in ("get", "post", "put", "patch", "delete")]

    def _takes_body(self, method: str, template: str) -> bool:
        return "requestBody" in self.schema["paths"][template][method.lower()]

    @staticmethod
    def probes_api(who: PermissionSet) -> bool:
        """The API checks no permission of accounts or auth: sets of those alone are left to the bundles."""
        return who.wide or bool(who.models & API_MODELS)

    def api(self, who: PermissionSet, attacker: User, client: Client, turn: int, baseline: str,
            own: int | None = None) -> None:
        """Every operation of the schema on one restricted row, rotating over the sets. A bundle: with every
        body, page by page; any other set: with one body, and each list whole. Then verdicts on the attacker's
        `own` answer that name a restricted passage."""
        if not self.probes_api(who):
            return
        for method, template in self.api_operations():
            self.matrix.operations.add((method, template))
            for url in self._urls(template, turn):
                if method == "GET":
                    for page in self._pages(template, url, who, client, turn):
                        self.matrix.probe("api", who, attacker, client, "GET", page)
                    continue
                bodies = self._bodies(method, template, attacker, who, turn)
                for data, content_type in bodies if who.wide else bodies[turn % len(bodies):][:1]:
                    self.matrix.probe("api", who, attacker, client, method, url, data=data, content_type=content_type,
                                      baseline=baseline, after_write=None if template == "/api/ask" else self._after_write)
        if own is not None:  # their own answer's verdict, naming a restricted document and a passage picked in it
            doc = self.docs[turn % len(self.docs)]
            start, end = self.ranges[doc]
            for body in ({"kind": "should_answer", "document": doc, "start": start, "end": end},
                         {"kind": "wrong", "document": doc, "start": start, "end": end}):
                self.matrix.probe("api own answer", who, attacker, client, "POST", f"/api/messages/{own}/judgement",
                                  data=json.dumps(body), content_type="application/json", baseline=baseline)

    def _urls(self, template: str, turn: int) -> list[str]:
        values = {
            "pk": self.folders if template.startswith("/api/folders") else
            self.sources if template.startswith("/api/sources") else self.docs,
            "conversation_id": self.conversations,
            "message_id": self.answers,
            "index": [0, 7],
            "adjustment_id": self.rows[RetrievalAdjustment],
            "answer_id": self.curated,
        }
        names = [part[1:-1] for part in template.split("/") if part.startswith("{")]
        unknown = set(names) - set(values)
        assert not unknown, f"the matrix has no ids for {unknown} of {template}: add them"
        urls = []
        for chosen in product(*([ids[turn % len(ids)]] for ids in (values[n] for n in names))):
            url = template
            for name, value in zip(names, chosen, strict=True):
                url = url.replace("{" + name + "}", str(value))
            urls.append(url)
        return urls

    def _pages(self, template: str, url: str, who: PermissionSet, client: Client, turn: int) -> Iterator[str]:
        """A list whole, or for a bundle every page of it (limit/offset or `before` keysets); the filters
        that name restricted rows."""
        item = self.corpus[turn % len(self.corpus)]
        if template == "/api/search":  # the same for every staff account: the bundles search
            if who.wide:
                yield f"{url}?q={item.secrets[turn % 3].questions[turn % 2]}&k=50"
            return
        if template in ("/api/documents", "/api/conversations"):
            total = max(Document.objects.count(), len(self.conversations))
            yield from (f"{url}?limit=2&offset={offset}" for offset in range(0, total + 2, 2)) if who.wide else [
                f"{url}?limit=200"]
            if template == "/api/documents":
                yield f"{url}?folder={self.folders[turn % len(self.folders)]}&limit=500"
                yield f"{url}?q={item.title.split()[1]}"
            return
        if template == "/api/curated/prefill":  # what "Write an answer for this" starts from: a reader's answer
            yield f"{url}?message={self.answers[turn % len(self.answers)]}"
            return
        if template == "/api/search/adjustments":
            yield from (f"{url}?limit=2&offset={offset}" for offset in range(0, len(self.docs) + 2, 2)) if who.wide else [
                url]
            yield f"{url}?document={self.docs[turn % len(self.docs)]}&active=true"
            return
        if template == "/api/curated":
            yield from (url, f"{url}?state=approved")
            return
        if template == "/api/review/answers":
            before = ""
            for _ in range(len(self.answers) + 1 if who.wide else 1):
                page = f"{url}?limit={2 if who.wide else 100}{before}"
                yield page
                response = client.get(page)
                rows = response.json() if response.status_code == 200 else []
                if not rows:
                    break
                before = f"&before={rows[-1]['id']}"
            return
        yield url

    def _bodies(self, method: str, template: str, attacker: User, who: PermissionSet,
                turn: int) -> list[tuple[Any, str | None]]:
        """Plausible writes of an attacker: give themselves access, open it to everyone, take over by name."""
        me = attacker.pk
        item = self.corpus[turn % len(self.corpus)]
        as_json = "application/json"
        doc = self.docs[turn % len(self.docs)]
        start, end = self.ranges[doc]
        handbook, (open_start, open_end) = self.public
        curated = {"text": "Matrix says so [1].", "questions": [item.secrets[0].questions[1]], "approve": True,
                   "citations": [{"document": doc, "start": start, "end": end}]}
        public = {**curated, "citations": [{"document": handbook, "start": open_start, "end": open_end}]}
        bodies: dict[tuple[str, str], list[Any]] = {
            ("PUT", "/api/documents/{pk}/access"): [{"users": [me]}, {"public": True}, {"inherit": True}],
            ("PUT", "/api/folders/{pk}/access"): [{"users": [me]}, {"public": True}],
            ("POST", "/api/folders"): [{"name": f"Matrix {turn}", "users": [me]}],
            ("POST", "/api/sources"): [{"name": f"Matrix {turn}", "kind": "folder", "location": "/srv/matrix",
                                        "folder": self.folders[turn % len(self.folders)]}],
            ("PATCH", "/api/conversations/{conversation_id}"): [{"title": "Matrix"}],
            ("PATCH", "/api/sources/{pk}"): [{"location": "/srv/matrix", "include": ["*.md"]},
                                            {"branch": f"--upload-pack=touch matrix{turn}; git-upload-pack"}],
            ("POST", "/api/ask"): [{"question": item.secrets[0].questions[0]},
                                   *({"question": "And the next one?", "conversation": c} for c in self.conversations
                                     if who.wide or c == self.conversations[turn % len(self.conversations)])],
            ("POST", "/api/messages/{message_id}/rating"): [{"rating": -1}],
            ("POST", "/api/messages/{message_id}/judgement"): [
                {"kind": "should_answer", "document": doc}, {"kind": "wrong"}, {"kind": "helpful"},
                {"kind": "should_answer", "document": doc, "start": start, "end": end}],
            ("POST", "/api/review/answers/{message_id}/judgement"): [
                {"kind": "should_answer", "document": doc, "note": "matrix"}, {"kind": "helpful"},
                {"kind": "wrong", "document": doc, "start": start, "end": end}],
            ("POST", "/api/review/answers/{message_id}/feedback"): [
                {"kind": "unsupported", "citation": 1, "note": "matrix"}, {"kind": "outdated"},
                {"kind": "right_source", "citation": 1}],
            # Boost or hide a restricted document, its passage by a viewer pick, or by its stable id.
            ("POST", "/api/search/adjustments"): [
                {"document_id": doc, "action": "hide", "reason": "matrix", "start": start, "end": end},
                {"document_id": doc, "action": "boost", "reason": "matrix"},
                {"document_id": doc, "action": "hide", "reason": "matrix",
                 "stable_id": RetrievalAdjustment.objects.get(pk=self.rows[RetrievalAdjustment][turn % len(self.docs)]).stable_id}],
            # Curate a restricted passage; curate a public one from a reader's answer; rewrite theirs to cite it.
            ("POST", "/api/curated"): [curated, {**public, "from_message": self.answers[turn % len(self.answers)]}],
            ("PUT", "/api/curated/{answer_id}"): [public, curated],
            ("POST", "/api/review/answers/{message_id}/unsupported/{index}"): [{"verdict": "confirmed"}],
        }
        if (method, template) == ("POST", "/api/documents"):
            folder = self.folders[turn % len(self.folders)]
            target = next(i for i in self.corpus if i.document is not None and i.document.folder_id == folder)
            text = f"# {target.title}\n\n## Replaced\n\nNothing to see.\n".encode()
            return [
                ({"files": [SimpleUploadedFile(target.filename, text)], "folder": str(folder), "access": "folder"}, None),
                ({"files": [SimpleUploadedFile(target.filename, text + b"!")], "folder": str(folder),
                  "access": "restricted", "users": [str(me)]}, None),
            ]
        if self._takes_body(method, template) and (method, template) not in bodies:
            raise AssertionError(f"the matrix has no body for {method} {template}: add one")
        return [(json.dumps(body), as_json) for body in bodies.get((method, template), [None])]

    def _after_write(self) -> Iterator[tuple[str, str]]:
        """After a write that succeeded: what it may have opened up."""
        yield "api after write", "/api/documents?limit=500"
        yield "api after write", "/api/folders"
        yield "api after write", "/api/review/answers?limit=100"
        self.viewed = (self.viewed + 1) % len(self.docs)
        yield "viewer after write", f"/documents/{self.docs[self.viewed]}/"

    def pages(self, who: PermissionSet, attacker: User, client: Client, turn: int) -> None:
        """The HTML pages beside the API: the review desk (every page), the curated answers desk, content gaps, the
        library, a restricted viewer."""
        if not (who.wide or who.support or CURATE in who.codenames):
            return
        pk = self.docs[turn % len(self.docs)]
        message = self.answers[turn % len(self.answers)]
        item = self.corpus[turn % len(self.corpus)]
        for url in ("/review/", "/review/?filter=flagged", "/review/curated/", f"/review/curated/?message={message}",
                    f"/review/curated/?topic=matrix&q={item.secrets[0].questions[0]}", "/gaps/", "/library/",
                    f"/documents/{pk}/", f"/documents/{pk}/download"):
            self.matrix.probe("pages", who, attacker, client, "GET", url)

    # ----------------------------------------------------------------- admin

    def admin(self, who: PermissionSet, attacker: User, client: Client, turn: int, baseline: str) -> None:
        """A single permission or a pair: the pages of its model, on one restricted row rotating over the sets.
        A bundle, or no permission at all: every page of every model. The review group changes
        nothing in the admin: sets with it get the index only (their bundles run without it too)."""
        probe = self.matrix.probe
        probe("admin", who, attacker, client, "GET", "/admin/")
        if who.support:
            return
        everything = who.wide or not who.models
        if everything:
            for app in sorted({m._meta.app_label for m in admin.site._registry}):
                probe("admin", who, attacker, client, "GET", f"/admin/{app}/")
        ours = {model for _, model in MODELS}
        for model, model_admin in admin.site._registry.items():
            opts = model._meta
            base = f"/admin/{opts.app_label}/{opts.model_name}/"
            rows = self.rows.get(model, [])
            sample = [rows[turn % len(rows)]] if rows else []
            if not everything and opts.model_name not in who.models:
                continue
            if opts.model_name not in ours:  # axes' login records: no restricted rows, refused or not
                probe("admin", who, attacker, client, "GET", base)
                continue
            pages = math.ceil(model._default_manager.count() / PER_PAGE) + 1
            for page in range(1, pages + 1):  # a list refused on its first page is refused on all
                listed = probe("admin changelist pages", who, attacker, client, "GET", f"{base}?p={page}")
                if listed.status_code != 200:
                    break
            if model_admin.search_fields and listed.status_code == 200:
                item = self.corpus[turn % len(self.corpus)]
                term = (item.secrets[0].code, item.title)[turn % 2]
                probe("admin search", who, attacker, client, "GET", f"{base}?q={term}")
            if model is Document:
                for pk in self.folders:
                    probe("admin changelist pages", who, attacker, client, "GET", f"{base}?folder__id__exact={pk}")
            for field in opts.get_fields() if everything else ():
                if field.is_relation and field.concrete:
                    probe("admin autocomplete", who, attacker, client, "GET",
                          f"/admin/autocomplete/?app_label={opts.app_label}&model_name={opts.model_name}"
                          f"&field_name={field.name}&term=")
            added = probe("admin", who, attacker, client, "GET", f"{base}add/")
            add_form = form_fields(added.content.decode()) if added.status_code == 200 else {}
            probe("admin writes", who, attacker, client, "POST", f"{base}add/",
                  data={**add_form, **self._admin_changes(model, attacker, add=True), "_save": "Save"},
                  baseline=baseline)
            for pk in sample:
                for view in ("change", "history", "delete"):
                    shown = probe("admin", who, attacker, client, "GET", f"{base}{pk}/{view}/")
                    if view == "change":
                        form = form_fields(shown.content.decode()) if shown.status_code == 200 else {}
                        probe("admin writes", who, attacker, client, "POST", f"{base}{pk}/change/",
                              data={**form, **self._admin_changes(model, attacker, add=False), "_save": "Save"},
                              baseline=baseline)
                probe("admin writes", who, attacker, client, "POST", f"{base}{pk}/delete/", data={"post": "yes"},
                      baseline=baseline)
                if model is User:
                    probe("admin writes", who, attacker, client, "POST", f"{base}{pk}/password/",
                          data={"password1": "Matrix-pass-4411", "password2": "Matrix-pass-4411",
                                "usable_password": "true"}, baseline=baseline)
            for action in ("delete_selected", *(model_admin.actions or ())):
                probe("admin writes", who, attacker, client, "POST", base,
                      data={"action": action, "_selected_action": [str(pk) for pk in rows], "post": "yes", "index": "0"},
                      baseline=baseline)
        # The attacker's own account: the admin's user form holds the superuser flag and group memberships.
        own = f"/admin/auth/user/{attacker.pk}/change/"
        shown = probe("admin", who, attacker, client, "GET", own)
        form = form_fields(shown.content.decode()) if shown.status_code == 200 else {"username": attacker.username}
        probe("admin writes", who, attacker, client, "POST", own,
              data={**form, **self._admin_changes(User, attacker, add=False), "_save": "Save"}, baseline=baseline)

    def content_manager(self, who: PermissionSet, attacker: User, client: Client, baseline: str) -> None:
        """What the content manager may do, on the public folder's source (the probes above find what they may
        not): without it a role refused everything would pass. Each probe is rolled back like the others."""
        probe, mirror = self.matrix.probe, f"/api/sources/{self.mirror}"

        def status(method: str, url: str, body: dict[str, Any] | None = None) -> int:
            data = None if body is None else json.dumps(body)
            return probe(CONTENT_MANAGER, who, attacker, client, method, url, data=data,
                         content_type=None if body is None else "application/json", baseline=baseline).status_code

        listed = probe(CONTENT_MANAGER, who, attacker, client, "GET", "/api/sources")
        assert [s["name"] for s in json.loads(listed.content)] == ["Handbook mirror"], listed.content
        assert status("GET", mirror) == 200
        assert status("PATCH", mirror, {"every": "1h", "path": "docs"}) == 200
        assert status("PATCH", mirror, {"branch": "--upload-pack=touch matrix; git-upload-pack"}) == 400
        assert status("POST", "/api/sources", {"name": "Matrix mine", "kind": "git", "folder": self.handbook.pk,
                                               "location": "https://git.example.com/mine.git"}) == 201
        assert status("DELETE", mirror) == 403
        assert status("GET", "/admin/kb/source/") == 200 and status("GET", "/admin/kb/source/add/") == 200
        assert status("GET", f"/admin/kb/source/{self.mirror}/change/") == 200
        deleted = probe(CONTENT_MANAGER, who, attacker, client, "POST", f"/admin/kb/source/{self.mirror}/delete/",
                        data={"post": "yes"}, baseline=baseline)
        assert deleted.status_code == 403

    def _admin_changes(self, model: type[models.Model], attacker: User, *, add: bool) -> dict[str, Any]:
        """What an attacker changes in a form: access to themselves, restricted rows as targets, more power."""
        me = str(attacker.pk)
        groups = [str(pk) for pk in self.rows[Group]]
        if model is Document:
            return {"title": "Matrix", "inherit_access": "", "public": "on", "users": [me]}
        if model is Source:
            return {"name": "Matrix source", "kind": "folder", "location": "/srv/matrix",
                    "folder": str(self.folders[0]), "shrink_guard": "0.5"}
        if model is Folder:
            return {"name": "Matrix folder" if add else Folder.objects.get(pk=self.folders[0]).name, "public": "on",
                    "users": [me]}
        if model is Feedback:
            return {"message": str(self.answers[0]), "citation": str(self.rows[Citation][0]), "kind": "unsupported",
                    "note": "matrix"}
        if model is Message:
            return {"source_documents": "", "unsupported": "[]", "rating": "1", "conversation": str(self.conversations[0])}
        if model is ReviewGrant:  # a reviewer's view of a group the attacker is not in
            return {"reviewer": str(self.people["sam"].pk), "group": str(self.rows[Group][1]), "folder": ""}
        if model is Citation:
            return {"label": "matrix", "message": str(self.answers[0])}
        if model is RetrievalAdjustment:  # hide a restricted passage, picked by its link in the viewer
            start, end = self.ranges[self.docs[0]]
            return {"document": str(self.docs[0]), "passage": "", "link": f"/documents/{self.docs[0]}/#char={start},{end}",
                    "action": "hide", "reason": "matrix"}
        if model is OidcIdentity:
            return {"user": str(self.people["admin"].pk), "issuer": "https://idp.example", "subject": "matrix-sub"}
        if model is User:
            extra = {"username": "matrix-new", "password1": "Matrix-pass-4411", "password2": "Matrix-pass-4411"} if add else {}
            return {**extra, "is_superuser": "on", "is_staff": "on", "groups": groups}
        if model is Group:
            return {"name": "matrix" if add else "engineering", "permissions": []}
        return {"title": "Matrix", "name": "Matrix"}


@dataclass(frozen=True)
class Learned:
    """The rows use taught about one restricted passage, and their markers (chat and search, issue 50)."""

    remembered: int
    curated: int
    adjustment: int
    markers: list[str]


RESTRICTED_FOLDERS = ("Ops vault 3310", "People files 6630")
PUBLIC_SENTENCE = "Bonus pools, restructuring budgets and expense approvals are decided by finance"
RESTRICTED_SOURCES = ("Vault mirror 3311", "People mirror 6631")  # each fills the restricted folder beside it
API_MODELS = {"document", "folder", "chunk", "source", "conversation", "message", "citation", "feedback", "curatedanswer",
              "retrievaladjustment"}
# The positive controls' insider: reads every group's documents, holds what shows the learned rows.
INSIDER = (CURATE, "chat.view_curatedanswer", "search.view_rememberedquestion", "search.view_retrievaladjustment")


def sampled_sets(sets: list[PermissionSet], rng: random.Random) -> list[tuple[int, PermissionSet]]:
    """(turn, set) to probe: no permission, and every permission with and without the review group, which between
    them reach every operation and every admin page; then, drawn with `rng`, two of the other bundles and for each
    model one of its single permissions or pairs. A set keeps its turn (the restricted row it is probed on)."""
    always = {"none", "everything", "everything +support", CONTENT_MANAGER, CURATE}
    chosen = [(turn, who) for turn, who in enumerate(sets) if who.name in always]
    bundles = [(turn, who) for turn, who in enumerate(sets) if who.wide and who.name not in always]
    by_model: dict[tuple[str, ...], list[tuple[int, PermissionSet]]] = {}
    for turn, who in enumerate(sets):
        if not who.wide and who.codenames:
            by_model.setdefault(tuple(sorted(who.models)), []).append((turn, who))
    chosen += rng.sample(bundles, 2) + [rng.choice(group) for group in by_model.values()]
    return sorted(chosen, key=lambda pair: pair[0])


@pytest.fixture
def few_rows_a_page(monkeypatch: pytest.MonkeyPatch) -> None:
    for model_admin in admin.site._registry.values():
        monkeypatch.setattr(model_admin, "list_per_page", PER_PAGE)


def test_no_staff_permission_set_leaks_or_escalates_on_the_api_or_the_admin(
    people: dict[str, Any], settings: Any, few_rows_a_page: None
) -> None:
    settings.KB_ANSWER_BACKEND = "extractive"
    started = time.monotonic()
    world = World(people, build(people))
    world.insiders()
    matrix = world.matrix
    full = os.environ.get("KB_MATRIX_FULL") == "1"
    seed = int(os.environ.get("KB_MATRIX_SEED") or random.SystemRandom().randrange(2**32))
    sets = list(enumerate(permission_sets())) if full else sampled_sets(permission_sets(), random.Random(seed))
    for turn, who in sets:
        with transaction.atomic():
            attacker = User.objects.create_user(f"matrix{turn}", password="x", is_staff=True)
            attacker.user_permissions.set(permissions_of(who.codenames))
            if who.support:
                attacker.groups.add(people["groups"]["support"])
            client = Client(raise_request_exception=False)
            client.force_login(attacker)
            own = world.own_answer(attacker) if world.probes_api(who) else None
            baseline = world.guarded.fingerprint(attacker)
            world.api(who, attacker, client, turn, baseline, own)
            world.pages(who, attacker, client, turn)
            world.admin(who, attacker, client, turn, baseline)
            if who.name == CONTENT_MANAGER:
                world.content_manager(who, attacker, client, baseline)
            transaction.set_rollback(True)

    seconds = time.monotonic() - started
    assert matrix.operations == set(world.api_operations())
    OUTPUT.mkdir(exist_ok=True)
    (OUTPUT / "permission-matrix.json").write_text(json.dumps(
        {**matrix.as_json(), "permission_sets": len(sets), "full": full, "seed": None if full else seed,
         "seconds": round(seconds)}, indent=1))
    sample = "all" if full else f"a sample (KB_MATRIX_SEED={seed} replays it; KB_MATRIX_FULL=1: all)"
    print(f"\npermission matrix: {len(sets)} permission sets, {sample}, {matrix.report()}\n  in {seconds:.0f}s")
    assert not matrix.of("leak") and not matrix.of("escalation"), matrix.report()
    assert matrix.total >= (MIN_PROBES if full else MIN_SAMPLED_PROBES), matrix.report()
