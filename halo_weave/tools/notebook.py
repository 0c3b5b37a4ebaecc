"""The model's notebook: jq tool calls inside an answer.

The model writes ``<tool>jq '<program>' notes.json</tool>`` to read its notes, or
``<tool>jq '<program>' notes.json > output</tool>`` to replace them with the program's
output.  Generation stops at :data:`STOP_SEQUENCE`; the controller hands the answer so
far to :meth:`ToolRunner.process_answer`, appends the returned ``result_text`` to the
assistant turn as tool-result tokens (``Conversation.append_token(..., tool_result=True)``),
saves ``new_notes`` when there are any, and generates again while
``continue_generation`` is true (at most :data:`MAX_ROUNDS` tool calls per answer).

Results are compact, one line per call, and only say what changed::

    ⚙️【jq '.topics.cats = "tuna"' notes.json > output】→ ✓ .topics.cats = "tuna"
    ⚙️【jq '.reminders' notes.json】→ ✓ ["call Bob"]
    ⚙️【jq 'env' notes.json】→ ❌ env is not allowed: reads the environment

Programs run in :mod:`.jq_sandbox` (allow-listed builtins, separate process, time and
output limits).  A write that fails, or whose output is not one JSON object, leaves the
notes unchanged.  Everything here is Qt-free; the notes themselves live in the store
(``store.load_tool_data(NOTES_NAME)`` / ``save_tool_data``).
"""

from __future__ import annotations

import copy
import json
import re
import shlex
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

from ..errors import ToolError
from .json_depth import MAX_DEPTH, too_deep
from .jq_sandbox import JqWorker, SandboxError

#: Generation stops here so the call can run before the model goes on.
STOP_SEQUENCE = "</tool>"
OPEN_TAG = "<tool>"
#: Tool calls executed per answer; the next one is refused and generation ends.
MAX_ROUNDS = 5
#: Key of the notes document in the store's tool data.
NOTES_NAME = "notes"
#: The only file the model can name.
NOTES_FILE = "notes.json"
#: Every result line starts with this; the UI colours such text cyan (seed: #4ecdc4).
RESULT_MARKER = "⚙️【"
#: Longest result line put into the context (the full value stays in the notes).
MAX_RESULT_CHARS = 400
#: Longest command echoed back in a result line.
MAX_COMMAND_CHARS = 160
#: Longest serialized notes document a write may produce.
MAX_NOTES_BYTES = 64 * 1024

TOOL_PROMPT = """\
You have a private notebook, notes.json, that persists for this whole conversation. \
Use it by writing one jq command inside tool tags; the result appears right after the \
closing tag, then continue your answer.
Read:   <tool>jq '.topics' notes.json</tool>
Set:    <tool>jq '.topics.cats = "likes tuna"' notes.json > output</tool>
Append: <tool>jq '.reminders += ["call Bob on Friday"]' notes.json > output</tool>
Delete: <tool>jq 'del(.scratch.draft)' notes.json > output</tool>
Writes end with "> output". The notebook holds topics {}, reminders [], context {} and \
scratch {}. At most 5 tool calls per answer; only jq on notes.json is available."""

_CALL = re.compile(re.escape(OPEN_TAG) + r"(.*?)" + re.escape(STOP_SEQUENCE), re.DOTALL)
_OPTIONS = {"-c", "-r", "-M", "-C", "--compact-output", "--raw-output", "--monochrome-output"}
_WRITE_TARGETS = {"output", NOTES_FILE}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def new_notes(now: str | None = None) -> dict:
    """The notes a conversation starts with."""
    stamp = now or _now()
    return {
        "_metadata": {
            "created": stamp,
            "last_modified": stamp,
            "description": "AI assistant's persistent notes",
        },
        "topics": {},
        "reminders": [],
        "context": {},
        "scratch": {},
    }


@dataclass(frozen=True)
class ToolCall:
    """One ``<tool>…</tool>`` in an answer; ``error`` is set when it cannot be parsed."""

    command: str  # the text between the tags, stripped
    program: str
    write: bool
    start: int  # span of the whole call in the answer text
    end: int
    error: str | None = None


@dataclass(frozen=True)
class ToolResult:
    """What one call did: the line for the context and, for a write, the new notes."""

    ok: bool
    message: str  # after the arrow: "✓ …" or "❌ …"
    compact_text: str  # the whole line: ⚙️【command】→ message
    new_notes: dict | None = None


