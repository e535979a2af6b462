from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from kb.library.ingest.batch import expand_paths, ingest_paths, resolve_access
from kb.library.ingest.extract import SUPPORTED, SUPPORTED_KINDS


def _names(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


class Command(BaseCommand):
    help = (
        "Upload and index files or folders; prints a summary with the reason for every failure. "
        f"Types: {SUPPORTED_KINDS} ({', '.join(SUPPORTED)}); any other file is reported as unsupported."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="+", type=Path)
        parser.add_argument("--folder", help="Folder to file the documents in (created if missing)")
        parser.add_argument("--groups", type=_names, default=[], help="Comma-separated groups that may read them")
        parser.add_argument("--users", type=_names, default=[], help="Comma-separated users that may read them")
        parser.add_argument("--sync", action="store_true", help="Index in this process, without a worker")
        parser.add_argument("--wait", type=float, default=600, help="Seconds to wait for the workers (default 600)")

    def handle(self, *args: Any, paths: list[Path], folder: str | None, groups: list[str], users: list[str],
               sync: bool, wait: float, **options: Any) -> str:
        missing = [str(p) for p in paths if not p.exists()]
        if missing:
            raise CommandError(f"no such file or folder: {', '.join(missing)}")
        try:
            folder_obj, group_objs, user_objs = resolve_access(folder=folder, groups=groups, users=users)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        files = list(expand_paths(paths))
        with tqdm(total=len(files), unit="file", desc="indexing" if sync else "uploading", file=self.stderr) as bar:

            def advance(name: str) -> None:
                bar.update(1)

            summary = ingest_paths(
                files, folder=folder_obj, groups=group_objs, users=user_objs, sync=sync, wait_seconds=wait,
                progress=advance,
            )
        text = "\n".join(summary.lines())
        if summary.failed:
            self.stderr.write(text)
            raise CommandError(f"{len(summary.failed)} of {len(files)} file(s) failed")
        return text
