"""`manage.py evaluate` end to end on the demo evaluation set.

One real run (module fixture, ~30 s on 2 cores) feeds every test: the live knowledge
base (here: the test database) must be exactly as before, the outputs must have the
shapes of docs/DESIGN.md#dump-format, and a scorer written here from docs/EVALUATION.md alone, reading only the
dump, the chunks file and the set's files, must reproduce the reported numbers.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from tests.conftest import ROOT, SHARED_EVAL, manage, service_env

DEMO = ROOT / "demo" / "eval"
SHARED_SCORER = SHARED_EVAL / "score.py"
KS = (1, 4, 8, 20)

# django_db: pytest-django creates the test database only for a session with a test that asks for it.
pytestmark = [pytest.mark.slow, pytest.mark.django_db]


@dataclass
class DemoRun:
    result: subprocess.CompletedProcess[str]
    out: Path
    before: dict[str, Any]
    after: dict[str, Any]
    scratch: str | None
    scratch_left: bool

    @property
    def report(self) -> dict[str, Any]:
        return json.loads((self.out / "eval.json").read_text(encoding="utf-8"))

    def lines(self, name: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in (self.out / name).read_text(encoding="utf-8").splitlines()]


def _seed_live_knowledge_base() -> dict[str, Any]:
    """Rows that clash with the set's names (group engineering, user alice): a run here would trip on them."""
    from django.contrib.auth.models import Group, User

    from kb.library.models import Chunk, Document

    group = Group.objects.create(name="engineering")
    alice = User.objects.create_user("alice", password="live-password")
    alice.groups.set([group])
    document = Document.objects.create(title="Live handbook", filename="live.md", status=Document.Status.READY,
                                       acl=[f"g:{group.pk}"], chunk_count=1)
    Chunk.objects.create(document=document, ordinal=0, stable_id="live-0", kind="note", breadcrumb="Live handbook",
                         text="Live handbook\nLive text.", content="Live text.", start=0, end=10, tokens=8,
                         embedding=[1.0] + [0.0] * 383, acl=[f"g:{group.pk}"])
    return {"group": group, "user": alice, "document": document}


def _remove(seeded: dict[str, Any]) -> None:
    seeded["document"].delete()
    seeded["user"].delete()
    seeded["group"].delete()


def _snapshot() -> dict[str, Any]:
    from django.conf import settings
    from django.contrib.auth.models import Group, User

    from kb.library.models import Chunk, Document, Folder

    media = Path(settings.MEDIA_ROOT)
    return {
        "counts": {m.__name__: m.objects.count() for m in (Document, Chunk, User, Group, Folder)},
        "documents": list(Document.objects.order_by("pk").values_list("pk", "updated_at", "status", "acl")),
        "chunks": list(Chunk.objects.order_by("pk").values_list("pk", "document_id", "content", "acl")),
        "users": list(User.objects.order_by("pk").values_list("pk", "username", "password", "last_login")),
        "memberships": sorted(User.groups.through.objects.values_list("user_id", "group_id")),
        "groups": list(Group.objects.order_by("pk").values_list("pk", "name")),
        "media": sorted(str(p) for p in media.rglob("*")) if media.exists() else [],
    }


def _database_exists(name: str) -> bool:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
        return cursor.fetchone() is not None


@pytest.fixture(scope="module")
def demo_run(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DemoRun]:
    from django.db import connection

    out = tmp_path_factory.mktemp("evaluate")
    with django_db_blocker.unblock():
        assert connection.settings_dict["NAME"].startswith("test_"), "refusing to seed a non-test database"
        seeded = _seed_live_knowledge_base()
        try:
            before = _snapshot()
            result = manage(
                "evaluate", str(DEMO), "--dump", str(out / "raw.jsonl"), "--chunks", str(out / "chunks.jsonl"),
                "--json", str(out / "eval.json"), "--plot", str(out / "sweep.png"), "--set", "rerank=false",
                "--answers", env=service_env(), timeout=600,
            )
            after = _snapshot()
            found = re.search(r"scratch database (kb_eval_\w+)", result.stderr)
            scratch = found.group(1) if found else None
            left = bool(scratch and _database_exists(scratch))
        finally:
            _remove(seeded)
    yield DemoRun(result, out, before, after, scratch, left)


