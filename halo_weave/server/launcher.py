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
import signal
import subprocess
import sys
import threading
import time
from typing import Callable, Mapping, Sequence

from ..errors import ServerStartError
from ..logs import server_output_log

#: Matches the ready line printed by ``halo_weave.server.__main__``.
READY_PATTERN = re.compile(r"Halo Weave server ready on (?P<url>http://\S+) \(model (?P<model>.*)\)")

#: Log lines kept for error messages and progress display.
LOG_TAIL_LINES = 200

#: Seconds to wait after SIGTERM before SIGKILL.
STOP_GRACE_S = 5.0


def exit_words(returncode: int) -> str:
    """How a process ended, in words: ``signal 11`` for one killed by SIGSEGV (``128 + n``
    from a shell counts as signal n), ``exit status 3`` otherwise."""
    number = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else 0
    if number in _CRASH_SIGNALS or (returncode < 0 and number > 0):
        return f"signal {number}"
    return f"exit status {returncode}"


_CRASH_SIGNALS = {int(s) for s in (signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGABRT, signal.SIGFPE)}


class ServerProcess:
    """A running ``halo_weave.server`` child process.

    ``on_line`` receives every output line; ``on_exit(returncode)`` is called once when
    the process ends by itself (not after :meth:`stop`); with ``log_file`` every line is
    also written to the built-in server's log file (:mod:`halo_weave.logs`).
    """

    def __init__(self, process: subprocess.Popen, on_line: Callable[[str], None] | None = None,
                 on_exit: Callable[[int], None] | None = None, log_file: bool = False) -> None:
        self.process = process
        self.url: str | None = None
        self.model: str | None = None
        self.log: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
        self._on_line = on_line
        self._on_exit = on_exit
        self._stopping = False
        self._file_log = server_output_log() if log_file else None
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
            if self._file_log is not None:
                self._file_log.info("%s", line)
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
        code = self.process.wait()
        if self._file_log is not None:
            self._file_log.info("[the server process ended: %s]", exit_words(code))
        if self._on_exit is not None and not self._stopping:
            self._on_exit(code)

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

    @property
    def returncode(self) -> int | None:
        """The exit status once the process has ended (negative: the signal that ended it)."""
        return self.process.poll()

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after ``grace_s`` seconds)."""
        self._stopping = True
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=grace_s)
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
    on_exit: Callable[[int], None] | None = None,
    log_file: bool = False,
) -> ServerProcess:
    """Start ``python -m halo_weave.server``; call :meth:`ServerProcess.wait_ready` next.

    ``env`` is added to this process's environment; ``on_line`` receives every output
    line (stdout and stderr merged), e.g. to show loading progress; ``on_exit`` and
    ``log_file``: see :class:`ServerProcess`.
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
    return ServerProcess(process, on_line, on_exit, log_file)
