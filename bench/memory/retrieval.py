"""Question-time query building the app does not do.

The retrieval ideas that won moved into the app (:mod:`halo_weave.memory.query`, behind
settings); the bench's ``recent-*`` methods set those settings on the index.  What stays
here is measured only: the query built from the question plus the recent exchange.
"""

from __future__ import annotations

import pickle
from pathlib import Path

from halo_weave.conversation import Conversation


def with_recent(conv: Conversation, question: str, turns: int) -> str:
    """``question`` followed by the text of the last ``turns`` turns of ``conv``."""
    recent = sorted(conv.turns)[-turns:] if turns > 0 else []
    texts = ["".join(conv.chunk_text(c.id) for c in conv.content_chunks(t)) for t in recent]
    return "\n".join([question] + [t.strip() for t in texts if t.strip()])


class CachedEmbedder:
    """The embedder with each text embedded once: every ``recent-*`` method searches the
    same questions, and with ``path`` (``--embed-cache``) the chunks' contexts are kept
    between runs (a pickle of text -> vector: the same text gives the same vector)."""

    def __init__(self, embedder, path: str = "") -> None:
        self._embedder = embedder
        self._path = Path(path) if path else None
        self._cache: dict[str, object] = {}
        if self._path is not None and self._path.exists():
            self._cache = pickle.loads(self._path.read_bytes())
        self._saved = len(self._cache)

    def __getattr__(self, name):
        return getattr(self._embedder, name)

    def encode(self, texts, **kwargs):
        todo = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if todo:
            self._cache.update(zip(todo, self._embedder.encode(todo, **kwargs)))
        return [self._cache[t] for t in texts]

    def save(self) -> None:
        if self._path is not None and len(self._cache) != self._saved:
            tmp = self._path.with_suffix(".tmp")
            tmp.write_bytes(pickle.dumps(self._cache))
            tmp.replace(self._path)
            self._saved = len(self._cache)
