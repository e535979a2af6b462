"""search's part of the admin: the document list (kb.admin) names the reranker and late
interaction that queries use now, next to the index version."""

from __future__ import annotations

from kb.admin import index_note_register
from search import late, rerank

index_note_register("reranker", rerank.status)
index_note_register("late interaction", late.status)
