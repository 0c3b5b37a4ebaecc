"""Start the reference server as a child process and wait until it is ready.

Used by the test suite (one server per session) and by the desktop app (autostart when
no server answers).  Qt-free and free of torch imports, so it is cheap to use.

>>> server = start_server(port=0)                     # doctest: +SKIP
>>> server.wait_ready(timeout=180)                    # doctest: +SKIP
'http://127.0.0.1:40123'
>>> server.stop()                                     # doctest: +SKIP
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import threading
import time
from typing import Callable, Mapping, Sequence

from ..errors import ServerStartError

#: Matches the ready line printed by ``halo_weave.server.__main__``.
READY_PATTERN = re.compile(r"Halo Weave server ready on (?P<url>http://\S+) \(model (?P<model>.*)\)")

#: Log lines kept for error messages and progress display.
LOG_TAIL_LINES = 200

#: Seconds to wait after SIGTERM before SIGKILL.
STOP_GRACE_S = 5.0


class ServerProcess:
    """A running ``halo_weave.server`` child process."""

    def __init__(self, process: subprocess.Popen, on_line: Callable[[str], None] | None = None) -> None:
        self.process = process
        self.url: str | None = None
        self.model: str | None = None
        self.log: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
        self._on_line = on_line
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._read, name="server-output", daemon=True)
        self._reader.start()

    @property
    def port(self) -> int | None:
        return int(self.url.rsplit(":", 1)[1]) if self.url else None

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    def _read(self) -> None:
        # Drain the pipe for the life of the process so the server never blocks on a write.
        for line in self.process.stdout:
            line = line.rstrip("\n")
            self.log.append(line)
            match = READY_PATTERN.search(line)
            if match and not self._ready.is_set():
                self.url, self.model = match.group("url"), match.group("model")
                self._ready.set()
            if self._on_line:
                try:
                    self._on_line(line)
                except Exception:  # noqa: BLE001 - a display callback must not kill the reader
                    pass
        self._ready.set()  # process ended: wake waiters, they check `url`

    def wait_ready(self, timeout: float = 300.0) -> str:
        """Block until the ready line (returns the URL) or raise :class:`ServerStartError`."""
        deadline = time.monotonic() + timeout
        while not self._ready.wait(min(0.2, max(0.0, deadline - time.monotonic()))):
            if time.monotonic() >= deadline:
                self.stop()
                raise ServerStartError(f"server not ready after {timeout:.0f} s:\n{self.log_tail()}")
        if self.url is None:
            self.process.wait(timeout=STOP_GRACE_S)
            raise ServerStartError(
                f"server exited with status {self.process.returncode} before it was ready:\n{self.log_tail()}"
            )
        return self.url

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(list(self.log)[-lines:])

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after a grace period)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._reader.join(timeout=STOP_GRACE_S)

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start_server(
    port: int = 0,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    *,
    host: str = "127.0.0.1",
    python: str | None = None,
    on_line: Callable[[str], None] | None = None,
) -> ServerProcess:
    """Start ``python -m halo_weave.server``; call :meth:`ServerProcess.wait_ready` next.

    ``env`` is added to this process's environment; ``on_line`` receives every output
    line (stdout and stderr merged), e.g. to show loading progress.
    """
    full_env = dict(os.environ)
    full_env.setdefault("HF_HUB_OFFLINE", "1")
    full_env["PYTHONUNBUFFERED"] = "1"
    if env:
        full_env.update(env)
    command = [python or sys.executable, "-m", "halo_weave.server",
               "--host", host, "--port", str(port), *extra_args]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=full_env,
        text=True,
        encoding="utf-8",
        errors="replace",
        bufsize=1,
    )
    return ServerProcess(process, on_line)
