"""Fixtures shared by the window tests (see window_helpers.py)."""

from __future__ import annotations

import pytest

from window_helpers import offline_window as _offline_window


@pytest.fixture
def offline_window(qtbot, tmp_path, monkeypatch):
    """A shown window on a closed port, its data in ``tmp_path``; closed afterwards."""
    window = _offline_window(qtbot, tmp_path, monkeypatch)
    yield window
    if not window.controller._shutting_down:  # a test may have closed it
        window.close()
