"""Run untrusted jq programs (the model's) against the notes, safely.

Two layers, because either alone is not enough:

1. :func:`check_program` tokenizes the program the way jq's lexer does (strings with
   ``\\(...)`` interpolation are tokenized recursively) and refuses it unless every name
   it *calls* is on an allow-list.  An allow-list rather than a deny-list: a future
   libjq that adds a builtin (``getenv``, ``readfile``...) must not silently widen
   what the model can do.  Comments are refused outright: jq 1.8 lets a backslash
   continue a comment onto the next line, and a checker that disagrees with jq about
   where a comment ends could be fooled into skipping code.  Field names (``.env``),
   quoted keys and object keys followed by ``:`` are data, not calls, and are allowed.
2. :class:`JqWorker` runs the checked program in a separate Python process (the jq C
   library cannot be interrupted from another thread) with an empty environment, an
   empty working directory, no new file descriptors, a memory cap, a wall-clock time
   limit (the process is killed and replaced) and an output-size limit.  Even if the
   checker missed something, ``env`` would see nothing and ``include`` could open no file.

The worker speaks JSON lines on stdin/stdout.  This file is also the worker's script
(``python -I jq_sandbox.py``), so it imports nothing from ``halo_weave``.
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

#: Wall-clock limit for one program, seconds (the worker is killed past it).
TIME_LIMIT_S = 2.0
#: Largest total serialized output of one program, bytes.
MAX_OUTPUT_BYTES = 256 * 1024
#: Longest program accepted, characters.
MAX_PROGRAM_CHARS = 2000
#: Address-space cap of the worker process (POSIX only).
WORKER_MEMORY_BYTES = 1024 * 1024 * 1024

#: Builtins a notes program may call.  Everything jq offers for JSON manipulation,
#: strings, regexes, math and dates; nothing that reads input, the environment,
#: files or modules, and nothing that writes to stderr or halts the process.
ALLOWED_BUILTINS = frozenset("""
    empty error not length utf8bytelength type keys keys_unsorted values has in inside
    contains map map_values path paths leaf_paths del delpaths getpath setpath pick
    to_entries from_entries with_entries select recurse walk add any all flatten range
    floor ceil round trunc sqrt pow log log2 log10 exp exp2 exp10 fabs abs fmin fmax fmod
    significand min max min_by max_by unique unique_by group_by sort sort_by reverse
    tostring tonumber toboolean tojson fromjson toarray ascii_downcase ascii_upcase
    ltrimstr rtrimstr trimstr trim ltrim rtrim startswith endswith split splits join
    test match capture scan sub gsub explode implode indices index rindex first last nth
    limit skip until while repeat isempty combinations transpose tostream fromstream
    truncate_stream arrays objects iterables booleans numbers strings nulls scalars
    normals finites isnan isinfinite isnormal isvalid isfinite infinite nan bsearch
    now todate fromdate todateiso8601 fromdateiso8601 mktime gmtime strftime strptime
    format IN INDEX JOIN builtins
