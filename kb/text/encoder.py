"""The embedding model's network, a BERT encoder, in plain PyTorch and loaded from the model's own files.

sentence-transformers and transformers cost ~5 s of imports in every process that embeds (7.1 s against
torch's 1.8 here), and a deployment or the test suite starts many such processes; the forward pass needs
only what is below. It does transformers' arithmetic op for op (its SDPA attention path), so outputs are
equal bit for bit in fp32 and under bf16 autocast (tests/kb/test_encoder.py compares them).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import Tensor, nn

UNUSED_WEIGHTS = ("pooler.", "embeddings.position_ids")  # the [CLS] pooler head; a buffer we do not keep


class Output(nn.Module):
    """A projection added back to its block's input, then layer-normed (post-norm BERT)."""

    def __init__(self, width_in: int, width: int, eps: float) -> None:
        super().__init__()
        self.dense = nn.Linear(width_in, width)
        self.LayerNorm = nn.LayerNorm(width, eps=eps)

    def forward(self, hidden: Tensor, residual: Tensor) -> Tensor:
        return self.LayerNorm(self.dense(hidden) + residual)  # type: ignore[no-any-return]


class Projections(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.query, self.key, self.value = nn.Linear(width, width), nn.Linear(width, width), nn.Linear(width, width)


class Attention(nn.Module):
    def __init__(self, width: int, eps: float) -> None:
        super().__init__()
        self.self = Projections(width)
        self.output = Output(width, width, eps)


class Intermediate(nn.Module):
    def __init__(self, width: int, inner: int) -> None:
        super().__init__()
        self.dense = nn.Linear(width, inner)


class Layer(nn.Module):
    """Self-attention, then the feed-forward block. Submodule names are the checkpoint's, so its weights
    load by name and strictly."""

    def __init__(self, width: int, heads: int, inner: int, eps: float) -> None:
        super().__init__()
        self.head_size = width // heads
        self.attention = Attention(width, eps)
        self.intermediate = Intermediate(width, inner)
        self.output = Output(inner, width, eps)

    def forward(self, hidden: Tensor, mask: Tensor | None) -> Tensor:
        shape = hidden.shape[:-1]
        q, k, v = (linear(hidden).view(*shape, -1, self.head_size).transpose(1, 2)
                   for linear in (self.attention.self.query, self.attention.self.key, self.attention.self.value))
        context = nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=0.0, scale=self.head_size**-0.5, is_causal=False)
        context = context.transpose(1, 2).contiguous().reshape(*shape, -1).contiguous()
        hidden = self.attention.output(context, hidden)
        return self.output(nn.functional.gelu(self.intermediate.dense(hidden)), hidden)  # type: ignore[no-any-return]


def _uninitialised_embedding(rows: int, width: int) -> nn.Embedding:
    """A table the checkpoint fills: a random start on the meta device would import torch._dynamo (its normal_
    runs through torch._refs), ~2.4 s of CPU in every process that loads the model."""
    return nn.Embedding(rows, width, _weight=torch.empty(rows, width))


class Embeddings(nn.Module):
    def __init__(self, vocabulary: int, positions: int, types: int, width: int, eps: float) -> None:
        super().__init__()
        self.word_embeddings = _uninitialised_embedding(vocabulary, width)
        self.position_embeddings = _uninitialised_embedding(positions, width)
        self.token_type_embeddings = _uninitialised_embedding(types, width)
        self.LayerNorm = nn.LayerNorm(width, eps=eps)

    def forward(self, input_ids: Tensor) -> Tensor:
        # Summed in transformers' order (words + types, then positions): float addition is not associative.
        hidden = self.word_embeddings(input_ids) + self.token_type_embeddings(torch.zeros_like(input_ids))
        return self.LayerNorm(hidden + self.position_embeddings.weight[: input_ids.shape[1]].unsqueeze(0))  # type: ignore[no-any-return]


class Layers(nn.Module):
    def __init__(self, layers: list[Layer]) -> None:
        super().__init__()
        self.layer = nn.ModuleList(layers)


class Encoder(nn.Module):
    """Word-piece ids (and, for a padded batch, its attention mask) to each piece's last hidden state."""

    def __init__(self, config: dict[str, int | float]) -> None:
        super().__init__()
        width, eps = int(config["hidden_size"]), float(config["layer_norm_eps"])
        self.embeddings = Embeddings(int(config["vocab_size"]), int(config["max_position_embeddings"]),
                                     int(config["type_vocab_size"]), width, eps)
        self.encoder = Layers([Layer(width, int(config["num_attention_heads"]), int(config["intermediate_size"]), eps)
                               for _ in range(int(config["num_hidden_layers"]))])
        self.width = width

    @classmethod
    def load(cls, path: Path) -> Encoder:
        """From a checkpoint folder (config.json, model.safetensors), every weight required, in eval mode."""
        config = json.loads((path / "config.json").read_text())
        if config.get("model_type") != "bert" or config.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"{path}: not a BERT encoder with absolute positions ({config.get('model_type')})")
        with torch.device("meta"):  # shapes only: initialising weights that the checkpoint replaces cost ~0.4 s
            encoder = cls(config)
        weights = {name.removeprefix("bert."): tensor for name, tensor in load_file(str(path / "model.safetensors")).items()}
        encoder.load_state_dict({k: v for k, v in weights.items() if not k.startswith(UNUSED_WEIGHTS)}, strict=True,
                                assign=True)
        return encoder.eval()

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        hidden: Tensor = self.embeddings(input_ids)
        # Attention sees no padding; a batch without any (a single text) runs unmasked, as transformers does.
        mask = None
        if attention_mask is not None and not bool(attention_mask.all()):
            length = input_ids.shape[1]
            mask = attention_mask.bool()[:, None, None, :].expand(-1, 1, length, length)
        for layer in self.encoder.layer:
            hidden = layer(hidden, mask)
        return hidden
