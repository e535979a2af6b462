"""Our encoder (plain PyTorch and `tokenizers`) gives sentence-transformers' vectors bit for bit.

Indexes built with either must stay comparable, and `evaluate --answers` must not move: every function of
kb.text.embedding is compared with what sentence-transformers computes for the same texts
(passages of the demo corpus in several batches, a text past the model's window, non-Latin text, an empty
one), in fp32 and under bf16 autocast, and the traced question encoder with transformers' own traced.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from django.test import override_settings

from kb.text import embedding
from kb.text.encoder import Encoder

CORPUS = Path(__file__).resolve().parents[2] / "demo" / "corpus"


def _texts(paragraphs: int = 90) -> list[str]:
    found = [p.strip() for path in sorted(CORPUS.rglob("*.md")) for p in path.read_text().split("\n\n")]
    texts = [p for p in found if p][:paragraphs]  # batches of uneven lengths, most of them padded
    return texts + ["", "VPN", "Zażółć gęślą jaźń — 東京の倉庫", " ".join(texts[:12])]  # the last: past 256 pieces


@pytest.fixture(scope="module")
def reference() -> Any:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(embedding.model_path()), device="cpu", local_files_only=True)


@pytest.fixture(params=["fp32", "bf16"])
def precision(request: pytest.FixtureRequest) -> Iterator[str]:
    embedding.use_bf16.cache_clear()
    with override_settings(KB_EMBEDDING_PRECISION=request.param):
        yield request.param
    embedding.use_bf16.cache_clear()


@pytest.mark.slow
def test_passage_vectors_pieces_and_ids_are_sentence_transformers_bit_for_bit(
        reference: Any, precision: str, monkeypatch: pytest.MonkeyPatch) -> None:
    bf16 = precision == "bf16"
    # Small batches: each is padded to its longest text and the longest come first, so a batch of 32 pads the
    # passages next to the 254-piece text to its length (a CPU without native bf16 emulates it ~5x slower than
    # fp32). The same cases (several batches, padding, the window, non-Latin, empty) at a fraction of the work.
    size = 2 if bf16 else 8
    monkeypatch.setattr(embedding, "BATCH_SIZE", size)
    texts = _texts(paragraphs=6 if bf16 else 40)
    with torch.autocast("cpu", dtype=torch.bfloat16 if bf16 else torch.float32, enabled=bf16):
        expected = reference.encode(texts, batch_size=size, normalize_embeddings=True, convert_to_numpy=True,
                                    show_progress_bar=False)
        outputs = reference.encode(texts, batch_size=size, output_value=None, show_progress_bar=False)
    vectors, pieces, ids = embedding.embed_with_pieces(texts)
    assert np.array_equal(embedding.embed(texts), expected)
    assert np.array_equal(vectors, expected)
    for out, got_pieces, got_ids, batch in zip(outputs, pieces, ids, embedding.token_vectors(texts), strict=True):
        n = int(out["attention_mask"].sum())
        assert np.array_equal(got_ids, out["input_ids"][1 : n - 1].numpy())
        unit = torch.nn.functional.normalize(out["token_embeddings"][:n].float(), dim=-1)[1:-1].numpy()
        assert np.array_equal(got_pieces, unit) and np.array_equal(batch, unit)
    assert max(len(i) for i in ids) == 254  # the long text was read to the window, as the model reads it


def test_word_pieces_and_their_spans_are_the_model_tokenizers(reference: Any) -> None:
    for text in _texts():
        assert embedding.piece_ids([text])[0] == reference.tokenizer(text, add_special_tokens=False)["input_ids"]
        offsets = reference.tokenizer(text, return_offsets_mapping=True)["offset_mapping"][1:-1]
        assert embedding.word_pieces(text) == [tuple(span) for span in offsets]


def test_the_traced_question_encoder_is_transformers_traced_bit_for_bit(reference: Any) -> None:
    class Hidden(torch.nn.Module):  # transformers' network as a function of the ids alone
        def __init__(self) -> None:
            super().__init__()
            self.transformer = reference[0].auto_model.eval()

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return self.transformer(input_ids=input_ids).last_hidden_state

    example = reference.preprocess(["an example question"])["input_ids"]
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.trace(Hidden(), example).eval()))
        for text in _texts()[::9]:
            ids = reference.preprocess([text])["input_ids"]
            assert torch.equal(embedding.query_encoder()(ids), theirs(ids))


def test_a_checkpoint_that_is_not_the_expected_network_is_refused(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "roberta"}')
    with pytest.raises(ValueError, match="not a BERT encoder"):
        Encoder.load(tmp_path)
