"""The chat-template tokens wrapped around every turn (built by :mod:`.chat_template`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

ROLES = ("system", "user", "assistant", "document")

#: Roles the chat template has no turn for, and the role whose framing they take: an
#: attached document's paragraphs reach the model inside a user turn.
FRAMED_AS = {"document": "user"}

#: The words of a recall note (:mod:`halo_weave.memory.recall_note`), tokenized with the
#: framing: a header, then one line per recalled paragraph.
NOTE_WORDS = {
    "header": "From earlier in our conversation:\n",
    "bullet": "- ",
    "dash": "-",
    "more": "…",
    "line": "\n",
    "end": "\n\n",
    # The answer's kind, after the lines, when the message asks for one (see
    # halo_weave.memory.recall_note.answer_kind).
    "when": "(The lines above are dated: answer with the date.)\n\n",
    "count": "(Answer with the number.)\n\n",
    "where": "(Answer with the place.)\n\n",
}

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December")

#: The pieces a note writes the day a paragraph was said with ("[8 May 2023] "),
#: tokenized with the framing: a day is written piece by piece, with no tokenizer at hand.
DATE_WORDS = {
    "date_open": "[",
    "date_close": "]",
    "space": " ",
    **{str(d): str(d) for d in range(10)},
    **{month: " " + month for month in MONTHS},
}


@dataclass
class Framing:
    """Chat-template tokens wrapped around every turn of a role (see :mod:`.chat_template`)."""

    prefix: dict[str, tuple[list[int], list[str]]]
    suffix: dict[str, tuple[list[int], list[str]]]
    #: :data:`NOTE_WORDS` and :data:`DATE_WORDS` tokenized (empty: no recall note can be written).
    note: dict[str, tuple[list[int], list[str]]] = field(default_factory=dict)

    def wrap(self, role: str, pieces: Sequence[tuple[int, str]]) -> list[tuple[int, str]]:
        """``(id, piece)`` pairs of a whole turn: the role's framing around ``pieces``."""
        role = FRAMED_AS.get(role, role)
        before, after = self.prefix.get(role, ([], [])), self.suffix.get(role, ([], []))
        return [*zip(*before), *pieces, *zip(*after)]

    def around(self, role: str) -> tuple[tuple[list[int], list[str]], tuple[list[int], list[str]]]:
        """The (ids, texts) before and after a turn of ``role`` (:data:`FRAMED_AS`)."""
        role = FRAMED_AS.get(role, role)
        return self.prefix.get(role, ([], [])), self.suffix.get(role, ([], []))

    @classmethod
    def none(cls) -> "Framing":
        empty = {role: ([], []) for role in ROLES}
        return cls(prefix=dict(empty), suffix=dict(empty))


class SystemPrompt:
    """The system prompt of a conversation: its text and the framed, tokenized prefix
    the model reads before every turn (never scored, never pruned)."""

    def __init__(self) -> None:
        self.text = ""
        self.ids = np.zeros(0, np.int32)
        self.texts: list[str] = []

    def set(self, text: str, token_ids: Sequence[int], texts: Sequence[str]) -> None:
        """Set the prefix (already framed and tokenized by the caller)."""
        self.text = text
        self.ids = np.asarray(token_ids, np.int32)
        self.texts = list(texts)

    def snapshot(self) -> tuple:
        """The prompt as it is now (for :meth:`restore`)."""
        return self.text, self.ids, list(self.texts)

    def restore(self, snapshot: tuple) -> None:
        """Back to what :meth:`snapshot` saw (the snapshot stays usable)."""
        self.text, self.ids, texts = snapshot
        self.texts = list(texts)
