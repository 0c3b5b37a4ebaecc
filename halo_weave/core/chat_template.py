"""Chat framing: the template text wrapped around each turn, and where an answer stops.

Framing is tokenized once per conversation (with the backend's tokenizer) and stored with
the turns it belongs to.  It is the only text whose marker strings (``<|im_start|>``)
become control tokens: a message, an imported chat or a tool result is tokenized as
text, so typing ``<|im_end|>`` cannot open a turn of another role.  The template is the model's own when the server publishes one
(matched here by its marker tokens); otherwise the user picks one in Settings (ChatML,
Llama 3, Mistral, Gemma, Alpaca, plain), saved per conversation.  ChatML is the default.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from .framing import DATE_WORDS, FRAMED_AS, NOTE_WORDS, ROLES, Framing

#: tokenize(text) -> [(token_id, text)]; for :func:`build_framing`, with special-token
#: strings parsed as specials (a backend's ``tokenize(text, parse_special=True)``).
Tokenize = Callable[[str], Sequence[tuple[int, str]]]

#: The choice that means "the server's own template, else ChatML".
AUTO = "auto"


@dataclass(frozen=True)
class TemplateStrings:
    """Text before and after a message of each role, and the answer's stop strings.

    ``prefix``/``suffix`` apply to every role (``{role}`` is filled in, with
    ``role_names`` renaming a role, e.g. Gemma's ``model``); ``prefixes``/``suffixes``
    override them per role.
    """

    name: str
    prefix: str  # with {role}
    suffix: str
    label: str = ""
    stops: tuple[str, ...] = ()
    prefixes: dict = field(default_factory=dict)
    suffixes: dict = field(default_factory=dict)
    role_names: dict = field(default_factory=dict)
    #: Where it came from, in words ("built in", "from the model (llama-server /props)").
    source: str = "built in"

    def prefix_for(self, role: str) -> str:
        text = self.prefixes.get(role, self.prefix)
        return text.format(role=self.role_names.get(role, role))

    def suffix_for(self, role: str) -> str:
        return self.suffixes.get(role, self.suffix)

    def wrap(self, role: str, content: str) -> str:
        return self.prefix_for(role) + content + self.suffix_for(role)

    def preview(self, system: str = "You are a helpful assistant.", user: str = "What is tea?",
                answer: str = "A drink made from leaves.") -> str:
        """One framed exchange, as the server will read it (Settings shows it)."""
        return (self.wrap("system", system) if system else "") + self.wrap("user", user) + self.wrap("assistant", answer)


CHATML = TemplateStrings("chatml", "<|im_start|>{role}\n", "<|im_end|>\n", "ChatML",
                         stops=("<|im_end|>", "<|im_start|>"))
LLAMA3 = TemplateStrings("llama3", "<|start_header_id|>{role}<|end_header_id|>\n\n", "<|eot_id|>", "Llama 3",
                         stops=("<|eot_id|>", "<|start_header_id|>"))
MISTRAL = TemplateStrings("mistral", "", "", "Mistral",
                          stops=("</s>", "[INST]"),
                          prefixes={"user": "[INST] ", "system": "[INST] "},
                          suffixes={"user": " [/INST]", "system": " [/INST]Understood.</s>", "assistant": "</s>"})
GEMMA = TemplateStrings("gemma", "<start_of_turn>{role}\n", "<end_of_turn>\n", "Gemma",
                        stops=("<end_of_turn>", "<start_of_turn>"),
                        role_names={"assistant": "model", "system": "user"})
ALPACA = TemplateStrings("alpaca", "", "\n\n", "Alpaca", stops=("### Instruction:", "### Response:"),
                         prefixes={"user": "### Instruction:\n", "assistant": "### Response:\n"})
PLAIN = TemplateStrings("plain", "", "\n\n", "Plain (User: / Assistant:)", stops=("\nUser:", "\nAssistant:"),
                        prefixes={"user": "User: ", "assistant": "Assistant: "})

TEMPLATES = {t.name: t for t in (CHATML, LLAMA3, MISTRAL, GEMMA, ALPACA, PLAIN)}

#: Marker text in a published Jinja template → our framing.
_MARKERS = (("<|im_start|>", CHATML), ("<|start_header_id|>", LLAMA3), ("<start_of_turn>", GEMMA),
            ("[INST]", MISTRAL), ("### Instruction", ALPACA))


def match_template(chat_template: str | None) -> TemplateStrings | None:
    """Our framing for a server's published Jinja template (None: not recognised / none)."""
    if not chat_template:
        return None
    for marker, template in _MARKERS:
        if marker in chat_template:
            return template
    return None


def detect_template(chat_template: str | None, choice: str = AUTO) -> TemplateStrings:
    """The framing to use: the user's choice, else the server's own, else ChatML."""
    if choice and choice != AUTO and choice in TEMPLATES:
        return TEMPLATES[choice]
    return match_template(chat_template) or CHATML


def build_framing(tokenize: Tokenize, template: TemplateStrings = CHATML) -> Framing:
    """Tokenize each role's prefix and suffix once."""
    prefix, suffix = {}, {}
    for role in (r for r in ROLES if r not in FRAMED_AS):  # the others take a framed role's
        prefix[role] = _split(tokenize(template.prefix_for(role)))
        suffix[role] = _split(tokenize(template.suffix_for(role)))
    note = {name: _split(tokenize(words)) for name, words in {**NOTE_WORDS, **DATE_WORDS}.items()}
    return Framing(prefix=prefix, suffix=suffix, note=note)


def system_text(prompt: str, template: TemplateStrings = CHATML) -> str:
    """The framed system prefix as the model reads it; empty when there is no system
    prompt.  Its tokens are the framing's around the prompt tokenized as text
    (:meth:`~halo_weave.core.framing.Framing.wrap`), never this string tokenized whole."""
    return template.wrap("system", prompt) if prompt.strip() else ""


def _split(pieces: Sequence[tuple[int, str]]) -> tuple[list[int], list[str]]:
    return [int(i) for i, _ in pieces], [t for _, t in pieces]
