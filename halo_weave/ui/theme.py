"""A dark theme under which the heatmap's olive → gold scale reads well.

Fusion style plus a dark palette; the small stylesheet uses only relative units (em,
pt-free) so it scales with the user's font and the screen's device pixel ratio.
"""

from __future__ import annotations

from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication

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


def dark_palette() -> QPalette:
    """The dark palette (also usable for a single widget)."""
    palette = QPalette()
    roles = QPalette.ColorRole
    palette.setColor(roles.Window, WINDOW)
    palette.setColor(roles.WindowText, TEXT)
    palette.setColor(roles.Base, BASE)
    palette.setColor(roles.AlternateBase, ALTERNATE)
    palette.setColor(roles.ToolTipBase, ALTERNATE)
    palette.setColor(roles.ToolTipText, TEXT)
    palette.setColor(roles.PlaceholderText, DIM_TEXT)
    palette.setColor(roles.Text, TEXT)
    palette.setColor(roles.Button, ALTERNATE)
    palette.setColor(roles.ButtonText, TEXT)
    palette.setColor(roles.BrightText, QColor(255, 120, 110))
    palette.setColor(roles.Link, QColor(110, 170, 255))
    palette.setColor(roles.Highlight, QColor(53, 80, 122))
    palette.setColor(roles.HighlightedText, QColor(255, 255, 255))
    disabled = QPalette.ColorGroup.Disabled
    for role in (roles.WindowText, roles.Text, roles.ButtonText):
        palette.setColor(disabled, role, QColor(110, 110, 115))
    return palette


def apply_dark_theme(app: QApplication) -> None:
    """Fusion style, dark palette and stylesheet for the whole application."""
    app.setStyle("Fusion")
    app.setPalette(dark_palette())
    app.setStyleSheet(STYLESHEET)
