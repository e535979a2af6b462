"""Fine-tune the relevance model on pairs from `search.relevance.mine` (see MODEL_CARD.md).

    python -m search.relevance.train pairs.jsonl --out relevance.npz [--minutes 45]

Each step reads groups of (query, its section, four other sections) and minimises two losses
on them: softmax over the group (rank the answer first) plus binary cross-entropy per pair (so
a logit means the same across questions: answerability compares it between questions). Pages
whose number ends in 0 are held out and scored at the end. Runs on CPU (bf16 where the CPU has
it); stops at the end of the data or of its time budget, and writes int8 weights.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path
from typing import Any

import numpy as np

Group = dict[str, Any]  # one line of the pairs file: query, positive, negatives


def _batches(groups: list[Group], size: int) -> list[list[Group]]:
    return [groups[i:i + size] for i in range(0, len(groups), size)]


def _logits(network, groups: list[Group]):  # type: ignore[no-untyped-def]
    from search.relevance import model

    queries = [g["query"] for g in groups for _ in range(1 + len(g["negatives"]))]
    passages = [p for g in groups for p in [g["positive"], *g["negatives"]]]
    return network(**model.encode(queries, passages)).view(len(groups), -1)


def evaluate(network, groups: list[Group]) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Share of held-out groups whose answer ranks first, and AUC of answers against others."""
    import torch

    training = network.training
    network.eval()
    rows = []
    with torch.inference_mode():
        for batch in _batches(groups, 16):
            rows.append(_logits(network, batch).float().numpy())
    network.train(training)  # as it was: the loaded (cached) model must stay in eval mode
    table = np.concatenate(rows)
    positive, negative = table[:, 0], table[:, 1:].ravel()
    order = np.argsort(np.concatenate([positive, negative]))
    ranks = np.empty(len(order))
    ranks[order] = np.arange(1, len(order) + 1)
    auc = (ranks[: len(positive)].sum() - len(positive) * (len(positive) + 1) / 2) / (len(positive) * len(negative))
    return {"top1": float((table.argmax(axis=1) == 0).mean()), "auc": float(auc),
            "positive_mean": float(positive.mean()), "negative_mean": float(negative.mean())}


def main(argv: list[str] | None = None) -> int:
    import torch

    from search.relevance import model

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pairs", type=Path)
    parser.add_argument("--out", type=Path, required=True, help="the weights file (.npz) to write")
    parser.add_argument("--minutes", type=float, default=45.0)
    parser.add_argument("--batch", type=int, default=8, help="groups per step (each group is 4 pairs)")
    parser.add_argument("--lr", type=float, default=4e-5)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: the whole data)")
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    groups = [json.loads(line) for line in args.pairs.open()]
    held = [g for g in groups if g["page"] % 10 == 0]
    train = [g for g in groups if g["page"] % 10 != 0]
    rng.shuffle(train)
    rng.shuffle(held)
    held = held[:400]
    batches = _batches(train, args.batch)
    total = min(len(batches), args.steps or len(batches))
    network = model.build().train()
    optimizer = torch.optim.AdamW(network.parameters(), lr=args.lr, weight_decay=0.01)
    warmup = max(1, total // 20)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, max(0.0, (total - s) / max(1, total - warmup))))
    bf16 = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    print(f"{len(train)} training groups, {len(held)} held out, {total} steps, bf16={bf16}", flush=True)
    print("before:", evaluate(network, held[:100]), flush=True)
    started = time.monotonic()
    for step, batch in enumerate(batches[:total]):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = _logits(network, batch).float()
        labels = torch.zeros_like(logits)
        labels[:, 0] = 1.0
        loss = (torch.nn.functional.cross_entropy(logits, torch.zeros(len(batch), dtype=torch.long))
                + torch.nn.functional.binary_cross_entropy_with_logits(logits, labels))
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(network.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        elapsed = time.monotonic() - started
        if step % 50 == 0:
            print(f"step {step}/{total} loss {loss.item():.3f} {elapsed:.0f}s", flush=True)
        if elapsed > args.minutes * 60:
            print(f"time budget reached at step {step}", flush=True)
            break
    network.eval()
    print("after:", evaluate(network, held), flush=True)
    model.save(network, args.out)
    quantized = model.load(args.out)
    print("after, int8 weights:", evaluate(quantized, held), flush=True)
    print(f"wrote {args.out} ({args.out.stat().st_size / 2**20:.1f} MiB) in {time.monotonic() - started:.0f}s "
          f"({math.ceil((time.monotonic() - started) / 60)} min)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
