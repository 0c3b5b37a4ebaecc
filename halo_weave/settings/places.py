"""Where the app keeps its files: data, settings, caches and logs, each overridable by an
environment variable."""

from __future__ import annotations

import logging
import os
from pathlib import Path


def data_dir() -> Path:
    """Where conversations live: ``$HALO_WEAVE_HOME`` or the platform's user data dir."""
    return _user_dir("HALO_WEAVE_HOME", "user_data_dir")


#: The settings file's name in the config directory (QSettings' INI format).
SETTINGS_FILE = "settings.ini"


def config_dir(create: bool = True) -> Path:
    """Where the settings file lives: ``$HALO_WEAVE_CONFIG``; else ``$HALO_WEAVE_HOME`` when
    that is set (a private data directory keeps its own settings, as the tests' does); else
    the platform's user config directory (``~/.config/halo-weave`` on Linux).  ``create``:
    make it if missing (``--help`` only names it)."""
    if not os.environ.get("HALO_WEAVE_CONFIG") and os.environ.get("HALO_WEAVE_HOME"):
        return _user_dir("HALO_WEAVE_HOME", "user_data_dir", create)
    return _user_dir("HALO_WEAVE_CONFIG", "user_config_dir", create)


def settings_file() -> Path:
    """The settings file in :func:`config_dir`.  One kept in the data directory, where
    earlier versions wrote it, is moved here first, once (never over an existing one)."""
    target = config_dir() / SETTINGS_FILE
    old = data_dir() / SETTINGS_FILE
    if not target.exists() and old.is_file() and old.resolve() != target.resolve():
        import shutil

        shutil.move(old, target)
        logging.getLogger("halo_weave.settings").info("Moved the settings from %s to %s", old, target)
    return target


def cache_dir() -> Path:
    """Where derived, re-creatable files live (e.g. the dequantized model cache)."""
    return _user_dir("HALO_WEAVE_CACHE", "user_cache_dir")


def log_dir() -> Path:
    """Where the app's and the built-in server's log files go: ``$HALO_WEAVE_LOGS`` or the
    platform's user log directory (``~/.local/state/halo-weave/log`` on Linux)."""
    return _user_dir("HALO_WEAVE_LOGS", "user_log_dir")


def _user_dir(env_var: str, platform_kind: str, create: bool = True) -> Path:
    env = os.environ.get(env_var)
    if env:
        path = Path(env).expanduser()
    else:
        import platformdirs  # only when no override is set: tests and CI never need it

        path = Path(getattr(platformdirs, platform_kind)("halo-weave", appauthor=False))
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path