def test_evaluate_prints_the_table_and_writes_every_output(demo_run: DemoRun) -> None:
    result = demo_run.result
    assert result.returncode == 0, result.stderr[-3000:]
    for heading in ("Retrieval:", "phrasing=ticket", "intent=screen", "identifier=true", "format=.pdf",
                    "Answers destroyed", "Truncated chunks", "Intent accuracy", "out-of-domain refused",
                    "in-domain refused", "ACL cases", "Permission leaks over every query", "query p50"):
        assert heading in result.stdout
    assert (demo_run.out / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (demo_run.out / "sweep.png").stat().st_size > 10_000
    report = demo_run.report
    assert report["overrides"] == {"rerank": False} and report["options"]["rerank"] is False
    assert report["figures"]["truncated"]["count"] == 0
    assert report["figures"]["ingest"]["failed"] == []
    assert report["figures"]["leaks"]["total"] == 0 and report["figures"]["leaks"]["outside_db_acl"] == 0


def test_the_live_knowledge_base_is_untouched(demo_run: DemoRun) -> None:
    assert demo_run.result.returncode == 0, demo_run.result.stderr[-3000:]
    assert demo_run.after == demo_run.before
    assert demo_run.before["counts"]["Document"] >= 1 and demo_run.before["counts"]["User"] >= 1
    assert demo_run.scratch is not None, "the run should name its scratch database"
    assert not demo_run.scratch_left, f"{demo_run.scratch} was not dropped"


def test_dump_and_chunks_have_the_design_shapes(demo_run: DemoRun) -> None:
    dump, chunks = demo_run.lines("raw.jsonl"), demo_run.lines("chunks.jsonl")
    corpus = {p.relative_to(DEMO / "corpus").as_posix() for p in (DEMO / "corpus").rglob("*") if p.is_file()}
    acl = json.loads((DEMO / "acl.json").read_text())
    sets = [line["set"] for line in dump]
    assert (sets.count("questions"), sets.count("ood"), sets.count("acl")) == (48, 10, len(acl["cases"]))
    for line in dump:
        assert list(line) == ["id", "set", "user", "query", "intent", "refused", "hits", "answer"]
        assert line["intent"] in {"screen", "concept"} and isinstance(line["refused"], bool)
        assert [h["rank"] for h in line["hits"]] == list(range(1, len(line["hits"]) + 1))
        assert len(line["hits"]) <= 20
        for hit in line["hits"]:
            assert set(hit) - {"passed"} == {"rank", "doc", "content", "start", "end", "distance", "kind"}
            assert hit.get("passed", True) is True and hit["doc"] in corpus
        assert line["refused"] == (not any(h.get("passed") for h in line["hits"]))
    assert {line["user"] for line in dump if line["set"] == "acl"} <= set(acl["users"])
    assert {c["doc"] for c in chunks} == corpus
    for chunk in chunks:
        assert list(chunk) == ["doc", "start", "end", "kind", "tokens", "content"]
        assert chunk["end"] > chunk["start"] and chunk["content"] and chunk["tokens"] > 0


# An independent scorer, written from the set's README: it shares no code with lab.evaluation.


def _norm(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).split())


def _rescore(set_dir: Path, dump: list[dict[str, Any]], chunks: list[dict[str, Any]]) -> dict[str, Any]:
    questions = [json.loads(line) for line in (set_dir / "questions.jsonl").read_text().splitlines() if line]
    ood = [json.loads(line) for line in (set_dir / "ood.jsonl").read_text().splitlines() if line]
    acl = json.loads((set_dir / "acl.json").read_text())
    by = {(r["set"], r["id"]): r for r in dump}
    ranks = []
    for q in questions:
        texts = [_norm(h["content"]) for h in by[("questions", q["id"])]["hits"][:20]]
        ranks.append(next((i for i, t in enumerate(texts, 1) if _norm(q["needle"]) in t), None))
    every_group = set(acl["groups"].values()) | {g for gs in acl["users"].values() for g in gs}
    leaks = 0
    for record in dump:
        readable = set(acl["users"].get(record["user"], every_group)) | {"everyone"}
        leaks += sum(1 for h in record["hits"] if acl["groups"].get(h["doc"], "everyone") not in readable)
    contents = [_norm(c["content"]) for c in chunks]
    needles = {q["gt"]: _norm(q["needle"]) for q in questions}
    cases = [by[("acl", f"acl{i:02d}")] for i in range(1, len(acl["cases"]) + 1)]
    return {
        "recall": {k: sum(1 for r in ranks if r and r <= k) for k in KS},
        "n": len(questions),
        "mrr": sum(1 / r if r else 0.0 for r in ranks) / len(questions),
        "ood_refused": sum(1 for o in ood if by[("ood", o["id"])]["refused"]),
        "in_domain_refused": sum(1 for q in questions if by[("questions", q["id"])]["refused"]),
        "leaks": leaks,
        "destroyed": sorted(gt for gt, n in needles.items() if not any(n in c for c in contents)),
        "must_find": sum(1 for c, r in zip(acl["cases"], cases, strict=True)
                         if c["must_find"] and any(h["doc"] == c["must_find"] for h in r["hits"][:20])),
        "refused_when_null": sum(1 for c, r in zip(acl["cases"], cases, strict=True)
                                 if c["must_find"] is None and r["refused"]),
    }


