"""The light theme and the dark one: the heatmap's colours read on both (WCAG contrast of
at least 4.5 for every colour drawn as text, computed from the colours and measured on
the painted pixels), View → Theme switches at once, and "Follow the system" follows
Qt's colour-scheme hint.  A window on a closed port; a real SQLite conversation."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QApplication

from halo_weave.ui import colors
from halo_weave.ui.theme import THEME_KEY, apply_theme, follow_system, resolve
from window_helpers import write_conversation

#: WCAG AA for body text.
AA = 4.5


def _blend(fg, bg, alpha: float):
    return tuple(int(round(f * alpha + b * (1 - alpha))) for f, b in zip(fg, bg))


@pytest.mark.parametrize("scheme", [colors.DARK, colors.LIGHT], ids=lambda s: s.name)
def test_every_colour_drawn_as_text_reads_on_the_heatmap(scheme):
    texts = {f"scale step {i}": rgb for i, rgb in enumerate(colors.level_rgb(scheme))}
    texts |= {"tool result": scheme.tool, "system prompt": scheme.unscored, "recall line": scheme.recall,
              "link": scheme.link, "dim": scheme.dim, "label": scheme.label, "find": scheme.find}
    texts |= {f"{role} label": rgb for role, rgb in scheme.roles.items()}
    backgrounds = {"base": scheme.base, "code": scheme.code_background}
    worst = {(name, where): colors.contrast(rgb, bg)
             for name, rgb in texts.items() for where, bg in backgrounds.items()}
    assert min(worst.values()) >= AA, sorted(worst.items(), key=lambda kv: kv[1])[:3]
    # Code's own colours on the code background, and the brightest tokens (never tinted:
    # the theme's text colour) on the highest highlight.
    assert min(colors.contrast(rgb, scheme.code_background) for rgb in scheme.code.values()) >= AA
    highest = _blend(scheme.highlight, scheme.base, scheme.highlight_alpha[1])
    assert colors.contrast(scheme.text, highest) >= AA
    # A match of find in the chat, in any chunk's colour, under the current match's fill.
    under_find = _blend(scheme.find, scheme.base, scheme.find_alpha[1])
    assert min(colors.contrast(rgb, under_find) for rgb in colors.level_rgb(scheme)) >= AA


def test_the_dark_scale_still_runs_dim_to_bright_and_the_light_one_faint_to_strong():
    dark, light = colors.level_rgb(colors.DARK), colors.level_rgb(colors.LIGHT)
    assert colors.contrast(dark[-1], colors.DARK.base) > colors.contrast(dark[0], colors.DARK.base) + 3
    assert light[0] != light[-1] and sum(light[-1]) != sum(light[0])


def _pixels(widget) -> np.ndarray:
    image = widget.grab().toImage().convertToFormat(QImage.Format.Format_RGB32)
    rows = np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), image.bytesPerLine())
    return rows[:, : image.width() * 4].reshape(image.height(), image.width(), 4)[..., 2::-1].astype(int)


def _painted_contrast(view) -> tuple[tuple, float]:
    """(background, best contrast of any painted pixel with it) in the heatmap's text area."""
    pixels = _pixels(view.viewport())
    background = tuple(int(v) for v in pixels[-2, -2])
    flat = {tuple(p) for p in pixels.reshape(-1, 3)[::7].tolist()}
    return background, max(colors.contrast(p, background) for p in flat)


@pytest.fixture
def restore_theme():
    app = QApplication.instance()
    style, palette, sheet = app.style().name(), app.palette(), app.styleSheet()
    yield app
    colors.use(colors.DARK)
    app.setStyle(style)
    app.setPalette(palette)
    app.setStyleSheet(sheet)


def test_view_theme_switches_the_window_and_the_heatmap_reads_on_both(offline_window, qtbot, tmp_path, restore_theme):
    window = offline_window
    path = write_conversation(tmp_path, "Packing for Kyoto in April: what should I bring?",
                              ("assistant", "Bring layers, a light rain jacket and comfortable walking shoes."))
    assert window.controller.files.open_conversation(path)
    view = window.heatmap
    window.menus.theme_actions["light"].trigger()
    qtbot.waitUntil(lambda: colors.scheme() is colors.LIGHT, timeout=2000)
    qtbot.waitUntil(lambda: view.palette().base().color().getRgb()[:3] == colors.LIGHT.base, timeout=2000)
    assert window.qsettings.value(THEME_KEY) == "light"
    qtbot.waitUntil(lambda: _painted_contrast(view)[0] == colors.LIGHT.base, timeout=3000)  # a light heatmap
    background, best = _painted_contrast(view)
    assert best >= AA, "the text painted on it reads"
    qtbot.waitUntil(lambda: window.palette().window().color().lightness() > 200, timeout=2000)  # the whole window

    window.menus.theme_actions["dark"].trigger()
    qtbot.waitUntil(lambda: view.palette().base().color().getRgb()[:3] == colors.DARK.base, timeout=2000)
    qtbot.waitUntil(lambda: _painted_contrast(view)[0] == colors.DARK.base, timeout=3000)
    assert _painted_contrast(view)[1] >= AA
    qtbot.waitUntil(lambda: window.palette().window().color().lightness() < 60, timeout=2000)


def test_following_the_system_takes_the_desktops_light_or_dark(offline_window, qtbot, restore_theme):
    app = restore_theme
    hints = app.styleHints()
    if not hasattr(hints, "setColorScheme"):
        pytest.skip("Qt before 6.8 cannot set the colour-scheme hint")
    assert resolve("light") is colors.LIGHT and resolve("dark") is colors.DARK
    if hints.colorScheme() == Qt.ColorScheme.Unknown:
        assert resolve("system") is colors.DARK, "no word from the desktop: the dark theme, as before"
    choice = ["system"]
    follow_system(app, lambda: choice[0])
    try:
        hints.setColorScheme(Qt.ColorScheme.Light)
        if hints.colorScheme() != Qt.ColorScheme.Light:
            pytest.skip(f"the {app.platformName()} platform ignores a requested colour scheme")
        apply_theme(app, "system")
        assert colors.scheme() is colors.LIGHT
        hints.setColorScheme(Qt.ColorScheme.Dark)
        qtbot.waitUntil(lambda: colors.scheme() is colors.DARK, timeout=2000)
        choice[0] = "light"  # a fixed choice is kept whatever the desktop says
        apply_theme(app, "light")
        hints.setColorScheme(Qt.ColorScheme.Light)
        hints.setColorScheme(Qt.ColorScheme.Dark)
        qtbot.wait(50)
        assert colors.scheme() is colors.LIGHT
    finally:
        hints.unsetColorScheme()
