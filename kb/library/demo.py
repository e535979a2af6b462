"""The demo company: groups, people and the documents under demo/corpus/<group>/."""

from __future__ import annotations

from pathlib import Path

from django.contrib.auth.models import Group, User
from django.db import transaction

from kb.library.ingest.batch import BatchSummary, ingest_paths
from kb.library.models import Folder
from kb.library.services import folder_set_access

CORPUS = Path(__file__).resolve().parents[2] / "demo" / "corpus"
PUBLIC_FOLDER = "everyone"
GROUPS = ("engineering", "finance", "hr", "support")
# Demo-only passwords equal to the username; printed by `make run`.
PEOPLE: dict[str, tuple[str, ...]] = {
    "alice": ("engineering",),
    "bob": ("finance",),
    "carol": (),
    "dave": ("engineering", "hr"),
    "sam": ("support",),
}


@transaction.atomic
def demo_people() -> None:
    groups = {name: Group.objects.get_or_create(name=name)[0] for name in GROUPS}
    for username, group_names in PEOPLE.items():
        user, created = User.objects.get_or_create(username=username)
        if created:
            user.set_password(username)
            user.save()
        user.groups.add(*(groups[g] for g in group_names))
    admin, created = User.objects.get_or_create(username="admin", defaults={"is_staff": True, "is_superuser": True})
    if created:
        admin.set_password("admin")
        admin.save()
    # Superusers read by their grants like everyone else; the demo admin is in every group.
    admin.groups.add(*groups.values())


def demo_folders(corpus: Path = CORPUS) -> dict[str, Folder]:
    """One folder per corpus sub-folder: `everyone` is public, the others belong to the group of that name."""
    folders: dict[str, Folder] = {}
    for directory in sorted(p for p in corpus.iterdir() if p.is_dir()):
        folder, _ = Folder.objects.get_or_create(name=directory.name)
        if directory.name == PUBLIC_FOLDER:
            folder_set_access(folder=folder, public=True)
        else:
            group, _ = Group.objects.get_or_create(name=directory.name)
            folder_set_access(folder=folder, public=False, groups=[group])
        folders[directory.name] = folder
    return folders


def load_demo(corpus: Path = CORPUS, *, sync: bool = False) -> BatchSummary:
    """Idempotent: people and folders are created once, unchanged files are not re-indexed."""
    demo_people()
    admin = User.objects.get(username="admin")
    total = BatchSummary()
    for name, folder in demo_folders(corpus).items():
        part = ingest_paths([corpus / name], folder=folder, uploaded_by=admin, sync=sync)
        for key in ("ready", "failed", "unchanged", "pending"):
            getattr(total, key).extend(getattr(part, key))
    return total
