"""llama-cpp-python's real OpenAI-compatible server on loopback, serving the bundled GGUF.

``pip install 'llama-cpp-python[server]'`` compiles llama.cpp once (``make venv`` tries
it; see the Makefile).  Where it could not be built, the tests that need it skip and say
so.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

#: Runs ``llama_cpp.server`` with the model settings this CPU survives.
MAIN = Path(__file__).with_name("llama_cpp_server_main.py")

#: Seconds the server may take to load the 135M model (well under 10 s on two cores).
START_TIMEOUT_S = 120

MISSING = (importlib.util.find_spec("llama_cpp") is None
           or importlib.util.find_spec("llama_cpp.server") is None)
SKIP_REASON = ("llama-cpp-python[server] is not installed (its llama.cpp compile failed or was skipped "
               "when the environment was made: see the Makefile), so its real server cannot run here")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaCppServer:
    """llama-cpp-python's server (through :data:`MAIN`) as a child process (``.url``, ``.api_key``)."""

    def __init__(self, api_key: str | None = None, n_ctx: int = 2048) -> None:
        if MISSING:
            pytest.skip(SKIP_REASON)
        from halo_weave.backends.local_tokenizer import bundled_gguf

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_key = api_key
        args = [sys.executable, str(MAIN), "--model", str(bundled_gguf()), "--host", "127.0.0.1",
                "--port", str(self.port), "--n_ctx", str(n_ctx), "--n_threads", "2"]
        if api_key:
            args += ["--api_key", api_key]
        # Its log goes to a file: llama.cpp writes a lot, and a full pipe would stall it.
        self.log = tempfile.NamedTemporaryFile(prefix="llama-cpp-server-", suffix=".log", delete=False)
        self.process = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                        env={**os.environ, "PYTHONUNBUFFERED": "1"})
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited: {self._log_tail()}")
            try:
                if httpx.get(f"{self.url}/v1/models", headers=headers, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"llama_cpp.server did not answer in time: {self._log_tail()}")

    def _log_tail(self) -> str:
        try:
            with open(self.log.name, "rb") as handle:
                return handle.read().decode("utf-8", "replace")[-2000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.log.close()
        try:
            os.unlink(self.log.name)
        except OSError:
            pass
