"""Questions asked once, answered better: remembered questions and curated answers, measured (docs/LEARNING.md).

`python bench/learn_from_use.py SET [--share 0.3] [--splits 5] [--json OUT] [--reuse-index NAME]`

The set (../shared/eval's layout, each ground truth asked as a "doc" and a "ticket" phrasing) is indexed in a scratch
database, as `manage.py evaluate` indexes it. Every question is asked once with nothing learnt ("before"). Then, per
random split, a `share` of the ground truths is judged through the product's own services: a judge (one of several
people, so the per-judge cap of the memory holds) asks the doc phrasing (chat.services.question_ask and
answer_produce, as the worker does) and judges the answer as a careful reader would — "helpful" when it says the
needle, from its first citation, "should have answered" with the needle's range picked when it was refused, "wrong" with
the range picked when it quoted something else (chat.review.judgements.message_judge). Every question is asked again
("after") and the printed figures compare the two for the ticket phrasings of the judged ground truths (R@1, R@4,
needle in the answer, refused), for the ground truths left alone (R@1) and for the out-of-domain questions (refused).
The curated part does the same with curated answers: support writes the needle, cited, as the answer to the doc
phrasing (chat.review.curated.curated_create, approved) and the ticket phrasing is asked. Memory and curated answers are
emptied between splits; each figure is the mean over the splits, with the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench._common import load_average, run_in_scratch_database  # noqa: E402

SCRIPT = Path(__file__).resolve()
JUDGES = 8  # people who judge: with KB_VERDICT_MAX_JUDGE_SHARE 0.2, no one of them reaches the cap
KEYS = ("remembered_ticket_r1", "remembered_ticket_r4", "remembered_ticket_needle", "remembered_ticket_refused",
        "others_r1", "ood_refused", "in_domain_refused")
CURATED_KEYS = ("curated_ticket_needle", "curated_ticket_refused", "curated_ticket_served", "curated_others_served",
                "curated_ood_served", "ood_refused", "in_domain_refused")


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kb.settings")
    os.environ["KB_ANSWER_BACKEND"] = "extractive"
    os.environ["KB_ASKS_PER_MINUTE"] = "0"  # judges ask far faster than people
    import django

    from kb.runtime.embedded import ensure_services

    ensure_services()  # an entry point, like manage.py: the settings only read where the servers are
    django.setup()


# Inner: inside the scratch database ---------------------------------------------------------------------------


def _index(eval_set: Any, log: Callable[[str], None]) -> tuple[dict[str, Any], str]:
    """The set's people and index (built once; a kept database keeps them), the judges and a curator added."""
    from django.contrib.auth.models import Permission, User
    from django.core.management import call_command

    from lab.evaluation import runner

    call_command("migrate", interactive=False, verbosity=0)
    evaluator = runner.evaluator_name(eval_set.acl)
    existing = runner._existing_index(evaluator)
    if existing:
        log("reusing the index built by an earlier run")
        people = existing["people"]
    else:
        people = runner._create_people(eval_set, evaluator)
        runner._ingest(eval_set, log)
    groups = list(people[evaluator].groups.all())
    for name in [f"judge-{i}" for i in range(JUDGES)] + ["curator"]:
        user = User.objects.filter(username=name).first() or User.objects.create_user(name)
        user.groups.set(groups)
        people[name] = user
    people["curator"].user_permissions.add(Permission.objects.get(codename="curate_answer"))
    people["curator"] = User.objects.get(pk=people["curator"].pk)  # permissions are cached per instance
    return people, evaluator


def _needle_range(text: str, needle: str) -> tuple[int, int] | None:
    """Where the needle sentence stands in a document's canonical text, whitespace and markup spacing aside."""
    at = text.find(needle)
    if at >= 0:
        return at, at + len(needle)
    words = needle.split()
    found = re.search(r"\s+".join(re.escape(w) for w in words), text) if words else None
    return found.span() if found else None


