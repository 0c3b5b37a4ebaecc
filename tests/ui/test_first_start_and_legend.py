"""An empty window explains the colours, the graveyard and the numbers; View → Heatmap
legend shows every colour the heatmap uses.  No model needed."""

from __future__ import annotations

import pytest


@pytest.fixture
def window(offline_window):
    offline_window.controller.files.open_conversation(None)
    return offline_window


def test_first_start_explains_colours_graveyard_and_numbers(window, qtbot):
    hint = window.guide.hint
    assert hint.isVisible()
    text = hint.text()
    assert "Colours" in text and "graveyard" in text and "Live" in text
    # It sits inside the heatmap, readable, not clipped.
    area = window.heatmap.viewport().geometry()
    assert area.contains(hint.geometry().topLeft()) and hint.width() <= area.width()
    # The first message ends it.
    conv = window.controller.conv
    conv.add_turn("user", [1, 2], ["Hello", " there"])
    window.controller.signals.conversation_changed.emit()
    assert not hint.isVisible()
    window.controller.files.open_conversation(None)  # a new, empty conversation explains again
    assert hint.isVisible()


def test_view_menu_opens_the_legend_with_every_colour(window, qtbot):
    assert window.menus.legend_action.text().startswith("Heatmap")
    window.menus.legend_action.trigger()
    legend = window.guide.legend
    qtbot.waitExposed(legend)
    words = " ".join(legend.descriptions)
    for meaning in ("olive", "gold", "yellow background", "tool", "system prompt", "pruned", "Pinned"):
        assert meaning in words
    image = legend.grab().toImage()
    # The scale swatch really is painted olive → gold.
    colours = {image.pixelColor(x, y).name() for x in range(0, image.width(), 4) for y in range(0, image.height(), 4)}
    assert len(colours) > 10


def test_a_starting_window_says_it_is_starting_not_offline(qtbot, tmp_path, monkeypatch):
    """Between the window's first paint and the first connection attempt nothing says
    "Offline" or "No model server": that flashed at every start."""
    from halo_weave.app import TurnController
    from halo_weave.settings import Settings
    from halo_weave.ui.main_window import MainWindow, app_qsettings

    monkeypatch.setenv("HALO_WEAVE_HOME", str(tmp_path))
    controller = TurnController(Settings.of(server_url="http://127.0.0.1:9", autostart_server=False), tmp_path,
                                autostart=False)
    window = MainWindow(controller, app_qsettings(tmp_path))
    qtbot.addWidget(window)
    window.show()
    qtbot.waitExposed(window)
    assert window.stats_bar.connection_state() == "connecting"
    assert "No model server" not in window.reason.text() and "Offline" not in window.stats_bar.connection_label.text()
    controller.start()  # nothing answers there: now it is offline, and says so
    qtbot.waitUntil(lambda: controller.link.state == "offline", timeout=30_000)
    assert window.stats_bar.connection_state() == "offline"
    window.close()
