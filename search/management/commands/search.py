from __future__ import annotations

import json
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from search.api import search_payload, shows_raw_scores
from search.retrieval import SearchOptions, hybrid_search


class Command(BaseCommand):
    help = "Search the knowledge base as USER sees it (same permissions as the browser)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("query")
        parser.add_argument("--user", required=True, help="Search as this user")
        parser.add_argument("--k", type=int, default=20)
        parser.add_argument("--json", action="store_true", dest="as_json", help="Print JSON instead of a table")

    def handle(self, *args: Any, query: str, user: str, k: int, as_json: bool, **options: Any) -> str:
        account = get_user_model().objects.filter(username=user).first()
        if account is None:
            raise CommandError(f"no user named {user!r}")
        result = hybrid_search(user=account, query=query, options=SearchOptions(k=k))
        if as_json:
            return json.dumps(search_payload(result, raw_scores=shows_raw_scores(account)), indent=2, ensure_ascii=False)
        lines = [f"intent: {result.intent} ({result.intent_confidence:.2f}) · threshold {result.threshold:.3f}"]
        if not result.answerable:
            lines.append(result.refusal_reason or "NO ANSWER")
        for rank, hit in enumerate(result.hits, 1):
            mark = "✓" if hit.passed else " "
            lines.append(f"{rank:>3} {mark} {hit.distance:.3f}  {hit.breadcrumb}  {hit.link}")
            lines.append("        " + " ".join(hit.content.split())[:160])
        return "\n".join(lines)

