"""The heatmap's text rendered as Markdown, or shown as typed.

:class:`MarkdownLayer` keeps the highlighter of the view's document (Markdown rendered in
place, :mod:`.markdown_view`, or, showing the raw text, fenced code in monospace,
:mod:`.code_blocks`) and what the rendered Markdown adds to a frame (bullets, rules,
Copy buttons, :mod:`.markdown_overlay`).  A long document is filled with its Markdown
deferred: what is on screen is formatted first, the rest soon after.
"""

from __future__ import annotations

from contextlib import nullcontext

from typing import Callable

from PySide6.QtCore import QPoint, QPointF, QRectF

from .code_blocks import CodeBlockHighlighter
from .markdown_overlay import Overlay, code_text, collect_overlay
from .markdown_overlay import link_at as markdown_link_at
from .markdown_view import MarkdownHighlighter


class MarkdownLayer:
    """How the heatmap's messages are drawn: rendered Markdown or the typed text.

    Owns the document's highlighter and the overlay of the current frame (collected again
    when the frame or the formats change).  ``block_formatted(number)`` is called when a
    block's formats change, so that its tokens are measured again.
    """

    def __init__(self, view, block_formatted: Callable[[int], None]) -> None:
        self._view = view
        self._block_formatted = block_formatted
        self._overlay: Overlay | None = None
        self._highlighter: MarkdownHighlighter | CodeBlockHighlighter = self._new_highlighter(True)

    @property
    def rendered(self) -> bool:
        """Whether messages are shown rendered as Markdown (else as typed)."""
        return isinstance(self._highlighter, MarkdownHighlighter)

    @property
    def highlighter(self) -> MarkdownHighlighter | CodeBlockHighlighter:
        """The highlighter of the view's document (it follows the text as it is added)."""
        return self._highlighter

    def switch(self, rendered: bool) -> None:
        """Render Markdown, or show the typed text; the caller lays the text out again."""
        self._highlighter.setDocument(None)
        self._highlighter = self._new_highlighter(rendered)

    def set_text(self, text: str, defer: bool) -> bool:
        """Replace the view's text; ``defer`` (a long document, rendered): only the blocks'
        states now, their formats by :meth:`format_on_screen`.  Whether it was deferred."""
        view, highlighter = self._view, self._highlighter
        attached = highlighter.follow(view.document(), text, replaced=True)
        deferred = defer and self.rendered
        with highlighter.states_only() if deferred else nullcontext():
            view.setPlainText(text)
            if attached:
                highlighter.rehighlight()
        return deferred

    def hold(self, ms: float) -> None:
        """Streaming: the Markdown off screen waits ``ms`` after the last token."""
        if self.rendered:
            self._highlighter.hold(ms)

    def format_scrolled_in(self) -> None:
        """Blocks that scrolled into view and still wait for their Markdown: now."""
        if self.rendered:
            first, lines = self._screen_lines()
            self._highlighter.format_range(first, first + lines + 1)

    def format_on_screen(self) -> None:
        """Format the blocks on screen (and a screen's worth around them) now, the rest
        soon after: a long conversation opens without waiting for all of its Markdown."""
        first, lines = self._screen_lines()
        self._highlighter.format_around(max(first - lines, 0), 3 * lines)

    def overlay(self) -> Overlay | None:
        """What the rendered Markdown adds to the current frame (None: shown as typed)."""
        frame = self._view.canvas.frame()
        if not self.rendered or frame is None:
            return None
        key = (frame.key, self._highlighter.generation)
        if self._overlay is None or self._overlay.key != key:
            self._overlay = collect_overlay(self._view, self._view.plan, key)
        return self._overlay

    def copy_buttons(self) -> list[tuple[QRectF, str, object]]:
        """The Copy buttons on screen: (viewport rectangle, "code" or "message", the
        opening fence's block or the message's turn id)."""
        overlay = self.overlay()
        return overlay.buttons if overlay is not None else []

    def copy_button_at(self, point: QPoint | QPointF) -> tuple[str, object] | None:
        """("code", its text) or ("message", turn id) of the Copy button under a viewport
        point (code blocks and message labels carry one while Markdown is rendered)."""
        for rect, kind, target in self.copy_buttons():
            if rect.contains(QPointF(point)):
                if kind == "code":
                    return kind, code_text(self._view, target, self._view.plan.soft_breaks)
                return kind, target
        return None

    def link_at(self, point: QPoint | QPointF) -> str | None:
        """The address of the rendered Markdown link under a viewport point, or None."""
        return markdown_link_at(self._view, QPointF(point)) if self.rendered else None

    def _new_highlighter(self, rendered: bool) -> MarkdownHighlighter | CodeBlockHighlighter:
        if not rendered:
            return CodeBlockHighlighter()
        highlighter = MarkdownHighlighter(lambda: self._view.plan, self._block_formatted)
        highlighter.attach(self._view.document())
        return highlighter

    def _screen_lines(self) -> tuple[int, int]:
        """(first visible block, lines the viewport holds)."""
        view = self._view
        first = view.firstVisibleBlock().blockNumber()
        return first, max(view.viewport().height() // max(view.fontMetrics().height(), 1), 1)
