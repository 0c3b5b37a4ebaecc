"""What a conversation holds of its chunks beside the token table.

The table (:mod:`.token_table`) has the live tokens' numbers; their texts are kept per
chunk here, and so are the tokens of the chunks pruned in this session, for a cheap
resurrection (chunks pruned before the conversation was opened come back through the
store instead).  A :class:`~halo_weave.conversation.Conversation` owns one
:class:`HeldTokens`; its helpers (:mod:`.turn_writer`, :mod:`.pruning`, ...) change it
only through these methods.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from .records import ChunkTokens


class HeldTokens:
    """Token texts by chunk (live chunks, and those pruned in this session) and the
    tokens of the chunks pruned in this session."""

    def __init__(self) -> None:
        self._texts: dict[int, list[str]] = {}
        self._pruned: dict[int, ChunkTokens] = {}

    # ------------------------------------------------------------------ texts
    def texts(self, chunk_id: int) -> list[str] | None:
        """The chunk's token texts (the list itself: not to be changed), or None."""
        return self._texts.get(chunk_id)

    def start(self, chunk_id: int) -> None:
        """A new chunk: no texts yet."""
        self._texts[chunk_id] = []

    def append(self, chunk_id: int, text: str) -> None:
        """One more token text at the end of a chunk (the streamed-token path)."""
        self._texts[chunk_id].append(text)

    def put(self, chunk_id: int, texts: Iterable[str]) -> None:
        """Set a chunk's texts (a copy of ``texts``)."""
        self._texts[chunk_id] = list(texts)

    def put_many(self, pairs: Iterable[tuple[int, list[str]]]) -> None:
        """Set many chunks' texts at once; the lists are taken, not copied."""
        self._texts.update(pairs)

    def join(self, kept: int, absorbed: int) -> None:
        """``absorbed``'s texts follow ``kept``'s (the two chunks were merged)."""
        self._texts[kept] = self._texts[kept] + self._texts.pop(absorbed)

    def forget(self, chunk_id: int) -> None:
        """Drop everything held of a chunk (it left the conversation)."""
        self._texts.pop(chunk_id, None)
        self._pruned.pop(chunk_id, None)

    # ------------------------------------------------------------------ pruned tokens
    def pruned(self, chunk_id: int) -> ChunkTokens | None:
        """A pruned chunk's tokens when it was pruned in this session, else None."""
        return self._pruned.get(chunk_id)

    def keep_pruned(self, chunk_id: int, token_ids: np.ndarray, brightness: np.ndarray) -> None:
        """A chunk leaves the table: keep its tokens (with its texts) for a resurrection."""
        self._pruned[chunk_id] = ChunkTokens(token_ids, self._texts[chunk_id], brightness)

    def revive(self, chunk_id: int, texts: Iterable[str]) -> None:
        """A pruned chunk is live again with ``texts``; its kept tokens are let go."""
        self._texts[chunk_id] = list(texts)
        self._pruned.pop(chunk_id, None)

    def drop_pruned(self) -> None:
        """Let go of every pruned chunk's tokens (they come back through the store)."""
        self._pruned.clear()

    # ------------------------------------------------------------------ trials
    def snapshot(self) -> tuple[dict[int, list[str]], dict[int, tuple[ChunkTokens, list[str] | None]]]:
        """Everything held, copied.  A pruned chunk's texts are the list its live texts
        were (an answer still streaming may add to it), so which ones are shared is kept
        too; token ids and brightness are never changed in place, so they are shared."""
        texts = self._texts
        pruned = {c: (tokens, None if tokens.texts is texts.get(c) else list(tokens.texts))
                  for c, tokens in self._pruned.items()}
        return {c: list(t) for c, t in texts.items()}, pruned

    def restore(self, snapshot: tuple[dict[int, list[str]], dict[int, tuple[ChunkTokens, list[str] | None]]]) -> None:
        """Hold exactly what :meth:`snapshot` saw (the snapshot stays usable)."""
        texts, pruned = snapshot
        self._texts = {c: list(t) for c, t in texts.items()}
        self._pruned = {
            c: ChunkTokens(tokens.token_ids, self._texts[c] if own is None else list(own), tokens.brightness)
            for c, (tokens, own) in pruned.items()
        }
