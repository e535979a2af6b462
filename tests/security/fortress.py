"""The leak suite's fixture corpus and its probe bookkeeping.

Six restricted documents reach their readers in every way the product grants access: a
folder's groups (inherited), a document's own groups, several groups, one named user, a
group plus a named user. Each restricted sentence carries a code found nowhere else, and
its question never contains that code, so a code showing up anywhere is a leak.
"""

from __future__ import annotations

import io
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any
from urllib.parse import quote, quote_plus

from django.contrib.auth.models import Group, Permission, User

from kb.library.ingest.pipeline import ingest
from kb.library.models import Document, Folder
from kb.library.services import document_upload, folder_set_access

# Staff "ellen" may open every admin page of our models but is in no group: the admin attacker.
ADMIN_MODELS = ("document", "chunk", "folder", "conversation", "message", "citation", "feedback", "apitoken")
ATTACKERS = ("alice", "bob", "carol", "dave", "sam", "ellen")


@dataclass(frozen=True)
class Secret:
    code: str  # appears only in this sentence
    sentence: str
    questions: tuple[str, ...]  # what an attacker would type; never the code


@dataclass
class Restricted:
    key: str
    title: str
    filename: str
    readers: frozenset[str]
    secrets: list[Secret]
    document: Document | None = None

    def markers(self) -> list[str]:
        """Strings that may never reach a non-reader: codes, title, file name, links and ids."""
        assert self.document is not None
        pk = self.document.pk
        return [*(s.code for s in self.secrets), self.title, self.filename,
                f"/documents/{pk}/", f"/document/{pk}/", f'"document_id": {pk}']


def _secret(code: str, what: str, where: str) -> Secret:
    return Secret(
        code=code,
        sentence=f"The {what} for the {where} is {code}, and it changes every quarter.",
        questions=(f"What is the {what} for the {where}?", f"{what} {where}",
                   f"The {what} for the {where} is, and it changes every quarter."),
    )


PLACES = ("Oslo depot", "Bergen harbour", "Tromso warehouse")


def restricted_corpus() -> list[Restricted]:
    specs = [
        ("kestrel", "Runbook Kestrel 4410", frozenset({"alice", "dave"}), "vault rotation code", "KES"),
        ("osprey", "Ledger Osprey 5520", frozenset({"bob"}), "quarterly bonus pool figure", "OSP"),
        ("heron", "Dossier Heron 6640", frozenset({"dave"}), "grievance case number", "HER"),
        ("falcon", "Memo Falcon 7750", frozenset({"bob"}), "private expense approval key", "FAL"),
        ("condor", "Plan Condor 8860", frozenset({"bob", "dave"}), "restructuring budget reference", "CON"),
        ("plover", "Brief Plover 9970", frozenset({"alice", "dave", "carol"}), "incident bridge passcode", "PLO"),
    ]
    corpus = []
    for key, title, readers, what, tag in specs:
        secrets = [_secret(f"{tag}-{4000 + 7 * i + len(key)}-Q{i}", what, place) for i, place in enumerate(PLACES)]
        corpus.append(Restricted(key, title, f"{key}-{title.split()[-1]}.md", readers, secrets))
    return corpus


PUBLIC = """# Office handbook

## Codes and passcodes

Door codes, vault rotation codes, bridge passcodes and approval keys are never written in the handbook.
Ask the owning team for any code for the Oslo depot, the Bergen harbour or the Tromso warehouse.

## Budgets

Bonus pools, restructuring budgets and expense approvals are decided by finance and published each quarter.
"""


def people_and_access() -> dict[str, Any]:
    """The demo users (tests.conftest.people) plus ellen, staff with admin permissions and no group."""
    ellen = User.objects.create_user("ellen", password="ellen", is_staff=True)
    ellen.user_permissions.set(Permission.objects.filter(content_type__model__in=ADMIN_MODELS))
    return {"ellen": ellen}


def upload(text: str, name: str, **access: Any) -> Document:
    data = text.encode()
    document = document_upload(name=name, stream=io.BytesIO(data), size=len(data), enqueue=False, **access).document
    assert ingest(document.pk) == Document.Status.READY, Document.objects.get(pk=document.pk).failure_reason
    return Document.objects.get(pk=document.pk)


def build(people: dict[str, Any]) -> list[Restricted]:
    """Index the public handbook and the six restricted documents, each through another kind of grant."""
    groups: dict[str, Group] = people["groups"]
    vault = Folder.objects.create(name="Ops vault 3310")
    folder_set_access(folder=vault, public=False, groups=[groups["engineering"]])
    people_folder = Folder.objects.create(name="People files 6630")
    folder_set_access(folder=people_folder, public=False, groups=[groups["hr"]])
    handbook = Folder.objects.create(name="Handbook")
    folder_set_access(folder=handbook, public=True)
    upload(PUBLIC, "handbook.md", folder=handbook)
    access = {
        "kestrel": {"folder": vault},
        "osprey": {"public": False, "groups": [groups["finance"]]},
        "heron": {"folder": people_folder},
        "falcon": {"public": False, "users": [people["bob"]]},
        "condor": {"public": False, "groups": [groups["hr"], groups["finance"]]},
        "plover": {"folder": handbook, "public": False, "groups": [groups["engineering"]], "users": [people["carol"]]},
    }
    corpus = restricted_corpus()
    for item in corpus:
        body = "\n\n".join(f"## {s.questions[1].title()}\n\n{s.sentence}" for s in item.secrets)
        item.document = upload(f"# {item.title}\n\n{body}\n", item.filename, **access[item.key])
    return corpus


@dataclass
class Probes:
    """Counts every probe by surface and collects every leak found (the suite asserts none)."""

    counts: Counter[str] = field(default_factory=Counter)
    leaks: list[str] = field(default_factory=list)

    def check(self, surface: str, who: str, text: str, markers: list[str], sent: Sequence[str] = ()) -> None:
        """`sent`: what the attacker typed (a query, a URL): a page may echo it back, which tells them nothing."""
        self.counts[surface] += 1
        for typed in sent:
            for form in {typed, quote(typed), quote(typed, safe=""), quote_plus(typed), escape(typed)}:
                text = text.replace(form, "")
        for marker in markers:
            if re.search(re.escape(marker) + (r"(?!\d)" if marker[-1].isdigit() else ""), text):
                self.leaks.append(f"{surface} as {who}: {marker!r}")

    def expect(self, surface: str, who: str, ok: bool, what: str) -> None:
        """A probe whose answer is a refusal (404, close code) rather than a body."""
        self.counts[surface] += 1
        if not ok:
            self.leaks.append(f"{surface} as {who}: {what}")

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def report(self) -> str:
        lines = [f"{self.total} probes over {len(self.counts)} surfaces, {len(self.leaks)} leaks"]
        lines += [f"  {surface}: {n}" for surface, n in sorted(self.counts.items())]
        return "\n".join(lines + [f"  LEAK {leak}" for leak in self.leaks[:50]])