def _located(eval_set: Any) -> dict[str, tuple[int, int, int]]:
    """Each ground truth's needle as (document id, start, end) in the index, where it can be found."""
    from kb.library.models import Chunk, Document
    from lab.evaluation import metrics, runner

    by_path = {path: pk for pk, path in runner._doc_paths().items()}
    texts = dict(Document.objects.values_list("pk", "canonical_text"))
    located = {}
    for q in eval_set.questions:
        gt, doc = str(q.get("gt") or q["id"]), by_path.get(q.get("doc", ""))
        if gt in located or doc is None:
            continue
        span = _needle_range(texts[doc], q["needle"])
        if span is None:  # the whole passage that holds it, as a judge who cannot select across markup would
            chunk = next((c for c in Chunk.objects.filter(document_id=doc).order_by("ordinal")
                          if metrics.holds(c.content, q["needle"])), None)
            span = (chunk.start, chunk.end) if chunk else None
        if span:
            located[gt] = (doc, *span)
    return located


def _ask_all(questions: Sequence[Mapping[str, Any]], user: Any, *, answer: set[str],
             paths: Mapping[int, str]) -> dict[str, dict[str, Any]]:
    """Each question searched as `user` (hybrid_search) and, for the ids in `answer`, answered from that search as
    /api/ask answers (chat.answering): rank of the needle, refused, needle in the answer, curated or not."""
    from lab.evaluation import answers, metrics
    from search.retrieval import hybrid_search

    backend = answers.answerer(None)
    out = {}
    for q in questions:
        began = time.perf_counter()
        result = hybrid_search(user=user, query=q["query"])
        record: dict[str, Any] = {"refused": not result.answerable}
        if q.get("needle"):
            record["rank"] = metrics.first_hit_rank([h.content for h in result.hits], q["needle"])
        if q["id"] in answer:
            given = backend.answer(user=user, query=q["query"], result=result, started=began, paths=paths)
            record["refused"] = bool(given["refused"])
            record["curated"] = given.get("match") == "curated"
            record["needle"] = bool(q.get("needle")) and answers.holds_needle(given["text"], q["needle"])
        out[q["id"]] = record
    return out


def _judge(gt_questions: Sequence[Mapping[str, Any]], located: Mapping[str, tuple[int, int, int]],
           judges: Sequence[Any]) -> dict[str, int]:
    """Each doc phrasing asked by a judge through the product and judged as a careful reader would."""
    from chat.models import Judgement, Message
    from chat.review.judgements import message_judge
    from chat.services import answer_produce, question_ask
    from lab.evaluation import answers, metrics

    kinds: dict[str, int] = {}
    for i, q in enumerate(gt_questions):
        gt = str(q.get("gt") or q["id"])
        judge = judges[i % len(judges)]
        asked = question_ask(user=judge, question=q["query"], enqueue=False)
        answer_produce(message_id=asked.answer.pk)
        message = Message.objects.get(pk=asked.answer.pk)
        first = _first_citation(message)
        if (message.status == Message.Status.DONE and first is not None and metrics.holds(first.quote, q["needle"])
                and answers.holds_needle(message.text, q["needle"])):
            kind, picked = Judgement.Kind.HELPFUL, None
        elif gt in located:
            kind = Judgement.Kind.SHOULD_ANSWER if message.refused else Judgement.Kind.WRONG
            picked = located[gt]
        else:
            kinds["unlocated"] = kinds.get("unlocated", 0) + 1
            continue
        document, start, end = picked if picked else (None, None, None)
        message_judge(judge=judge, message_id=message.pk, role=Judgement.Role.ASKER, kind=kind, document_id=document,
                      start=start, end=end)
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


def _first_citation(message: Any) -> Any:
    """The citation of the answer's first [n] marker."""
    found = re.search(r"\[(\d{1,3})\]", message.text or "")
    return message.citations.filter(number=int(found.group(1))).first() if found else None


def _curate(gt_questions: Sequence[Mapping[str, Any]], located: Mapping[str, tuple[int, int, int]],
            curator: Any) -> int:
    """Support answers each doc phrasing once: the needle's sentence, cited, approved."""
    from chat.review.curated import curated_create
    from kb.library.models import Document

    made = 0
    for q in gt_questions:
        where = located.get(str(q.get("gt") or q["id"]))
        if where is None:
            continue
        text = Document.objects.get(pk=where[0]).canonical_text[where[1]:where[2]]
        curated_create(author=curator, text=f"{' '.join(text.split())} [1]", questions=[q["query"]],
                       citations=[where], approve=True)
        made += 1
    return made


