"""What the heatmap says about a chunk or a message: its tooltip, the message under a
point, the branch arrows of a message header, and the context menu (pin, merge, prune,
copy; edit a message, regenerate an answer, switch branches).  The menu only emits the
view's signals; the controller acts on them."""

from __future__ import annotations

import bisect
import time

from PySide6.QtCore import QPoint, QPointF
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QMenu

from ..conversation import Chunk, Conversation
from ..core.pruning import recent_chunks
from ..rules import prune_order
from ..settings import choice_words
from . import colors
from .chunk_words import title_of
from .heatmap_frame import character_at, region_of
from .recall_line import MORE


class ChunkTips:
    """The chunks' tooltips.  Owns the scoring note: what colours the chunks and decides
    pruning, in a few words (the window sets it), the last line of every tooltip."""

    def __init__(self, view) -> None:
        self._view = view
        self._note = ""

    @property
    def note(self) -> str:
        """The rule in use in a few words: the last line of every chunk's tooltip."""
        return self._note

    def set_note(self, note: str) -> None:
        """Say ``note`` (the rule in use) in the chunks' tooltips."""
        self._note = note

    def for_chunk(self, chunk_id: int) -> str:
        """Turn, role, chunk id, token count and score of a chunk, and :attr:`note`."""
        return tooltip(self._view.conversation(), chunk_id, self._note)


def tooltip(conv: Conversation | None, chunk_id: int, scoring: str = "") -> str:
    """Message number, role, paragraph, token count and the score pruning ranks the chunk by (named
    after the settings' ``chunk_rank``), whether the recent window shelters it, and
    ``scoring`` (what colours it and decides pruning) as the last line."""
    chunk = conv.chunks.get(chunk_id) if conv else None
    if chunk is None:
        return ""
    anchor = " (the message's opening: it leaves and comes back with its exchange)" if chunk.anchor else ""
    s = conv.settings
    order = prune_order(s.pruning.prune_order)
    lines = [
        title_of(conv, chunk) + anchor,
        f"{chunk.token_count:,} tokens · {choice_words(s, 'chunk_rank')} brightness {conv.chunk_peak(chunk_id):,}",
    ]
    if chunk.recalled_for is not None:
        lines.append(f"recalled for {_message_words(conv, chunk.recalled_for)} (violet bar): "
                     "marked until it is pruned")
    if chunk.pinned:
        lines.append(colors.emoji_or(QGuiApplication.font(), "📌 ", "") + "pinned: never pruned")
    elif order.note:
        lines.append(order.note)
    elif order.needs_brightness and chunk.live and chunk.id in recent_chunks(conv, conv.table.chunk_spans()[0]):
        lines.append(f"in the newest {s.pruning.prune_keep_recent:,} tokens: pruned last")
    if scoring:
        lines.append(scoring)
    return "\n".join(lines)


def link_tooltip(conv: Conversation | None, turn_id: int, chunk_id: int) -> str:
    """What a click on a recall link of the message ``turn_id`` does."""
    chunk = conv.chunks.get(chunk_id) if conv else None
    if chunk_id == MORE:
        return "Show every chunk this message recalled"
    if chunk is None:
        return ""
    where = title_of(conv, chunk)
    if chunk.live:
        return f"Show it in the context ({where})"
    return f"Pruned since: show it in the graveyard ({where})"


def _message_words(conv: Conversation, turn_id: int) -> str:
    """"your message of 14:32 (turn 12)"."""
    turn = conv.turns.get(turn_id)
    if turn is None:
        return f"turn {turn_id}"
    return f"your message of {time.strftime('%H:%M', time.localtime(turn.created_at))} (turn {turn_id})"


def turn_at(view, plan, point: QPoint | QPointF) -> int | None:
    """The turn (message) under a viewport point of ``view`` showing ``plan``, its label
    line included; None elsewhere."""
    conv = view.conversation()
    if conv is None or not plan.region_start:
        return None
    position = view.cursorForPosition(QPoint(int(point.x()), int(point.y()))).position()
    i = bisect.bisect_right(plan.region_start, position) - 1
    turn_id = plan.region_turn[i] if i >= 0 else -1
    return turn_id if turn_id >= 0 and turn_id in conv.turns else None


def branch_link_at(view, plan, point: QPoint | QPointF) -> tuple[int, int] | None:
    """(turn id, step) of the "‹" or "›" of a branch mark under a viewport point, or None."""
    if not plan.branch_links:
        return None
    found = character_at(view, QPoint(int(point.x()), int(point.y())))
    if found is None or region_of(plan, found[0].position())[0] != "header":
        return None
    return next(((t, step) for a, b, t, step in plan.branch_links if a <= found[1] < b), None)


