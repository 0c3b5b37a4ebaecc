"""The records a conversation is made of: turns, chunks and a chunk's tokens."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

#: Chunk indices of a turn's framing chunks (chat-template tokens before / after content).
PREFIX_INDEX = -1
SUFFIX_INDEX = -2


@dataclass
class Chunk:
    """A paragraph-sized unit of one turn: the unit of pruning, resurrection and search."""

    id: int
    turn_id: int
    chunk_index: int
    role: str
    start: int  # absolute position of its first token; positions are contiguous
    token_count: int = 0
    live: bool = True
    pinned: bool = False
    brightness_at_prune: int | None = None
    tool_result: bool = False
    #: ``next_position`` when it was last resurrected (None: never, in this session):
    #: oldest-first pruning counts its age from then, not from where it sits.
    resurrected_at: int | None = None
    #: The user turn whose message recalled it (:mod:`.recall`), until it is pruned.
    recalled_for: int | None = None

    @property
    def age_key(self) -> int:
        """Where it ranks among chunks by age: its start, or when it came back if later."""
        at = self.resurrected_at
        return self.start if at is None or at < self.start else at

    @property
    def key(self) -> tuple[int, int, str]:
        """Chunk identity: ``(turn_id, chunk_index, role)``."""
        return (self.turn_id, self.chunk_index, self.role)

    @property
    def framing(self) -> bool:
        return self.chunk_index < 0

    @property
    def anchor(self) -> bool:
        return self.chunk_index == 0

    @property
    def end(self) -> int:
        return self.start + self.token_count


@dataclass
class Turn:
    """One message: a role, a time, and its chunks in order (framing included)."""

    turn_id: int
    role: str
    created_at: float
    chunk_ids: list[int] = field(default_factory=list)
    complete: bool = False


@dataclass
class ChunkTokens:
    """The tokens of one chunk: ids, texts and brightness, aligned."""

    token_ids: np.ndarray
    texts: list[str]
    brightness: np.ndarray

    @property
    def text(self) -> str:
        return "".join(self.texts)


ChunkLoader = Callable[[Sequence[int]], dict[int, ChunkTokens]]