@dataclass
class ToolStep:
    """What the controller does after a generation round (see the module docstring)."""

    results: list[ToolResult] = field(default_factory=list)
    #: Ordinary assistant text to append first: the closing tag when the server cut it.
    prefix_text: str = ""
    #: Text to append as tool-result tokens ("" when there was nothing to run).
    result_text: str = ""
    #: Notes to save (None: unchanged).
    new_notes: dict | None = None
    continue_generation: bool = False
    rounds_used: int = 0


def parse_command(command: str) -> tuple[str, bool]:
    """``(program, write)`` of a tool command such as ``jq '.a = 1' notes.json > output``."""
    try:
        words = shlex.split(command, posix=True)
    except ValueError as exc:
        raise ToolError(f"cannot parse the command: {exc}") from None
    if not words or words[0] != "jq":
        raise ToolError(f"only jq is available: <tool>jq '<program>' {NOTES_FILE}</tool>")
    program: str | None = None
    write = False
    rest = iter(words[1:])
    for word in rest:
        if word.startswith(">"):
            target = word[1:].lstrip(">") or next(rest, "")
            if target not in _WRITE_TARGETS:
                raise ToolError(f"writes go to '> output', not {target!r}")
            write = True
        elif write:
            raise ToolError(f"unexpected {word!r} after '> output'")
        elif word in _OPTIONS:
            continue
        elif word.startswith("-") and program is None:
            raise ToolError(f"jq option {word} is not available")
        elif program is None:
            program = word
        elif word != NOTES_FILE:
            if word in ("|", "&&", ";", "||"):
                raise ToolError("one jq command per tool call, no shell pipes")
            raise ToolError(f"only {NOTES_FILE} exists, not {word!r}")
    if program is None:
        raise ToolError(f"no jq program: <tool>jq '.topics' {NOTES_FILE}</tool>")
    return program, write


def find_calls(text: str) -> list[ToolCall]:
    """Every complete ``<tool>…</tool>`` in ``text``, in order."""
    calls = []
    for m in _CALL.finditer(text):
        command = m.group(1).strip()
        try:
            program, write = parse_command(command)
            calls.append(ToolCall(command, program, write, m.start(), m.end()))
        except ToolError as exc:
            calls.append(ToolCall(command, "", False, m.start(), m.end(), error=str(exc)))
    return calls


def rounds_used(text: str) -> int:
    """Tool results already in an answer (each executed call leaves one marker)."""
    return text.count(RESULT_MARKER)


def pending_calls(text: str) -> list[ToolCall]:
    """Calls in ``text`` that no result follows yet (before the next call)."""
    calls = find_calls(text)
    pending = []
    for k, call in enumerate(calls):
        # Not "right after the tag": the token that completed </tool> may carry more text.
        until = calls[k + 1].start if k + 1 < len(calls) else len(text)
        if RESULT_MARKER not in text[call.end:until]:
            pending.append(call)
    return pending


def looks_like_tool_result(text: str) -> bool:
    """Whether a chunk's text is a tool result (re-derives the flag after an import)."""
    return text.lstrip().startswith(RESULT_MARKER)


