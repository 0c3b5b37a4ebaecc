"""Chat framing: the template tokens wrapped around each turn.

Framing is tokenized once per conversation (with the server's tokenizer) and stored with
the turns it belongs to.  ChatML is the default; a server that publishes another template
can be matched here by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from .framing import ROLES, Framing

#: tokenize(text) -> [(token_id, text)], with special-token strings parsed as specials.
Tokenize = Callable[[str], Sequence[tuple[int, str]]]


@dataclass(frozen=True)
class TemplateStrings:
    """Text before and after a message of each role."""

    name: str
    prefix: str  # with {role}
    suffix: str

    def wrap(self, role: str, content: str) -> str:
        return self.prefix.format(role=role) + content + self.suffix


CHATML = TemplateStrings("chatml", "<|im_start|>{role}\n", "<|im_end|>\n")

TEMPLATES = {CHATML.name: CHATML}


def detect_template(chat_template: str | None) -> TemplateStrings:
    """Pick the framing for a server's published Jinja template (ChatML by default)."""
    if chat_template and "<|im_start|>" in chat_template:
        return CHATML
    return CHATML


def build_framing(tokenize: Tokenize, template: TemplateStrings = CHATML) -> Framing:
    """Tokenize each role's prefix and suffix once."""
    prefix, suffix = {}, {}
    for role in ROLES:
        prefix[role] = _split(tokenize(template.prefix.format(role=role)))
        suffix[role] = _split(tokenize(template.suffix))
    return Framing(prefix=prefix, suffix=suffix)


def system_text(prompt: str, template: TemplateStrings = CHATML) -> str:
    """The framed system prefix; empty when there is no system prompt."""
    return template.wrap("system", prompt) if prompt.strip() else ""


def _split(pieces: Sequence[tuple[int, str]]) -> tuple[list[int], list[str]]:
    return [int(i) for i, _ in pieces], [t for _, t in pieces]
