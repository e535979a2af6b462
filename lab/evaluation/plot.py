"""The calibration picture: where answers and out-of-domain questions sit in distance.

Left: histograms of the cosine distance of in-domain answers (the hit that holds the
needle, else the nearest hit) and of the nearest hit of out-of-domain queries. Right:
the threshold sweep, in-domain refused and out-of-domain answered ("bluffs") against
the threshold. A good threshold sits where both curves are low; the configured one is
marked on both panels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display, no GUI toolkit


def distances(records: Sequence[Mapping[str, Any]]) -> tuple[list[float], list[float]]:
    """(in-domain answer distances, OOD nearest distances) from --json query records.

    An answer's distance is that of the hit holding the needle, else of the nearest hit;
    queries with no candidate at all are left out.
    """
    answers = [r["answer_distance"] if r.get("answer_distance") is not None else r.get("nearest")
               for r in records if r["set"] == "questions"]
    ood = [r.get("nearest") for r in records if r["set"] == "ood"]
    return [d for d in answers if d is not None], [d for d in ood if d is not None]


def write_plot(path: Path, *, records: Sequence[Mapping[str, Any]], sweep: Sequence[Mapping[str, float]],
               threshold: float, title: str) -> None:
    import matplotlib.pyplot as plt

    answers, ood = distances(records)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    bins = [i / 50 for i in range(51)]
    left.hist(answers, bins=bins, alpha=0.6, label=f"in-domain answer ({len(answers)})", color="tab:blue")
    left.hist(ood, bins=bins, alpha=0.6, label=f"out-of-domain nearest ({len(ood)})", color="tab:red")
    left.axvline(threshold, color="black", linestyle="--", label=f"threshold {threshold:.3f}")
    left.set_xlabel("cosine distance")
    left.set_ylabel("queries")
    left.set_title("Distance distributions")
    left.legend(loc="upper left", fontsize="small")

    xs = [row["threshold"] for row in sweep]
    right.plot(xs, [row["in_domain_refused"] for row in sweep], label="in-domain refused", color="tab:blue")
    right.plot(xs, [row["ood_answered"] for row in sweep], label="out-of-domain answered (bluffs)", color="tab:red")
    right.axvline(threshold, color="black", linestyle="--", label=f"configured {threshold:.3f}")
    right.set_xlim(0, 1)
    right.set_ylim(-0.02, 1.02)
    right.set_xlabel("threshold (max cosine distance answered from)")
    right.set_ylabel("share of queries")
    right.set_title("Threshold sweep")
    right.legend(loc="center right", fontsize="small")

    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
