"""Session-wide test setup: private data dirs, offline models, one real model server.

``HALO_WEAVE_HOME`` and ``HALO_WEAVE_CONFIG`` point at a fresh temporary directory per session;
``HALO_WEAVE_CACHE`` at a stable temporary path so the model files made by the first run
(the assembled Qwen GGUF, the dequantized SmolLM2) make later runs start servers in seconds.
"""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
from pathlib import Path

import pytest

#: Shared across test runs on purpose: holds the assembled Qwen GGUF (491 MB), the llama.cpp
#: verdicts and the dequantized SmolLM2 (~540 MB).
TEST_CACHE_DIR = Path(tempfile.gettempdir()) / "halo-weave-test-cache"

#: First start dequantizes the GGUF (about a minute on a busy 2-core machine).
SERVER_START_TIMEOUT_S = 300

_HOME = tempfile.mkdtemp(prefix="halo-weave-home-")
os.environ["HALO_WEAVE_HOME"] = _HOME
os.environ["HALO_WEAVE_CONFIG"] = _HOME  # settings.ini: never the user's own
os.environ["HALO_WEAVE_CACHE"] = str(TEST_CACHE_DIR)
os.environ["HALO_WEAVE_LOGS"] = str(Path(_HOME) / "logs")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def pytest_unconfigure(config) -> None:
    shutil.rmtree(_HOME, ignore_errors=True)


@pytest.fixture(autouse=True)
def _collect_on_the_main_thread():
    """Once a controller has turned automatic collection over to the application's
    thread (ui/control/collector.py), a test that never runs the event loop would leave
    its cycles for good: each test's are collected here, on the main thread, after
    pytest-qt has closed its windows."""
    yield
    if not gc.isenabled():
        gc.collect()


def _session_server(*model: str):
    from halo_weave.server.launcher import start_server

    # The saved conversation caches go to TEST_CACHE_DIR/kv-states, which outlives the run: bounded.
    process = start_server(port=0, extra_args=["--kv-disk-mb", "512", *model],
                           env={"HALO_WEAVE_CACHE": str(TEST_CACHE_DIR)})
    try:
        process.wait_ready(timeout=SERVER_START_TIMEOUT_S)
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="session")
def server():
    """The real reference server on 127.0.0.1 with the bundled default model
    (``.url``, ``.port``, ``.process``)."""
    yield from _session_server()


@pytest.fixture(scope="session")
def smollm2_server():
    """The same server with SmolLM2-135M, for what was recorded with it (a real KoboldCPP's
    answers) and where the text-mode tokenizer's ids must be the server's."""
    yield from _session_server("--model", "smollm2")


@pytest.fixture
def offline_window(qtbot, tmp_path, monkeypatch):
    """A shown window on a closed port, its data in ``tmp_path``; closed afterwards.

    Here rather than in tests/ui/conftest.py: a second module named ``conftest`` hides this
    one from the tests that import its constants (``from conftest import ...``).
    """
    from window_helpers import offline_window as _offline_window  # tests/ui, on the path there

    window = _offline_window(qtbot, tmp_path, monkeypatch)
    yield window
    if not window.controller.gate.closing:  # a test may have closed it
        window.close()
