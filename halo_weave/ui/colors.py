"""The heatmap's colours, for the dark and the light theme, and its scale quantised into
a few brushes.

Chunk colour follows the chunk's *peak* brightness on a dynamic min→max scale over
the live chunks: dim olive → medium yellow → bright gold.  The scale is cut into
:data:`LEVELS` steps so the overlay paints one batch of rectangles per step instead of
one brush per token.  Everything here is numpy except :func:`level_colors`, which
turns the steps into ``QColor`` once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PySide6.QtGui import QColor, QFont, QFontMetrics

RGB = tuple[int, int, int]


@dataclass(frozen=True)
class Scheme:
    """Every colour the heatmap and the panels beside it paint, for one theme.

    The heatmap draws its text in ``text`` on ``base`` and paints each chunk's colour
    over it in ``tint_mode``: *darken* (per channel minimum) on the dark theme, where
    white text becomes the chunk's colour and the darker background stays; *lighten*
    (per channel maximum) on the light one, where black text does and the lighter
    background stays.  Each colour drawn as text reads on ``base`` and on
    ``code_background`` at a WCAG contrast of at least 4.5 (``tests/ui/test_theme.py``).
    """

    name: str
    base: RGB
    text: RGB
    tint_mode: str  # "darken" or "lighten"
    #: The chunk scale: dimmest → middle → brightest.
    scale: tuple[RGB, RGB, RGB]
    tool: RGB
    #: Unscored text: the system prompt and the "pruned here" markers.
    unscored: RGB
    #: What a message recalled: the line under it and the mark beside each recalled chunk
    #: (apart from every other colour of the heatmap: the scale, tool, the role bars).
    recall: RGB
    roles: dict
    #: Background of the brightest tokens, and its alpha range.
    highlight: RGB
    highlight_alpha: tuple[float, float]
    #: Find in the chat: the box around each match, and the fill alpha of a match / the current one.
    find: RGB
    find_alpha: tuple[float, float]
    code_background: RGB
    link: RGB
    dim: RGB
    label: RGB
    #: Pygments token styles (see .markdown_scan) -> colour.
    code: dict
    button_text: RGB
    button_fill: RGB
    rule: RGB


DARK = Scheme(
    name="dark", base=(22, 22, 26), text=(255, 255, 255), tint_mode="darken",
    scale=((158, 143, 78), (200, 180, 80), (255, 220, 100)),
    tool=(0x4E, 0xCD, 0xC4), unscored=(145, 145, 150), recall=(185, 150, 255),
    roles={"user": (125, 180, 255), "assistant": (235, 205, 130), "system": (150, 150, 155),
           "document": (120, 200, 170)},
    highlight=(255, 220, 100), highlight_alpha=(0.2, 0.45),
    find=(255, 96, 170), find_alpha=(0.08, 0.14),
    code_background=(36, 38, 46), link=(140, 190, 255), dim=(140, 140, 150), label=(150, 150, 160),
    code={"c-keyword": (200, 160, 255), "c-string": (170, 230, 140), "c-number": (250, 190, 120),
          "c-comment": (150, 160, 150), "c-builtin": (120, 210, 240), "c-function": (130, 200, 255),
          "c-class": (130, 220, 200), "c-decorator": (240, 210, 120)},
    button_text=(170, 170, 180), button_fill=(52, 54, 64), rule=(90, 90, 100),
)

LIGHT = Scheme(
    name="light", base=(250, 250, 246), text=(0, 0, 0), tint_mode="lighten",
    scale=((104, 98, 80), (132, 94, 0), (160, 66, 0)),
    tool=(0, 120, 115), unscored=(100, 100, 105), recall=(110, 60, 200),
    roles={"user": (30, 90, 190), "assistant": (140, 92, 15), "system": (100, 100, 105),
           "document": (20, 120, 90)},
    highlight=(255, 200, 40), highlight_alpha=(0.25, 0.5),
    find=(200, 0, 110), find_alpha=(0.06, 0.1),
    code_background=(238, 238, 242), link=(20, 90, 200), dim=(100, 100, 110), label=(95, 95, 105),
    code={"c-keyword": (130, 40, 180), "c-string": (30, 120, 30), "c-number": (170, 80, 0),
          "c-comment": (100, 110, 100), "c-builtin": (0, 110, 140), "c-function": (20, 90, 190),
          "c-class": (0, 120, 100), "c-decorator": (130, 95, 0)},
    button_text=(80, 80, 90), button_fill=(222, 224, 230), rule=(180, 180, 188),
)

_scheme: list[Scheme] = [DARK]


def scheme() -> Scheme:
    """The colours in use (the dark theme's until :func:`use` says otherwise)."""
    return _scheme[0]


def use(chosen: Scheme) -> None:
    """Paint with ``chosen`` from now on (the theme sets it; widgets re-read it when the
    application's palette changes)."""
    _scheme[0] = chosen


# The dark theme's colours under their earlier names (the legend's swatches, tests).
OLIVE, YELLOW, GOLD = DARK.scale
TOOL_CYAN = DARK.tool
UNSCORED_GREY = DARK.unscored
RECALL_VIOLET = DARK.recall
ROLE_COLORS = DARK.roles
HIGHLIGHT_RGB = DARK.highlight
HIGHLIGHT_ALPHA = DARK.highlight_alpha
FIND_RGB = DARK.find
FIND_ALPHA = DARK.find_alpha


def contrast(a: RGB, b: RGB) -> float:
    """WCAG 2 contrast ratio of two sRGB colours (1 .. 21)."""
    def luminance(rgb: RGB) -> float:
        c = np.asarray(rgb, np.float64) / 255.0
        c = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
        return float(0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2])

    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


#: Steps of the chunk colour scale (one brush batch each).
LEVELS = 32
#: Steps of the highlight alpha.
HIGHLIGHT_LEVELS = 8


def scale_rgb(t: np.ndarray, chosen: Scheme | None = None) -> np.ndarray:
    """RGB (n, 3) floats for positions ``t`` in [0, 1] on the scale of ``chosen`` (the
    scheme in use): dim → middle → bright (dark: olive → yellow → gold)."""
    t = np.clip(np.asarray(t, np.float64), 0.0, 1.0)[:, None]
    olive, yellow, gold = (np.array(c, np.float64) for c in (chosen or scheme()).scale)
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


def level_rgb(chosen: Scheme) -> list[RGB]:
    """The scale steps of ``chosen`` as RGB tuples (what :func:`level_colors` paints)."""
    return [tuple(int(v) for v in c) for c in np.rint(scale_rgb(np.linspace(0.0, 1.0, LEVELS), chosen))]


#: The settings field that sets how much is highlighted (the dialog's label, the legend's words).
HIGHLIGHT_LABEL = "Highlighted share of words"


def highlight_colors() -> list[QColor]:
    """One translucent colour per highlight step (the scheme's alpha range)."""
    lo, hi = scheme().highlight_alpha
    colors = []
    for alpha in np.linspace(lo, hi, HIGHLIGHT_LEVELS):
        color = QColor(*scheme().highlight)
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
