"""API keys for model servers, never in plain text in the settings file.

Keys go to the platform keyring (``keyring``: macOS Keychain, Windows Credential Locker,
Secret Service / KWallet on Linux).  Where no keyring backend exists (a bare Linux, a
container) the key is kept for this session only, unless the user asks to store it in
a file only they can read (``api-keys.json`` in the data directory, mode 0600).  Keys are
looked up by server URL.  Qt-free.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

#: The keyring service name keys are stored under (the user name is the server URL).
SERVICE = "halo-weave"

#: The opt-in file, in the data directory.
KEY_FILE = "api-keys.json"

_session: dict[str, str] = {}
_lock = threading.Lock()


def _norm(url: str) -> str:
    return url.strip().rstrip("/")


def keyring_available() -> bool:
    """True when a real keyring backend exists on this machine."""
    try:
        import keyring
        from keyring.backends import fail
    except ImportError:
        return False
    try:
        backend = keyring.get_keyring()
    except Exception:  # noqa: BLE001 - a broken backend is no backend
        return False
    return not isinstance(backend, fail.Keyring) and backend.priority > 0


def _key_file(data_dir: Path | None) -> Path:
    if data_dir is None:
        from ..settings import data_dir as default_dir

        data_dir = default_dir()
    return Path(data_dir) / KEY_FILE


def _read_file(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def get_key(url: str, *, data_dir: Path | None = None) -> str | None:
    """The key for ``url``: this session's, the keyring's, or the opt-in file's."""
    url = _norm(url)
    with _lock:
        if url in _session:
            return _session[url] or None
    if keyring_available():
        import keyring

        try:
            key = keyring.get_password(SERVICE, url)
        except Exception:  # noqa: BLE001
            key = None
        if key:
            return key
    path = _key_file(data_dir)
    return _read_file(path).get(url) if path.exists() else None


def set_key(url: str, key: str, *, to_file: bool = False, data_dir: Path | None = None) -> str:
    """Store ``key`` for ``url``; returns a sentence saying where it went.

    An empty key forgets the key everywhere.
    """
    url, key = _norm(url), key.strip()
    with _lock:
        _session[url] = key
    path = _key_file(data_dir)
    stored = _read_file(path) if path.exists() else {}
    if not key:
        if keyring_available():
            import keyring

            try:
                keyring.delete_password(SERVICE, url)
            except Exception:  # noqa: BLE001 - nothing stored
                pass
        if url in stored:
            stored.pop(url)
            _write_private(path, stored)
        return "The API key was removed."
    if keyring_available():
        import keyring

        keyring.set_password(SERVICE, url, key)
        return "The API key is stored in the system keyring."
    if to_file:
        stored[url] = key
        _write_private(path, stored)
        return f"No system keyring on this machine: the API key is stored in {path}, readable only by you."
    return ("No system keyring on this machine: the API key is kept for this session only "
            "(tick “store in a file only I can read” to keep it).")


def _write_private(path: Path, data: dict) -> None:
    """Write ``data`` to ``path`` readable and writable by the owner only (0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def forget_session() -> None:
    """Drop the session-only keys (tests)."""
    with _lock:
        _session.clear()
