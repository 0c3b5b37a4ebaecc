"""What storage's modules use of an open conversation file.

:class:`~halo_weave.store.ConversationStore` is the open file; it sits a layer above this
package and hands itself to the functions here (``store``), which read and write through
its connection and its public methods only.  :class:`StoreHandle` names that interface, so
this package needs no import of the store.
"""

from __future__ import annotations

import sqlite3
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Iterable, Protocol, Sequence

from ..conversation import Chunk, ChunkTokens, Conversation, Turn


class StoreHandle(Protocol):
    """An open conversation file, as storage's functions use it."""

    conn: sqlite3.Connection
    path: Path

    @property
    def read_only(self) -> bool:
        """Whether the file may not be written (damaged, or opened to look only)."""

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        """One transaction around the writes inside it (nested calls join it)."""

    def set_meta(self, key: str, value: Any) -> None:
        """Store one value of the file's ``meta`` table."""

    def load_chunk_tokens(self, chunk_ids: Sequence[int]) -> dict[int, ChunkTokens]:
        """The stored tokens of these chunks."""

    def save_turn(self, conv: Conversation, turn: Turn) -> None:
        """Write one turn and its chunks as the conversation holds them."""

    def save_chunks(self, conv: Conversation, chunks: Iterable[Chunk]) -> None:
        """Write these chunks' state (live, pinned, brightness, tokens when pruned)."""
