"""Before Qt starts: can its X11 platform plugin load?  If not, say how to fix it.

On a minimal Linux without Qt's X11 dependencies, Qt aborts with "Could not load the Qt
platform plugin "xcb" in "" even though it was found" and a core dump, which says
nothing about the missing system library (usually ``libxcb-cursor0``).  This module
loads the plugin the way Qt would (``dlopen``) before any Qt object exists, and when that
fails returns a message naming the missing library and the package to install.
Qt-free (ctypes only).
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import re
import sys
from pathlib import Path

#: Every X11 library Qt's xcb plugin needs that minimal installs tend to lack (Debian names).
XCB_PACKAGES = ("libxcb-cursor0", "libxkbcommon-x11-0", "libxcb-icccm4", "libxcb-keysyms1",
                "libxcb-image0", "libxcb-render-util0", "libxcb-shape0", "libxcb-xkb1")


def qt_platform() -> str:
    """The platform plugin Qt will try first on this machine ('' when not Linux)."""
    requested = os.environ.get("QT_QPA_PLATFORM", "").split(";")[0].split(":")[0].strip()
    if requested:
        return requested
    if not sys.platform.startswith("linux"):
        return ""
    if os.environ.get("WAYLAND_DISPLAY") and os.environ.get("XDG_SESSION_TYPE") == "wayland":
        return "wayland"
    return "xcb"


def xcb_plugin() -> Path | None:
    """PySide6's ``libqxcb.so`` (None when PySide6 or the plugin is not there)."""
    spec = importlib.util.find_spec("PySide6")
    if spec is None or not spec.submodule_search_locations:
        return None
    plugin = Path(spec.submodule_search_locations[0]) / "Qt" / "plugins" / "platforms" / "libqxcb.so"
    return plugin if plugin.exists() else None


def missing_library(error: str) -> str | None:
    """The library a loader error names ("libxcb-cursor.so.0: cannot open shared object file")."""
    match = re.search(r"([\w.+-]+\.so(?:\.\d+)*): cannot open shared object file", error)
    return match.group(1) if match else None


def debian_package(library: str) -> str:
    """The usual Debian/Ubuntu package of a shared library (libxcb-cursor.so.0 -> libxcb-cursor0)."""
    name, _, version = library.partition(".so")
    version = version.lstrip(".").split(".")[0]
    name = name.lower()
    return f"{name}{'-' if name[-1:].isdigit() else ''}{version}"


def platform_problem(plugin: Path | None = None) -> str | None:
    """A message for the user when the xcb plugin cannot load, else None.

    ``plugin`` defaults to PySide6's xcb plugin; nothing is checked when Qt will not use
    xcb (another platform requested, a Wayland session, not Linux).
    """
    if plugin is None:
        if qt_platform() != "xcb":
            return None
        plugin = xcb_plugin()
        if plugin is None:
            return None
    try:
        ctypes.CDLL(str(plugin), mode=os.RTLD_LAZY)
    except OSError as exc:
        error = str(exc)
    else:
        if qt_platform() == "xcb" and not os.environ.get("DISPLAY") and plugin == xcb_plugin():
            return ("Halo Weave cannot open a window: no X display (DISPLAY is not set).\n"
                    "Run it inside a desktop session, under `xvfb-run halo-weave`, or set "
                    "QT_QPA_PLATFORM=offscreen for a window nobody sees.")
        return None
    library = missing_library(error)
    lines = ["Halo Weave cannot open a window: Qt's X11 platform plugin (xcb) does not load."]
    if library:
        package = debian_package(library)
        lines += [f"The system library {library} is missing. On Debian or Ubuntu:",
                  f"    sudo apt-get install {package}",
                  "or, to install everything Qt's xcb plugin needs at once:",
                  f"    sudo apt-get install {' '.join(XCB_PACKAGES)}",
                  "(Fedora: sudo dnf install xcb-util-cursor xcb-util-wm xcb-util-keysyms "
                  "xcb-util-image xcb-util-renderutil libxkbcommon-x11)"]
    else:
        lines += [f"The loader said: {error}",
                  f"On Debian or Ubuntu: sudo apt-get install {' '.join(XCB_PACKAGES)}"]
    lines.append("Without a display, QT_QPA_PLATFORM=offscreen runs it headless.")
    return "\n".join(lines)
