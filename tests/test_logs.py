"""Logs a user can send: the app's records, its uncaught exceptions and native crashes
land in files in the log folder, which ``halo-weave --help`` names."""

from __future__ import annotations

import os
import subprocess
import sys

from halo_weave.logs import APP_LOG, CRASH_LOG


def _run(code: str, logs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HALO_WEAVE_LOGS": str(logs)})


def test_an_uncaught_exception_lands_in_the_app_log_with_its_traceback(tmp_path):
    done = _run("from halo_weave.logs import install_app_logging\n"
                "import logging, threading\n"
                "install_app_logging()\n"
                "logging.getLogger('halo_weave.app').info('window shown')\n"
                "t = threading.Thread(target=lambda: 1 / 0, name='indexer'); t.start(); t.join()\n"
                "raise ValueError('the settings file is unreadable')\n", tmp_path)
    assert done.returncode == 1
    text = (tmp_path / APP_LOG).read_text()
    assert "window shown" in text
    assert "uncaught exception in thread indexer" in text and "ZeroDivisionError" in text
    assert "ValueError: the settings file is unreadable" in text and "Traceback" in text


def test_a_native_crash_leaves_its_stack_in_the_crash_log(tmp_path):
    done = _run("from halo_weave.logs import install_app_logging\n"
                "import ctypes\n"
                "install_app_logging()\n"
                "ctypes.string_at(0)\n", tmp_path)
    assert done.returncode != 0
    text = (tmp_path / CRASH_LOG).read_text()
    assert "Segmentation fault" in text and "<string>" in text


def test_help_names_the_log_folder(tmp_path):
    done = subprocess.run([sys.executable, "-c", "from halo_weave.app import main; main(['--help'])"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "HALO_WEAVE_LOGS": str(tmp_path / "logs")})
    assert done.returncode == 0
    assert str(tmp_path / "logs") in done.stdout.split(), "the path whole, ready to copy"