class ToolRunner:
    """Runs tool calls against a notes document in a sandboxed jq worker.

    The runner holds no notes: callers pass the current document in and save
    ``ToolResult.new_notes`` / ``ToolStep.new_notes`` themselves.  Thread-safe; call
    :meth:`close` on shutdown to stop the worker process.
    """

    def __init__(self, worker: JqWorker | None = None, *, clock: Callable[[], str] = _now) -> None:
        self.worker = worker or JqWorker()
        self.clock = clock

    def close(self) -> None:
        self.worker.close()

    def run(self, call: ToolCall, notes: dict | None) -> ToolResult:
        """Execute one call; failures become a ❌ result and never change the notes."""
        notes = notes if isinstance(notes, dict) else new_notes(self.clock())
        if call.error:
            return _result(call, False, call.error)
        try:
            outputs = self.worker.run(call.program, notes)
        except SandboxError as exc:
            return _result(call, False, str(exc))
        except RecursionError:
            return _result(call, False, "the program is nested too deeply")
        if too_deep(outputs, MAX_DEPTH + 1):  # the outputs list is one level itself
            unchanged = "; notes unchanged" if call.write else ""
            return _result(call, False, f"the result is nested more than {MAX_DEPTH} levels deep{unchanged}")
        if not call.write:
            return _result(call, True, _describe_read(outputs))
        try:
            updated = self._validated_write(notes, outputs)
        except ToolError as exc:
            return _result(call, False, f"{exc}; notes unchanged")
        changes = describe_changes(notes, updated)
        return _result(call, True, "; ".join(changes) if changes else "no change", updated)

    def process_answer(self, text: str, notes: dict | None, *, hit_stop: bool = False) -> ToolStep:
        """Run the calls the answer so far ends with; decide whether to generate again.

        ``text`` is the whole assistant turn so far (earlier results included).
        ``hit_stop``: the round ended on :data:`STOP_SEQUENCE`; a server that cuts the stop
        sequence from the text leaves a trailing ``<tool>…`` that is then completed.
        """
        step = ToolStep(rounds_used=rounds_used(text))
        if hit_stop and not text.rstrip().endswith(STOP_SEQUENCE):
            open_at = text.rfind(OPEN_TAG)
            if open_at >= 0 and STOP_SEQUENCE not in text[open_at:]:
                step.prefix_text = STOP_SEQUENCE
                text = text + STOP_SEQUENCE
        calls = pending_calls(text)
        if not calls:
            step.prefix_text = ""
            return step
        current = notes if isinstance(notes, dict) else new_notes(self.clock())
        lines = []
        refused = False
        for call in calls:
            if step.rounds_used >= MAX_ROUNDS:
                result = _result(call, False, f"tool limit reached: at most {MAX_ROUNDS} calls per answer")
                refused = True
            else:
                result = self.run(call, current)
                step.rounds_used += 1
                if result.new_notes is not None:
                    current = step.new_notes = result.new_notes
            step.results.append(result)
            lines.append(result.compact_text)
        step.result_text = "\n" + "\n".join(lines) + "\n"
        step.continue_generation = not refused
        return step

    def _validated_write(self, notes: dict, outputs: list) -> dict:
        if len(outputs) != 1:
            raise ToolError(f"a write must output exactly one JSON object, got {len(outputs)} outputs")
        updated = outputs[0]
        if not isinstance(updated, dict):
            raise ToolError(f"a write must output a JSON object, got {_json_type(updated)}")
        updated = copy.deepcopy(updated)
        meta = updated.get("_metadata")
        if not isinstance(meta, dict):
            meta = copy.deepcopy(notes.get("_metadata")) if isinstance(notes.get("_metadata"), dict) else {}
            updated["_metadata"] = meta
        meta["last_modified"] = self.clock()
        size = len(json.dumps(updated, ensure_ascii=False).encode())
        if size > MAX_NOTES_BYTES:
            raise ToolError(f"notes would grow to {size} bytes, past {MAX_NOTES_BYTES}; delete something first")
        return updated


def describe_changes(old, new, path: str = "") -> list[str]:
    """Compact description of what a write changed: ``.a.b = 1``, ``del(.c)``, ``.r += [..]``."""
    if path == "._metadata":
        return []
    if isinstance(old, dict) and isinstance(new, dict):
        changes = []
        for key in old:
            if key not in new:
                changes.append(f"del({_path(path, key)})")
        for key, value in new.items():
            sub = _path(path, key)
            if key not in old:
                changes.append(f"{sub} = {_short(value)}")
            elif old[key] != value or type(old[key]) is not type(value):
                changes.extend(describe_changes(old[key], value, sub))
        return changes
    if isinstance(old, list) and isinstance(new, list) and len(new) > len(old) and new[: len(old)] == old:
        return [f"{path or '.'} += {_short(new[len(old):])}"]
    if old == new and type(old) is type(new):
        return []
    return [f"{path or '.'} = {_short(new)}"]


def _path(prefix: str, key: str) -> str:
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        return f"{prefix}.{key}"
    return f"{prefix}[{json.dumps(key, ensure_ascii=False)}]" if prefix else f".[{json.dumps(key, ensure_ascii=False)}]"


def _short(value, limit: int = 120) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _json_type(value) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(value), "a number")


def _describe_read(outputs: list) -> str:
    if not outputs:
        return "✓ (no output)"
    return "✓ " + ", ".join(json.dumps(v, ensure_ascii=False, separators=(",", ":")) for v in outputs)


def _result(call: ToolCall, ok: bool, message: str, new_notes: dict | None = None) -> ToolResult:
    message = message if message.startswith("✓") or not ok else f"✓ {message}"
    if not ok:
        message = f"❌ {message}"
    command = call.command if len(call.command) <= MAX_COMMAND_CHARS else call.command[: MAX_COMMAND_CHARS - 1] + "…"
    line = f"{RESULT_MARKER}{command}】→ {message}"
    if len(line) > MAX_RESULT_CHARS:
        line = line[: MAX_RESULT_CHARS - 1] + "…"
    return ToolResult(ok, message, line, new_notes)
