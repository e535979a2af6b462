"""Template helpers shared by every page: the navigation a person's role allows."""

from __future__ import annotations

from typing import Any

from django import template

register = template.Library()


@register.simple_tag(takes_context=True)
def nav_items(context: dict[str, Any]) -> list[dict[str, Any]]:
    """[{label, url, current}] for the top bar: Ask and Library for everyone signed in, Review for support
    staff, Gaps (content gaps) for whoever may see them, Admin for staff. Pages a person may not use are
    not shown."""
    request = context.get("request")
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return []
    match = getattr(request, "resolver_match", None)
    current = match.url_name if match else ""
    items = [("Ask", "/", current == "ask"), ("Library", "/library/", current in {"library", "document"})]
    may_review = context.get("may_review")  # from chat.context_processors: chat owns the rule
    if may_review is not None and may_review():
        items.append(("Review", "/review/", current == "review"))
    may_view_gaps = context.get("may_view_gaps")
    if may_view_gaps is not None and may_view_gaps():
        items.append(("Gaps", "/gaps/", current == "gaps"))
    if user.is_staff:
        items.append(("Admin", "/admin/", False))
    return [{"label": label, "url": url, "current": is_current} for label, url, is_current in items]


@register.filter
def initials(user: Any) -> str:
    name = (user.get_full_name() or user.get_username() or "?").strip()
    parts = name.replace(".", " ").replace("_", " ").split()
    return "".join(p[0] for p in parts[:2]).upper() or "?"


@register.filter
def filesize(value: int | None) -> str:
    size = float(value or 0)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return ""


@register.filter
def kind_label(mime: str) -> str:
    return {
        "text/markdown": "Markdown",
        "text/plain": "Text",
        "text/html": "HTML",
        "application/pdf": "PDF",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "Word",
    }.get(mime or "", "File")


@register.filter
def kind_short(mime: str) -> str:
    return {"Markdown": "MD", "Text": "TXT", "HTML": "HTML", "PDF": "PDF", "Word": "DOC"}.get(kind_label(mime), "FILE")
