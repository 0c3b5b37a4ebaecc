"""A model's own chat template turned into per-role text around each message.

The template (Jinja, published by the model) is rendered around sentinel contents —
unique words standing for a system prompt, user messages and answers — and the text
between the sentinels is the framing: what comes after an answer and before the next user
message is the assistant's suffix and the user's prefix, what ``add_generation_prompt``
appends is the assistant's prefix, and so on.  The message text itself is never part of
the framing, so it is tokenized as text later (:mod:`.chat_template`).

Two shapes are read:

* **a system turn of its own** (ChatML, Llama 3, Phi-3, DeepSeek): the framing of every
  role comes from one rendering;
* **no system turn** (Gemma, Mistral's ``[INST]``): the template folds the system prompt
  into a user message or refuses it, so the system prompt becomes a user turn answered by
  a short acknowledgement (``Understood.``), which keeps user and assistant turns
  alternating as those templates require.

A second conversation with other sentinels is then rendered and compared with what the
derived framing gives for it: a template whose framing depends on a message's position or
content beyond what per-role text can say (a different first turn, content rewritten) is
refused with the reason, and the caller falls back to a built-in template.  Qt-free.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Sequence

from .chat_template import TemplateStrings

#: What a system prompt folded into a user turn is answered with (as the built-in Mistral).
ACKNOWLEDGEMENT = "Understood."

#: Stand-ins for message contents: letters and digits only, so a template that trims or
#: strips whitespace leaves them whole.
S1, U1, A1, U2, A2 = "hwsysalpha7q", "hwuseralpha7q", "hwansalpha7q", "hwuserbeta7q", "hwansbeta7q"
S2, U3, A3, U4 = "hwsysgamma7q", "hwusergamma7q", "hwansgamma7q", "hwuserdelta7q"


class TemplateUnusable(ValueError):
    """The template cannot be represented as text around each message (the reason says why)."""


@dataclass(frozen=True)
class Render:
    """One rendering to ask for: ``messages`` as ``[(role, content)]``."""

    messages: tuple[tuple[str, str], ...]
    add_generation_prompt: bool

    def as_json(self) -> dict:
        return {"messages": [{"role": r, "content": c} for r, c in self.messages],
                "add_generation_prompt": self.add_generation_prompt}


def _conversation(*pairs: tuple[str, str], gen: bool) -> Render:
    return Render(tuple(pairs), gen)


_SYS, _US = ("system", S1), ("user", U1)
#: Every rendering the split needs, asked for at once (one sandboxed process).
RENDERS: tuple[Render, ...] = (
    _conversation(_SYS, _US, ("assistant", A1), ("user", U2), ("assistant", A2), gen=False),  # 0
    _conversation(_SYS, _US, gen=False),  # 1
    _conversation(_SYS, _US, gen=True),  # 2
    _conversation(_US, ("assistant", A1), ("user", U2), ("assistant", A2), gen=False),  # 3
    _conversation(_US, gen=False),  # 4
    _conversation(_US, gen=True),  # 5
    _conversation(("system", S2), ("user", U3), ("assistant", A3), ("user", U4), gen=True),  # 6: check
    _conversation(("user", U3), ("assistant", A3), ("user", U4), gen=True),  # 7: check, no system
)


def _cut(text: str, sentinels: Sequence[str]) -> list[str]:
    """``text`` split around ``sentinels``, which must appear once each, in order:
    ``[before first, between 1st and 2nd, …, after last]``."""
    pieces, rest = [], text
    for word in sentinels:
        if text.count(word) != 1 or word not in rest:
            raise TemplateUnusable("a message's text does not appear once and in order in the output "
                                   "(the template rewrites or reorders messages)")
        before, rest = rest.split(word, 1)
        pieces.append(before)
    pieces.append(rest)
    return pieces


def _appended(longer: str, shorter: str, what: str) -> str:
    if not longer.startswith(shorter):
        raise TemplateUnusable(f"{what} changes the text before it")
    return longer[len(shorter):]


def _ending(text: str, tail: str, what: str) -> str:
    if tail and not text.endswith(tail):
        raise TemplateUnusable(f"{what} is not the same in every turn")
    return text[:len(text) - len(tail)]


def _opening(text: str, head: str, what: str) -> str:
    if not text.startswith(head):
        raise TemplateUnusable(f"{what} is not the same in every turn")
    return text[len(head):]


@dataclass(frozen=True)
class Split:
    """Per-role framing read from the renderings.  ``lead``: text a past answer starts
    with that the generation prompt leaves out (Mistral's space after ``[/INST]``, or the
    whole opening in a template that ignores ``add_generation_prompt``); it is part of the
    assistant's prefix here."""

    prefixes: dict
    suffixes: dict
    system_turn: bool  # False: the system prompt is framed as a user turn and acknowledged
    preamble: str = ""
    lead: str = ""