""".split())

#: Names refused with a specific reason (all are jq builtins or keywords).
FORBIDDEN = {
    "env": "reads the environment",
    "input": "reads further inputs",
    "inputs": "reads further inputs",
    "input_filename": "reads file information",
    "input_line_number": "reads input information",
    "import": "loads modules from files",
    "include": "loads modules from files",
    "modulemeta": "reads module files",
    "get_search_list": "reads the module search path",
    "get_prog_origin": "reads the module search path",
    "get_jq_origin": "reads the module search path",
    "halt": "stops the process",
    "halt_error": "stops the process",
    "stderr": "writes to stderr",
    "debug": "writes to stderr",
    "__loc__": "reads the program's location",
    "ENV": "reads the environment",
}

KEYWORDS = frozenset(
    "if then elif else end as def reduce foreach try catch label break and or".split()
)

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_FORMAT = re.compile(r"@[A-Za-z0-9_]+")
_SPACE = re.compile(r"[ \t\r\n]+")
# Longest first, so "?//" wins over "?" and "//=" over "//".
_OPERATORS = sorted(
    "?// //= |= += -= *= /= %= == != <= >= // .. and or | , + - * / % = < > ? ; : ( ) [ ] { } .".split(),
    key=len, reverse=True,
)


class SandboxError(ValueError):
    """A program that was refused, failed, or ran past a limit.  ``str()`` is for the model."""


@dataclass(frozen=True)
class Token:
    kind: str  # ident, var, field, string, number, format, op
    text: str
    pos: int


def tokenize(program: str) -> list[Token]:
    """jq tokens of ``program``, string interpolations flattened in; raises on comments.

    >>> [t.text for t in tokenize('.a += ["x\\\\(1)"]')]
    ['.a', '+=', '[', '"', '1', '"', ']']
    """
    tokens: list[Token] = []
    _lex(program, 0, tokens, nested=False)
    return tokens


def _lex(src: str, i: int, out: list[Token], *, nested: bool) -> int:
    """Lex code from ``i``; inside an interpolation stop at its closing ``)``."""
    depth = 0
    n = len(src)
    while i < n:
        c = src[i]
        m = _SPACE.match(src, i)
        if m:
            i = m.end()
            continue
        if c == "#":
            raise SandboxError("comments (#) are not allowed in notes programs")
        if c == '"':
            i = _lex_string(src, i, out)
            continue
        if c == "$":
            m = re.compile(r"\$[ \t\r\n]*([A-Za-z_][A-Za-z0-9_]*)").match(src, i)
            if not m:
                raise SandboxError(f"unexpected '$' at {i}")
            out.append(Token("var", m.group(1), i))
            i = m.end()
            continue
        if c == "@":
            m = _FORMAT.match(src, i)
            if not m:
                raise SandboxError(f"unexpected '@' at {i}")
            out.append(Token("format", m.group(0), i))
            i = m.end()
            continue
        if c == "." and i + 1 < n and (src[i + 1].isascii() and (src[i + 1].isalpha() or src[i + 1] == "_")):
            m = _IDENT.match(src, i + 1)
            out.append(Token("field", "." + m.group(0), i))
            i = m.end()
            continue
        m = _NUMBER.match(src, i)
        if m and (c.isdigit() or (c == "." and m.end() > i + 1)):
            out.append(Token("number", m.group(0), i))
            i = m.end()
            continue
        m = _IDENT.match(src, i)
        if m:
            if src.startswith("::", m.end()):
                raise SandboxError("module functions (name::func) are not available")
            out.append(Token("ident", m.group(0), i))
            i = m.end()
            continue
        for op in _OPERATORS:
            if src.startswith(op, i):
                break
        else:
            raise SandboxError(f"unexpected character {c!r} at {i}")
        if nested and op == "(":
            depth += 1
        elif nested and op == ")":
            if depth == 0:
                return i + 1
            depth -= 1
        out.append(Token("op", op, i))
        i += len(op)
    if nested:
        raise SandboxError("unterminated string interpolation")
    return i


def _lex_string(src: str, i: int, out: list[Token]) -> int:
    """Lex a string literal starting at the quote ``src[i]``; returns the index after it."""
    out.append(Token("op", '"', i))
    i += 1
    n = len(src)
    while i < n:
        c = src[i]
        if c == '"':
            out.append(Token("op", '"', i))
            return i + 1
        if c == "\\":
            if i + 1 >= n:
                break
            if src[i + 1] == "(":
                i = _lex(src, i + 2, out, nested=True)
                continue
            i += 2
            continue
        i += 1
    raise SandboxError("unterminated string")


def check_program(program: str, builtin_names: frozenset[str] = frozenset()) -> None:
    """Refuse ``program`` unless everything it calls is allowed; see the module docstring.

    ``builtin_names`` are all builtins of the libjq in use: a name the program defines
    itself is fine unless it collides with one of them (a ``def`` shadows a builtin only
    inside its scope, so a shadowed forbidden builtin could still be reached outside).
    """
    if len(program) > MAX_PROGRAM_CHARS:
        raise SandboxError(f"program longer than {MAX_PROGRAM_CHARS} characters")
    tokens = tokenize(program)
    stack: list[str] = []
    for k, tok in enumerate(tokens):
        prev = tokens[k - 1].text if k else ""
        nxt = tokens[k + 1].text if k + 1 < len(tokens) else ""
        if tok.kind == "op" and tok.text in "([{":
            stack.append(tok.text)
        elif tok.kind == "op" and tok.text in ")]}" and stack:
            stack.pop()
        if tok.kind == "var":
            name = tok.text
            if name in FORBIDDEN or name.startswith("__"):
                raise SandboxError(f"${name} is not allowed: {FORBIDDEN.get(name, 'internal variable')}")
            continue
        if tok.kind != "ident":
            continue
        name = tok.text
        if stack and stack[-1] == "{" and prev in ("{", ",") and nxt == ":":
            continue  # an object key such as {env: 1}: data, not a call
        if name in FORBIDDEN:
            raise SandboxError(f"{name} is not allowed: {FORBIDDEN[name]}")
        if name.startswith("_"):
            raise SandboxError(f"{name} is not allowed: internal function")
        if name in KEYWORDS or name in ALLOWED_BUILTINS:
            continue
        if name in builtin_names:
            raise SandboxError(f"{name} is not allowed in notes programs")
        # Otherwise a name the program defines itself (or an undefined one jq rejects).


# ---------------------------------------------------------------------- parent side
class JqWorker:
    """A warm worker process that runs checked programs; thread-safe, restarts itself."""

    def __init__(self, time_limit_s: float = TIME_LIMIT_S, max_output_bytes: int = MAX_OUTPUT_BYTES):
        self.time_limit_s = time_limit_s
        self.max_output_bytes = max_output_bytes
        self._proc: subprocess.Popen | None = None
        self._lines: queue.Queue | None = None
        self._lock = threading.Lock()
        self._workdir = tempfile.TemporaryDirectory(prefix="halo-jq-")
        self.builtin_names: frozenset[str] = frozenset()
        self.starts = 0

    def run(self, program: str, value) -> list:
        """All outputs of ``program`` on ``value`` (checked first); raises SandboxError."""
        with self._lock:
            self._ensure_started()
            check_program(program, self.builtin_names)
            request = json.dumps({"program": program, "input": value, "max_output": self.max_output_bytes})
            try:
                self._proc.stdin.write(request + "\n")
                self._proc.stdin.flush()
            except OSError:
                self._kill()
                raise SandboxError("the jq worker died; try again") from None
            try:
                line = self._lines.get(timeout=self.time_limit_s)
            except queue.Empty:
                self._kill()
                raise SandboxError(f"program ran longer than {self.time_limit_s:g} s and was stopped") from None
            if line is None:
                self._kill()
                raise SandboxError("program exhausted the worker's memory and was stopped")
            reply = json.loads(line)
            if not reply["ok"]:
                raise SandboxError(reply["error"])
            return reply["results"]

    def start(self) -> None:
        """Start the worker now (it otherwise starts on the first run)."""
        with self._lock:
            self._ensure_started()

    def close(self) -> None:
        """Stop the worker process."""
        with self._lock:
            self._kill()

    def __del__(self) -> None:  # best effort; close() is the contract
        try:
            self._kill()
        except Exception:
            pass

    def _ensure_started(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        # Windows cannot start Python without SYSTEMROOT; POSIX gets nothing at all.
        env = {"SYSTEMROOT": os.environ.get("SYSTEMROOT", "")} if os.name == "nt" else {}
        self._proc = subprocess.Popen(
            [sys.executable, "-I", os.path.abspath(__file__), "--worker", str(WORKER_MEMORY_BYTES)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, encoding="utf-8", env=env, cwd=self._workdir.name, bufsize=1,
        )
        self.starts += 1
        lines: queue.Queue = queue.Queue()
        proc = self._proc

        def pump() -> None:
            for line in proc.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, name="jq-worker-reader", daemon=True).start()
        self._lines = lines
        try:
            hello = lines.get(timeout=30)
        except queue.Empty:
            hello = None
        if not hello:
            self._kill()
            raise SandboxError("the jq worker did not start (is the jq package installed?)")
        self.builtin_names = frozenset(json.loads(hello)["builtins"])

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass


# ---------------------------------------------------------------------- worker side
def _serve(memory_bytes: int) -> None:
    import jq  # noqa: PLC0415 - only the worker needs the C library

    names = sorted({b.split("/")[0] for b in jq.compile("builtins").input_value(None).first()})
    _lock_down(memory_bytes)
    out = sys.stdout
    out.write(json.dumps({"builtins": names}) + "\n")
    out.flush()
    for line in sys.stdin:
        try:
            request = json.loads(line)
            results, size = [], 0
            program = jq.compile(request["program"])
            for value in program.input_value(request["input"]):
                text = json.dumps(value, ensure_ascii=False, allow_nan=False)
                size += len(text) + 1
                if size > request["max_output"]:
                    raise ValueError(f"output larger than {request['max_output']} bytes; stopped")
                results.append(value)
            reply = {"ok": True, "results": results}
        except MemoryError:
            reply = {"ok": False, "error": "program used too much memory"}
        except Exception as exc:  # jq reports compile and runtime errors as ValueError
            reply = {"ok": False, "error": _clean_error(str(exc))}
        out.write(json.dumps(reply, ensure_ascii=False) + "\n")
        out.flush()


def _clean_error(message: str) -> str:
    first = message.strip().splitlines()[0] if message.strip() else "jq error"
    return first.removeprefix("jq: error: ").strip()


def _lock_down(memory_bytes: int) -> None:
    """Cap memory, forbid new files and file writes (POSIX; elsewhere the checker suffices)."""
    try:
        import resource
    except ImportError:
        return
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    # No descriptor beyond stdin/stdout/stderr can be created from now on.
    resource.setrlimit(resource.RLIMIT_NOFILE, (3, 3))


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    _serve(int(sys.argv[2]))
