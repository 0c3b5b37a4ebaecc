"""Code blocks (```) in the heatmap: a monospace font and a background of their own.

Neither touches the text, so the heatmap's token positions stay exact: the font is a
``QSyntaxHighlighter`` format (Qt lays the line out again, and the overlay measures
every token from that layout), and the background is painted by the view under its
highlight layer (:func:`paint_code_backgrounds`), so highlighted tokens inside code still
show.  A block inside a fence carries :data:`CODE_STATE` as its user state, the fence
lines themselves included (the closing one as :data:`CLOSE_STATE`).
"""

from __future__ import annotations

from PySide6.QtCore import QRectF
from PySide6.QtGui import QColor, QFontDatabase, QPainter, QSyntaxHighlighter, QTextCharFormat, QTextDocument
from PySide6.QtWidgets import QPlainTextEdit

from . import colors

#: Block user state inside a fenced code block (-1 is Qt's "no state") and on its closing fence.
CODE_STATE = 1
CLOSE_STATE = 2
#: States from here on are lines inside a fence as :mod:`.markdown_scan` reads them.
CODE_BASE = 16
FENCE = "```"
#: Background of code lines: a little lighter than the view's base (22, 22, 26).
#: The dark theme's code background (the one in use: ``colors.scheme().code_background``).
CODE_BACKGROUND = QColor(*colors.DARK.code_background)


class CodeBlockHighlighter(QSyntaxHighlighter):
    """Monospace for the lines of fenced code blocks; marks them with :data:`CODE_STATE`.

    A highlighter costs a Python call per block laid out, so it is attached to the view's
    document only while the document holds a fence (:meth:`follow`); ``active`` says
    whether any code block is drawn (the view paints code backgrounds only then).
    """

    def __init__(self) -> None:
        super().__init__(None)
        self.active = False
        self._tail = ""  # the document's last two characters
        self._format = QTextCharFormat()
        fixed = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        self._format.setFontFamilies(fixed.families())
        self._format.setFontFixedPitch(True)

    def follow(self, document: QTextDocument, text: str, replaced: bool = False) -> bool:
        """Before ``text`` goes into ``document`` (replacing it, or appended): attach when a
        fence can appear, detach when none can.  True when it was attached just now: the
        caller then calls :meth:`rehighlight` once the text is in (Qt would otherwise format
        on its next event loop turn, after the view measured the lines)."""
        joined = text if replaced else self._tail + text
        self._tail = joined[-2:]
        has_fence = FENCE in joined
        if replaced and not has_fence:
            if self.document() is not None:
                self.setDocument(None)
            self.active = False
            return False
        if has_fence and self.document() is not document:
            self.setDocument(document)
            return True
        return False

    def highlightBlock(self, text: str) -> None:  # noqa: N802 - Qt API
        inside = self.previousBlockState() == CODE_STATE
        fence = text.lstrip().startswith(FENCE)
        if inside:
            # Code goes on until a fence closes it (the fence is still drawn as code).
            self.setFormat(0, len(text), self._format)
            self.setCurrentBlockState(CLOSE_STATE if fence else CODE_STATE)
        elif fence and text.strip().count(FENCE) == 1:
            self.setFormat(0, len(text), self._format)
            self.setCurrentBlockState(CODE_STATE)
            self.active = True
        else:  # prose, or "```x```" opening and closing on one line
            self.setCurrentBlockState(-1)

    @staticmethod
    def is_code(state: int) -> bool:
        """Whether a block with this user state is drawn as code."""
        return state in (CODE_STATE, CLOSE_STATE) or state >= CODE_BASE


def paint_code_backgrounds(view: QPlainTextEdit, painter: QPainter, bounds: QRectF) -> None:
    """Fill the full width of every code line that meets ``bounds`` (viewport coordinates)."""
    offset = view.contentOffset()
    width = view.viewport().width()
    block = view.firstVisibleBlock()
    top = view.blockBoundingGeometry(block).translated(offset).top() if block.isValid() else 0.0
    while block.isValid() and top <= bounds.bottom():
        height = view.blockBoundingRect(block).height()
        if CodeBlockHighlighter.is_code(block.userState()) and top + height >= bounds.top():
            painter.fillRect(QRectF(0, top, width, height), QColor(*colors.scheme().code_background))
        top += height
        block = block.next()
