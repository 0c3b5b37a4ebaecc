"""Before Qt aborts on a machine without its X11 libraries, the app prints the fix."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from halo_weave.ui.platform_check import debian_package, missing_library, platform_problem


def test_library_names_map_to_debian_packages():
    assert debian_package("libxcb-cursor.so.0") == "libxcb-cursor0"
    assert debian_package("libxkbcommon-x11.so.0") == "libxkbcommon-x11-0"
    assert debian_package("libxcb-render-util.so.0") == "libxcb-render-util0"
    assert missing_library("libxcb-cursor.so.0: cannot open shared object file: No such file or directory") \
        == "libxcb-cursor.so.0"


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build a plugin with a missing library")
def test_a_plugin_with_a_missing_library_names_the_package(tmp_path):
    # A real shared object that needs a library which is not on this machine, as
    # libqxcb.so needs libxcb-cursor.so.0 on a minimal Debian.
    (tmp_path / "stub.c").write_text("int halo_stub(void) { return 1; }\n")
    (tmp_path / "plugin.c").write_text("extern int halo_stub(void); int plugin(void) { return halo_stub(); }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libxcb-halotest.so.0", "-o",
                    "libxcb-halotest.so.0", "stub.c"], cwd=tmp_path, check=True)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", "libqxcb.so", "plugin.c", "-L.",
                    "-l:libxcb-halotest.so.0"], cwd=tmp_path, check=True)
    (tmp_path / "libxcb-halotest.so.0").unlink()
    message = platform_problem(tmp_path / "libqxcb.so")
    assert message is not None
    assert "libxcb-halotest.so.0 is missing" in message
    assert "sudo apt-get install libxcb-halotest0" in message
    assert "libxcb-cursor0" in message  # the usual culprit is in the all-at-once line


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="xcb is Linux only")
def test_launch_without_a_display_explains_instead_of_aborting(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    env["HALO_WEAVE_HOME"] = str(tmp_path)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    result = subprocess.run([sys.executable, "-c", "import sys; from halo_weave.app import main; sys.exit(main([]))"],
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "cannot open a window" in result.stderr
    assert "Aborted" not in result.stderr and "core dumped" not in result.stderr
