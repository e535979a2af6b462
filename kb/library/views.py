"""The library's browser pages: the library, the document viewer and downloads. Each one parses the
request, calls a selector or a service, and renders; the rules live in kb.library.selectors,
kb.library.services and kb.library.access, the upload form's in kb.library.forms, the document's
rendering in kb.library.viewer. Chat's pages (Ask, Review) are in chat/views.py."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils.formats import number_format
from django.utils.translation import gettext
from django.views.decorators.http import require_GET, require_POST

from kb.library.access import staff_may
from kb.library.forms import UploadForm, upload_choices
from kb.library.ingest.extract import PDF
from kb.library.models import Document
from kb.library.selectors import (
    document_file_get,
    document_get,
    document_get_followable,
    document_status_rows,
    library_documents,
    library_folders,
    user_can_manage_documents,
)
from kb.library.services import DocumentStateConflict, UploadRejected, document_retry
from kb.library.sources.selectors import sources_viewable, with_lag
from kb.library.viewer import page_of, parse_range, render_document
from kb.middleware import allow_remote_images

# --------------------------------------------------------------------------- documents


@login_required
@allow_remote_images
def document_view(request: HttpRequest, pk: int) -> HttpResponse:
    document = document_get(user=request.user, pk=pk)
    text = document.canonical_text or ""
    highlight = parse_range(request.GET.get("hl"), len(text))
    rendered = render_document(document, highlight=highlight) if document.status == Document.Status.READY else None
    return render(
        request,
        "documents/view.html",
        {
            "document": document,
            "rendered": rendered,
            "is_pdf": document.mime_type == PDF,
            "highlight": highlight,
            "highlight_page": page_of(document, highlight[0]) if highlight else None,
            "page_count": len(document.pages or []),
            "can_manage": user_can_manage_documents(request.user),
        },
    )


@login_required
@require_GET
def document_download(request: HttpRequest, pk: int) -> FileResponse:
    """The original file. PDFs may open inline (the viewer links to `#page=N`); everything
    else is an attachment with a sandboxing CSP, so an uploaded HTML file never runs here."""
    document = document_file_get(user=request.user, pk=pk)
    if not document.file:
        raise Http404("No file")
    try:
        handle = document.file.open("rb")
    except FileNotFoundError:
        raise Http404("The stored file is missing") from None
    inline = request.GET.get("inline") == "1" and document.mime_type == PDF
    response = FileResponse(
        handle,
        as_attachment=not inline,
        filename=document.filename or f"document-{document.pk}",
        content_type=document.mime_type if inline else "application/octet-stream",
    )
    # Chrome's PDF viewer is the browser's own; a page-level sandbox would block it.
    response["Content-Security-Policy"] = (
        "default-src 'none'; frame-ancestors 'none'" if inline else "sandbox; default-src 'none'; frame-ancestors 'none'"
    )
    response["Cache-Control"] = "private, no-store"
    return response


# --------------------------------------------------------------------------- library


LIBRARY_PAGE = 100  # documents per library page


@login_required
def library(request: HttpRequest) -> HttpResponse:
    query = request.GET.get("q", "")[:200]
    folder = request.GET.get("folder", "")[:20]
    manage = user_can_manage_documents(request.user)
    page = Paginator(library_documents(user=request.user, query=query, folder=folder), LIBRARY_PAGE).get_page(
        request.GET.get("page")
    )
    context: dict[str, Any] = {
        "documents": page.object_list,
        "page": page,
        "folders": library_folders(user=request.user),
        "query": query,
        "folder": folder,
        "can_manage": manage,
        # Replace file (the admin's form) beside Retry: for those who may change documents (staff rule, per document there).
        "can_replace": manage and staff_may(request.user, "kb.change_document"),
    }
    if manage:
        context.update(upload_choices(request.user))
    # Staff who may see sources (kb.view_source, their folder readable) follow their runs here too.
    context["sources"] = list(with_lag(sources_viewable(request.user).select_related("folder")))
    return render(request, "library.html", context)


def _manager_only(request: HttpRequest) -> None:
    # Not a 403: to anyone else these endpoints do not exist.
    if not user_can_manage_documents(request.user):
        raise Http404("No such page")


@login_required
@require_POST
def library_upload(request: HttpRequest) -> JsonResponse:
    """One file per request, so the browser can show a progress bar per file."""
    _manager_only(request)
    limit = settings.KB_MAX_UPLOAD_MB * 1024 * 1024
    length = str(request.META.get("CONTENT_LENGTH") or "0")
    declared = int(length) if length.isdigit() else 0
    if declared > limit + 64 * 1024:  # refuse before Django reads the body
        return JsonResponse(
            {"error": gettext("The file is %(size)s MB; the limit is %(limit)s MB")
             % {"size": number_format(declared / 1048576, 1), "limit": settings.KB_MAX_UPLOAD_MB}}, status=413
        )
    form = UploadForm(request.POST, request.FILES)
    if not form.is_valid():
        return JsonResponse({"error": form.first_error()}, status=400)
    try:
        result = form.save(uploaded_by=request.user)
    except UploadRejected as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    rows = document_status_rows(user=request.user, ids=[result.document.pk])
    return JsonResponse(
        {
            "document": rows[0] if rows else {"type": "document", "id": result.document.pk, "status": result.document.status},
            "created": result.created,
            "queued": result.queued,
            "url": f"/documents/{result.document.pk}/",
        },
        status=201 if result.created else 200,
    )


@login_required
@require_POST
def library_retry(request: HttpRequest, pk: int) -> JsonResponse:
    _manager_only(request)
    try:
        document_retry(document=document_get_followable(user=request.user, pk=pk))
    except DocumentStateConflict as exc:
        return JsonResponse({"error": str(exc)}, status=409)
    return JsonResponse({"document": document_status_rows(user=request.user, ids=[pk])[0]})
