"""The review queue (issue 49 item 4): queues, counts, folders and search read only the answers a reviewer may see
in full; the others are one number that no filter, folder or search term changes (real database, real retrieval,
the extractive backend)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from chat import services
from chat.models import Message, ReviewAccess, ReviewGrant
from chat.review import judgements
from chat.review.desk import QUEUES, ReviewView, review_counts, review_queue
from chat.review.feedback import feedback_add
from chat.selectors import withheld_from_reviewer
from kb.library.models import Folder
from kb.library.services import folder_set_access
from tests.chat.conftest import EXPORT_QUESTION, OOD_QUESTION, SHIPMENTS, VAULT, VAULT_QUESTION
from tests.chat.test_api import answered
from tests.factories import ingested_document

pytestmark = pytest.mark.django_db

SECRET = "ZX-4412-QUARTZ"
SURFACE = ReviewAccess.Surface.REVIEW_API


@pytest.fixture
def desk(people: dict[str, Any]) -> dict[str, Any]:
    """Shipments in the public folder Logistics, the vault in the engineering-only folder Ops; carol's answer (rated
    down), a refusal, and alice's vault answer, which sam (support) may not read."""
    logistics = Folder.objects.create(name="Logistics")
    ops = Folder.objects.create(name="Ops")
    folder_set_access(folder=logistics, public=True)
    folder_set_access(folder=ops, public=False, groups=[people["groups"]["engineering"]])
    ingested_document(SHIPMENTS, "shipments.md", folder=logistics)
    ingested_document(VAULT, "vault.md", folder=ops)
    export = answered(people["carol"], EXPORT_QUESTION)
    refusal = answered(people["carol"], OOD_QUESTION)
    vault = answered(people["alice"], VAULT_QUESTION)
    assert (export.status, refusal.status, vault.status) == ("done", "refused", "done")
    assert SECRET in vault.text and export.source_documents
    judgements.message_rate(user=people["carol"], message_id=export.pk, rating=-1, reason="off_topic",
                            comment="I asked about formats")
    return {"export": export, "refusal": refusal, "vault": vault, "logistics": logistics, "ops": ops}


def ids(views: list[ReviewView]) -> list[int]:
    return [v.answer.message.pk for v in views]


def test_the_closest_queue_holds_the_answers_labelled_closest_that_the_reviewer_sees_in_full(
        desk: dict[str, Any], people: dict[str, Any]) -> None:
    from chat.models import Message

    sam = people["sam"]
    export, vault = desk["export"], desk["vault"]
    assert review_counts(reviewer=sam).queues["closest"] == 0
    # Both labelled as a closest match (chat.match); the vault's answer draws on what sam may not read.
    Message.objects.filter(pk__in=[export.pk, vault.pk]).update(match="closest")
    counts = review_counts(reviewer=sam)
    assert counts.queues["closest"] == 1 and counts.hidden == 1
    assert ids(review_queue(reviewer=sam, queue="closest", surface=SURFACE)) == [export.pk]


def test_each_queue_lists_and_counts_only_what_the_reviewer_sees_in_full(desk: dict[str, Any],
                                                                         people: dict[str, Any]) -> None:
    sam = people["sam"]
    export, refusal = desk["export"], desk["refusal"]
    counts = review_counts(reviewer=sam)
    assert counts.queues == {"unreviewed": 2, "closest": 0, "rated_down": 1, "refused": 1, "flagged": 0, "all": 2}
    assert counts.hidden == 1
    assert ids(review_queue(reviewer=sam, queue="unreviewed", surface=SURFACE)) == [refusal.pk, export.pk]
    assert ids(review_queue(reviewer=sam, queue="rated_down", surface=SURFACE)) == [export.pk]
    assert ids(review_queue(reviewer=sam, queue="refused", surface=SURFACE)) == [refusal.pk]

    feedback_add(reviewer=sam, message=export, kind="outdated", citation_number=1, note="old")
    judgements.message_judge(judge=sam, message_id=refusal.pk, role="reviewer", kind="helpful")
    counts = review_counts(reviewer=sam)
    assert counts.queues == {"unreviewed": 1, "closest": 0, "rated_down": 1, "refused": 1, "flagged": 1, "all": 2}
    assert ids(review_queue(reviewer=sam, queue="unreviewed", surface=SURFACE)) == [export.pk]  # judged: gone
    assert ids(review_queue(reviewer=sam, queue="flagged", surface=SURFACE)) == [export.pk]
    # The asker's verdict does not take an answer out of the unreviewed queue; a reviewer's does.
    judgements.message_judge(judge=sam, message_id=export.pk, role="reviewer", kind="wrong")
    assert review_counts(reviewer=sam).queues["unreviewed"] == 0
    with pytest.raises(ValueError, match="unknown review queue 'later'"):
        review_queue(reviewer=sam, queue="later", surface=SURFACE)


