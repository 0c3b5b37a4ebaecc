"""Recall, the window's part (with :mod:`.heatmap_recall`): the line under a user message
that says what it recalled.

"Recalled for this message: 3 chunks: “My cat is called Mochi…” · “I fly to Lisbon on…” ·
“My sister Ana is…”": each quoted piece is the first words of a chunk the message's
search brought back, a link the heatmap jumps to it by (one pruned since says so, and
its link shows it in the graveyard: "(back in the graveyard)"; when all are, the line says
it once); past
:data:`SHOWN` chunks a last link, "+ 22 more", lists the rest.  Qt-free: the heatmap's
document plan lays it out (:mod:`.heatmap_layout`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..conversation import Conversation

#: Chunks listed by their first words before "+ N more".
SHOWN = 6
#: The first words of a chunk: at most this many words, and this many characters.
FIRST_WORDS = 6
FIRST_CHARS = 36
#: The chunk id of the "+ N more" link.
MORE = -1
#: Joins the words of one link, so that a line wraps between links, not inside one.
NBSP = "\u00a0"
#: After a link whose chunk was pruned again since the message recalled it.
BACK = f"{NBSP}(back{NBSP}in{NBSP}the{NBSP}graveyard)"
#: After the count when every chunk the message recalled was pruned again since.
ALL_BACK = " — since pruned again, all back in the graveyard (a click shows one there)"


@dataclass(frozen=True)
class Link:
    """A clickable part of the line: ``[start, end)`` in the line's text (UTF-16 units
    from its start, as Qt counts), and the chunk it shows (:data:`MORE`: the rest of the list)."""

    start: int
    end: int
    chunk_id: int


def first_words(text: str, words: int = FIRST_WORDS, chars: int = FIRST_CHARS) -> str:
    """The opening words of ``text`` on one line, "…" where it goes on."""
    parts = text.split()
    head = " ".join(parts[:words])
    cut = len(parts) > words
    if len(head) > chars:
        head = head[:chars].rsplit(" ", 1)[0] if " " in head[:chars] else head[:chars]
        cut = True
    return head + ("…" if cut else "")


def count_words(count: int) -> str:
    return f"{count:,} chunk{'s' if count != 1 else ''}"


def recall_line(conv: Conversation, turn_id: int, expanded: bool = False) -> tuple[str, list[Link]]:
    """The line for the message ``turn_id`` and its links; ``("", [])`` when it recalled
    nothing that still exists."""
    ids = [c for c in conv.recalls.of(turn_id) if c in conv.chunks]
    if not ids:
        return "", []
    all_pruned = not any(conv.chunks[c].live for c in ids)
    text = f"Recalled for this message: {count_words(len(ids))}{ALL_BACK if all_pruned else ''}: "
    links: list[Link] = []
    shown = ids if expanded or len(ids) <= SHOWN + 1 else ids[:SHOWN]
    for i, chunk_id in enumerate(shown):
        if i:
            text += " · "
        try:
            words = first_words(conv.chunk_text(chunk_id))
        except Exception:  # noqa: BLE001 - a line under a message is never worth an error dialog
            words = f"chunk {chunk_id}"
        piece = f"“{words}”".replace(" ", NBSP)
        links.append(Link(_units(text), _units(text) + _units(piece), chunk_id))
        text += piece
        if not (all_pruned or conv.chunks[chunk_id].live):
            text += BACK
    if len(shown) < len(ids):
        piece = f"+{NBSP}{len(ids) - len(shown):,}{NBSP}more"
        text += " · "
        links.append(Link(_units(text), _units(text) + _units(piece), MORE))
        text += piece
    return text, links


def _units(text: str) -> int:
    """Length in UTF-16 code units (the quotes and "…" are one each)."""
    return len(text.encode("utf-16-le")) // 2