def test_an_independent_scorer_reproduces_the_reported_numbers(demo_run: DemoRun) -> None:
    assert demo_run.result.returncode == 0, demo_run.result.stderr[-3000:]
    dump, chunks = demo_run.lines("raw.jsonl"), demo_run.lines("chunks.jsonl")
    mine = _rescore(DEMO, dump, chunks)
    figures = demo_run.report["figures"]
    overall = figures["retrieval"]["all"]
    assert {k: overall[f"R@{k}"]["count"] for k in KS} == mine["recall"]
    assert overall["MRR"] == pytest.approx(mine["mrr"], abs=1e-12)
    assert figures["refusal"]["ood_refused"]["count"] == mine["ood_refused"]
    assert figures["refusal"]["in_domain_refused"]["count"] == mine["in_domain_refused"]
    assert figures["leaks"]["total"] == mine["leaks"]
    assert figures["destroyed"]["gts"] == mine["destroyed"]
    assert figures["acl"]["must_find"]["count"] == mine["must_find"]
    assert figures["acl"]["refused_when_null"]["count"] == mine["refused_when_null"]

    # The printed table says the same, to its three decimals.
    row = next(line for line in demo_run.result.stdout.splitlines() if line.startswith("all "))
    printed = [float(x) for x in re.findall(r"(\d\.\d{3}) \[", row)] + [float(row.split()[-1])]
    assert printed == [round(mine["recall"][k] / mine["n"], 3) for k in KS] + [round(mine["mrr"], 3)]
    out_of = len(json.loads((DEMO / "acl.json").read_text())["cases"])
    assert f"out-of-domain refused   {mine['ood_refused']}/10 " in demo_run.result.stdout
    assert f"in-domain refused       {mine['in_domain_refused']}/{mine['n']} " in demo_run.result.stdout
    assert f"Permission leaks over every query: {mine['leaks']} " in demo_run.result.stdout
    assert len(figures["acl"]["cases"]) == out_of


def test_answers_are_dumped_and_an_independent_check_reproduces_their_figures(demo_run: DemoRun) -> None:
    assert demo_run.result.returncode == 0, demo_run.result.stderr[-3000:]
    dump = {(line["set"], line["id"]): line for line in demo_run.lines("raw.jsonl")}
    questions = [json.loads(line) for line in (DEMO / "questions.jsonl").read_text().splitlines() if line]
    needles = 0
    for (_, _), line in dump.items():
        answer = line["answer"]
        assert list(answer) == ["text", "refused", "citations"] and answer["text"]
        assert answer["refused"] == line["refused"]  # NO ANSWER is decided before any backend runs
        for citation in answer["citations"]:
            assert list(citation) == ["n", "doc", "start", "end"]
            assert f"[{citation['n']}]" in answer["text"]
            assert any(h["doc"] == citation["doc"] and h.get("passed") for h in line["hits"])
    for q in questions:
        answer = dump[("questions", q["id"])]["answer"]
        plain = _norm(re.sub(r"\s*\[\d+\]", "", answer["text"]))
        needles += not answer["refused"] and _norm(q["needle"]) in plain
    figures = demo_run.report["figures"]["answers"]
    assert figures["slices"]["all"]["needle"]["count"] == needles
    assert figures["backend"] == "extractive" and figures["errors"] == 0
    assert figures["supported"]["rate"] == 1.0  # extractive answers copy their sentences
    assert "Answers (extractive backend)" in demo_run.result.stdout
    records = {r["id"]: r for r in demo_run.report["records"] if r["set"] == "questions"}
    assert sum(r["answer"]["needle"] for r in records.values()) == needles


