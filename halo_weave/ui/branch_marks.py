"""Branches, the window's part: the branch marks of the heatmap, "‹ number / count ›" in
the header of a message where branches part, and its two arrows (a click shows the
previous or next branch through :mod:`halo_weave.session.branches`; docs/architecture.md,
"Branches")."""

from __future__ import annotations

from PySide6.QtCore import QPoint, QPointF, QRect
from PySide6.QtGui import QTextCursor

from . import heatmap_menu


class BranchMarks:
    """The heatmap's branch marks and arrows.

    Owns turn id -> (number, count) of the messages where branches part (the window's,
    shown from the view's next rebuild) and the arrow a left press was on.  A press and
    release on the same arrow emits the view's ``branch_requested(turn_id, step)``.
    """

    def __init__(self, view) -> None:
        self._view = view
        self._marks: dict[int, tuple[int, int]] = {}
        self._pressed: tuple[int, int] | None = None

    def set_marks(self, marks: dict[int, tuple[int, int]]) -> None:
        """Turn id -> (number, count) of the messages where branches part, shown as
        "‹ number / count ›" in their headers from the view's next rebuild."""
        self._marks = dict(marks)

    def marks(self) -> dict[int, tuple[int, int]]:
        """Every mark set (a copy)."""
        return dict(self._marks)

    def mark(self, turn_id: int) -> tuple[int, int] | None:
        """(number, count) of the branch that starts at ``turn_id``; None when none does."""
        return self._marks.get(turn_id)

    def link_at(self, point: QPoint | QPointF) -> tuple[int, int] | None:
        """(turn id, step) of the branch arrow ("‹" -1, "›" +1) under a viewport point."""
        return heatmap_menu.branch_link_at(self._view, self._view.plan, point)

    def arrow_rect(self, turn_id: int, step: int) -> QRect | None:
        """Viewport rectangle of a branch arrow of the message ``turn_id`` (None: no such arrow)."""
        view = self._view
        link = next(((a, b) for a, b, t, s in view.plan.branch_links if (t, s) == (turn_id, step)), None)
        if link is None:
            return None
        cursor = QTextCursor(view.document())
        cursor.setPosition(link[0])
        first = view.cursorRect(cursor)
        cursor.setPosition(link[1])
        end = view.cursorRect(cursor)
        return QRect(first.left(), first.top(), max(end.left() - first.left(), 4), first.height())

    def press(self, point: QPoint | QPointF) -> bool:
        """A left press: True when it is on an arrow (remembered until the release)."""
        self._pressed = self.link_at(point)
        return self._pressed is not None

    def release(self, point: QPoint | QPointF) -> bool:
        """A release: True when the press was on an arrow; released on the same arrow,
        the branch is asked for."""
        branch, self._pressed = self._pressed, None
        if branch is None:
            return False
        if self.link_at(point) == branch:
            self._view.branch_requested.emit(*branch)
        return True

    def tooltip_at(self, point: QPoint | QPointF) -> str | None:
        """What the arrow under a viewport point does (None: no arrow there)."""
        branch = self.link_at(point)
        return heatmap_menu.branch_tooltip(self._view.plan, *branch) if branch is not None else None
