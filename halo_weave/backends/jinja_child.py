"""Renders a model's Jinja chat template in a process of its own (run as a script).

Started by :mod:`halo_weave.backends.model_template` with ``python -I`` and this file's
path: it imports nothing of the app, only jinja2 and the standard library.  It reads one
JSON object from stdin — ``{"template", "bos_token", "eos_token", "max_chars",
"renders": [{"messages", "add_generation_prompt"}]}`` — and writes one JSON object to
stdout: ``{"outputs": [text or null], "errors": [sentence or null]}``, or ``{"error":
sentence}`` when the template does not compile.

A template is code from a model file, so it runs in jinja2's
``ImmutableSandboxedEnvironment`` (no attribute starting with ``_``, no changing lists or
dicts), with ``*`` and ``**`` refusing results over ``max_chars`` and the output cut off
at ``max_chars``.  The parent also limits the process's memory and time, so a template
that loops for ever or allocates without end ends the process, not the app.
"""

import json
import sys
from datetime import datetime


class OutputTooLarge(Exception):
    """The rendering grew past the allowed size."""


def environment(max_chars: int):
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Bounded(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset(["*", "**"])

        def call_binop(self, context, operator, left, right):
            if operator == "**" and isinstance(right, (int, float)) and abs(right) > 64:
                raise OutputTooLarge("an exponent over 64")
            if operator == "*":
                for seq, times in ((left, right), (right, left)):
                    if isinstance(seq, (str, list, tuple)) and isinstance(times, int) and (
                            len(seq) * times > max_chars):
                        raise OutputTooLarge(f"a repeated value longer than {max_chars:,} characters")
            return super().call_binop(context, operator, left, right)

    env = Bounded(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])

    def raise_exception(message):
        raise TemplateError(str(message))

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    env.filters["tojson"] = tojson
    return env


def render(template, variables: dict, max_chars: int) -> str:
    parts, size = [], 0
    for piece in template.generate(**variables):
        size += len(piece)
        if size > max_chars:
            raise OutputTooLarge(f"output longer than {max_chars:,} characters")
        parts.append(piece)
    return "".join(parts)


def words(exc: BaseException) -> str:
    from jinja2.exceptions import SecurityError

    if isinstance(exc, SecurityError):
        return f"the sandbox refused an unsafe operation ({exc})"
    if isinstance(exc, OutputTooLarge):
        return f"the template's output is too large ({exc})"
    if isinstance(exc, RecursionError):
        return "the template recurses without end"
    if isinstance(exc, MemoryError):
        return "the template used too much memory"
    return f"{type(exc).__name__}: {exc}"


def limit_resources(memory_bytes: int, cpu_seconds: int) -> None:
    """Cap this process's memory and CPU time where the system allows it (POSIX)."""
    try:
        import resource
    except ImportError:  # Windows: the parent's timeout still ends the process
        return
    for which, value in ((resource.RLIMIT_AS, memory_bytes), (resource.RLIMIT_CPU, cpu_seconds)):
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            pass  # e.g. a hard limit already lower


def main() -> int:
    request = json.loads(sys.stdin.read())
    limit_resources(int(request.get("memory_bytes", 1 << 30)), int(request.get("cpu_seconds", 10)))
    max_chars = int(request.get("max_chars", 200_000))
    env = environment(max_chars)
    try:
        template = env.from_string(request["template"])
    except Exception as exc:  # noqa: BLE001 - any compile failure is reported, not raised
        json.dump({"error": f"the template does not compile: {words(exc)}"}, sys.stdout)
        return 0
    outputs, errors = [], []
    for job in request["renders"]:
        variables = {"messages": job["messages"], "add_generation_prompt": job["add_generation_prompt"],
                     "bos_token": request.get("bos_token", ""), "eos_token": request.get("eos_token", ""),
                     "tools": None, "documents": None}
        try:
            outputs.append(render(template, variables, max_chars))
            errors.append(None)
        except Exception as exc:  # noqa: BLE001 - a template may raise anything
            outputs.append(None)
            errors.append(words(exc))
    json.dump({"outputs": outputs, "errors": errors}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
