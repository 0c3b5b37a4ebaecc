"""How llama.cpp loads a model without crashing on the CPU it runs on.

Two guards, consulted by every place that loads a GGUF with weights (the attention
engine, the proxy reader, the memory benchmark, the tests' llama-cpp-python server):

* **AMX.**  On CPUs with Intel AMX, llama.cpp repacks the weights into AMX buffers at
  load ("extra buffer types") and its AMX matrix product crashes in the first decode
  (https://github.com/ggml-org/llama.cpp/issues/20824) or, for Q4_0/Q4_1, computes wrong
  results (https://github.com/ggml-org/llama.cpp/pull/16315).  Where the CPU or the build
  has AMX, models load with ``use_extra_bufts = False``: the weights stay in the ordinary
  CPU buffer and the AVX-512 kernels run them.  A runtime setting rather than a build
  flag, so that it holds for every build, a cached wheel and a user's own install alike.
* **The canary.**  The first time a llama.cpp build meets a CPU with a model, a child
  process loads that model and decodes a few tokens with the settings the engine would
  use.  If the child dies (a signal, an error, a hang), the next settings are tried: the
  default, then the safe ones (no extra buffer types), then none (the server runs on
  transformers).  Per model, because the kernels that run depend on its quantization
  (Q4_K weights are repacked where Q4_1 weights are not).  The verdict is kept in the user
  cache folder, one file per build, CPU and model, so later starts cost nothing.

``$HALO_WEAVE_LLAMACPP`` (``default`` or ``safe``) forces the settings and skips the
canary, e.g. to measure one against the other.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
import platform
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable, Sequence

from ..launcher import exit_words

log = logging.getLogger("halo_weave.server")

DEFAULT, SAFE, UNUSABLE = "default", "safe", "unusable"
#: Forces ``default`` or ``safe`` without a canary.
MODE_ENV = "HALO_WEAVE_LLAMACPP"
#: Seconds a canary child may take (loading a bundled model and decoding a few tokens
#: takes one to three seconds on two cores); a child still running then counts as hung.
CANARY_TIMEOUT_S = 120.0
#: Verdict files live here, under the user cache folder.
VERDICT_FOLDER = "llamacpp-canary"
#: Lines of a dead child's output kept in its verdict and the log.
TAIL_LINES = 12

AMX_ISSUE = "https://github.com/ggml-org/llama.cpp/issues/20824"

_SENTENCES = {
    DEFAULT: "llama.cpp runs with its default settings (a test run passed on this CPU).",
    SAFE: "llama.cpp runs with its safe settings on this CPU (no weight repacking): {why}.",
    UNUSABLE: "llama.cpp cannot run on this CPU ({why}); the server uses transformers instead (slower).",
}


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Which settings llama.cpp loads models with here, and why in one sentence."""

    mode: str
    sentence: str
    #: What each canary child did, e.g. ``("default: died (signal 11)", "safe: ok")``.
    trials: tuple[str, ...] = ()

    @property
    def noteworthy(self) -> bool:
        """Whether the window should say it (anything but the plain default)."""
        return self.mode != DEFAULT


@dataclasses.dataclass(frozen=True)
class ChildResult:
    """One canary child: ``ok``, else how it died and its last lines."""

    ok: bool
    how: str
    tail: str = ""
    #: The token ids the child decoded (its ``ok ...`` line).
    tokens: tuple[int, ...] = ()


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (Linux ``/proc/cpuinfo``; empty where it cannot be read)."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``, else :func:`platform.processor`)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "cpu model"):
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def has_amx(flags: frozenset[str] | None = None, system_info: str = "") -> bool:
    """Whether the CPU (its flags) or the llama.cpp build (its system info) has AMX."""
    flags = cpu_flags() if flags is None else flags
    return any(flag.startswith("amx") for flag in flags) or "AMX_INT8 = 1" in system_info


def system_info(llama) -> str:
    """llama.cpp's own description of the CPU features it was built for."""
    try:
        return (llama.llama_print_system_info() or b"").decode("utf-8", "replace")
    except Exception:  # noqa: BLE001 - an old binding without it: no information
        return ""


def build_key(llama, gguf: Path | None = None) -> str:
    """One name per llama.cpp build, CPU and model: the library files, the CPU's features
    and the model file's name and size."""
    parts = [sys.version.split()[0], cpu_name(), " ".join(sorted(cpu_flags())), system_info(llama)]
    if gguf is not None:
        parts.append(f"model {Path(gguf).name}:{_size(gguf)}")
    folder = Path(llama.__file__).parent / "lib"
    for lib in sorted(folder.glob("*")):
        try:
            stat = lib.stat()
        except OSError:
            continue
        parts.append(f"{lib.name}:{stat.st_size}:{stat.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]


def apply(params, mode: str, gpu_layers: int = 0):
    """``params`` (``llama_model_params``) set up for ``mode``: ``gpu_layers`` on a GPU
    (0: CPU only; see :mod:`.offload`), and no extra buffer types (so no weight repacking)
    in every mode but the default (a caller that loads llama.cpp although the verdict says
    it crashes gets the least risky settings)."""
    params.n_gpu_layers = gpu_layers
    if mode != DEFAULT:
        params.use_extra_bufts = False
    return params


def _size(path: Path) -> int:
    try:
        return Path(path).stat().st_size
    except OSError:
        return -1


def model_params(llama, gguf: Path | None = None, gpu_layers: int = 0):
    """Default ``llama_model_params`` with the settings this machine's verdict for ``gguf``
    chose (None: the bundled SmolLM2's), ``gpu_layers`` offloaded (a build with a GPU
    backend only: :func:`.offload.resolve` decides)."""
    return apply(llama.llama_model_default_params(), verdict(gguf).mode, gpu_layers)


def candidates(amx: bool) -> tuple[str, ...]:
    """The settings to try, in order: a CPU with AMX never runs the default (it is known
    to crash there)."""
    return (SAFE,) if amx else (DEFAULT, SAFE)


def run_child(mode: str, gguf: Path, command: Sequence[str] | None = None,
              timeout: float = CANARY_TIMEOUT_S) -> ChildResult:
    """Run one canary child (``command`` replaces ``python -m ...canary MODE GGUF``)."""
    command = list(command or [sys.executable, "-m", "halo_weave.server.llamacpp.canary", mode, str(gguf)])
    try:
        done = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=timeout,
                              env={**os.environ, "PYTHONFAULTHANDLER": "1"})
    except subprocess.TimeoutExpired as exc:
        out = exc.output.decode("utf-8", "replace") if isinstance(exc.output, bytes) else (exc.output or "")
        return ChildResult(False, f"no answer in {timeout:.0f} s", _tail(out))
    except OSError as exc:
        return ChildResult(False, f"could not start: {exc}")
    out = done.stdout.decode("utf-8", "replace")
    if done.returncode == 0:
        answer = [line.split()[1:] for line in out.splitlines() if line.startswith("ok ")]
        tokens = tuple(int(t) for t in answer[-1]) if answer else ()
        return ChildResult(True, "ok", _tail(out), tokens)
    return ChildResult(False, exit_words(done.returncode), _tail(out))


