"""What the heatmap's viewport shows, and what was painted there.

The frame is the visible token boxes (:func:`.heatmap_frame.collect_frame`), collected
again only when the view scrolled, resized or changed; each box has a colour key,
computed once per frame from the brightness column.  The key last painted for each plan
token lets a streamed token repaint only the lines whose colour moved.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QRect, QRectF, QTimer

from .heatmap_frame import BlockGeometry, Frame, colour_keys, collect_frame
from .heatmap_gutter import pin_markers
from .heatmap_paint import FramePainter, request_lines
from .heatmap_recall import recall_marks
from .markdown_overlay import carry_marked, hidden_tokens

#: Minimum milliseconds between two repaints (one frame at 60 Hz).
FRAME_MS = 16


class Canvas:
    """The heatmap's frame and paint state.

    Owns the token geometry of each block (cached per block revision and width), the
    current :class:`~.heatmap_frame.Frame`, the colour key of each of its boxes, the key
    last painted per plan token, whether the next repaint is of the whole viewport, what
    the gutter last showed, the frame timer (the view's ``flush`` at most once per
    frame) and the layers' brushes (:attr:`painter`, :mod:`.heatmap_paint`).  Reads the
    view's conversation, plan and Markdown overlay through their public accessors.
    """

    def __init__(self, view) -> None:
        self._view = view
        self._geometry: dict[int, BlockGeometry] = {}
        self._frame: Frame | None = None
        self._keys: np.ndarray | None = None  # colour key per box of self._frame
        self._shown = np.zeros(0, np.int64)  # last painted colour key per plan token
        self._full_update = True
        self._gutter_signature: tuple = ()
        self._timer = QTimer(view)
        self._timer.setSingleShot(True)
        self._timer.setInterval(FRAME_MS)
        self._timer.timeout.connect(view.flush)
        #: The layers' brushes and the painting of an update (:mod:`.heatmap_paint`).
        self.painter = FramePainter()

    def restyle(self) -> None:
        """The theme changed: the layers' brushes of the colours in use, all repainted."""
        self.painter = FramePainter()
        self.invalidate(full=True)

    def schedule(self) -> None:
        """Do the view's next frame within :data:`FRAME_MS` (once, however often asked)."""
        if not self._timer.isActive():
            self._timer.start()

    def frame_started(self) -> None:
        """The view does its frame now: none is pending any more."""
        self._timer.stop()

    def invalidate(self, full: bool = False) -> None:
        """Collect the frame again before the next paint (``full``: repaint everything)."""
        self._frame = None
        self._keys = None
        if full:
            self._shown = np.zeros(0, np.int64)
            self._full_update = True

    def forget_layout(self) -> None:
        """The document was replaced or its font changed: measure every block again."""
        self._geometry.clear()
        self.invalidate(full=True)

    def forget_block(self, number: int) -> None:
        """A block's formats changed (its text may not have): measure its tokens again."""
        if self._geometry.pop(number, None) is not None:
            self._frame = None
            self._keys = None

    def colours_changed(self) -> None:
        """Brightness moved: the colour keys are computed again with the next paint."""
        self._keys = None

    def frame(self) -> Frame | None:
        """The visible boxes, collected again when the view scrolled, resized or changed."""
        view = self._view
        plan = view.plan
        if view.conversation() is None or plan.length == 0:
            return None
        offset = view.contentOffset()
        # contentOffset() is relative to the first visible block (often 0, 0): the block
        # itself and the scroll position belong in the key, or a frame collected at one
        # scroll position is painted at another (boxes beside their words, or over empty
        # lines below the last paragraph).
        key = (view.firstVisibleBlock().blockNumber(), view.verticalScrollBar().value(),
               offset.x(), offset.y(), view.document().revision(), view.viewport().width(),
               view.viewport().height(), id(plan), len(plan.rows))
        if self._frame is None or self._frame.key != key:
            self._frame = collect_frame(view, plan, self._geometry, key)
            self._keys = None
        return self._frame

    def keys(self, frame: Frame) -> np.ndarray:
        """The colour key of each box of ``frame`` (computed once per frame)."""
        if self._keys is None or len(self._keys) != len(frame.token):
            conv, plan = self._view.conversation(), self._view.plan
            last = max(len(conv.table) - 1, 0)
            rows = np.minimum(plan.rows[frame.token], last)
            overlay = self._view.markdown_layer.overlay()
            hidden = hidden_tokens(overlay) if overlay is not None else np.zeros(0, np.int64)
            if len(hidden):  # one pass for both: the ranking behind the highlight is costly
                hidden_rows = np.minimum(plan.rows[hidden], last)
                both = colour_keys(conv, np.concatenate((rows, hidden_rows)))
                self._keys = both[: len(rows)].copy()
                carry_marked(overlay, plan, frame, self._keys, both[len(rows):])
            else:
                self._keys = colour_keys(conv, rows) if len(rows) else np.zeros(0, np.int64)
        return self._keys

    def painted(self, frame: Frame, inside: np.ndarray) -> np.ndarray:
        """The colour keys of the boxes ``inside`` an update, remembered as painted."""
        keys_in = self.keys(frame)[inside]
        if len(inside):
            self._shown_keys(frame.token)  # grows the array when tokens were added
            self._shown[frame.token[inside]] = keys_in
        return keys_in

    def request_repaint(self) -> None:
        """Ask Qt to repaint the boxes whose colour changed since they were painted (the
        whole viewport after a rebuild), and the gutter when its marks moved."""
        view = self._view
        frame = self.frame()
        if frame is None or self._full_update:
            self._full_update = False
            view.viewport().update()
            view.gutter.update()
            return
        changed = np.flatnonzero(self.keys(frame) != self._shown_keys(frame.token))
        request_lines(view.viewport(), frame, changed)
        signature = (tuple(frame.bodies), tuple(pin_markers(view, frame)), tuple(recall_marks(view, frame)))
        if signature != self._gutter_signature:
            self._gutter_signature = signature
            view.gutter.update()

    def box_chunks(self, frame: Frame) -> np.ndarray:
        """The chunk id of each box of ``frame`` (-1 where its row is gone)."""
        rows = self._view.plan.rows[frame.token]
        table = self._view.conversation().table
        chunk_ids = np.full(len(rows), -1, np.int64)
        valid = rows < len(table)
        chunk_ids[valid] = table.chunk_id[rows[valid]]
        return chunk_ids

    def chunk_rect(self, chunk_id: int) -> QRect | None:
        """Viewport rectangle covering the visible tokens of a chunk (None if off screen)."""
        frame = self.frame()
        if frame is None or not len(frame.token):
            return None
        mine = np.flatnonzero(self.box_chunks(frame) == chunk_id)
        if not len(mine):
            return None
        left, right = frame.x0[mine].min(), frame.x1[mine].max()
        top, bottom = frame.y[mine].min(), (frame.y[mine] + frame.h[mine]).max()
        return QRectF(left, top, right - left, bottom - top).toAlignedRect()

    def _shown_keys(self, tokens: np.ndarray) -> np.ndarray:
        """Last painted key of these plan tokens (-1 = never painted)."""
        need = len(self._view.plan.rows)
        if len(self._shown) < need:
            grown = np.full(max(need, 2 * len(self._shown), 1024), -1, np.int64)
            grown[: len(self._shown)] = self._shown
            self._shown = grown
        return self._shown[tokens]