def test_a_hidden_answer_is_never_a_row_and_its_count_moves_with_no_filter_folder_or_search(
    desk: dict[str, Any], people: dict[str, Any]
) -> None:
    sam, vault = people["sam"], desk["vault"]
    probes = [{}, {"search": SECRET}, {"search": "vault rotation Oslo"}, {"search": "alice"}, {"search": "nothing-like-it"},
              {"folder": desk["ops"].pk}, {"folder": desk["logistics"].pk}, {"folder": 10**9}]
    for queue in QUEUES:
        for probe in probes:
            counts = review_counts(reviewer=sam, queue=queue, **probe)
            assert counts.hidden == 1, (queue, probe)
            assert "Ops" not in [f.name for f in counts.folders]  # sam knows of no such folder
            listed = review_queue(reviewer=sam, queue=queue, limit=100, surface=SURFACE, **probe)
            assert vault.pk not in ids(listed), (queue, probe)
            assert all(SECRET not in v.answer.text for v in listed)
    # A search for the hidden answer's own words finds nothing, and no queue count moves for it.
    assert review_counts(reviewer=sam, search=SECRET).queues == dict.fromkeys(QUEUES, 0)
    assert review_counts(reviewer=sam, search="Oslo depot").queues == dict.fromkeys(QUEUES, 0)
    # alice reads the vault: for her (were she a reviewer) it is a row like any other.
    people["alice"].groups.add(people["groups"]["support"])
    alice = review_counts(reviewer=people["alice"], search=SECRET)
    assert (alice.queues["all"], alice.hidden) == (1, 0)
    assert [f.name for f in review_counts(reviewer=people["alice"], queue="all").folders] == ["Logistics", "Ops"]


def test_search_and_folder_narrow_the_queue_and_the_folders_carry_counts(desk: dict[str, Any],
                                                                          people: dict[str, Any]) -> None:
    sam, export = people["sam"], desk["export"]
    assert ids(review_queue(reviewer=sam, queue="all", search="export SHIPMENTS", surface=SURFACE)) == [export.pk]
    assert ids(review_queue(reviewer=sam, queue="all", search="swallow", surface=SURFACE)) == [desk["refusal"].pk]
    assert review_counts(reviewer=sam, search="export").queues["all"] == 1
    counts = review_counts(reviewer=sam, queue="all")
    assert [(f.id, f.name, f.count) for f in counts.folders] == [(desk["logistics"].pk, "Logistics", 1)]
    assert ids(review_queue(reviewer=sam, queue="all", folder=desk["logistics"].pk, surface=SURFACE)) == [export.pk]
    assert review_counts(reviewer=sam, folder=desk["logistics"].pk).queues["refused"] == 0


def test_the_queue_rule_is_is_withheld_answer_by_answer_with_and_without_a_grant(desk: dict[str, Any],
                                                                                 people: dict[str, Any]) -> None:
    sam = people["sam"]
    answers = list(Message.objects.filter(role=Message.Role.ASSISTANT))

    def agrees() -> None:
        listed = set(ids(review_queue(reviewer=sam, queue="all", limit=100, surface=SURFACE)))
        assert {m.pk for m in answers if not withheld_from_reviewer(m, reviewer=sam)} == listed
        assert review_counts(reviewer=sam).hidden == len(answers) - len(listed)

    agrees()
    grant = ReviewGrant.objects.create(reviewer=sam, folder=desk["ops"])
    agrees()
    assert review_counts(reviewer=sam).hidden == 0
    assert "Ops" in [f.name for f in review_counts(reviewer=sam, queue="all").folders]  # the grant names it
    grant.delete()
    ReviewGrant.objects.create(reviewer=sam, group=people["groups"]["hr"])  # covers nothing of the vault
    agrees()
    # A citation whose document is gone makes the answer unreadable to everyone, as message_views has it.
    desk["export"].citations.update(document=None)
    agrees()
    assert review_counts(reviewer=sam).hidden == 2


