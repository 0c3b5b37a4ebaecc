"""Teacher forcing on the app's llama.cpp engine: one decode per turn, every row read.

The server's cache (:class:`halo_weave.server.llamacpp.cache.LlamaCache`) reads the
attention of the *last* query of a decode, which is what generation needs.  The replay
forces a whole known turn, so here one decode runs ``[last input token] + forced[:-1]``
with logits for every query and the softmax of every query read out: row ``j`` is the
attention paid while producing ``forced[j]`` and ``log p(forced[j])`` comes from the
same decode.  The cache itself is synced with the engine's own KV surgery
(:meth:`LlamaCache.sync`: a prune is ``seq_rm`` + ``seq_add``, a resurrection restores
kept cells or runs only the inserted span), so nothing before an edit is recomputed.

Each decode is the cache's own :meth:`LlamaCache.decode` (logits of every query), whose
attention hook hands over every layer's softmax; the hook sums it over heads and layers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np



@dataclass
class ForcingStats:
    """Where the model's time went (seconds and tokens)."""

    calls: int = 0
    forced_tokens: int = 0
    synced_tokens: int = 0  # tokens the sync ran (appended, inserted or re-run)
    restored_tokens: int = 0  # resurrected tokens taken from kept cells
    sync_seconds: float = 0.0
    force_seconds: float = 0.0
    by_mode: dict = field(default_factory=dict)

    def line(self) -> str:
        return (f"{self.calls} turns, {self.forced_tokens} forced + {self.synced_tokens} synced "
                f"tokens ({self.restored_tokens} restored); sync {self.sync_seconds:.0f} s, "
                f"force {self.force_seconds:.0f} s; {self.by_mode}")


@dataclass
class Forced:
    """One forced turn: attention rows and the log-probability of each forced token."""

    rows: np.ndarray  # float32 [m, n0 + m - 1], mean over layers and heads, by position
    logprobs: np.ndarray  # float64 [m]

    @property
    def nll(self) -> float:
        return float(-self.logprobs.mean())


class LlamaForcing:
    """A teacher-forcing source over a :class:`~halo_weave.server.llamacpp.LlamaEngine`."""

    mode = "llamacpp"

    def __init__(self, engine) -> None:
        self.engine = engine
        self.kv = engine.kv
        self.L = self.kv.L
        self.stats = ForcingStats()

    @classmethod
    def load(cls, context_size: int = 8192, threads: int = 1) -> "LlamaForcing":
        from halo_weave.server import bundled, loader
        from halo_weave.server.llamacpp.engine import LlamaEngine

        # SmolLM2, the proxy reader, whatever the built-in server's default is.
        source = loader.resolve(bundled.SMOLLM2)
        engine = LlamaEngine(source.path / source.gguf_file, context_size=context_size, threads=threads)
        return cls(engine)

    def tokenize(self, text: str) -> list[tuple[int, str]]:
        """``[(token_id, piece)]``; special-token strings are parsed as specials (the
        replay's framing comes through here; LoCoMo's text holds no such strings)."""
        return self.engine.tokenize(text, parse_special=True)

    def reset(self, keep_pruned: bool = True) -> None:
        """Forget the cache (a new replay); ``keep_pruned``: keep pruned spans' cells."""
        self.kv.reset()
        if hasattr(self.kv, "keep_pruned"):
            self.kv.keep_pruned = keep_pruned

    # ------------------------------------------------------------------ the call
    def sync(self, ids: Sequence[int]) -> None:
        """Make the live sequence hold exactly ``ids`` (the engine's KV surgery)."""
        t = time.perf_counter()
        report = self.kv.sync([int(i) for i in ids])
        self.stats.sync_seconds += time.perf_counter() - t
        if report is not None:
            self.stats.synced_tokens += report.computed
            self.stats.restored_tokens += report.restored
            self.stats.by_mode[report.mode] = self.stats.by_mode.get(report.mode, 0) + 1

    def force(self, input_ids: Sequence[int], forced_ids: Sequence[int], keys=None,
              rows: bool = True) -> Forced:
        """Attention rows and log-probabilities of ``forced_ids`` after ``input_ids``
        (``keys`` is not needed: the sync finds the edits from the ids); ``rows=False``:
        the log-probabilities only (rows None)."""
        want_rows = rows
        ids = [int(i) for i in input_ids]
        forced = [int(i) for i in forced_ids]
        if not ids or not forced:
            raise ValueError("teacher forcing needs at least one input and one forced token")
        self.sync(ids[:-1])
        t = time.perf_counter()
        queries = [ids[-1]] + forced[:-1]
        n0 = len(ids)
        rows = np.zeros((len(forced), n0 + len(forced) - 1), np.float32)
        logprobs = np.zeros(len(forced), np.float64)
        done = 0
        kv = self.kv
        try:
            while done < len(queries):
                part = queries[done:done + kv.n_batch]
                sums = np.zeros((len(part), kv.n_cells), np.float32)

                def add(_layer, probs, sums=sums):  # [heads, queries, cells]
                    sums[:, :probs.shape[2]] += probs.sum(axis=0)

                logits = kv.decode(part, hook=add if want_rows else None).astype(np.float64)
                # Cells to positions: the live sequence's cells in position order; cells of
                # later positions and of other sequences were masked (zero) in the softmax.
                width = len(kv.ids)
                block = sums[:, kv.cells] / (kv.n_layer * kv.n_head)
                rows[done:done + len(part), :width] = block
                targets = np.asarray(forced[done:done + len(part)])
                top = logits.max(axis=1, keepdims=True)
                lse = np.log(np.exp(logits - top).sum(axis=1)) + top[:, 0]
                logprobs[done:done + len(part)] = logits[np.arange(len(part)), targets] - lse
                done += len(part)
        except BaseException:
            kv.reset()
            raise
        # Causal rows: the query at input position p sees positions <= p only.
        self.stats.calls += 1
        self.stats.forced_tokens += len(forced)
        self.stats.force_seconds += time.perf_counter() - t
        return Forced(rows if want_rows else None, logprobs)