def _forget_everything(people: Mapping[str, Any]) -> None:
    from chat.models import Conversation, CuratedAnswer
    from search.models import RememberedQuestion

    RememberedQuestion.objects.all().delete()
    CuratedAnswer.objects.all().delete()
    Conversation.objects.filter(owner__in=[p for name, p in people.items() if name.startswith("judge-")]).delete()


def _share(records: Mapping[str, Mapping[str, Any]], ids: Iterable[str], test: Callable[[Mapping[str, Any]], bool]) -> float:
    chosen = [records[i] for i in ids if i in records]
    return float(np.mean([test(r) for r in chosen])) if chosen else float("nan")


def _figures(records: Mapping[str, Mapping[str, Any]], *, tickets: list[str], others: list[str], ood: list[str],
             in_domain: list[str]) -> dict[str, float]:
    def rank_within(k: int) -> Callable[[Mapping[str, Any]], bool]:
        return lambda r: r.get("rank") is not None and r["rank"] <= k

    return {
        "remembered_ticket_r1": _share(records, tickets, rank_within(1)),
        "remembered_ticket_r4": _share(records, tickets, rank_within(4)),
        "remembered_ticket_needle": _share(records, tickets, lambda r: bool(r.get("needle"))),
        "remembered_ticket_refused": _share(records, tickets, lambda r: bool(r["refused"])),
        "others_r1": _share(records, others, rank_within(1)),
        "others_r1_count": float(sum(rank_within(1)(records[i]) for i in others if i in records)),
        "ood_refused": _share(records, ood, lambda r: bool(r["refused"])),
        "in_domain_refused": _share(records, in_domain, lambda r: bool(r["refused"])),
        "curated_ticket_needle": _share(records, tickets, lambda r: bool(r.get("needle"))),
        "curated_ticket_refused": _share(records, tickets, lambda r: bool(r["refused"])),
        "curated_ticket_served": _share(records, tickets, lambda r: bool(r.get("curated"))),
        "curated_others_served": _share(records, others, lambda r: bool(r.get("curated"))),
        "curated_ood_served": _share(records, ood, lambda r: bool(r.get("curated"))),
    }


def run_inner(eval_dir: Path, *, share: float, splits: int) -> dict[str, Any]:
    from lab.evaluation import runner

    def log(line: str) -> None:
        print(f"  {line}", file=sys.stderr, flush=True)

    eval_set = runner.load_set(eval_dir)
    people, evaluator = _index(eval_set, log)
    paths = runner._doc_paths()
    located = _located(eval_set)
    asker, judges = people[evaluator], [people[f"judge-{i}"] for i in range(JUDGES)]
    by_gt: dict[str, dict[str, Mapping[str, Any]]] = {}
    for q in eval_set.questions:
        by_gt.setdefault(str(q.get("gt") or q["id"]), {})[q.get("phrasing", "doc")] = q
    gts = sorted(g for g, phrasings in by_gt.items() if {"doc", "ticket"} <= set(phrasings))
    everything = [*eval_set.questions, *eval_set.ood]
    in_domain = [q["id"] for q in eval_set.questions]
    ood = [q["id"] for q in eval_set.ood]
    tickets_all = {by_gt[g]["ticket"]["id"] for g in gts}
    answered = tickets_all | set(ood) | set(in_domain)

    _forget_everything(people)
    started = time.perf_counter()
    before = _ask_all(everything, asker, answer=answered, paths=paths)
    log(f"before: {len(before)} questions in {time.perf_counter() - started:.0f} s")
    result: dict[str, Any] = {"set": str(eval_dir), "share": share, "splits": [], "located": len(located),
                              "ground_truths": len(gts)}
    for seed in range(splits):
        rng = np.random.default_rng(seed)
        picked = [gts[i] for i in rng.permutation(len(gts))[: round(share * len(gts))]]
        tickets = [by_gt[g]["ticket"]["id"] for g in picked]
        others = [q["id"] for g in gts if g not in picked for q in by_gt[g].values()]
        split: dict[str, Any] = {"seed": seed, "judged": len(picked)}
        for mode in ("remembered", "curated"):
            _forget_everything(people)
            began = time.perf_counter()
            if mode == "remembered":
                split["verdicts"] = _judge([by_gt[g]["doc"] for g in picked], located, judges)
            else:
                split["curated"] = _curate([by_gt[g]["doc"] for g in picked], located, people["curator"])
            after = _ask_all(everything, asker, answer=answered, paths=paths)
            shape = {"tickets": tickets, "others": others, "ood": ood, "in_domain": in_domain}
            split[mode] = {"before": _figures(before, **shape), "after": _figures(after, **shape),
                           "seconds": time.perf_counter() - began}
            log(f"split {seed} {mode}: {time.perf_counter() - began:.0f} s")
        result["splits"].append(split)
    _forget_everything(people)
    result["load"] = load_average()
    return result


