"""The desktop entry and the icon: installed into the user's menu on request, and on the window."""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
from pathlib import Path

from PySide6.QtGui import QIcon

SCRIPT = Path(sys.executable).with_name("halo-weave")  # installed beside this interpreter


def _run(*args: str, xdg: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, XDG_DATA_HOME=str(xdg))
    return subprocess.run([str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=120)


def test_install_desktop_entry_puts_halo_weave_in_the_menu_with_its_icon(tmp_path, qapp):
    result = _run("--install-desktop-entry", xdg=tmp_path)
    assert result.returncode == 0, result.stderr
    entry_path = tmp_path / "applications" / "halo-weave.desktop"
    icon_path = tmp_path / "icons" / "hicolor" / "scalable" / "apps" / "halo-weave.svg"
    assert f"wrote {entry_path}" in result.stdout and f"wrote {icon_path}" in result.stdout

    entry = configparser.ConfigParser(interpolation=None)
    entry.optionxform = str
    entry.read(entry_path)
    desktop = entry["Desktop Entry"]
    assert desktop["Type"] == "Application" and desktop["Name"] == "Halo Weave"
    assert desktop["Icon"] == "halo-weave"
    # The entry runs this installation's command by its full path (pipx's bin folder is
    # often not on the desktop session's PATH), and that command works.
    assert Path(desktop["Exec"]) == SCRIPT
    assert subprocess.run([desktop["Exec"], "--version"], capture_output=True, timeout=120).returncode == 0
    assert not QIcon(str(icon_path)).pixmap(48, 48).isNull()

    removed = _run("--remove-desktop-entry", xdg=tmp_path)
    assert removed.returncode == 0
    assert not entry_path.exists() and not icon_path.exists()


def test_the_window_shows_the_app_icon(offline_window):
    image = offline_window.windowIcon().pixmap(64, 64).toImage()
    assert not image.isNull()
    assert image.pixelColor(32, 32).alpha() > 0  # drawn, not a blank placeholder
