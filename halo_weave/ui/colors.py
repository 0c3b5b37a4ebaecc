"""The heatmap's colour scale, quantised into a few brushes.

Chunk colour follows the chunk's *peak* brightness on a dynamic min→max scale over
the live chunks: dim olive → medium yellow → bright gold.  The scale is cut into
:data:`LEVELS` steps so the overlay paints one batch of rectangles per step instead of
one brush per token.  Everything here is numpy except :func:`level_colors`, which
turns the steps into ``QColor`` once.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtGui import QColor, QFont, QFontMetrics

OLIVE = (100, 90, 40)
YELLOW = (200, 180, 80)
GOLD = (255, 220, 100)
TOOL_CYAN = (0x4E, 0xCD, 0xC4)
#: Unscored text: the system prompt and the "pruned here" markers.
UNSCORED_GREY = (125, 125, 130)
#: What a message recalled: the line under it and the mark beside each recalled chunk
#: (apart from every other colour of the heatmap: the scale, tool cyan, the role bars).
RECALL_VIOLET = (185, 150, 255)
ROLE_COLORS = {
    "user": (125, 180, 255),
    "assistant": (235, 205, 130),
    "system": (150, 150, 155),
    "document": (120, 200, 170),
}
#: Highlight of the brightest tokens: a yellow background, alpha 0.2 .. 0.5.
HIGHLIGHT_RGB = (255, 220, 100)
HIGHLIGHT_ALPHA = (0.2, 0.5)

#: Steps of the chunk colour scale (one brush batch each).
LEVELS = 32
#: Steps of the highlight alpha.
HIGHLIGHT_LEVELS = 8


def scale_rgb(t: np.ndarray) -> np.ndarray:
    """RGB (n, 3) floats for positions ``t`` in [0, 1]: olive → yellow → gold."""
    t = np.clip(np.asarray(t, np.float64), 0.0, 1.0)[:, None]
    olive, yellow, gold = (np.array(c, np.float64) for c in (OLIVE, YELLOW, GOLD))
    low = olive + (yellow - olive) * (t * 2.0)
    high = yellow + (gold - yellow) * (t * 2.0 - 1.0)
    return np.where(t < 0.5, low, high)


def peak_levels(peaks: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Scale step (0 .. LEVELS-1) of each peak on the dynamic ``lo .. hi`` scale.

    When every live chunk has the same peak (a fresh, fail-bright conversation) all
    chunks are at the top of the scale.
    """
    if hi <= lo:
        return np.full(len(peaks), LEVELS - 1, np.int64)
    t = (np.asarray(peaks, np.float64) - lo) / (hi - lo)
    return np.clip(np.rint(t * (LEVELS - 1)), 0, LEVELS - 1).astype(np.int64)


def level_colors() -> list[QColor]:
    """One opaque QColor per scale step."""
    rgb = scale_rgb(np.linspace(0.0, 1.0, LEVELS))
    return [QColor(int(r), int(g), int(b)) for r, g, b in np.rint(rgb)]


#: The settings field that sets how much is highlighted (the dialog's label, the legend's words).
HIGHLIGHT_LABEL = "Highlighted share of words"


def highlight_colors() -> list[QColor]:
    """One translucent yellow per highlight step (alpha 0.2 .. 0.5)."""
    lo, hi = HIGHLIGHT_ALPHA
    colors = []
    for alpha in np.linspace(lo, hi, HIGHLIGHT_LEVELS):
        color = QColor(*HIGHLIGHT_RGB)
        color.setAlphaF(float(alpha))
        colors.append(color)
    return colors


def qcolor(rgb: tuple[int, int, int]) -> QColor:
    return QColor(*rgb)


def has_glyph(font: QFont, text: str) -> bool:
    """Whether ``font`` (with fallbacks) can draw every character of ``text``."""
    metrics = QFontMetrics(font)
    return all(metrics.inFontUcs4(ord(ch)) for ch in text if ord(ch) not in (0xFE0F, 0x200D))


def emoji_or(font: QFont, emoji: str, fallback: str) -> str:
    """``emoji`` where the font can draw it, else ``fallback`` (no tofu boxes)."""
    return emoji if has_glyph(font, emoji) else fallback