@pytest.mark.skipif(not SHARED_SCORER.exists(), reason=f"{SHARED_SCORER} is not on this machine (set KB_SHARED_EVAL)")
def test_the_shared_scorer_agrees(demo_run: DemoRun) -> None:
    spec = importlib.util.spec_from_file_location("shared_score", SHARED_SCORER)
    assert spec and spec.loader
    scorer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scorer)
    theirs, _ = scorer.score(str(DEMO), str(demo_run.out / "raw.jsonl"), str(demo_run.out / "chunks.jsonl"))
    figures = demo_run.report["figures"]
    for name, prefix in (("all", ""), ("phrasing=doc", "doc."), ("phrasing=ticket", "ticket."),
                         ("intent=screen", "screen."), ("intent=concept", "concept."), ("identifier=true", "ident.")):
        block = figures["retrieval"][name]
        for k in KS:
            assert theirs[f"{prefix}R@{k}"] == round(block[f"R@{k}"]["rate"], 4), (name, k)
            assert theirs[f"{prefix}R@{k}_ci"] == [round(x, 3) for x in block[f"R@{k}"]["ci"]], (name, k)
        assert theirs[f"{prefix}MRR"] == round(block["MRR"], 4), name
    assert theirs["in_domain_refused"] == round(figures["refusal"]["in_domain_refused"]["rate"], 4)
    assert theirs["ood_refused"] == round(figures["refusal"]["ood_refused"]["rate"], 4)
    assert theirs["intent_acc"] == round(figures["intent"]["rate"], 4)
    assert theirs["leaks"] == figures["leaks"]["acl_users"]["leaks"] == figures["leaks"]["total"]
    assert theirs["answers_destroyed"] == figures["destroyed"]["count"]
    assert theirs["truncated_reported"] == figures["truncated"]["count"]
    assert theirs["acl_must_find"] == f"{figures['acl']['must_find']['count']}/{figures['acl']['must_find']['n']}"


def _report(path: Path, ranks: dict[str, int | None], refused: dict[str, bool]) -> Path:
    records = [{"id": i, "set": "questions", "rank": r, "refusal_correct": True} for i, r in ranks.items()]
    records += [{"id": i, "set": "ood", "refused": v, "refusal_correct": v} for i, v in refused.items()]
    path.write_text(json.dumps({"format": "kb-evaluation/1", "records": records}))
    return path


def test_compare_reports_wins_losses_and_the_exact_sign_test(tmp_path: Path) -> None:
    # A finds eight answers at rank 1 that B misses; B finds two that A misses; one tie.
    a = _report(tmp_path / "a.json", {**{f"q{i}": 1 for i in range(8)}, "q8": None, "q9": None, "q10": 2},
                {"ood01": True, "ood02": True})
    b = _report(tmp_path / "b.json", {**{f"q{i}": None for i in range(8)}, "q8": 1, "q9": 3, "q10": 2},
                {"ood01": False, "ood02": True})
    out = StringIO()
    call_command("evaluate", "--compare", str(a), str(b), stdout=out)
    rows = {line.split()[0]: line.split() for line in out.getvalue().splitlines() if line.startswith("hit@")}
    # metric, A, B, A wins, B wins, ties, p
    assert rows["hit@4"][3:] == ["8", "2", "1", "0.1094"]
    assert rows["hit@1"][3:] == ["8", "1", "2", "0.03906"]  # 2 * (1 + 9) / 512
    assert "refusal correct" in out.getvalue()
    assert "11 answerable queries in both" in out.getvalue()


def test_bad_input_is_refused_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="valid keys: .*threshold"):
        call_command("evaluate", str(DEMO), "--set", "treshold=0.5")
    with pytest.raises(CommandError, match="missing questions.jsonl"):
        call_command("evaluate", str(tmp_path))
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(CommandError, match="not an `evaluate --json` file"):
        call_command("evaluate", "--compare", str(tmp_path / "x.json"), str(tmp_path / "x.json"))
