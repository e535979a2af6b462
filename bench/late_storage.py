"""Late-interaction storage options: bytes per chunk against retrieval and answer quality (issue 30 item 1).

    .venv/bin/python bench/late_storage.py [--sets ../shared/eval demo/eval-formats] [--options stop+1bit ...]
                                           [--out DIR]

For each evaluation set, `manage.py evaluate SET --answers --reuse-index late_<set>` builds the index once
(kept as kb_eval_keep_late_<set>; later runs only query) and is the baseline: today's int8 vectors. For
each option, a copy of that database (CREATE DATABASE … TEMPLATE) has every chunk's stored word-piece
vectors replaced by what the option would give back (encoded, then decoded), written in today's int8
layout; a pruned piece is written as a zero row, which MaxSim and the sentence's pooled mean both ignore,
so search.late and chat.sentences read the option's vectors unchanged. The same evaluate command runs on
the copy, and the copy is dropped. Printed per option: the bytes the option stores per chunk (mean, max,
and for a full 254-piece chunk), the paired comparison with the baseline (R@1, R@4, MRR, needle in answer,
passage cited: wins/losses and the exact sign test; "within" when neither recall nor the needle count
drops by more than one query), and the late stage's decode + MaxSim time for 20 chunks (median over the
set's questions, load average beside it).

Options (combined with "+", e.g. stop+1bit): `int4` (4-bit codes, one float16 scale per piece), `2bit`
(four levels, one float16 scale per piece), `1bit`
(sign bits, one float16 scale per piece: the mean absolute value), `c1bit` (sign bits around the chunk's
mean piece, which is stored as int8), `stop` (drop the pieces of words with no
lexeme in PostgreSQL's English configuration: stop words and punctuation, which the query side already
weighs 0), `idfN` (keep only pieces whose word's IDF in the corpus is at least N), `capN` (keep at most N
pieces, the highest IDF first).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kb.settings")
# Timed as the processes that serve queries run (kb.runtime.launcher.query_environment): one thread.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from bench._common import DEV_DIR, load_average  # noqa: E402

SETS = [DEV_DIR, ROOT / "demo" / "eval-formats"]
OPTIONS = ["stop", "idf2", "int4", "1bit", "stop+int4", "stop+1bit", "idf2+1bit", "stop+cap64+1bit"]
FULL = 254  # word pieces of a chunk that fills the model's window
LATE_DEPTH = 20  # chunks the late stage reads per query (KB_SEARCH_LATE_DEPTH)


@dataclass(frozen=True)
class Chunk:
    id: int
    ids: list[int]
    vectors: np.ndarray  # pieces x dimensions, float32, as stored today
    idf: np.ndarray  # per piece: its word's IDF (0 for a stop word or punctuation)


# Codes: each returns the vectors given back and the bytes stored for them ------------------------


def int8(vectors: np.ndarray) -> tuple[np.ndarray, int]:
    from kb.text.pieces import pack, unpack

    data = pack(vectors)
    return unpack(data, vectors.shape[1]), len(data)


def int4(vectors: np.ndarray) -> tuple[np.ndarray, int]:
    scale = np.abs(vectors).max(axis=1, keepdims=True).astype(np.float16).astype(np.float32) / 7
    scale[scale == 0] = 1
    codes = np.clip(np.rint(vectors / scale), -7, 7)
    return (codes * scale).astype(np.float32), len(vectors) * (2 + vectors.shape[1] // 2)


def two_bit(vectors: np.ndarray) -> tuple[np.ndarray, int]:
    """Four levels per value (Lloyd-Max for a normal distribution: ±0.453σ, ±1.510σ, cut at ±0.982σ), with
    one float16 σ per piece."""
    sigma = vectors.std(axis=1, keepdims=True).astype(np.float16).astype(np.float32)
    sigma[sigma == 0] = 1
    z = np.abs(vectors) / sigma
    level = np.where(z > 0.982, 1.510, 0.453) * np.sign(vectors)
    return (level * sigma).astype(np.float32), len(vectors) * (2 + vectors.shape[1] // 4)


def one_bit(vectors: np.ndarray) -> tuple[np.ndarray, int]:
    scale = np.abs(vectors).mean(axis=1, keepdims=True).astype(np.float16).astype(np.float32)
    return (np.where(vectors >= 0, 1.0, -1.0) * scale).astype(np.float32), len(vectors) * (2 + vectors.shape[1] // 8)


def centered_bit(vectors: np.ndarray) -> tuple[np.ndarray, int]:
    """The chunk's mean piece (int8 + scale) and each piece's sign bits around it, with a float16 scale per
    piece: residual compression in ColBERTv2's manner with one centroid, the chunk's own. MiniLM's pieces
    share a large common direction, which plain sign bits spend most of their information on."""
    center, size = int8(vectors.mean(axis=0, keepdims=True))
    residual, bits = one_bit(vectors - center)
    return center + residual, size + bits


CODES: dict[str, Callable[[np.ndarray], tuple[np.ndarray, int]]] = {
    "int8": int8, "int4": int4, "2bit": two_bit, "1bit": one_bit, "c1bit": centered_bit}


def kept(chunk: Chunk, parts: Sequence[str]) -> np.ndarray:
    """Which pieces an option keeps (a boolean mask)."""
    mask = np.ones(len(chunk.ids), dtype=bool)
    for part in parts:
        if part == "stop":
            mask &= chunk.idf > 0
        elif m := re.fullmatch(r"idf([\d.]+)", part):
            mask &= chunk.idf >= float(m.group(1))
        elif m := re.fullmatch(r"cap(\d+)", part):
            cap = int(m.group(1))
            if mask.sum() > cap:
                order = np.argsort(-np.where(mask, chunk.idf, -1), kind="stable")
                mask = np.zeros_like(mask)
                mask[order[:cap]] = True
    return mask


def encode(option: str, chunk: Chunk) -> tuple[np.ndarray, int]:
    """The chunk's vectors as the option gives them back (pruned pieces as zero rows) and its stored bytes:
    a mask of one bit per piece where the option prunes, the codes of the kept pieces."""
    parts = option.split("+")
    code = CODES[next((p for p in parts if p in CODES), "int8")]
    mask = kept(chunk, [p for p in parts if p not in CODES])
    out = np.zeros_like(chunk.vectors)
    size = 0 if mask.all() else (len(mask) + 7) // 8
    if mask.any():
        out[mask], stored = code(chunk.vectors[mask])
        size += stored
    return out, size


def full_chunk_bytes(option: str, chunks: Sequence[Chunk]) -> int:
    """Bytes for a chunk of FULL pieces: the set's longest chunk's pieces repeated to that length."""
    longest = max(chunks, key=lambda c: len(c.ids))
    reps = -(-FULL // len(longest.ids))
    stretched = Chunk(-1, (longest.ids * reps)[:FULL], np.tile(longest.vectors, (reps, 1))[:FULL],
                      np.tile(longest.idf, reps)[:FULL])
    return encode(option, stretched)[1]


# The evaluation -------------------------------------------------------------------------------------


def evaluate(eval_dir: Path, name: str, out: Path) -> dict[str, Any]:
    subprocess.run([sys.executable, str(ROOT / "manage.py"), "evaluate", str(eval_dir), "--answers",
                    "--reuse-index", name, "--json", str(out)], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    report: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return report


def read_chunks(conninfo: dict[str, Any], database: str) -> list[Chunk]:
    """Every chunk's stored vectors and ids, and its pieces' word IDF as search.late weighs the query's words."""
    import psycopg
    from django.conf import settings

    from kb.text import embedding
    from kb.text.pieces import unpack, unpack_ids
    from search.stats import CHUNK_TOTAL_SQL, idf_sql

    reader = embedding.tokenizer()
    with psycopg.connect(**conninfo | {"dbname": database}) as db:
        rows = db.execute("SELECT id, late_vectors, piece_ids FROM kb_chunk WHERE late_vectors IS NOT NULL"
                          " AND piece_ids IS NOT NULL ORDER BY id", binary=True).fetchall()
        pieces = [(cid, unpack_ids(ids), unpack(data, settings.KB_EMBEDDING_DIMENSIONS)) for cid, data, ids in rows]
        words_of = [_words([reader.id_to_token(i) or "" for i in ids]) for _, ids, _ in pieces]
        vocabulary = sorted({w for words in words_of for w in words})
        found = db.execute(
            f"""SELECT q.word, coalesce(max({idf_sql(ndoc="coalesce(s.ndoc, 0)", total="n.total")}), 0)
                FROM unnest(%s::text[]) AS q(word)
                LEFT JOIN LATERAL unnest(tsvector_to_array(to_tsvector('english', q.word))) AS l(lexeme) ON true
                LEFT JOIN search_lexeme_stats s ON s.word = l.lexeme
                CROSS JOIN (SELECT greatest(coalesce({CHUNK_TOTAL_SQL}, 1), 1) AS total) n
                WHERE l.lexeme IS NOT NULL GROUP BY q.word""",  # noqa: S608 (constant SQL fragments)
            [vocabulary]).fetchall()
    idf = dict(found)
    return [Chunk(cid, ids, vectors, np.array([idf.get(w, 0.0) for w in words], dtype=np.float32))
            for (cid, ids, vectors), words in zip(pieces, words_of, strict=True)]


