"""The character formats of rendered Markdown, built on the text font and cached.

:class:`MarkdownFormats` makes the format of each set of styles a line's Markdown gives
(:mod:`.markdown_scan`), the zero-width format that hides a markup character, and the
advance a table column is spaced by; it builds them again when the font changes.
"""

from __future__ import annotations

from PySide6.QtGui import QColor, QFont, QFontDatabase, QFontMetricsF, QTextCharFormat, QTextDocument

from . import colors

#: Heading sizes relative to the body text (h1 … h6).
HEADING_SCALE = (1.5, 1.3, 1.15, 1.05, 1.0, 1.0)
#: The dark theme's colours (the ones in use come from ``colors.scheme()``).
LINK_COLOR = QColor(*colors.DARK.link)
DIM_COLOR = QColor(*colors.DARK.dim)
LABEL_COLOR = QColor(*colors.DARK.label)
CODE_COLORS = {style: QColor(*rgb) for style, rgb in colors.DARK.code.items()}


class MarkdownFormats:
    """Owns the cached formats: ``_formats`` (by styles), ``_hidden`` (by hidden
    character), the font they were built on and a table character's advance."""

    def __init__(self) -> None:
        self._formats: dict[frozenset, QTextCharFormat] = {}
        self._hidden: dict[tuple, QTextCharFormat] = {}
        self._font = QFont()
        self._advance: float | None = None

    def follow_font(self, document: QTextDocument | None) -> None:
        """Drop the cached formats when ``document``'s text font changed (they are built on it)."""
        font = document.defaultFont() if document is not None else QFont()
        if font != self._font:
            self._font = font
            self._formats.clear()
            self._hidden.clear()
            self._advance = None

    def styled(self, styles: frozenset) -> QTextCharFormat:
        """The format of text with ``styles`` (bold, a heading, code, a syntax colour, …)."""
        cached = self._formats.get(styles)
        if cached is not None:
            return cached
        base = self._font
        fmt = QTextCharFormat()
        size = base.pointSizeF() if base.pointSizeF() > 0 else 10.0
        for style in sorted(styles):
            if style in ("bold",):
                fmt.setFontWeight(QFont.Weight.Bold)
            elif style == "italic" or style == "quote":
                fmt.setFontItalic(True)
            elif style == "strike":
                fmt.setFontStrikeOut(True)
            elif style.startswith("h") and style[1:].isdigit():
                fmt.setFontWeight(QFont.Weight.Bold)
                fmt.setFontPointSize(size * HEADING_SCALE[int(style[1:]) - 1])
            elif style in ("code", "table", "label"):
                fixed = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
                fmt.setFontFamilies(fixed.families())
                fmt.setFontFixedPitch(True)
                if style == "label":
                    fmt.setForeground(QColor(*colors.scheme().label))
                    fmt.setFontPointSize(size * 0.85)
            elif style == "link":
                fmt.setFontUnderline(True)
                fmt.setForeground(QColor(*colors.scheme().link))
            elif style == "dim":
                fmt.setForeground(QColor(*colors.scheme().dim))
            elif style == "bullet":
                fmt.setForeground(QColor(0, 0, 0, 0))  # the view paints a bullet there
            elif style in colors.scheme().code:
                fmt.setForeground(QColor(*colors.scheme().code[style]))
        self._formats[styles] = fmt
        return fmt

    def hidden(self, char: str, fixed: bool = False) -> QTextCharFormat:
        """A format that draws ``char`` at no width, transparent: the text font with a
        letter spacing of minus the character's advance (measured per character, as
        advances differ; the line keeps its height).  ``fixed``: in the monospace font
        (a fence line keeps the height of the code lines it borders)."""
        cached = self._hidden.get((char, fixed))
        if cached is not None:
            return cached
        base = self._font
        font = QFont(base)
        if fixed:
            font.setFamilies(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont).families())
            font.setFixedPitch(True)
        advance = QFontMetricsF(font).horizontalAdvance(char)
        font.setLetterSpacing(QFont.SpacingType.AbsoluteSpacing, -advance)
        fmt = QTextCharFormat()
        fmt.setFont(font)
        fmt.setForeground(QColor(0, 0, 0, 0))
        self._hidden[(char, fixed)] = fmt
        return fmt

    def table_advance(self) -> float:
        """One character's advance in a table's monospace font."""
        if self._advance is None:
            self._advance = QFontMetricsF(self.styled(frozenset({"table"})).font()).horizontalAdvance("M")
        return self._advance
