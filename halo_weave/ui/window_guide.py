"""What explains the heatmap in the window: the first-start hint and the legend."""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QPlainTextEdit, QWidget

from ..conversation import Conversation
from ..settings import Scoring
from .legend import FirstStartHint, LegendDialog


class WindowGuide(QObject):
    """The first-start hint over the heatmap and the heatmap's legend.

    Owns the hint (shown while the conversation has no message, placed below the text
    shown and kept there as the heatmap resizes) and the legend dialog (made when first
    asked for, non-modal, saying the rule in use: ``scoring()``, read when it is made and
    on :meth:`scoring_changed`).
    """

    def __init__(self, window: QWidget, heatmap: QPlainTextEdit, scoring: Callable[[], Scoring | None]) -> None:
        super().__init__(window)
        self._window = window
        self._heatmap = heatmap
        #: The three lines over an empty conversation.
        self.hint = FirstStartHint(heatmap)
        self._legend: LegendDialog | None = None
        self._scoring = scoring
        heatmap.installEventFilter(self)

    @property
    def legend(self) -> LegendDialog | None:
        """The legend dialog (None until it was first shown)."""
        return self._legend

    def sync_hint(self, conv: Conversation | None) -> None:
        """Show the hint while ``conv`` has no message (after the heatmap shows it: the
        hint sits below the text shown)."""
        empty = conv is not None and not conv.turns
        if empty:
            self.hint.place_in(self._heatmap)
            self.hint.raise_()
        self.hint.setVisible(empty)

    def show_legend(self) -> None:
        """Show the legend (View → Heatmap legend); it can stay open beside the chat."""
        if self._legend is None:
            self._legend = LegendDialog(self._window, self._scoring())
        self._legend.show()
        self._legend.raise_()

    def scoring_changed(self) -> None:
        """The rule in use changed: the legend says the new one."""
        if self._legend is not None:
            self._legend.set_scoring(self._scoring())

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 - Qt API
        if watched is self._heatmap and event.type() == QEvent.Type.Resize and self.hint.isVisible():
            self.hint.place_in(self._heatmap)
        return False
