"""Staff's boosts and hides of a document or one of its passages for retrieval (issue 50, item 3).

Retrieval (search.retrieval) applies the active ones: a hidden passage or document is dropped from the
candidates, a boosted one gains in fusion and in late re-ranking. Here are the rules for making and revoking
them, shared by the admin and the API: the Django permission for the action, and read access to the document
(superusers: any). A document or adjustment the user may not read is "not found", exactly like a missing one,
so neither surface tells whether it exists. One adjustment is active per document and passage: a new one
revokes the one before, and a revoked one stays as the log of who did what, when and why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import OuterRef, QuerySet, Subquery
from django.db.models.functions import Substr
from django.utils import timezone
from django.utils.translation import gettext

from kb.library.access import staff_may, visible_documents
from kb.library.models import Chunk, Document
from search.memory import passage_at
from search.models import RetrievalAdjustment

ADD = "search.add_retrievaladjustment"
REVOKE = "search.change_retrievaladjustment"
VIEW = "search.view_retrievaladjustment"
EXCERPT = 160  # characters of a passage shown to name it

# A passage's address in the viewer (a citation's link): /documents/<id>/#char=<start>,<end>, or the full URL.
VIEWER_LINK = re.compile(r"^\s*(?:https?://[^/\s]+)?/documents/(\d+)/?#char=(\d+),(\d+)\s*$")


class AdjustmentError(ValueError):
    """A request that cannot be carried out, said in words (the API's 422, the admin form's error)."""


class AdjustmentNotFound(AdjustmentError):
    """No such document, passage or adjustment, or one the user may not read: the same answer for both."""


class AdjustmentDenied(AdjustmentError):
    """The user lacks the Django permission for the action."""


@dataclass(frozen=True)
class Passage:
    """One passage of a document, as an adjustment form offers it."""

    stable_id: str
    start: int
    end: int
    excerpt: str


def adjustable_documents(user: Any) -> QuerySet[Document]:
    """Documents whose boosts and hides `user` may see and (with the permission) make: those they may read;
    superusers, who manage every document in the admin, all."""
    if getattr(user, "is_superuser", False) and getattr(user, "is_active", False):
        return Document.objects.all()
    return visible_documents(user)


def adjustments_visible(user: Any) -> QuerySet[RetrievalAdjustment]:
    """The adjustments on documents `user` may read, each with its passage's first characters and range
    (`passage_excerpt` / `passage_start` / `passage_end`: null for a whole document or a passage since changed)."""
    passage = Chunk.objects.filter(document_id=OuterRef("document_id"), stable_id=OuterRef("stable_id")).order_by("ordinal")
    return (RetrievalAdjustment.objects.filter(document__in=adjustable_documents(user).values("pk"))
            .select_related("document", "created_by", "revoked_by")
            .defer("document__canonical_text", "document__pages", "document__headings")
            .annotate(passage_excerpt=Subquery(passage.annotate(excerpt=Substr("content", 1, EXCERPT)).values("excerpt")[:1]),
                      passage_start=Subquery(passage.values("start")[:1]),
                      passage_end=Subquery(passage.values("end")[:1])))


def document_passages(document_id: int) -> list[Passage]:
    """The document's passages in reading order, each once (parts of a split section share no stable id)."""
    rows = (Chunk.objects.filter(document_id=document_id).order_by("ordinal")
            .values_list("stable_id", "start", "end", Substr("content", 1, EXCERPT)))
    seen: set[str] = set()
    passages = []
    for stable_id, start, end, excerpt in rows:
        if stable_id not in seen:
            seen.add(stable_id)
            passages.append(Passage(stable_id, start, end, " ".join(excerpt.split())))
    return passages


def passage_from_link(link: str) -> tuple[int, int, int]:
    """(document id, start, end) of a passage link copied from the viewer."""
    found = VIEWER_LINK.match(link)
    if not found:
        raise AdjustmentError(gettext("“%(link)s” is not a passage link: copy one from the document viewer, "
                                      "such as /documents/12/#char=340,512") % {"link": link.strip()[:200]})
    document_id, start, end = (int(part) for part in found.groups())
    return document_id, start, end