def _words(tokens: Sequence[str]) -> list[str]:
    """The word each piece belongs to ("##" pieces continue the one before)."""
    spans: list[list[int]] = []
    for i, token in enumerate(tokens):
        if token.startswith("##") and spans:
            spans[-1].append(i)
        else:
            spans.append([i])
    out = [""] * len(tokens)
    for span in spans:
        word = "".join(tokens[i].removeprefix("##") for i in span)
        for i in span:
            out[i] = word
    return out


def write_copy(conninfo: dict[str, Any], template: str, copy: str, option: str, chunks: Sequence[Chunk]) -> None:
    import psycopg
    from psycopg import sql

    from kb.text.pieces import pack

    with psycopg.connect(**conninfo, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(copy)))
        admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(copy), sql.Identifier(template)))
    with psycopg.connect(**conninfo | {"dbname": copy}) as db, db.cursor() as cur:
        cur.executemany("UPDATE kb_chunk SET late_vectors = %s WHERE id = %s",
                        [(pack(encode(option, c)[0]), c.id) for c in chunks])


def drop(conninfo: dict[str, Any], name: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(**conninfo, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def late_ms(option: str, chunks: Sequence[Chunk], queries: Sequence[np.ndarray]) -> tuple[float, float]:
    """Median time to decode LATE_DEPTH chunks' stored codes and score a question against them (ms), and the
    mean absolute difference of those MaxSim scores from the int8 ones."""
    rng = np.random.default_rng(7)
    encoded = {c.id: encode(option, c)[0] for c in chunks}
    baseline = {c.id: c.vectors for c in chunks}
    decoder = _decoder(option, chunks)
    times, differences = [], []
    for query in queries:
        picked = [chunks[i] for i in rng.choice(len(chunks), size=min(LATE_DEPTH, len(chunks)), replace=False)]
        started = time.perf_counter()
        scores = [float((query @ decoder(c).T).max(axis=1).mean()) for c in picked]
        times.append((time.perf_counter() - started) * 1000)
        reference = [float((query @ baseline[c.id].T).max(axis=1).mean()) for c in picked]
        check = [float((query @ encoded[c.id].T).max(axis=1).mean()) for c in picked]
        differences.append(float(np.abs(np.array(check) - np.array(reference)).mean()))
        if not np.allclose(scores, check, atol=0.02):
            raise AssertionError(f"{option}: the decoder disagrees with the simulation: {scores[:3]} {check[:3]}")
    return float(np.median(times)), float(np.mean(differences))


def _decoder(option: str, chunks: Sequence[Chunk]) -> Callable[[Chunk], np.ndarray]:
    """A decoder of the option's real stored bytes (what the late stage would run), over pre-encoded chunks."""
    from kb.text.pieces import pack, unpack

    parts = option.split("+")
    dimensions = chunks[0].vectors.shape[1]
    stored: dict[int, tuple[bytes, bytes]] = {}
    for c in chunks:
        mask = kept(c, [p for p in parts if p not in CODES])
        v = c.vectors[mask]
        if "c1bit" in parts:
            center = v.mean(axis=0, keepdims=True)
            r = v - unpack(pack(center), dimensions)
            scale = np.abs(r).mean(axis=1).astype("<f2")
            stored[c.id] = (pack(center) + scale.tobytes(), np.packbits(r >= 0, axis=1).tobytes())
        elif "1bit" in parts:
            scale = np.abs(v).mean(axis=1).astype("<f2")
            stored[c.id] = (scale.tobytes(), np.packbits(v >= 0, axis=1).tobytes())
        elif "2bit" in parts:
            sigma = v.std(axis=1).astype("<f2")
            safe = np.where(sigma == 0, 1, sigma).astype(np.float32)[:, None]
            codes2 = (np.where(v >= 0, 2, 0) + (np.abs(v) / safe > 0.982)).astype(np.uint8)
            quads = codes2.reshape(len(v), -1, 4)
            stored[c.id] = (sigma.tobytes(), (quads[..., 0] << 6 | quads[..., 1] << 4 | quads[..., 2] << 2
                                              | quads[..., 3]).astype(np.uint8).tobytes())
        elif "int4" in parts:
            scale = (np.abs(v).max(axis=1).astype("<f2").astype(np.float32) / 7)
            scale[scale == 0] = 1
            codes = (np.clip(np.rint(v / scale[:, None]), -7, 7).astype(np.int8) + 8).astype(np.uint8)
            stored[c.id] = ((scale * 7).astype("<f2").tobytes(), (codes[:, 0::2] << 4 | codes[:, 1::2]).tobytes())
        else:
            stored[c.id] = (b"", pack(v))
    signs = np.array([-1.0, 1.0], dtype=np.float32)
    levels = np.array([-0.453, -1.510, 0.453, 1.510], dtype=np.float32)  # by code: sign bit, then large bit

    def decode(c: Chunk) -> np.ndarray:
        scales, codes = stored[c.id]
        if "c1bit" in parts:
            center = unpack(scales[: 4 + dimensions], dimensions)
            s = np.frombuffer(scales[4 + dimensions :], dtype="<f2").astype(np.float32)
            bits = np.unpackbits(np.frombuffer(codes, dtype=np.uint8).reshape(len(s), -1), axis=1)
            decoded: np.ndarray = center + signs[bits] * s[:, None]
            return decoded
        if "1bit" in parts:
            s = np.frombuffer(scales, dtype="<f2").astype(np.float32)
            bits = np.unpackbits(np.frombuffer(codes, dtype=np.uint8).reshape(len(s), -1), axis=1)
            return signs[bits] * s[:, None]
        if "2bit" in parts:
            s = np.frombuffer(scales, dtype="<f2").astype(np.float32)
            s[s == 0] = 1
            bytes2 = np.frombuffer(codes, dtype=np.uint8).reshape(len(s), -1, 1)
            quads = (bytes2 >> np.array([6, 4, 2, 0], dtype=np.uint8)) & 3
            decoded2: np.ndarray = levels[quads.reshape(len(s), dimensions)] * s[:, None]
            return decoded2
        if "int4" in parts:
            s = np.frombuffer(scales, dtype="<f2").astype(np.float32) / np.float32(7)
            packed = np.frombuffer(codes, dtype=np.uint8).reshape(len(s), -1)
            values = np.empty((len(s), dimensions), dtype=np.float32)
            values[:, 0::2] = (packed >> 4).astype(np.float32) - 8
            values[:, 1::2] = (packed & 15).astype(np.float32) - 8
            return values * s[:, None]
        return unpack(codes, dimensions)

    return decode


def paired(base: dict[str, Any], other: dict[str, Any]) -> dict[str, tuple[float, int, int, float]]:
    """Per figure: (option's count minus the baseline's, wins, losses, sign test p) over the set's questions."""
    from lab.evaluation.metrics import sign_test

    def flags(report: dict[str, Any], figure: str) -> dict[str, float]:
        out = {}
        for r in report["records"]:
            if r["set"] != "questions":
                continue
            rank, answer = r.get("rank"), r.get("answer", {})
            out[r["id"]] = {"R@1": float(rank is not None and rank <= 1), "R@4": float(rank is not None and rank <= 4),
                            "MRR": 1 / rank if rank else 0.0, "needle": float(bool(answer.get("needle"))),
                            "cited": float(bool(answer.get("cited")))}[figure]
        return out

    result = {}
    for figure in ("R@1", "R@4", "MRR", "needle", "cited"):
        a, b = flags(other, figure), flags(base, figure)
        wins = sum(1 for k in a if a[k] > b[k] + 1e-9)
        losses = sum(1 for k in a if a[k] < b[k] - 1e-9)
        result[figure] = (round(sum(a.values()) - sum(b.values()), 3), wins, losses, sign_test(wins, losses))
    return result


def run(sets: Sequence[Path], options: Sequence[str], out: Path) -> None:
    import django

    from kb.runtime.embedded import ensure_services

    ensure_services()
    django.setup()
    from django.db import connection

    from kb.text import embedding
    from lab.evaluation.runner import _server_params, git_commit

    conninfo = {k: v for k, v in _server_params(connection.settings_dict).items() if k != "dbname"}
    conninfo["dbname"] = "postgres"
    out.mkdir(parents=True, exist_ok=True)
    print(f"# late storage, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {git_commit()}")
    for eval_dir in sets:
        tag = re.sub(r"\W", "_", eval_dir.resolve().name)
        name = f"late_{tag}"
        started = time.perf_counter()
        base = evaluate(eval_dir, name, out / f"{tag}-int8.json")
        chunks = read_chunks(conninfo, f"kb_eval_keep_{name}")
        queries = [embedding.embed_query(json.loads(line)["query"])[1]
                   for line in (eval_dir / "questions.jsonl").open(encoding="utf-8")]
        pieces = [len(c.ids) for c in chunks]
        print(f"\n## {eval_dir} ({len(chunks)} chunks, {np.mean(pieces):.0f} pieces per chunk on average, "
              f"at most {max(pieces)}; baseline run {time.perf_counter() - started:.0f} s, load {load_average()})\n")
        print("| option | bytes/chunk mean | max | full chunk | R@1 | R@4 | MRR | needle | cited | within one |"
              " late ms (20 chunks) | score diff | load |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        base_figures = {f: sum(v) for f, v in _totals(base).items()}
        n = len(_totals(base)["R@1"])
        for number, option in enumerate(["int8", *options]):
            sizes = [encode(option, c)[1] for c in chunks]
            if option == "int8":
                report = base
            else:
                copy = f"kb_eval_keep_{name}_{number}"  # evaluate takes names of up to 30 characters
                write_copy(conninfo, f"kb_eval_keep_{name}", copy, option, chunks)
                try:
                    report = evaluate(eval_dir, copy.removeprefix("kb_eval_keep_"), out / f"{tag}-{option}.json")
                finally:
                    drop(conninfo, copy)
            pairs = paired(base, report)
            within = all(pairs[f][0] >= -1 for f in ("R@1", "R@4", "needle"))
            ms, diff = late_ms(option, chunks, queries)
            cells = [f"{(base_figures[f] + pairs[f][0]) / (n if f == 'MRR' else 1):.3g} "
                     f"(+{pairs[f][1]}/−{pairs[f][2]}, p={pairs[f][3]:.2f})" for f in ("R@1", "R@4", "MRR", "needle", "cited")]
            print(f"| {option} | {np.mean(sizes):.0f} | {max(sizes)} | {full_chunk_bytes(option, chunks)} | "
                  + " | ".join(cells) + f" | {'yes' if within else 'no'} | {ms:.2f} | {diff:.4f} | {load_average()} |",
                  flush=True)


def _totals(report: dict[str, Any]) -> dict[str, list[float]]:
    rows = [r for r in report["records"] if r["set"] == "questions"]
    return {
        "R@1": [float(r.get("rank") is not None and r["rank"] <= 1) for r in rows],
        "R@4": [float(r.get("rank") is not None and r["rank"] <= 4) for r in rows],
        "MRR": [1 / r["rank"] if r.get("rank") else 0.0 for r in rows],
        "needle": [float(bool(r.get("answer", {}).get("needle"))) for r in rows],
        "cited": [float(bool(r.get("answer", {}).get("cited"))) for r in rows],
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", nargs="+", type=Path, default=SETS)
    parser.add_argument("--options", nargs="+", default=OPTIONS)
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "late_storage", help="the evaluate --json files")
    arguments = parser.parse_args()
    run(arguments.sets, arguments.options, arguments.out)
