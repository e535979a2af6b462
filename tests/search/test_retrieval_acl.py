"""Permission leaks must be zero: adversarial searches against restricted documents."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from accounts.tokens import token_create
from kb.library.models import Document, Folder
from kb.library.services import document_set_access, folder_set_access
from kb.text.identifiers import identifiers
from search.retrieval import SearchOptions, hybrid_search
from tests.factories import ingested_document

SECRET = (
    "# Vault rotation\n\n## Procedure\n\n"
    "The vault rotation code for the Oslo depot is ZX-4412-QUARTZ and it changes every ninety days. "
    "Only the on-call engineer may read it out over the phone, and never in a chat channel.\n"
)
PUBLIC = (
    "# Depot opening hours\n\n## Hours\n\n"
    "The Oslo depot opens at seven in the morning on weekdays and at nine on Saturdays. "
    "It is closed on Sundays and public holidays; deliveries wait at the gate.\n"
)
QUOTE = "The vault rotation code for the Oslo depot is ZX-4412-QUARTZ and it changes every ninety days."


@pytest.fixture
def corpus(people: dict[str, Any]) -> dict[str, Document]:
    hr = people["groups"]["hr"]
    return {
        "secret": ingested_document(SECRET, "vault.md", public=False, groups=[people["groups"]["engineering"]]),
        "public": ingested_document(PUBLIC, "hours.md"),
        "hr": ingested_document(SECRET.replace("vault", "payroll"), "payroll.md", public=False, groups=[hr]),
    }


def seen(user: Any, query: str = QUOTE) -> set[int]:
    return {hit.document_id for hit in hybrid_search(user=user, query=query).hits}


def test_exact_quote_of_a_restricted_sentence_does_not_reach_outsiders(corpus: dict[str, Document], people: dict[str, Any]) -> None:
    assert corpus["secret"].pk in seen(people["alice"])
    for outsider in ("bob", "carol", "sam"):
        found = seen(people[outsider])
        assert corpus["secret"].pk not in found and corpus["hr"].pk not in found
    assert corpus["secret"].pk not in seen(people["alice"], "ZX-4412-QUARTZ") - seen(people["alice"])


def test_identifier_search_does_not_leak(corpus: dict[str, Document], people: dict[str, Any]) -> None:
    assert identifiers("what is ZX-4412-QUARTZ?") == ["ZX-4412-QUARTZ"]
    assert corpus["secret"].pk in seen(people["dave"], "ZX-4412-QUARTZ")
    assert seen(people["carol"], "ZX-4412-QUARTZ") <= {corpus["public"].pk}


def test_removal_from_a_group_takes_effect_at_once(corpus: dict[str, Document], people: dict[str, Any]) -> None:
    alice = people["alice"]
    assert corpus["secret"].pk in seen(alice)
    alice.groups.remove(people["groups"]["engineering"])
    assert corpus["secret"].pk not in seen(alice)


def test_a_document_made_restricted_after_indexing_disappears(corpus: dict[str, Document], people: dict[str, Any]) -> None:
    carol = people["carol"]
    assert corpus["public"].pk in seen(carol, "When does the Oslo depot open?")
    document_set_access(document=corpus["public"], inherit=False, public=False, groups=[people["groups"]["finance"]])
    assert corpus["public"].pk not in seen(carol, "When does the Oslo depot open?")
    assert corpus["public"].pk in seen(people["bob"], "When does the Oslo depot open?")


def test_a_folder_made_restricted_hides_its_documents(people: dict[str, Any]) -> None:
    folder = Folder.objects.create(name="depots")
    document = ingested_document(PUBLIC, "hours.md", folder=folder)
    assert document.pk in seen(people["carol"], "Oslo depot opening hours")
    folder_set_access(folder=folder, public=False, groups=[people["groups"]["hr"]])
    assert document.pk not in seen(people["carol"], "Oslo depot opening hours")
    assert document.pk in seen(people["dave"], "Oslo depot opening hours")


def test_a_per_user_grant_reaches_only_that_user(people: dict[str, Any]) -> None:
    document = ingested_document(SECRET, "grant.md", public=False, users=[people["carol"]])
    assert document.pk in seen(people["carol"])
    assert document.pk not in seen(people["alice"])
    assert document.pk not in seen(people["bob"])


def test_superuser_sees_by_grant_only_plain_staff_does_not_see_more(corpus: dict[str, Document], people: dict[str, Any]) -> None:
    staff = people["sam"]
    staff.is_staff = True
    staff.save()
    assert corpus["secret"].pk not in seen(staff)
    # Superusers administer documents but search like everyone else: by their own grants.
    assert corpus["secret"].pk not in seen(people["admin"])
    for user in (staff, people["admin"]):  # and the search that found nothing secret finds what they may read
        assert corpus["public"].pk in seen(user, "When does the Oslo depot open?")


def test_anonymous_and_inactive_users_see_nothing(corpus: dict[str, Document], people: dict[str, Any]) -> None:
    from django.contrib.auth.models import AnonymousUser

    assert hybrid_search(user=AnonymousUser(), query=QUOTE).hits == []
    people["alice"].is_active = False
    people["alice"].save()
    assert hybrid_search(user=people["alice"], query=QUOTE).hits == []


@pytest.mark.parametrize("lists", [3, 4])
def test_every_candidate_subquery_carries_the_acl_predicate(corpus: dict[str, Document], people: dict[str, Any],
                                                             lists: int) -> None:
    """Dense, lexical and identifier lists; the multilingual dense list too once alice may read a passage in
    that space (a German one)."""
    if lists == 4:
        ingested_document("# Tresor\n\nDer Rotationscode des Tresors wird jeden Montag vom Sicherheitsteam "
                          "neu vergeben und nur mündlich weitergegeben.\n", "tresor.md")
    with CaptureQueriesContext(connection) as captured:
        hybrid_search(user=people["alice"], query="ZX-4412-QUARTZ vault rotation code")
    sql = next(q["sql"] for q in captured.captured_queries if "dense AS (" in q["sql"])
    subqueries = re.findall(r"FROM kb_chunk c(?:, anyterm a)?\s+WHERE (.*?)(?:GROUP|ORDER) BY", sql, re.S)
    assert len(subqueries) == lists
    for where in subqueries:
        principals = re.match(r"\s*c\.acl && '\{(.*?)\}'::varchar\[\]", where)
        assert principals, where
        assert set(principals.group(1).split(",")) == {"everyone", f"u:{people['alice'].pk}",
                                                        f"g:{people['groups']['engineering'].pk}"}
    # No candidate list is built without the filter, and the fused rows come only from them.
    assert sql.count("FROM kb_chunk c") == lists


def test_search_api_requires_login_or_token_and_respects_acl(corpus: dict[str, Document], people: dict[str, Any], client: Client) -> None:
    assert client.get("/api/search", {"q": QUOTE}).status_code == 401
    _, raw = token_create(user=people["bob"])
    response = client.get("/api/search", {"q": QUOTE, "k": 5}, headers={"Authorization": f"Bearer {raw}"})
    assert response.status_code == 200
    found = {h["document_id"] for h in response.json()["hits"]}
    assert corpus["public"].pk in found and corpus["secret"].pk not in found  # bob's search, without the vault
    client.force_login(people["alice"])
    body = client.get("/api/search", {"q": QUOTE, "k": 5}).json()
    top = body["hits"][0]
    assert top["document_id"] == corpus["secret"].pk and top["passed"] is True
    assert top["link"] == f"/documents/{top['document_id']}/#char={top['start']},{top['end']}"
    assert QUOTE in top["content"]


def test_unrelated_question_is_refused_with_the_reason(corpus: dict[str, Document], people: dict[str, Any]) -> None:
    result = hybrid_search(user=people["alice"], query="What is the airspeed velocity of an unladen swallow?",
                           options=SearchOptions(threshold=0.5, answerability=False))
    assert not result.answerable
    assert result.refusal_reason is not None and "above the threshold 0.500" in result.refusal_reason
    assert all(not hit.passed for hit in result.hits)


def test_a_refusal_is_offered_passages_on_its_topic_and_none_from_elsewhere(
    corpus: dict[str, Document], people: dict[str, Any], settings: Any
) -> None:
    """The Ask page offers the hits within `related_distance` beside a refusal (docs/CHAT.md)."""
    settings.KB_SEARCH_RELATED_MARGIN = 0.15
    elsewhere = hybrid_search(user=people["carol"], query="What is the airspeed velocity of an unladen swallow?")
    assert elsewhere.related_distance == pytest.approx(elsewhere.threshold + 0.15)
    assert elsewhere.nearest_distance is not None and elsewhere.nearest_distance > elsewhere.related_distance
    on_topic = hybrid_search(user=people["carol"], query="When can I pick up a parcel at the Oslo depot on a Sunday?")
    assert on_topic.hits[0].document_id == corpus["public"].pk
    assert on_topic.hits[0].distance <= on_topic.related_distance