def _allow(user: Any, permission: str) -> None:
    if not staff_may(user, permission):
        raise AdjustmentDenied(gettext("You need the %(permission)s permission for this.") % {"permission": permission})


def adjustment_target(*, user: Any, document_id: int, stable_id: str = "", start: int | None = None,
                      end: int | None = None) -> tuple[Document, str]:
    """The document (one `user` may read) and passage an adjustment would apply to: the passage by its stable id,
    or the one holding most of the range [start, end) (a pick in the viewer); neither: the whole document."""
    document = adjustable_documents(user).filter(pk=document_id).first()
    if document is None:
        raise AdjustmentNotFound(gettext("No such document."))
    if (start is None) != (end is None):
        raise AdjustmentError(gettext("A passage range needs both start and end."))
    if start is not None and end is not None:
        if stable_id:
            raise AdjustmentError(gettext("Name the passage by its stable id or by a range, not both."))
        passage = passage_at(document.pk, start, end)
        if passage is None:
            raise AdjustmentNotFound(gettext("No passage of this document holds characters %(start)s–%(end)s; "
                                             "it may have changed since: pick the passage again in the viewer.")
                                     % {"start": start, "end": end})
        return document, passage.stable_id
    if stable_id and not Chunk.objects.filter(document_id=document.pk, stable_id=stable_id).exists():
        raise AdjustmentNotFound(gettext("This document has no such passage (any more)."))
    return document, stable_id


def adjustment_add(*, user: Any, document_id: int, action: str, reason: str, stable_id: str = "",
                   start: int | None = None, end: int | None = None) -> RetrievalAdjustment:
    """Boost or hide a document or one of its passages for everyone's retrieval, revoking the adjustment that
    was active on the same document and passage (the newest decision holds; the old one stays as the log)."""
    _allow(user, ADD)
    if action not in RetrievalAdjustment.Action.values:
        raise AdjustmentError(gettext("The action is “boost” or “hide”, not “%(action)s”.") % {"action": action})
    reason = " ".join(reason.split())
    if not reason:
        raise AdjustmentError(gettext("Say why (the reason): the next person to see it needs to know."))
    limit = RetrievalAdjustment._meta.get_field("reason").max_length or 500
    if len(reason) > limit:
        raise AdjustmentError(gettext("The reason is %(length)s characters; keep it under %(limit)s.")
                              % {"length": len(reason), "limit": limit})
    document, stable_id = adjustment_target(user=user, document_id=document_id, stable_id=stable_id,
                                            start=start, end=end)
    with transaction.atomic():
        # The document's row lock serialises two adjustments of it: never two active on one passage.
        Document.objects.select_for_update().filter(pk=document.pk).values_list("pk").first()
        now = timezone.now()
        RetrievalAdjustment.objects.filter(document_id=document.pk, stable_id=stable_id,
                                           revoked_at__isnull=True).update(revoked_at=now, revoked_by=user)
        created = RetrievalAdjustment.objects.create(document_id=document.pk, stable_id=stable_id, action=action,
                                                     reason=reason, created_by=user)
    return adjustments_visible(user).get(pk=created.pk)


def adjustment_revoke(*, user: Any, adjustment_id: int) -> RetrievalAdjustment:
    """Take an adjustment back: retrieval ranks the passage as before. The row stays, with who revoked it and
    when; revoking one already revoked changes nothing."""
    _allow(user, REVOKE)
    with transaction.atomic():
        found = adjustments_visible(user).filter(pk=adjustment_id).values_list("pk", flat=True).first()
        adjustment = RetrievalAdjustment.objects.select_for_update().filter(pk=found).first() if found else None
        if adjustment is None:
            raise AdjustmentNotFound(gettext("No such boost or hide."))
        if adjustment.revoked_at is None:
            adjustment.revoked_at, adjustment.revoked_by = timezone.now(), user
            adjustment.save(update_fields=["revoked_at", "revoked_by"])
    return adjustments_visible(user).get(pk=adjustment.pk)
