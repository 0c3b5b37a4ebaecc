"""The work every replay of one conversation shares: the calls before its first prune.

Until a policy first prunes, every policy feeds the model the same turns in the same
calls, so the same forced rows and log-probabilities come out.  :class:`SharedPrefix`
keeps the results of those calls and the cache they built (the cache only grows until
the first prune, so one cache holds every earlier call's state as a prefix); a later
replay takes them instead of running the model again, and a pass with other calls (the
fidelity reference) starts from the longest prefix of that cache it shares.

Cached keys and values are shared by reference, never copied, and nothing writes into
what is held here: the replay's cache layers (:mod:`.kv_buffer`) write only after the rows
they hold, into a buffer of their own (an adopted prefix is copied into a new buffer before
the first write), and a KV shift rewrites a layer's buffer in place only once no call
recorded here can hold a view of it (:meth:`.attention.ModelAttention._shift`), else it
builds new buffers.
"""

from __future__ import annotations

import numpy as np


class SharedPrefix:
    """Recorded calls of the first replay(s) of a conversation, up to the first prune."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        """Forget everything (a new conversation)."""
        self.calls: list[tuple] = []  # (signature, rows, logprobs, cache length after it)
        self.ids: list[int] = []
        self.keys: list = []
        self.layers: list[tuple] = []  # per layer (keys, values) of the longest cache seen
        self.served_tokens = 0  # forced tokens answered from here
        self.adopted_tokens = 0  # cached tokens taken instead of prefilled

    def lookup(self, index: int, signature: tuple, rows: bool = True):
        """``(rows, logprobs, cache length after it)`` of call ``index`` if it was this very
        call (and recorded its rows, if ``rows``), else None."""
        if index < len(self.calls) and self.calls[index][0] == signature:
            _, kept, logprobs, n = self.calls[index]
            if rows and kept is None:
                return None
            self.served_tokens += len(logprobs)
            return (kept.copy() if rows else None), logprobs.copy(), n
        return None

    def record(self, index: int, signature: tuple, rows: np.ndarray | None, logprobs: np.ndarray,
               ids: list[int], keys: list, layers) -> None:
        """Keep call ``index`` if it extends the recorded stretch (same calls so far and a
        cache that holds the recorded one as its prefix)."""
        if index != len(self.calls) or ids[:len(self.ids)] != self.ids or keys[:len(self.keys)] != self.keys:
            return
        self.calls.append((signature, None if rows is None else rows.copy(), logprobs.copy(), len(ids)))
        self.ids, self.keys = list(ids), list(keys)
        self.layers = [(layer.keys, layer.values) for layer in layers]

    def common(self, ids: list[int], keys: list) -> int:
        """How many leading tokens of ``ids`` / ``keys`` the recorded cache holds."""
        n = 0
        for a, b, ka, kb in zip(self.ids, ids, self.keys, keys):
            if a != b or ka != kb:
                break
            n += 1
        return n

    def adopt(self, cache, n: int) -> None:
        """Fill the empty transformers ``cache`` with the first ``n`` recorded tokens."""
        for layer, (k, v) in zip(cache.layers, self.layers):
            layer.lazy_initialization(k, v)
            layer.keys, layer.values = k[..., :n, :], v[..., :n, :]
        self.adopted_tokens += n