# Outer: the report --------------------------------------------------------------------------------------------


def summary(result: Mapping[str, Any]) -> dict[str, float]:
    """The --json figures: each key's mean over the splits, before and after."""
    out: dict[str, float] = {}
    for mode, keys in (("remembered", KEYS), ("curated", CURATED_KEYS)):
        for key in keys:
            name = key if key.startswith(("remembered", "curated")) or mode == "remembered" else f"curated_{key}"
            for when in ("before", "after"):
                out[f"{name}_{when}"] = float(np.mean([s[mode][when][key] for s in result["splits"]]))
    out["others_r1_lost_max"] = float(max(s["remembered"]["before"]["others_r1_count"]
                                          - s["remembered"]["after"]["others_r1_count"] for s in result["splits"]))
    return out


def report(result: Mapping[str, Any]) -> list[str]:
    figures = summary(result)
    lines = [f"## {result['set']}: verdicts on {result['share']:.0%} of {result['ground_truths']} ground truths, "
             f"{len(result['splits'])} splits (load {result['load']})", "",
             "| remembered questions | before | after |", "| --- | --- | --- |"]
    for key in KEYS:
        lines.append(f"| {key} | {figures[f'{key}_before']:.3f} | {figures[f'{key}_after']:.3f} |")
    lines.append(f"| others R@1 lost, worst split (questions) | | {figures['others_r1_lost_max']:.0f} |")
    lines += ["", "| curated answers | before | after |", "| --- | --- | --- |"]
    for key in CURATED_KEYS:
        name = key if key.startswith("curated") else f"curated_{key}"
        lines.append(f"| {name} | {figures[f'{name}_before']:.3f} | {figures[f'{name}_after']:.3f} |")
    lines += ["", "| split | judged | verdicts | remembered ticket R@1 after | needle after | curated served |",
              "| --- | --- | --- | --- | --- | --- |"]
    for s in result["splits"]:
        verdicts = ", ".join(f"{k} {v}" for k, v in sorted(s["verdicts"].items()))
        lines.append(f"| {s['seed']} | {s['judged']} | {verdicts} | {s['remembered']['after']['remembered_ticket_r1']:.3f} "
                     f"| {s['remembered']['after']['remembered_ticket_needle']:.3f} "
                     f"| {s['curated']['after']['curated_ticket_served']:.3f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("eval_dir", type=Path, help="an evaluation set (../shared/eval's layout)")
    parser.add_argument("--share", type=float, default=0.3, help="share of the ground truths judged per split")
    parser.add_argument("--splits", type=int, default=5, help="random splits (seeds 0..n-1)")
    parser.add_argument("--json", type=Path, help="write the figures (means over splits) and every split here")
    parser.add_argument("--reuse-index", metavar="NAME",
                        help="keep the scratch database as kb_eval_keep_NAME and reuse its index next time")
    parser.add_argument("--inner", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not 0 < args.share < 1 or args.splits < 1:
        parser.error("--share must be between 0 and 1 and --splits at least 1")
    if args.reuse_index and not re.fullmatch(r"[a-z0-9_]{1,30}", args.reuse_index):
        parser.error("--reuse-index: use 1-30 lower-case letters, digits or _")
    _setup()
    if args.inner:
        result = run_inner(args.eval_dir.resolve(), share=args.share, splits=args.splits)
        args.inner.write_text(json.dumps(result))
        return
    result = run_in_scratch_database(SCRIPT, [str(args.eval_dir.resolve()), "--share", str(args.share),
                                              "--splits", str(args.splits)], keep=args.reuse_index)
    for line in report(result):
        print(line)
    if args.json:
        args.json.write_text(json.dumps({**summary(result), "load": result["load"], "splits": result["splits"]},
                                        indent=2))


if __name__ == "__main__":
    main()