def _tail(text: str) -> str:
    return "\n".join(text.strip().splitlines()[-TAIL_LINES:])


def decide(amx: bool, run: Callable[[str], ChildResult]) -> Verdict:
    """Try each candidate setting with ``run`` until one survives."""
    trials: list[str] = []
    deaths: list[str] = []
    for mode in candidates(amx):
        result = run(mode)
        trials.append(f"{mode}: {result.how}")
        if result.ok:
            if mode == DEFAULT:
                return Verdict(DEFAULT, _SENTENCES[DEFAULT], tuple(trials))
            why = (f"the CPU has AMX, whose llama.cpp path crashes ({AMX_ISSUE})" if amx
                   else f"a test run with the default settings died ({deaths[-1]})")
            return Verdict(SAFE, _SENTENCES[SAFE].format(why=why), tuple(trials))
        deaths.append(result.how)
        log.warning("llama.cpp canary with %s settings died (%s):\n%s", mode, result.how, result.tail)
    return Verdict(UNUSABLE, _SENTENCES[UNUSABLE].format(why="a test run died: " + "; ".join(deaths)),
                   tuple(trials))


_lock = threading.Lock()
#: Verdicts found by this process, per model file (None: no model named).
_verdicts: dict[Path | None, Verdict] = {}
_last: Verdict | None = None


def verdict(gguf: Path | None = None, *, run: Callable[[str], ChildResult] | None = None,
            folder: Path | None = None) -> Verdict:
    """This machine's verdict for the model ``gguf`` (None: the bundled SmolLM2): forced by
    ``$HALO_WEAVE_LLAMACPP``, read from the cache folder, or found by the canary (and
    kept).  Computed once per process and model."""
    global _last
    with _lock:
        if run is not None or folder is not None:
            return _find_verdict(gguf, run, folder)
        if gguf not in _verdicts:
            _verdicts[gguf] = _find_verdict(gguf, None, None)
        _last = _verdicts[gguf]
        return _last


def known_verdict() -> Verdict | None:
    """The verdict this process found last, if any (never runs a canary)."""
    return _last


def _find_verdict(gguf: Path | None, run: Callable[[str], ChildResult] | None, folder: Path | None) -> Verdict:
    forced = os.environ.get(MODE_ENV, "").strip().lower()
    if forced in (DEFAULT, SAFE):
        return Verdict(forced, f"llama.cpp runs with its {forced} settings (set by ${MODE_ENV}).")
    from . import bindings

    llama = bindings.load().llama
    amx = has_amx(system_info=system_info(llama))
    if folder is None:
        from ...settings import cache_dir

        folder = cache_dir() / VERDICT_FOLDER
    if gguf is None and run is None:
        try:
            from ..bundled import smollm2_gguf

            gguf = smollm2_gguf()
        except Exception as exc:  # noqa: BLE001 - no bundled model: nothing to test with
            mode = SAFE if amx else DEFAULT
            log.info("llama.cpp canary skipped (%s): %s settings", exc, mode)
            return Verdict(mode, _SENTENCES[SAFE].format(why=f"the CPU has AMX ({AMX_ISSUE})")
                           if amx else "llama.cpp runs with its default settings (not tested: no bundled model).")
    path = folder / f"{build_key(llama, gguf)}.json"
    cached = _read(path)
    if cached is not None:
        return cached
    if run is None:
        run = functools.partial(run_child, gguf=gguf)
    log.info("llama.cpp: first start of this build on this CPU with %s, running a short test in a child process",
             Path(gguf).name if gguf else "this model")
    found = decide(amx, run)
    _write(path, found)
    (log.warning if found.noteworthy else log.info)("%s", found.sentence)
    return found


def _read(path: Path) -> Verdict | None:
    try:
        data = json.loads(path.read_text())
        found = Verdict(data["mode"], data["sentence"], tuple(data.get("trials", ())))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return found if found.mode in (DEFAULT, SAFE, UNUSABLE) else None


def _write(path: Path, found: Verdict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps({**dataclasses.asdict(found), "cpu": cpu_name()}, indent=1))
        os.replace(temporary, path)
    except OSError as exc:  # a read-only cache: the canary runs again next start
        log.warning("cannot keep the llama.cpp canary's verdict in %s: %s", path, exc)
