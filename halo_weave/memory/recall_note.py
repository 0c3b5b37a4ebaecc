"""The recall note: a short copy of what a message recalled, just before the message.

A recalled paragraph comes back at its original place in the context, where the model
read it when it was said.  A small model reading a long context answers from the start
and the end and loses the middle, so the request also carries a copy of the best
recalled paragraphs' first words inside the user's turn, before the message, each
line opening with the day its paragraph was said (the context itself holds no dates; the
year only when it is not this one), and, when the message asks when, how many or where,
a cue for that kind of answer::

    <user framing>From earlier in our conversation:
    - [2 March 2025] My cat is called Mochi…
    - [30 November] I fly to Lisbon on 3 March.
    (The lines above are dated: answer with the date.)

    When do I fly to Lisbon?<user end>

The note is not part of the conversation: it is not saved, indexed, shown or pruned.
It is written from what :attr:`~halo_weave.conversation.Conversation.recalls` holds for
the message (best match first), from the paragraphs of it still live, so the first
answer, a regenerated one and a Continue read the same note; the next message's request
has none (a server with KV surgery drops its cells; another re-reads the prompt from
there).  A message's recall plans keep :data:`NOTE_TOKENS` free for it, and it never
takes more than the model's window has left.  On the LoCoMo dev subset it raised answer F1 with Qwen2.5-Coder-0.5B from
0.139 to 0.224 (docs/answers.md).  The note's tokens are copies of the paragraphs' own
tokens between the tokenized words of :data:`~halo_weave.core.framing.NOTE_WORDS`.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Iterable, Sequence

import numpy as np

from ..core.framing import MONTHS
from . import relevance

#: Paragraphs a note copies at most, tokens copied from each, and tokens in all.
NOTE_CHUNKS = 4
NOTE_CHUNK_TOKENS = 40
NOTE_TOKENS = 160


@dataclass(frozen=True)
class NoteShape:
    """How much a note copies: at most ``lines`` paragraphs, ``line_tokens`` of each,
    ``tokens`` in all (the app's: :data:`SHAPE`; the answer benchmark measures others)."""

    lines: int = NOTE_CHUNKS
    line_tokens: int = NOTE_CHUNK_TOKENS
    tokens: int = NOTE_TOKENS
    #: Copy from a paragraph longer than a line the sentences that hold most of the
    #: message's words (after its opening words up to a ":", a transcript's "[date]
    #: Name:"), not its first words.
    focused: bool = False
    #: After the lines, a cue for the kind of answer the message asks for
    #: (:func:`answer_kind`: a date, a number, a place; a date only when a line is dated).
    cue: bool = False
    #: Each line opens with the day its paragraph was said, "[8 May 2023]", within its
    #: ``line_tokens`` (unless the paragraph opens with that day itself; an attached
    #: document's paragraphs have no day).
    dated: bool = False
    #: The lines chosen (the best paragraphs) are written in the order they were said,
    #: not best first: a message's next word that reorders its recall leaves the note
    #: as it was unless it changes which paragraphs the note copies.
    timeline: bool = False


#: The app's: each line dated (the context holds no day), the answer's kind cued.  Both
#: were chosen on the tuning conversations and won on the test ones (docs/answers.md,
#: "The dated note").
SHAPE = NoteShape(dated=True, cue=True)
#: A focused note's head: a ":" among a paragraph's first tokens ends its speaker and date.
HEAD_TOKENS = 16
#: What ends a sentence a focused note may copy.
SENTENCE_ENDS = (".", "!", "?")

#: The kinds of answer a cue names, by how a question opens (lower case, after a
#: greeting or a clause such as "and", checked word by word: see :func:`answer_kind`).
ANSWER_KINDS = (
    ("when", ("when", "what date", "which date", "what day", "what year", "which year",
              "what month", "which month", "what time", "how long ago", "since when")),
    ("count", ("how many", "how much", "how often", "how old", "how long")),
    ("where", ("where",)),
)

#: (token ids, token texts) of a chunk.
Tokens = tuple[Sequence[int], Sequence[str]]


@dataclass(frozen=True)
class RecallNote:
    """The note's tokens and where they go: before ``offset`` in the request's input ids
    (the first token of the message, after the user turn's opening framing)."""

    ids: tuple[int, ...]
    texts: tuple[str, ...]
    offset: int

    def __len__(self) -> int:
        return len(self.ids)

    def insert(self, input_ids: Sequence[int]) -> list[int]:
        """``input_ids`` with the note in its place."""
        ids = [int(i) for i in input_ids]
        return ids[:self.offset] + list(self.ids) + ids[self.offset:]

    def remove(self, attention: np.ndarray) -> np.ndarray:
        """An attention row over the request (note included) as one over the context:
        the note's cells dropped (a copy's attention is not its paragraph's)."""
        return np.concatenate((attention[:self.offset], attention[self.offset + len(self.ids):]))


def note_tokens(words: dict, chunks: Iterable[Tokens], limit: int = NOTE_TOKENS,
                shape: NoteShape = SHAPE, asked: frozenset[str] = frozenset(),
                kind: str | None = None, said: Sequence[float | None] = (),
                now: float | None = None, at: Sequence[int] = ()) -> tuple[list[int], list[str]]:
    """The note's tokens for the paragraphs ``chunks`` (best first), within ``limit``
    (at most ``shape.tokens``); empty when ``words`` (the framing's tokenized note
    words) are missing or no paragraph has text.  ``asked``: the message's word stems
    (:func:`~.relevance.words`), which a focused shape copies sentences by; ``kind``
    (:func:`answer_kind`): the cue ending the note (its words must be in ``words``);
    ``said``: when each paragraph was said (a Unix time; None: unknown), which a dated
    shape opens its line with (its year left out in the year of ``now``: :func:`day_tokens`);
    ``at``: where each paragraph is in the conversation, which a timeline shape writes its
    lines in the order of."""
    limit = min(limit, shape.tokens)
    if not words:
        return [], []
    lines = []
    for k, (ids, texts) in enumerate(chunks):
        if len(lines) == shape.lines:
            break
        line = _line(words, list(ids), list(texts), shape, asked, said[k] if k < len(said) else None, now)
        if line is not None:
            lines.append((at[k] if k < len(at) else k, line))
    while lines:
        chosen = sorted(lines, key=lambda kl: kl[0]) if shape.timeline else lines
        ids, texts = _written(words, [line for _, line in chosen])
        cue = kind if kind != "when" or any(dated for _, (*_, dated) in lines) else None  # dates: only if said
        if cue in words:  # the cue in place of the blank line that ends the note
            end = len(words["end"][0])
            ids, texts = ids[: len(ids) - end] + list(words["line"][0]), texts[: len(texts) - end] + list(words["line"][1])
            ids, texts = ids + [int(i) for i in words[cue][0]], texts + list(words[cue][1])
        if len(ids) <= limit:
            return ids, texts
        lines.pop()
    return [], []


def _line(words: dict, ids: list[int], texts: list[str], shape: NoteShape, asked: frozenset[str],
          stamp: float | None, now: float | None = None) -> tuple[list[int], list[str], bool, bool] | None:
    """One paragraph's line: a dated shape's day (:func:`day_tokens` of ``stamp``, unless
    the paragraph opens with it: a transcript line's own), then what it copies of the
    paragraph, within ``shape.line_tokens``; whether the paragraph went on; whether the
    line says its day.  None when the paragraph has no text."""
    day = day_tokens(words, stamp, now) if shape.dated else ([], [])
    own = bool(day[0]) and _opens_with(texts, day[1])
    if own:
        day = [], []
    elif day[0]:  # the day, then a space unless the paragraph's first token brings one
        first = next((t for t in texts if t.strip()), " ")
        space = words["space"] if not first[:1].isspace() else ([], [])
        day = day[0] + list(space[0]), day[1] + list(space[1])
    length = shape.line_tokens - len(day[0])
    line = _focused(ids, texts, length, asked) if shape.focused and asked else _trimmed(ids, texts, length)
    if line is None:
        return None
    return day[0] + list(line[0]), day[1] + list(line[1]), line[2], own or bool(day[0])


def day_tokens(words: dict, stamp: float | None, now: float | None = None) -> tuple[list[int], list[str]]:
    """The day of ``stamp`` (a Unix time, the local day) as a note writes it, "[8 May
    2023]", or "[8 May]" in the year of ``now`` (default: the present; a small model
    given this year's date lends its year to the dates it reads), in the framing's
    tokenized date pieces (``words``: the framing's
    :data:`~halo_weave.core.framing.DATE_WORDS` among them); empty without a time or
    when a piece is missing."""
    try:
        day = datetime.fromtimestamp(stamp) if stamp is not None and stamp > 0 else None
        this_year = datetime.fromtimestamp(time.time() if now is None else now).year
    except (OverflowError, OSError, ValueError):  # a time no calendar holds (an imported file's)
        return [], []
    if day is None:
        return [], []
    pieces = day_pieces(day, year=day.year != this_year)
    if any(p not in words for p in pieces):
        return [], []
    ids, texts = [], []
    for piece in pieces:
        ids.extend(int(i) for i in words[piece][0])
        texts.extend(words[piece][1])
    return ids, texts


def day_pieces(day: datetime, year: bool = True) -> list[str]:
    """The :data:`~halo_weave.core.framing.DATE_WORDS` pieces that write ``day``, in
    order: "[8 May 2023]" (``year`` False: "[8 May]")."""
    return ["date_open", *str(day.day), MONTHS[day.month - 1], *(["space", *str(day.year)] if year else []),
            "date_close"]


def said_at(conv, chunks: Iterable) -> list[float | None]:
    """When each of ``chunks`` was said in ``conv``: its turn's time (None for an
    attached document's paragraph: when it was attached is not when it was written)."""
    said = []
    for chunk in chunks:
        turn = conv.turns[chunk.turn_id] if chunk.turn_id in conv.turns else None
        said.append(None if turn is None or chunk.role == "document" else turn.created_at)
    return said


def question_of(message: str) -> str | None:
    """The question in ``message``: its last sentence ending in "?" (the whole message
    when none does; None when it holds no words)."""
    parts = [p for p in message.replace("\n", " ").split("?") if p.strip()]
    if not parts:
        return None
    return parts[-1] if message.rstrip().endswith("?") or len(parts) == 1 else parts[-2]


def answer_kind(message: str) -> str | None:
    """The kind of answer the question in ``message`` asks for: "when", "count", "where"
    or None.  The last sentence ending in "?" is the question (the whole message when
    none does); a kind is named by the words it opens with or that open a clause of it."""
    asked = question_of(message)
    if asked is None:
        return None
    asked = re.sub(r"[.!;:]\s|\b(and|so|but|then)\b", ",", asked.lower())
    clauses = [" ".join(w.strip("\"'()") for w in c.split()) for c in asked.split(",")]
    for kind, openers in ANSWER_KINDS:
        if any(c == o or c.startswith(o + " ") for c in clauses for o in openers):
            return kind
    return None


def for_message(conv, turn_id: int, limit: int = NOTE_TOKENS, shape: NoteShape = SHAPE) -> RecallNote | None:
    """The note of the user message ``turn_id`` within ``limit`` tokens (None when it
    recalled nothing still live, or none fits), placed in ``conv``'s live input ids."""
    chunks = [conv.chunks[c] for c in conv.recalls.of(turn_id) if c in conv.chunks]
    live = [c for c in chunks if c.live and not c.framing]
    content = [c for c in conv.content_chunks(turn_id) if c.live] if turn_id in conv.turns else []
    message = "".join("".join(conv.chunk_tokens(c.id).texts) for c in content)
    ids, texts = of_chunks(conv, live, limit, shape, message)
    if not ids or not content:
        return None
    offset = len(conv.system.ids) + int(np.searchsorted(conv.table.position, content[0].start))
    return RecallNote(tuple(ids), tuple(texts), offset)


def of_chunks(conv, chunks: Sequence, limit: int = NOTE_TOKENS, shape: NoteShape = SHAPE,
              message: str = "") -> tuple[list[int], list[str]]:
    """The note's tokens for ``conv``'s paragraphs ``chunks`` (best first) before the
    message ``message`` (its text: what a focused note copies by and a cue names)."""
    asked = frozenset(relevance.words(relevance.focus(message))) if shape.focused and message else frozenset()
    kind = answer_kind(message) if shape.cue and message else None
    tokens = ((t.token_ids, t.texts) for t in (conv.chunk_tokens(c.id) for c in chunks))
    return note_tokens(conv.framing.note, tokens, limit, shape, asked, kind, said_at(conv, chunks),
                       at=[c.start for c in chunks])


def best_first(plan, chunks: Iterable) -> list[int]:
    """The order a message's recall is kept in: the order of ``plan`` (a
    :class:`~halo_weave.memory.recall_plan.RecallPlan`: matches in score order, each
    followed by the neighbouring turns it brings), then the rest (anchors) in position
    order.  (Listing the matches before every neighbour answered no better: docs/answers.md.)"""
    rank = {cid: k for k, cid in enumerate(dict.fromkeys(plan.chunk_ids))}
    return [c.id for c in sorted(chunks, key=lambda c: (rank.get(c.id, len(rank)), c.start))]


def _trimmed(ids: list[int], texts: list[str], length: int) -> tuple[list[int], list[str], bool] | None:
    """A paragraph's first ``length`` tokens without the blank ones around them; whether it went on."""
    start = next((k for k, t in enumerate(texts) if t.strip()), None)
    if start is None:
        return None
    end = len(texts)
    while end > start and not texts[end - 1].strip():
        end -= 1
    stop = min(end, start + length)
    return ids[start:stop], texts[start:stop], stop < end


def _focused(ids: list[int], texts: list[str], length: int,
             asked: frozenset[str]) -> tuple[list[int], list[str], bool] | None:
    """At most ``length`` tokens of a paragraph: all of it when it fits; else its head
    (the tokens up to a ":" among its first :data:`HEAD_TOKENS`, a transcript's speaker
    and date) and the sentences holding the most of ``asked``, in the paragraph's order
    (ties: the earlier sentence); its first tokens when no sentence holds any."""
    whole = _trimmed(ids, texts, len(texts))
    if whole is None:
        return None
    ids, texts = list(whole[0]), list(whole[1])
    if len(ids) <= length:
        return ids, texts, False
    head = next((k + 1 for k, t in enumerate(texts[:HEAD_TOKENS]) if t.rstrip().endswith(":")), 0)
    spans, start = [], head
    for k in range(head, len(texts)):
        if texts[k].rstrip().endswith(SENTENCE_ENDS) or "\n" in texts[k] or k == len(texts) - 1:
            spans.append((start, k + 1))
            start = k + 1
    scored = [(len(asked & relevance.words("".join(texts[a:b]))), -a, a, b) for a, b in spans]
    if not any(score for score, *_ in scored):
        return _trimmed(ids, texts, length)
    room, chosen = length - head, []
    for score, _, a, b in sorted(scored, reverse=True):
        if score == 0 or room <= 0:
            break
        take = min(b - a, room)  # a sentence longer than what is left: its start
        chosen.append((a, a + take))
        room -= take
    keep = list(range(head)) + [k for a, b in sorted(chosen) for k in range(a, b)]
    return [ids[k] for k in keep], [texts[k] for k in keep], len(keep) < len(ids)


def _opens_with(texts: list[str], day: list[str]) -> bool:
    """Whether a paragraph's text (blank tokens before it aside) opens with the text of ``day``."""
    head = "".join(texts[:len(day) + 8]).lstrip()
    return head.startswith("".join(day))


def _written(words: dict, lines: list) -> tuple[list[int], list[str]]:
    ids, texts = list(words["header"][0]), list(words["header"][1])
    for k, (line_ids, line_texts, more, _dated) in enumerate(lines):
        # "- " before a word, "-" before a token that brings its own space.
        dash = words["dash"] if line_texts[0][:1].isspace() and words.get("dash") else words["bullet"]
        parts = [dash, (line_ids, line_texts)]
        if more:
            parts.append(words["more"])
        parts.append(words["end"] if k == len(lines) - 1 else words["line"])
        for part_ids, part_texts in parts:
            ids.extend(int(i) for i in part_ids)
            texts.extend(part_texts)
    return ids, texts
