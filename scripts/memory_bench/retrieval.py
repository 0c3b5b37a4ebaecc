"""Question-time retrieval ideas for multi-hop and temporal questions (issue 16).

Each takes the app's search (:meth:`SemanticIndex.search`) and changes only which
matches reach the resurrection plan; the plan, the anchors and the budget stay the app's.

* ``split``: the question and its parts (split on "and", commas, semicolons) are searched
  separately and the result lists interleaved, best first, so a second hop's turn is not
  crowded out by twenty near-copies of the first.
* ``neighbours``: each match is followed by the turns just before and after it in the
  same session (a fact is often stated across a question and its answer).
"""

from __future__ import annotations

import re
from dataclasses import replace

from halo_weave.conversation import Conversation
from halo_weave.memory.resurrection import Match

VARIANTS = ("split", "neighbours", "split-neighbours")

_SPLIT = re.compile(r",|;|\band\b|\bor\b|\bthen\b", re.IGNORECASE)


def parts(question: str) -> list[str]:
    """The question's parts worth a search of their own (3+ words each), or []."""
    found = [p.strip(" ?.!") for p in _SPLIT.split(question)]
    found = [p for p in found if len(p.split()) >= 3]
    return found if len(found) > 1 else []


def interleave(lists: list[list[Match]], limit: int) -> list[Match]:
    """Round-robin over ranked lists, first occurrence of each chunk kept."""
    out: list[Match] = []
    seen: set[int] = set()
    for rank in range(max((len(x) for x in lists), default=0)):
        for found in lists:
            if rank < len(found) and found[rank].chunk_id not in seen:
                seen.add(found[rank].chunk_id)
                out.append(found[rank])
                if len(out) >= limit:
                    return out
    return out


def with_neighbours(conv: Conversation, matches: list[Match], session_of: list[int], limit: int) -> list[Match]:
    """Each match, then the first content chunk of the turns beside it in its session."""
    out: list[Match] = []
    seen: set[int] = set()

    def add(match: Match) -> None:
        if match.chunk_id not in seen:
            seen.add(match.chunk_id)
            out.append(match)

    for match in matches:
        add(match)
        for turn_id in (match.turn_id - 1, match.turn_id + 1):
            if not 0 <= turn_id < len(session_of) or session_of[turn_id] != session_of[match.turn_id]:
                continue
            content = conv.content_chunks(turn_id) if turn_id in conv.turns else []
            if content:
                c = content[0]
                add(replace(match, chunk_id=c.id, turn_id=turn_id, chunk_index=c.chunk_index,
                            role=c.role, token_count=c.token_count))
        if len(out) >= limit:
            break
    return out[:limit]


def search(variant: str, index, conv: Conversation, question: str, session_of: list[int],
           limit: int) -> list[Match]:
    """The matches ``variant`` hands to the resurrection plan."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown retrieval variant {variant!r}")
    found = index.search(question, limit)
    if variant.startswith("split"):
        found = interleave([found] + [index.search(p, limit) for p in parts(question)], limit)
    if variant.endswith("neighbours"):
        found = with_neighbours(conv, found, session_of, 2 * limit)
    return found
