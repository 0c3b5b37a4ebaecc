"""Real third-party model servers on loopback, for the opt-in tests (test_real_servers.py).

They are not built by ``make test``: point the environment at binaries you built.

* ``HALO_WEAVE_LLAMA_SERVER``: llama.cpp's ``llama-server`` executable.
* ``HALO_WEAVE_KOBOLDCPP``: KoboldCPP's ``koboldcpp.py`` (beside its compiled library),
  or a KoboldCPP executable.

Each serves the bundled SmolLM2 GGUF on a free loopback port (or a given one) as a child
process, its log in a temporary file; without the variable the test skips, saying so.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from llama_cpp_server import free_port

#: Seconds a server may take to load the 135M model on a busy 2-core machine.
START_TIMEOUT_S = 180

LLAMA_ENV = "HALO_WEAVE_LLAMA_SERVER"
KOBOLD_ENV = "HALO_WEAVE_KOBOLDCPP"


def _required(env: str, what: str) -> Path:
    value = os.environ.get(env)
    if not value:
        pytest.skip(f"{env} is not set: point it at {what} to run this test against the real server")
    path = Path(value)
    if not path.exists():
        pytest.skip(f"{env}={value} does not exist")
    return path


class RealServer:
    """A server binary as a child process (``.url``, ``.port``, ``.process``, ``.log_text()``);
    as a context manager, stopped on leaving."""

    ready_path = "/"

    def __init__(self, args: list[str], port: int, cwd: Path | None = None) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log = tempfile.NamedTemporaryFile(prefix="real-server-", suffix=".log", delete=False)
        # Its own process group: stopping it also stops anything it started.
        self.process = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, cwd=cwd,
                                        env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{args[0]} exited: {self.log_text()[-2000:]}")
            try:
                if httpx.get(self.url + self.ready_path, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"{args[0]} did not answer in {START_TIMEOUT_S} s: {self.log_text()[-2000:]}")

    def __enter__(self) -> "RealServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def log_text(self) -> str:
        try:
            return Path(self.log.name).read_bytes().decode("utf-8", "replace")
        except OSError:
            return ""

    def kill(self) -> None:
        """The process dies at once (SIGKILL), as when it crashes."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()


class LlamaServerProcess(RealServer):
    """``llama-server -m <bundled GGUF>`` (context ``n_ctx``)."""

    ready_path = "/health"

    def __init__(self, *, n_ctx: int = 2048, port: int | None = None, extra: tuple[str, ...] = ()) -> None:
        from halo_weave.backends.local_tokenizer import bundled_gguf

        binary = _required(LLAMA_ENV, "llama.cpp's llama-server executable")
        port = port or free_port()
        super().__init__([str(binary), "-m", str(bundled_gguf()), "--host", "127.0.0.1", "--port", str(port),
                          "-c", str(n_ctx), "-t", "2", "-np", "1", *extra], port)


class KoboldCppProcess(RealServer):
    """``koboldcpp.py --model <bundled GGUF>`` (context ``n_ctx``), on ``port`` (free by default)."""

    ready_path = "/api/v1/model"

    def __init__(self, *, n_ctx: int = 4096, port: int | None = None, extra: tuple[str, ...] = ()) -> None:
        from halo_weave.backends.local_tokenizer import bundled_gguf

        target = _required(KOBOLD_ENV, "KoboldCPP's koboldcpp.py (built beside its library)")
        if target.is_dir():
            target = target / "koboldcpp.py"
        command = [sys.executable, str(target)] if target.suffix == ".py" else [str(target)]
        port = port or free_port()
        super().__init__([*command, "--model", str(bundled_gguf()), "--host", "127.0.0.1", "--port", str(port),
                          "--contextsize", str(n_ctx), "--threads", "2", "--skiplauncher", "--quiet", *extra],
                         port, cwd=target.parent)


def started(kind: str, **options) -> RealServer:
    """The real server named ``kind`` (``"koboldcpp"`` or ``"llama-server"``), started."""
    return {"koboldcpp": KoboldCppProcess, "llama-server": LlamaServerProcess}[kind](**options)
