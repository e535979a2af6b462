from __future__ import annotations

import argparse
import secrets
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kb.library.models import Source
from kb.library.sources.secrets import WEBHOOK, secret_state
from kb.library.sources.selectors import sources_lag
from kb.library.sources.services import SourceRejected, parse_every, source_change, source_create, source_remove
from kb.library.sources.sync import SourceBusy
from kb.library.sources.webhooks import webhook_path, webhook_secret_set

WATCH_HELP = ("Folder: sync a few seconds after a file is saved (the watcher, `manage.py watch_sources`; "
              "docs/OPERATIONS.md, \"Watched folders\"). Git sources take push webhooks instead")


def _every(value: str) -> int:
    try:
        return parse_every(value)
    except SourceRejected as exc:
        raise CommandError(str(exc)) from None


class Command(BaseCommand):
    help = "Add, list or remove the sources kept in sync with KB folders (docs/SOURCES.md); `manage.py sync` runs one."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        add = actions.add_parser("add", help="Add a source filling an existing KB folder")
        add.add_argument("name")
        add.add_argument("--kind", required=True, choices=Source.Kind.values)
        add.add_argument("--location", required=True, help="A directory on the server, or a repository URL")
        add.add_argument("--folder", required=True, help="The KB folder it fills; its documents take its access")
        add.add_argument("--branch", default="", help="Git: the branch (default: the repository's default branch)")
        add.add_argument("--path", default="", help="Only this sub-path of the source")
        add.add_argument("--include", nargs="+", action="extend", default=[], metavar="GLOB",
                         help="Only paths matching one of these globs (on the path from the source's root)")
        add.add_argument("--exclude", nargs="+", action="extend", default=[], metavar="GLOB",
                         help="Leave out paths matching one of these globs")
        add.add_argument("--every", type=_every, default=None, help="Schedule: 15m, 2h, 1d… (default: by hand)")
        add.add_argument("--watch", action="store_true", help=WATCH_HELP)
        change = actions.add_parser("change", help="Watch a folder source or stop watching it (/api/sources "
                                    "changes the other settings)")
        change.add_argument("name")
        change.add_argument("--watch", action=argparse.BooleanOptionalAction, default=None, help=WATCH_HELP)
        actions.add_parser("list", help="The sources, their last run, index lag and last push")
        hook = actions.add_parser("webhook-secret", help="Set a Git source's webhook secret: a new random one "
                                  "(printed once), one read from standard input, or none")
        hook.add_argument("name")
        given = hook.add_mutually_exclusive_group()
        given.add_argument("--stdin", action="store_true", help="Read the secret from standard input (the forge's own)")
        given.add_argument("--clear", action="store_true", help="Remove it: pushes are refused until one is set")
        remove = actions.add_parser("remove", help="Remove a source and its documents")
        remove.add_argument("name")
        remove.add_argument("--keep-documents", action="store_true",
                            help="Keep its documents in the folder as ordinary documents")

    def handle(self, *args: Any, action: str, **options: Any) -> str:
        if action == "add":
            return self._add(**options)
        if action == "change":
            return self._change(options["name"], watch=options["watch"])
        if action == "list":
            return self._list()
        if action == "webhook-secret":
            return self._webhook_secret(options["name"], stdin=options["stdin"], clear=options["clear"])
        return self._remove(options["name"], keep_documents=options["keep_documents"])

    def _add(self, *, name: str, kind: str, location: str, folder: str, branch: str, path: str, include: list[str],
             exclude: list[str], every: int | None, watch: bool, **_: Any) -> str:
        try:
            source = source_create(name=name, kind=kind, location=location, folder_name=folder, branch=branch,
                                   path=path, include=include, exclude=exclude, every=every, watch=watch)
        except SourceRejected as exc:
            raise CommandError(str(exc)) from None
        watched = "; watched" if source.watch else ""
        return (f"added source {source.name!r} ({source.kind}) filling folder {source.folder.name!r}{watched}; "
                f"run `manage.py sync {source.name}`")

    def _change(self, name: str, *, watch: bool | None) -> str:
        source = Source.objects.filter(name=name).first()
        if source is None:
            raise CommandError(f"no source named {name!r}")
        if watch is None:
            raise CommandError("nothing to change: give --watch or --no-watch")
        try:
            source_change(source=source, watch=watch)
        except SourceRejected as exc:
            raise CommandError(str(exc)) from None
        if watch:
            return (f"{name!r} is watched: `manage.py watch_sources` (started by `make run`) takes it up within "
                    "KB_SOURCE_WATCH_REFRESH seconds, with one catch-up run")
        return f"{name!r} is no longer watched; its schedule (or `manage.py sync`) runs it"

    def _list(self) -> str:
        lines = []
        found = list(Source.objects.select_related("folder"))
        lags = sources_lag([source.pk for source in found])
        for source in found:
            schedule = (f"every {source.every}s" if source.every else "by hand") + (", watched" if source.watch else "")
            last = source.last_status or "never run"
            success = source.last_success_at.isoformat(timespec="seconds") if source.last_success_at else "never"
            lines.append(
                f"{source.name}\t{source.kind}\t{source.location}\tfolder={source.folder.name}\t{schedule}\t"
                f"last={last}\tlast_success={success}\tlisted={source.last_listed} changed={source.last_changed} "
                f"new={source.last_new} deleted={source.last_deleted} failed={source.last_failed}\t"
                f"documents={source.documents.count()}\tlag={lags[source.pk].lag_seconds():.0f}s "
                f"pending={lags[source.pk].pending} last_change_lag="
                + ("-" if source.last_lag_seconds is None else f"{source.last_lag_seconds:.0f}s")
                + "\tlast_push=" + (f"{source.last_push_at.isoformat(timespec='seconds')} ({source.last_push_origin})"
                                    if source.last_push_at else "never")
                + (f"\treason={source.last_reason}" if source.last_reason else "")
            )
        return "\n".join(lines) or "no sources"

    def _webhook_secret(self, name: str, *, stdin: bool, clear: bool) -> str:
        source = Source.objects.filter(name=name).first()
        if source is None:
            raise CommandError(f"no source named {name!r}")
        if source.kind != Source.Kind.GIT:
            raise CommandError(f"{name!r} is a {source.kind} source: only Git sources take push webhooks")
        if clear:
            webhook_secret_set(source=source, secret="")
            return f"removed the webhook secret of {name!r} ({secret_state(source, WEBHOOK)} now); pushes are refused"
        secret = sys.stdin.readline().strip() if stdin else secrets.token_urlsafe(32)
        if not secret:
            raise CommandError("no secret on standard input")
        webhook_secret_set(source=source, secret=secret)
        shown = "" if stdin else f"secret: {secret}\n"
        return (f"{shown}set the webhook secret of {name!r}. In the forge, add a push webhook to "
                f"https://<this server>{webhook_path(source)} with this secret (GitHub and Gitea: content type "
                "application/json, the webhook's secret; GitLab: its secret token); docs/SOURCES.md, \"Push webhooks\"")

    def _remove(self, name: str, *, keep_documents: bool) -> str:
        source = Source.objects.filter(name=name).first()
        if source is None:
            raise CommandError(f"no source named {name!r}")
        try:
            deleted = source_remove(source=source, keep_documents=keep_documents)
        except SourceBusy as exc:
            raise CommandError(str(exc)) from None
        kept = "its documents were kept" if keep_documents else f"{deleted} document(s) deleted"
        return f"removed source {name!r}; {kept}"
