"""The chat template to frame with: the model's own, rendered in a sandbox, else a built-in.

Servers publish the model's template in different places: ours in ``/api/v1/model``
(``chat_template``, the GGUF's ``tokenizer.chat_template``), llama.cpp's llama-server in
``/props``, Ollama in ``/api/show`` (``template`` — a *Go* template, which is not run here:
its marker strings pick a built-in one).  A Jinja template is rendered by
:mod:`.jinja_child` in a separate Python process (jinja2's immutable sandbox, memory and
CPU capped, killed after :data:`RENDER_TIMEOUT_S`), and :mod:`halo_weave.core.template_split`
reads the per-role framing from the renderings.  When anything fails the built-in template
its markers suggest (else ChatML) is used, and :class:`TemplateInUse` says why.  Results
are kept per template text for the process, so reconnecting does not render again.  Qt-free.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from ..core.chat_template import AUTO, CHATML, TEMPLATES, TemplateStrings, match_template
from ..core.template_split import RENDERS, TemplateUnusable, split, template_strings

#: Seconds the sandboxed renderer may run before it is killed.
RENDER_TIMEOUT_S = 5.0
#: Memory (address space) the renderer's process may use.
RENDER_MEMORY_BYTES = 1 << 30
#: Characters one rendering may produce (a chat template's are a few hundred).
RENDER_MAX_CHARS = 200_000

CHILD = Path(__file__).with_name("jinja_child.py")

#: Go template actions (Ollama): ``{{ .Prompt }}``, ``{{- if .System }}``, ``{{ range .Messages }}``.
_GO_TEMPLATE = re.compile(r"\{\{-?\s*(?:\.|if\s+\.|range\s+\.|end\s*-?\}\})")

_cache: dict[tuple[str, str, str], TemplateStrings | str] = {}
_cache_lock = threading.Lock()


@dataclass(frozen=True)
class TemplateInUse:
    """The template chosen and why: ``problem`` is a sentence when the model's own could not
    be used (shown to the user once), else ``""``."""

    template: TemplateStrings
    problem: str = ""

    @property
    def words(self) -> str:
        """``"Template: ChatML (built-in fallback)"`` — for the status tooltip."""
        return f"Template: {self.template.label} ({self.template.source})"


def is_go_template(text: str) -> bool:
    """Whether ``text`` is a Go template (Ollama's), not Jinja."""
    return bool(_GO_TEMPLATE.search(text)) and "{%" not in text


def render_sandboxed(text: str, *, bos_token: str = "", eos_token: str = "") -> tuple[list, list]:
    """``(outputs, errors)`` of :data:`~halo_weave.core.template_split.RENDERS` rendered by
    ``text`` in the sandboxed process; raises :class:`TemplateUnusable` when it cannot run."""
    request = {"template": text, "bos_token": bos_token, "eos_token": eos_token, "max_chars": RENDER_MAX_CHARS,
               "memory_bytes": RENDER_MEMORY_BYTES, "cpu_seconds": int(RENDER_TIMEOUT_S) + 1,
               "renders": [r.as_json() for r in RENDERS]}
    try:
        done = subprocess.run([sys.executable, "-I", str(CHILD)], input=json.dumps(request), capture_output=True,
                              text=True, encoding="utf-8", timeout=RENDER_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise TemplateUnusable(f"rendering it took longer than {RENDER_TIMEOUT_S:.0f} s and was stopped") from exc
    except OSError as exc:
        raise TemplateUnusable(f"the sandboxed renderer could not start ({exc})") from exc
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise TemplateUnusable(f"the sandboxed renderer ended without an answer (out of memory or time?): "
                               f"{last[:200]}") from None
    if "error" in answer:
        raise TemplateUnusable(answer["error"])
    return answer["outputs"], answer["errors"]


def from_model(text: str, *, origin: str, bos_token: str = "", eos_token: str = "") -> TemplateStrings:
    """The framing read from the model's Jinja template ``text``; raises
    :class:`TemplateUnusable` with the reason."""
    key = (text, bos_token, eos_token)
    with _cache_lock:
        cached = _cache.get(key)
    if cached is None:
        try:
            outputs, errors = render_sandboxed(text, bos_token=bos_token, eos_token=eos_token)
            cached = _same_built_in(template_strings(split(outputs, errors, eos_token), eos_token=eos_token,
                                                     label="The model's own", source=f"from {origin}"))
        except TemplateUnusable as exc:
            cached = str(exc)
        with _cache_lock:
            _cache[key] = cached
    if isinstance(cached, str):
        raise TemplateUnusable(cached)
    return _fallback(cached, f"from {origin}")  # the cache is by text: where it came from is this call's


def _framing(template: TemplateStrings) -> list[tuple[str, str]]:
    return [(template.prefix_for(role), template.suffix_for(role)) for role in ("system", "user", "assistant")]


def _same_built_in(derived: TemplateStrings) -> TemplateStrings:
    """The built-in template that frames exactly as ``derived`` does (named as it, with its
    stop strings, so conversations framed by it before stay as they are), else ``derived``."""
    for template in TEMPLATES.values():
        if _framing(template) == _framing(derived):
            return _fallback(template, derived.source)
    return derived


def _fallback(template: TemplateStrings, words: str) -> TemplateStrings:
    return TemplateStrings(**{**template.__dict__, "source": words})


def resolve(published: str | None, choice: str = AUTO, *, origin: str = "the server",
            bos_token: str = "", eos_token: str = "") -> TemplateInUse:
    """The template to frame with: the user's choice; else the model's own ``published``
    template (from ``origin``); else the built-in its markers match; else ChatML."""
    if choice and choice != AUTO and choice in TEMPLATES:
        return TemplateInUse(_fallback(TEMPLATES[choice], "chosen in Settings"))
    if not published:
        return TemplateInUse(_fallback(CHATML, f"built-in fallback: {origin} publishes no template"))
    matched = match_template(published)
    fallback_name = matched.label if matched is not None else CHATML.label
    if is_go_template(published):
        how = "matched by its markers" if matched is not None else "built-in fallback"
        return TemplateInUse(_fallback(matched or CHATML, f"{how}: {origin} publishes a Go template, not Jinja"))
    try:
        return TemplateInUse(from_model(published, origin=origin, bos_token=bos_token, eos_token=eos_token))
    except TemplateUnusable as exc:
        return TemplateInUse(_fallback(matched or CHATML, "built-in fallback"),
                             f"The model's own chat template ({origin}) cannot be used: {exc}. "
                             f"Using the built-in {fallback_name} template instead.")
