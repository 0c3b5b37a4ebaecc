"""Proxy attention: a bundled model reads each finished exchange of a server that sends
no attention, and its attention stands in for the missing one.

The reader is a helper beside the user's server, never a chat server in its place: the
bundled SmolLM2 GGUF (the fastest bundled model, whatever the built-in server runs; see
:mod:`.bundled`) on the llama.cpp engine, loaded in the app's process (no port, no HTTP)
and only when a server without attention is connected.  For each finished answer
it runs the live context once, teacher-forced: the answer the *other* model wrote is fed
as if the reader had written it, and every answer token's attention row is read in
batches (:meth:`~halo_weave.server.llamacpp.cache.LlamaCache.attend_all`), which is what
a generation event would have carried.  It reads at most its own window: the system
prompt and the newest context that fits with the answer.  The KV cache keeps the
context between exchanges, so only what is new is run (and a prune is surgery).

In text mode the token table already holds SmolLM2's ids (the text-mode tokenizer), so the reader's
rows line up with the table cell for cell; a server with its own token ids
(llama-server with another model) has a different vocabulary, which the reader cannot
read: :func:`readable` says so.  The votes are applied by :mod:`halo_weave.memory.proxy`.
Qt-free; :meth:`ProxyReader.read` blocks (the app runs it on a thread).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np

#: The reader's window: the most context it reads per exchange (its cost grows with it).
READER_WINDOW = 4096
#: Room always left for the answer's rows when the context must be cut.
MIN_CONTEXT = 64


class ReaderUnavailable(RuntimeError):
    """The reader cannot run here (no llama-cpp-python, or no SmolLM2 GGUF)."""


@dataclass
class ReadResult:
    """The rows of one read and what it cost."""

    rows: np.ndarray  # float32 [answer tokens, read tokens - 1]
    context_tokens: int  # tokens before the answer that were read
    answer_tokens: int
    run_tokens: int  # tokens the model actually ran (the rest came from its cache)
    seconds: float


class ProxyReader:
    """SmolLM2 as an attention reader (see the module docstring)."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.name = "SmolLM2-135M" if "smollm2-135m" in engine.name.lower() else engine.name
        self.window = int(engine.context_size)
        self._lock = threading.Lock()
        self.reads = 0

    @classmethod
    def load(cls, window: int = READER_WINDOW, threads: int = 1) -> "ProxyReader":
        """Load SmolLM2's GGUF on llama.cpp (~0.5 s); :class:`ReaderUnavailable` if it cannot."""
        from . import bundled, loader
        from .llamacpp import bindings

        try:
            bindings.load()
            source = loader.resolve(bundled.SMOLLM2)
        except (bindings.LlamaUnavailable, loader.ModelNotFound) as exc:
            raise ReaderUnavailable(str(exc)) from exc
        if not source.gguf_file:
            raise ReaderUnavailable("the reader's model is not a GGUF file")
        from .llamacpp.engine import LlamaEngine

        # No store of pruned spans' states: the reader never brings a span back quickly
        # enough to pay for the memory (a resurrected chunk is simply run).
        engine = LlamaEngine(source.path / source.gguf_file, context_size=window, threads=threads, store_bytes=0)
        return cls(engine)

    def tokenize(self, text: str) -> list[int]:
        """The reader's token ids of ``text``, split as the token table's tokenizer splits
        text (control-token strings in it are text)."""
        return self.engine.encode(text)

    def vocab_size(self) -> int:
        return self.engine.vocab_size

    def read(self, context_ids, answer_ids) -> ReadResult:
        """Attention rows while "writing" ``answer_ids`` after ``context_ids``.

        Row *j* covers the first ``len(context_ids) + j`` tokens (the rest 0).  The caller
        keeps the total within :attr:`window` (:func:`halo_weave.memory.proxy.plan_read`).
        """
        context = [int(i) for i in context_ids]
        answer = [int(i) for i in answer_ids]
        if not context or not answer:
            raise ValueError("a read needs context and an answer")
        if len(context) + len(answer) > self.window:
            raise ValueError(f"{len(context) + len(answer)} tokens exceed the reader's window of {self.window}")
        started = time.perf_counter()
        with self._lock:
            kv = self.engine.kv
            report = kv.sync(context[:-1])
            rows = kv.attend_all(context[-1:] + answer[:-1])
            self.reads += 1
        run = (report.computed if report is not None else len(context) - 1) + len(answer)
        return ReadResult(rows, len(context), len(answer), int(run), time.perf_counter() - started)

    def close(self) -> None:
        with self._lock:
            self.engine.close()


def readable(backend) -> bool:
    """Whether the reader can read this backend's token table: its ids are the bundled
    tokenizer's (text mode), not a server vocabulary of another model."""
    caps = backend.capabilities
    return caps.attention is False and not caps.token_ids
