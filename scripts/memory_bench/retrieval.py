"""Question-time query building the app does not do (issue 16, idea (a)).

The retrieval ideas that won moved into the app (:mod:`halo_weave.memory.query`, behind
settings); the bench's ``recent-*`` methods set those settings on the index.  What stays
here is measured only: the query built from the question plus the recent exchange.
"""

from __future__ import annotations

from halo_weave.conversation import Conversation


def with_recent(conv: Conversation, question: str, turns: int) -> str:
    """``question`` followed by the text of the last ``turns`` turns of ``conv``."""
    recent = sorted(conv.turns)[-turns:] if turns > 0 else []
    texts = ["".join(conv.chunk_text(c.id) for c in conv.content_chunks(t)) for t in recent]
    return "\n".join([question] + [t.strip() for t in texts if t.strip()])
