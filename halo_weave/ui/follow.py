"""Follow the answer: keep a text view at its end unless the user scrolled up to read.

Every chat app does this: while the newest text is in view, new text keeps it in view;
once the user scrolls up, nothing moves under their eyes and a "Jump to latest" button
offers the way back.  :class:`Follower` holds that one bit of state for a
``QPlainTextEdit`` and owns the button (a child of the view, floating over the bottom
right corner of its viewport).

What counts as the user scrolling is what the scroll bar reports as a user action
(``actionTriggered``: wheel, drag, arrow keys, Page Up/Down, a click on the bar), never a
programmatic ``setValue``.  Reaching the bottom again by any of those resumes following.

``QPlainTextEdit`` lays its blocks out lazily and counts a block it has not laid out
yet as one line, so its scroll bar maximum is an estimate until the last blocks are laid
out; :meth:`Follower.scroll_to_end` lays out enough of the tail first, then scrolls.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtWidgets import QAbstractSlider, QPlainTextEdit, QToolButton

#: Distance in pixels of the jump button from the viewport's bottom right corner.
BUTTON_MARGIN = 12


class Follower(QObject):
    """Keeps ``view`` at its end while :attr:`following`; see the module docstring.

    Call :meth:`content_changed` after text was added or the document rebuilt.
    Signal ``following_changed(bool)``.
    """

    following_changed = Signal(bool)

    def __init__(self, view: QPlainTextEdit) -> None:
        super().__init__(view)
        self._view = view
        self._following = True
        bar = view.verticalScrollBar()
        bar.actionTriggered.connect(self._on_user_action)
        bar.valueChanged.connect(self._on_value)
        bar.rangeChanged.connect(self._on_range)
        self.button = QToolButton(view)
        self.button.setObjectName("jumpToLatest")
        self.button.setText("↓ Jump to latest")
        self.button.setToolTip("Scroll to the newest text and follow the answer again")
        self.button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.button.setAutoRaise(False)
        self.button.clicked.connect(self.jump_to_latest)
        self.button.hide()
        view.installEventFilter(self)

    # ------------------------------------------------------------------ public API
    @property
    def following(self) -> bool:
        """True while new text keeps the view at its end."""
        return self._following

    def jump_to_latest(self) -> None:
        """Scroll to the end and follow again (the button, sending a message)."""
        self._set_following(True)
        self.scroll_to_end()

    def stop_following(self) -> None:
        """The user went to read elsewhere (a link): new text no longer moves the view."""
        self._set_following(False)

    def content_changed(self, rebuilt: bool = False) -> None:
        """Text was added (or, ``rebuilt``, the document replaced): keep the end in view
        when following."""
        if self._following:
            self.scroll_to_end(layout_tail=rebuilt)
        else:
            self._sync_button()

    def at_end(self) -> bool:
        """Whether the last line is in view."""
        bar = self._view.verticalScrollBar()
        return bar.value() >= bar.maximum()

    def scroll_to_end(self, layout_tail: bool = True) -> None:
        """Scroll so the last line of the document is at the bottom of the view.

        ``layout_tail`` lays out the last blocks first (needed after the document was
        replaced; appended text is laid out by Qt as it is inserted).
        """
        view = self._view
        if layout_tail:
            document = view.document()
            layout = document.documentLayout()
            # Lay out blocks from the end until they fill the viewport: their line counts
            # then are real, and so is the scroll bar's maximum.
            need, block, changed = view.viewport().height(), document.lastBlock(), False
            while block.isValid() and need > 0:
                lines_before = block.lineCount()
                need -= layout.blockBoundingRect(block).height()
                changed |= block.lineCount() != lines_before
                block = block.previous()
            if changed:
                layout.documentSizeChanged.emit(layout.documentSize())
        bar = view.verticalScrollBar()
        bar.setValue(bar.maximum())
        if self.button.isVisible():
            self._sync_button()

    # ------------------------------------------------------------------ internals
    def _set_following(self, following: bool) -> None:
        if following != self._following:
            self._following = following
            self.following_changed.emit(following)
        self._sync_button()

    def _on_user_action(self, action: int) -> None:
        if action == QAbstractSlider.SliderAction.SliderNoAction:
            return
        bar = self._view.verticalScrollBar()
        # The action has moved the slider position, not yet the value.
        self._set_following(bar.sliderPosition() >= bar.maximum())

    def _on_value(self, value: int) -> None:
        if not self._following and value >= self._view.verticalScrollBar().maximum():
            self._set_following(True)  # scrolled back down to the newest text
        else:
            self._sync_button()

    def _on_range(self, _minimum: int, maximum: int) -> None:
        # Qt lays out text lazily: the range can still grow after the last scroll (a
        # block laid out late, the stats line wrapping), so following sticks to the end.
        bar = self._view.verticalScrollBar()
        if self._following and bar.value() != maximum:
            bar.setValue(maximum)
        self._sync_button()

    def _sync_button(self) -> None:
        show = not self._following and not self.at_end()
        if show:
            self._place_button()
            self.button.raise_()
        self.button.setVisible(show)

    def _place_button(self) -> None:
        viewport = self._view.viewport()
        hint = self.button.sizeHint()
        corner = viewport.geometry().bottomRight()
        self.button.setGeometry(corner.x() - hint.width() - BUTTON_MARGIN,
                                corner.y() - hint.height() - BUTTON_MARGIN, hint.width(), hint.height())

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt API
        if watched is self._view and event.type() == QEvent.Type.Resize and self.button.isVisible():
            self._place_button()
        return False
