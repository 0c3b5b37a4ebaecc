"""The dark and the light theme, and following the system's choice between them.

Fusion style plus a palette and a small stylesheet per theme (relative units only, so it
scales with the user's font and the screen's device pixel ratio).  The heatmap's own
colours for each theme are :class:`.colors.Scheme` (``colors.DARK``, ``colors.LIGHT``),
each checked for contrast.  View → Theme chooses: *Follow the system* (the default: Qt's
colour-scheme hint, light when the desktop says light, dark otherwise, changing with it),
*Dark* or *Light*; the choice is kept in the settings file (``view/theme``).
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication

from . import colors

#: The choices of View → Theme, and the settings key that keeps one.
THEMES = ("system", "dark", "light")
THEME_KEY = "view/theme"

WINDOW = QColor(30, 31, 35)
BASE = QColor(22, 22, 26)
ALTERNATE = QColor(38, 39, 44)
TEXT = QColor(225, 223, 216)
DIM_TEXT = QColor(140, 140, 145)
ACCENT = QColor(70, 110, 170)

STYLESHEET = """
QToolTip { color: #e1dfd8; background: #26272c; border: 1px solid #44464d; padding: 0.2em; }
QMenu { background: #26272c; border: 1px solid #44464d; }
QMenu::item { padding: 0.25em 1.5em 0.25em 1em; }
QMenu::item:selected { background: #35507a; }
QMenu::item:disabled { color: #7d7d84; }
QWidget#statsBar { background: #1c1d21; border-bottom: 1px solid #2e3036; }
QWidget#statsBar QLabel { color: #c9c7c0; }
QLabel#graveyardCount { font-weight: bold; }
QListView { background: #18181c; border: 1px solid #2e3036; }
QLineEdit, QPlainTextEdit, QSpinBox, QDoubleSpinBox, QComboBox {
    selection-background-color: #35507a;
}
QPlainTextEdit { border: 1px solid #2e3036; }
QToolButton:checked { background: #35507a; border-radius: 0.25em; }
"""

LIGHT_STYLESHEET = """
QToolTip { color: #1e1e22; background: #fbfbf8; border: 1px solid #b9b9c0; padding: 0.2em; }
QMenu { background: #fbfbf8; border: 1px solid #b9b9c0; }
QMenu::item { padding: 0.25em 1.5em 0.25em 1em; }
QMenu::item:selected { background: #c9daf5; }
QMenu::item:disabled { color: #707078; }
QWidget#statsBar { background: #ecebe6; border-bottom: 1px solid #d3d2cc; }
QWidget#statsBar QLabel { color: #2c2c30; }
QLabel#graveyardCount { font-weight: bold; }
QListView { background: #fbfbf8; border: 1px solid #d3d2cc; }
QLineEdit, QPlainTextEdit, QSpinBox, QDoubleSpinBox, QComboBox {
    selection-background-color: #c9daf5; selection-color: #000000;
}
QPlainTextEdit { border: 1px solid #d3d2cc; }
QToolButton:checked { background: #c9daf5; border-radius: 0.25em; }
"""


def dark_palette() -> QPalette:
    """The dark palette (also usable for a single widget)."""
    return _palette(WINDOW, BASE, ALTERNATE, TEXT, DIM_TEXT, QColor(255, 120, 110), QColor(110, 170, 255),
                    QColor(53, 80, 122), QColor(255, 255, 255), QColor(110, 110, 115))


def light_palette() -> QPalette:
    """The light palette: dark text on warm white, the same roles as :func:`dark_palette`."""
    return _palette(QColor(240, 239, 234), QColor(*colors.LIGHT.base), QColor(232, 231, 226),
                    QColor(30, 30, 34), QColor(100, 100, 108), QColor(190, 30, 30), QColor(*colors.LIGHT.link),
                    QColor(201, 218, 245), QColor(0, 0, 0), QColor(150, 150, 156))


def _palette(window, base, alternate, text, dim, bright, link, highlight, highlighted, disabled_text) -> QPalette:
    palette = QPalette()
    roles = QPalette.ColorRole
    for role, color in ((roles.Window, window), (roles.WindowText, text), (roles.Base, base),
                        (roles.AlternateBase, alternate), (roles.ToolTipBase, alternate),
                        (roles.ToolTipText, text), (roles.PlaceholderText, dim), (roles.Text, text),
                        (roles.Button, alternate), (roles.ButtonText, text), (roles.BrightText, bright),
                        (roles.Link, link), (roles.Highlight, highlight), (roles.HighlightedText, highlighted)):
        palette.setColor(role, color)
    disabled = QPalette.ColorGroup.Disabled
    for role in (roles.WindowText, roles.Text, roles.ButtonText):
        palette.setColor(disabled, role, disabled_text)
    return palette


def system_prefers_light() -> bool:
    """Whether the desktop asks for a light scheme (Qt's colour-scheme hint; unknown: no)."""
    app = QGuiApplication.instance()
    return app is not None and app.styleHints().colorScheme() == Qt.ColorScheme.Light


def resolve(choice: str) -> colors.Scheme:
    """The scheme a View → Theme choice stands for now."""
    if choice == "light" or (choice == "system" and system_prefers_light()):
        return colors.LIGHT
    return colors.DARK


def apply_theme(app: QApplication, choice: str = "system") -> colors.Scheme:
    """Fusion style, the palette and stylesheet of ``choice`` (see :data:`THEMES`) for the
    whole application, and the heatmap's colours with them; returns the scheme in use.
    Widgets hear of it as a palette change (the window restyles the heatmap then)."""
    scheme = resolve(choice)
    colors.use(scheme)
    light = scheme is colors.LIGHT
    # A stylesheet's polish keeps the palette each widget had: drop it, change the
    # palette, then style again, so that a switch while the window is open takes whole.
    app.setStyleSheet("")
    app.setStyle("Fusion")
    app.setPalette(light_palette() if light else dark_palette())
    app.setStyleSheet(LIGHT_STYLESHEET if light else STYLESHEET)
    return scheme


def apply_dark_theme(app: QApplication) -> None:
    """Fusion style, dark palette and stylesheet for the whole application."""
    apply_theme(app, "dark")


def follow_system(app: QApplication, choice_of) -> None:
    """Apply the theme again whenever the desktop switches between light and dark, while
    ``choice_of()`` (the current View → Theme choice) is "system"."""
    app.styleHints().colorSchemeChanged.connect(
        lambda _scheme: apply_theme(app, "system") if choice_of() == "system" else None)