def branch_tooltip(plan, turn_id: int, step: int) -> str:
    number, count = plan.branch_marks.get(turn_id, (0, 0))
    return (f"Show branch {number + step} of {count} from here (this message and everything after "
            "it; the branch shown now is kept)")


def message_text(conv: Conversation, turn_id: int) -> str:
    """A message's text as shown: its live chunks, without the chat template."""
    return "".join(conv.chunk_text(c.id) for c in conv.content_chunks(turn_id) if c.live)


def in_open_turn(conv: Conversation | None, chunk: Chunk) -> bool:
    turn = conv.open_turn if conv else None
    return turn is not None and turn.turn_id == chunk.turn_id


def can_merge(conv: Conversation, chunk: Chunk) -> bool:
    """Whether "merge with next" can apply (the core has the final word)."""
    if in_open_turn(conv, chunk):
        return False
    content = conv.content_chunks(chunk.turn_id)
    index = next((i for i, c in enumerate(content) if c.id == chunk.id), None)
    if index is None or index + 1 >= len(content):
        return False
    nxt = content[index + 1]
    return nxt.live and nxt.start == chunk.end


def context_menu(view, point: QPoint | QPointF) -> QMenu:
    """The context menu of a :class:`~halo_weave.ui.heatmap.HeatmapView` at a viewport
    point (chunk actions only over a chunk)."""
    conv = view.conversation()
    menu = QMenu(view)
    chunk_id = view.finder.chunk_at(point)
    chunk = conv.chunks.get(chunk_id) if (conv and chunk_id is not None) else None
    clipboard = QGuiApplication.clipboard()
    if chunk is not None:
        title = menu.addAction(title_of(conv, chunk))
        title.setEnabled(False)
        pin = menu.addAction("Unpin" if chunk.pinned else colors.emoji_or(menu.font(), "📌 ", "") + "Pin (never prune)")
        pin.triggered.connect(lambda: view.pin_requested.emit(chunk.id, not chunk.pinned))
        merge = menu.addAction("Merge with next chunk")
        merge.setEnabled(can_merge(conv, chunk))
        merge.triggered.connect(lambda: view.merge_requested.emit(chunk.id))
        prune = menu.addAction("Prune now")
        prune.setEnabled(not in_open_turn(conv, chunk))
        prune.triggered.connect(lambda: view.prune_requested.emit(chunk.id))
        menu.addSeparator()
        copy_chunk = menu.addAction("Copy chunk text")
        copy_chunk.triggered.connect(lambda: clipboard.setText(conv.chunk_text(chunk.id)))
    turn_id = turn_at(view, view.plan, point)
    if turn_id is not None:
        role = conv.turns[turn_id].role
        words = {"user": "Copy your message", "document": "Copy the document's paragraphs shown"}
        copy_message = menu.addAction(words.get(role, "Copy the answer"))
        copy_message.setToolTip("The whole message as shown (its pruned paragraphs left out)")
        copy_message.triggered.connect(lambda: clipboard.setText(message_text(conv, turn_id)))
        if role != "document":  # an attached file is neither edited nor answered again
            _change_actions(view, menu, conv, turn_id, role)
        menu.addSeparator()
    copy = menu.addAction("Copy selection")
    copy.setShortcut("Ctrl+C")
    copy.setEnabled(view.textCursor().hasSelection())
    copy.triggered.connect(view.copy)
    select_all = menu.addAction("Select all")
    select_all.triggered.connect(view.selectAll)
    return menu


def _change_actions(view, menu: QMenu, conv: Conversation, turn_id: int, role: str) -> None:
    """Edit this message / Regenerate this answer, and the branches that part here."""
    idle = conv.open_turn is None
    if role == "user":
        edit = menu.addAction("✎ Edit this message…")
        edit.setToolTip("Change it and send it again: a new branch starts here; "
                        "the old one (this message and what followed) is kept")
        edit.triggered.connect(lambda: view.edit_requested.emit(turn_id))
    else:
        edit = menu.addAction("↻ Regenerate this answer")
        edit.setToolTip("Answer the question before it again: a new branch starts here; "
                        "the old one is kept")
        edit.triggered.connect(lambda: view.regenerate_requested.emit(turn_id))
    edit.setEnabled(idle)
    mark = view.branches.mark(turn_id)
    if mark is not None:
        number, count = mark
        previous = menu.addAction(f"‹ Previous branch ({number} of {count})")
        previous.setEnabled(idle and number > 1)
        previous.triggered.connect(lambda: view.branch_requested.emit(turn_id, -1))
        following = menu.addAction(f"Next branch › ({number} of {count})")
        following.setEnabled(idle and number < count)
        following.triggered.connect(lambda: view.branch_requested.emit(turn_id, 1))
