"""The icon and the desktop entry: shipped in ``resources/``, installed for the user on request.

``halo-weave --install-desktop-entry`` writes ``halo-weave.desktop`` to
``$XDG_DATA_HOME/applications`` and the icon to
``$XDG_DATA_HOME/icons/hicolor/scalable/apps`` (``~/.local/share`` when ``XDG_DATA_HOME``
is unset), so the app appears in the desktop's menu with its icon;
``--remove-desktop-entry`` takes both away again.  The entry runs this installation's
``halo-weave`` by its full path: pipx's and a virtual environment's script folders are
often not on the desktop session's ``PATH``.
"""

from __future__ import annotations

import os
import shutil
import sys
from importlib import resources
from pathlib import Path

#: The name of the icon and of the desktop entry (also the app's Wayland app id).
APP_ID = "halo-weave"


def resource(name: str) -> Path:
    """A file shipped in ``halo_weave/ui/resources``."""
    return Path(str(resources.files(__package__) / "resources" / name))


def icon_path() -> Path:
    """The app's icon (SVG)."""
    return resource(f"{APP_ID}.svg")


def _xdg_data_home() -> Path:
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")


def entry_target() -> Path:
    """Where the desktop entry is installed."""
    return _xdg_data_home() / "applications" / f"{APP_ID}.desktop"


def icon_target() -> Path:
    """Where the icon is installed."""
    return _xdg_data_home() / "icons" / "hicolor" / "scalable" / "apps" / f"{APP_ID}.svg"


def executable() -> str:
    """The ``halo-weave`` script of this installation, or the bare name if none is found."""
    beside = Path(sys.executable).parent / APP_ID
    if beside.is_file():
        return str(beside)
    return shutil.which(APP_ID) or APP_ID


def entry_text(exec_path: str) -> str:
    """The shipped desktop entry, its ``Exec`` line running ``exec_path``."""
    lines = resource(f"{APP_ID}.desktop").read_text(encoding="utf-8").splitlines()
    quoted = f'"{exec_path}"' if " " in exec_path else exec_path
    return "\n".join(f"Exec={quoted}" if line.startswith("Exec=") else line for line in lines) + "\n"


def install() -> list[Path]:
    """Write the desktop entry and the icon for this user; the paths written."""
    entry, icon = entry_target(), icon_target()
    entry.parent.mkdir(parents=True, exist_ok=True)
    icon.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(icon_path(), icon)
    entry.write_text(entry_text(executable()), encoding="utf-8")
    return [entry, icon]


def remove() -> list[Path]:
    """Delete the installed desktop entry and icon; the paths that were there."""
    removed = []
    for path in (entry_target(), icon_target()):
        if path.exists():
            path.unlink()
            removed.append(path)
    return removed
