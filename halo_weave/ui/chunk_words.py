"""How the window names a paragraph (a chunk) to the user, the same everywhere: the
graveyard's rows, the heatmap's context menu and tooltips, the recall links' tooltips.

"Message 12 · Assistant · paragraph 3": messages are counted from 1 in the order the chat
shows them (the branch shown), paragraphs from 1 within their message.  Internal ids
(turn id, chunk id, S-index) stay out of what the user reads.  Qt-free.
"""

from __future__ import annotations

from .heatmap_layout import ROLE_LABELS


def message_numbers(conv) -> dict[int, int]:
    """Turn id -> the message's number in the chat shown (1 for the first)."""
    return {turn_id: number for number, turn_id in enumerate(conv.turns, 1)}


def chunk_title(number: int | None, role: str, chunk_index: int, tool_result: bool = False) -> str:
    """"Message 12 · Assistant · paragraph 3" (``number`` None: "Message ?")."""
    who = "tool result" if tool_result else ROLE_LABELS.get(role, role.title())
    return f"Message {number if number else '?'} · {who} · paragraph {chunk_index + 1}"


def title_of(conv, chunk) -> str:
    """:func:`chunk_title` of a chunk of ``conv``."""
    number = next((n for n, t in enumerate(conv.turns, 1) if t == chunk.turn_id), None)
    return chunk_title(number, chunk.role, chunk.chunk_index, bool(getattr(chunk, "tool_result", False)))
