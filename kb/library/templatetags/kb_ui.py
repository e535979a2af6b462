"""Template helpers shared by every page: the navigation a person's role allows."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils import formats
from django.utils.translation import gettext, gettext_lazy

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
    items = [(gettext("Ask"), "/", current == "ask"),
             (gettext("Library"), "/library/", current in {"library", "document"})]
    may_review = context.get("may_review")  # from chat.context_processors: chat owns the rule
    if may_review is not None and may_review():
        items.append((gettext("Review"), "/review/", current == "review"))
    may_view_gaps = context.get("may_view_gaps")
    if may_view_gaps is not None and may_view_gaps():
        items.append((gettext("Gaps"), "/gaps/", current == "gaps"))
    if user.is_staff:
        items.append((gettext("Admin"), "/admin/", False))
    return [{"label": label, "url": url, "current": is_current} for label, url, is_current in items]


@register.filter
def initials(user: Any) -> str:
    name = (user.get_full_name() or user.get_username() or "?").strip()
    parts = name.replace(".", " ").replace("_", " ").split()
    return "".join(p[0] for p in parts[:2]).upper() or "?"


@register.filter
def filesize(value: int | None) -> str:
    """1.5 MB, or 1,5 MB where the reader's language writes a decimal comma."""
    size = float(value or 0)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{formats.number_format(size, 1)} {unit}"
        size /= 1024
    return ""


# Kinds by MIME type: (the stylesheet's class, the name shown, the icon's letters).
KINDS = {
    "text/markdown": ("markdown", "Markdown", "MD"),
    "text/plain": ("text", gettext_lazy("Text"), "TXT"),
    "text/html": ("html", "HTML", "HTML"),
    "application/pdf": ("pdf", "PDF", "PDF"),
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": ("word", "Word", "DOC"),
}
OTHER_KIND = ("file", gettext_lazy("File"), "FILE")


@register.filter
def kind_class(mime: str) -> str:
    return KINDS.get(mime or "", OTHER_KIND)[0]


@register.filter
def kind_label(mime: str) -> str:
    return str(KINDS.get(mime or "", OTHER_KIND)[1])


@register.filter
def kind_short(mime: str) -> str:
    return KINDS.get(mime or "", OTHER_KIND)[2]


# A failed document's line, per pipeline stage (the library page; kb/library.js has the same for live updates).
FAILED_AT = {
    "queued": gettext_lazy("Failed while queued: %(reason)s"),
    "extracting": gettext_lazy("Failed while extracting: %(reason)s"),
    "chunking": gettext_lazy("Failed while chunking: %(reason)s"),
    "embedding": gettext_lazy("Failed while embedding: %(reason)s"),
    "": gettext_lazy("Failed while processing: %(reason)s"),
}


@register.filter
def failure_line(document: Any) -> str:
    stage, reason = document.failed_stage or "", document.failure_reason
    found = FAILED_AT.get(stage)
    if found is None:
        return gettext("Failed while %(stage)s: %(reason)s") % {"stage": stage, "reason": reason}
    return str(found) % {"reason": reason}
