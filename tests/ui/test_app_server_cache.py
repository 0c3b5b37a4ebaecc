"""The app's bundled server starts with a KV cache sized from the app's budget."""

from __future__ import annotations

import pytest

from halo_weave.app import TurnController
from halo_weave.settings import Settings
from halo_weave.ui.control import connection as connection_mod

pytestmark = pytest.mark.slow

NOTHING_LISTENS = "http://127.0.0.1:9"


def test_the_bundled_server_starts_with_a_cache_sized_from_the_budget(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("HALO_WEAVE_HOME", str(tmp_path))
    monkeypatch.setattr(connection_mod, "DEFAULT_SERVER_URL", NOTHING_LISTENS)
    settings = Settings.of(server_url=NOTHING_LISTENS, autostart_server=True, max_context_tokens=1000,
                        max_new_tokens=200)
    controller = TurnController(settings, tmp_path, autostart=True)
    try:
        controller.start()
        qtbot.waitUntil(lambda: controller.link.state == "connected", timeout=300_000)
        server = controller.link.server
        assert server is not None and server.alive()
        # 1,000 + 200 tokens, padded to 256 cells: not the model's 8,192.
        assert any("1280 cells to start" in line for line in server.log), server.log_tail()
    finally:
        controller.shutdown()  # stops the server it started