def _user_assistant(full: str, short: str, prompted: str, first: str):
    """(head, user prefix, user suffix, assistant prefix, lead, assistant suffix) of the
    renderings ``full`` (``first``, …, U1, A1, U2, A2), ``short`` (…, U1) and ``prompted``
    (``short`` with the generation prompt)."""
    sentinels = (first, U1, A1, U2, A2) if first != U1 else (U1, A1, U2, A2)
    head, *gaps, tail = _cut(full, sentinels)
    user_to_answer, answer_to_user, user_to_answer_2 = gaps[-3:]
    assistant_suffix = tail
    user_suffix = _cut(short, sentinels[:-3])[-1]
    assistant_prefix = _appended(prompted, short, "add_generation_prompt")
    lead = _opening(user_to_answer, user_suffix + assistant_prefix, "the text between a message and its answer")
    if lead.strip() and assistant_prefix:
        # (A template without a generation prompt leaves the whole opening to ``lead``.)
        raise TemplateUnusable("a past answer is framed differently from the generation prompt")
    user_prefix = _opening(answer_to_user, assistant_suffix, "the text after an answer")
    if user_to_answer != user_to_answer_2:
        raise TemplateUnusable("the second user message is framed differently from the first")
    return head, user_prefix, user_suffix, assistant_prefix + lead, lead, assistant_suffix


def _closing_eos(outputs: Sequence[str | None], eos_token: str) -> list[str | None]:
    """Renderings without a final end-of-sequence token that the template adds to every
    rendering without the generation prompt, whatever its last message (Phi-3)."""
    plain = [outputs[i] for i, r in enumerate(RENDERS) if not r.add_generation_prompt]
    if not eos_token or not all(o is not None and o.endswith(eos_token) for o in plain):
        return list(outputs)
    return [o[:-len(eos_token)] if o is not None and not r.add_generation_prompt else o
            for o, r in zip(outputs, RENDERS)]


def split(outputs: Sequence[str | None], errors: Sequence[str | None], eos_token: str = "") -> Split:
    """The framing from the outputs of :data:`RENDERS` (``None`` where one failed, with its
    error); raises :class:`TemplateUnusable` with the reason."""
    outputs = _closing_eos(outputs, eos_token)
    reason = ""
    if all(outputs[i] is not None for i in (0, 1, 2, 6)):
        try:
            head, gap_su, *_ = _cut(outputs[0], (S1, U1))
            _, p_u, x_u, p_a, lead, x_a = _user_assistant(outputs[0], outputs[1], outputs[2], S1)
            x_s = _ending(gap_su, p_u, "the user's opening")
            found = Split({"system": head, "user": p_u, "assistant": p_a},
                          {"system": x_s, "user": x_u, "assistant": x_a}, True, lead=lead)
            _check(found, outputs[6], system=True)
            return found
        except TemplateUnusable as exc:
            reason = str(exc)
    if not all(outputs[i] is not None for i in (3, 4, 5, 7)):
        failed = next((e for e in errors if e), None) or reason or "it renders nothing"
        raise TemplateUnusable(f"rendering failed: {failed}")
    head, p_u, x_u, p_a, lead, x_a = _user_assistant(outputs[3], outputs[4], outputs[5], U1)
    preamble = _ending(head, p_u, "the user's opening")
    found = Split({"system": preamble + p_u, "user": p_u, "assistant": p_a},
                  {"system": x_u + p_a + ACKNOWLEDGEMENT + x_a, "user": x_u, "assistant": x_a},
                  False, preamble, lead)
    _check(found, outputs[7], system=False)
    return found


def _check(found: Split, rendered: str, *, system: bool) -> None:
    p, x = found.prefixes, found.suffixes

    def wrap(role: str, text: str) -> str:
        return p[role] + text + x[role]

    expected = (wrap("system", S2) if system else found.preamble) + wrap("user", U3) + wrap("assistant", A3) + \
        wrap("user", U4) + p["assistant"]
    if expected != rendered + found.lead:
        raise TemplateUnusable("a second conversation renders differently from the framing read from the first "
                               "(the template depends on a message's position or content)")


def template_strings(found: Split, *, eos_token: str = "", label: str, source: str) -> TemplateStrings:
    """:class:`TemplateStrings` for ``found``; stop strings are the end of an answer and the
    opening of a user turn (and the end-of-sequence token)."""
    stops = []
    for stop in (found.suffixes["assistant"].strip(), found.prefixes["user"].strip(), eos_token):
        if stop and stop not in stops:
            stops.append(stop)
    digest = hashlib.sha1(repr((sorted(found.prefixes.items()), sorted(found.suffixes.items()))).encode())
    escape = lambda text: text.replace("{", "{{").replace("}", "}}")  # noqa: E731 - prefix_for formats
    return TemplateStrings(
        f"model-{digest.hexdigest()[:10]}", "", "", label, stops=tuple(stops[:4]),
        prefixes={role: escape(text) for role, text in found.prefixes.items()},
        suffixes=dict(found.suffixes), source=source)