def test_the_api_lists_the_queue_without_withheld_rows_counts_them_and_keeps_the_old_list(
    desk: dict[str, Any], people: dict[str, Any]
) -> None:
    sam = Client()
    sam.force_login(people["sam"])
    vault = desk["vault"]
    old = sam.get("/api/review/answers", {"limit": 100}).json()
    assert [a["withheld"] for a in old if a["id"] == vault.pk] == [True]  # the contract without `queue`
    queue = sam.get("/api/review/answers", {"queue": "unreviewed"}).json()
    assert [a["id"] for a in queue] == [desk["refusal"].pk, desk["export"].pk]
    assert sam.get("/api/review/answers", {"q": SECRET}).json() == []
    counts = sam.get("/api/review/counts", {"q": SECRET, "queue": "all"})
    assert counts.status_code == 200, counts.content
    assert counts.json() == {"queues": dict.fromkeys(QUEUES, 0), "folders": [], "hidden": 1}
    counts = sam.get("/api/review/counts").json()
    assert counts["queues"]["unreviewed"] == 2 and counts["hidden"] == 1
    assert counts["folders"] == [{"id": desk["logistics"].pk, "name": "Logistics", "count": 1}]
    assert sam.get("/api/review/counts", {"queue": "later"}).status_code == 422
    alice = Client()
    alice.force_login(people["alice"])
    assert alice.get("/api/review/counts").status_code == 404  # support's pages do not exist for anyone else
    assert Client().get("/api/review/counts").status_code == 401
    schema = sam.get("/api/openapi.json").json()
    assert "/api/review/counts" in schema["paths"]


def test_a_follow_up_shows_the_question_before_it(corpus: dict[str, Any], people: dict[str, Any]) -> None:
    first = answered(people["carol"], EXPORT_QUESTION)
    asked = services.question_ask(user=people["carol"], question="And which tabs does it have?",
                                  conversation_id=first.conversation_id, enqueue=False)
    services.answer_produce(message_id=asked.answer.pk)
    sam = Client()
    sam.force_login(people["sam"])
    listed = {a["id"]: a for a in sam.get("/api/review/answers", {"queue": "all"}).json()}
    assert listed[asked.answer.pk]["follows"] == EXPORT_QUESTION
    assert listed[first.pk]["follows"] == ""


def test_paging_past_a_hidden_answer_and_its_conversation_tell_nothing_of_it(desk: dict[str, Any],
                                                                             people: dict[str, Any]) -> None:
    sam, vault = people["sam"], desk["vault"]
    newer = answered(people["carol"], EXPORT_QUESTION)  # a page read as if after an open-claims answer would hold it

    def page_after_hidden() -> list[int]:
        return ids(review_queue(reviewer=sam, queue="all", before=vault.pk, surface=SURFACE))

    plain = page_after_hidden()
    assert plain == [desk["refusal"].pk, desk["export"].pk] and newer.pk not in plain
    claim = {"start": 0, "end": 10, "sentence": SECRET, "numbers": [1], "missing": [], "verdict": "open"}
    Message.objects.filter(pk=vault.pk).update(unsupported=[claim])  # the keyset would order it first
    assert page_after_hidden() == plain
    client = Client()
    client.force_login(sam)
    conversation = client.get(f"/api/review/conversations/{vault.conversation_id}")
    assert conversation.status_code == 200 and SECRET not in conversation.content.decode()
    assert [m["withheld"] for m in conversation.json()["messages"]] == [False, True]  # the question, the answer
