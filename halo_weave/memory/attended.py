"""Ranking a message's recall by the chat model's attention (SnapKV's choice, per paragraph).

SnapKV keeps the context positions that a prompt's last tokens attend to; here the unit is
the paragraph.  The chat model reads the prompt with the message (the message, its
framing and the answer's opening are the queries: our server's read-ahead with
``queries``); each recalled paragraph scores the mean attention per token those queries
pay it (summed over the queries, averaged over layers and heads).

The app keeps what its relevance order ranks first (:mod:`.relevance`), which kept more
of LoCoMo's evidence than this order and needs no server; the benchmarks compare the two
(``bench_answers --methods default-attention``, ``bench_recall_order``: docs/answers.md).

Qt-free and server-free: the caller gets the attention (our server's read-ahead with
``queries``, or the benchmark's engine) and hands it to :func:`ranked`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import relevance


#: A message whose queries (its turn and the answer's opening) run longer than this is
#: weighed by its last :data:`END_QUERIES` tokens only: the whole of a pasted page as
#: queries drowns the question at its end (a 260-token paste ending in "what is my cat
#: called?" kept the bicycle over the cat, read whole or by its last 64 tokens; by its last
#: 32 the cat), and the server need not read a page twice.  SnapKV's observation window is
#: likewise the prompt's last tokens.  LoCoMo's questions stay under it, read whole.
MAX_QUERIES = 64
END_QUERIES = 32


@dataclass(frozen=True)
class Reading:
    """What the model reads to weigh a message's recall.

    ``prefix``: the prompt before the queries (system prompt and live context, the
    recalled paragraphs in place, and the start of a message longer than the window);
    ``queries``: the message as the user's turn and the answer's opening (its last
    :data:`END_QUERIES` tokens when longer than :data:`MAX_QUERIES`); ``chunk_of``: for each position of ``prefix``, the chunk it
    belongs to (-1 for the system prompt); ``recalled``: the ids of the recalled content
    chunks, in position order.
    """

    prefix: list[int]
    queries: list[int]
    chunk_of: np.ndarray
    recalled: tuple[int, ...]


def read_for(conv, recalled_ids, question_ids: list[int], question_texts: list[str]) -> Reading | None:
    """The :class:`Reading` that weighs ``recalled_ids`` (live content chunks of ``conv``)
    for the message ``question_ids``; None when nothing was recalled.  ``conv`` is left as
    it was (the message is added on trial)."""
    wanted = set(recalled_ids)
    chunks = [c for c in conv.live_chunks() if c.id in wanted and not c.framing]
    if not chunks:
        return None
    system = len(conv.system.ids)
    with conv.trial():
        turn = conv.add_turn("user", [int(i) for i in question_ids], list(question_texts))
        ids = [int(i) for i in conv.live_input_ids()] + [int(i) for i in conv.framing.prefix["assistant"][0]]
        first_row = int(np.flatnonzero(np.asarray(conv.table.turn_id) == turn.turn_id)[0])
        rows = np.asarray(conv.table.chunk_id, dtype=np.int64).copy()
    split = system + first_row
    if len(ids) - split > MAX_QUERIES:
        split = len(ids) - END_QUERIES
    chunk_of = np.concatenate([np.full(system, -1, dtype=np.int64), rows[:split - system]])
    return Reading(ids[:split], ids[split:], chunk_of, tuple(c.id for c in chunks))


def ranked(reading: Reading, attention) -> list[int]:
    """The recalled chunk ids, the most attended first: each scores the mean of
    ``attention`` (one value per position of ``reading.prefix``) over its tokens.  Equal
    scores keep position order."""
    mass = np.asarray(attention, dtype=np.float64)
    if mass.shape != (len(reading.prefix),):
        raise ValueError(f"attention over {mass.shape} positions for a prefix of {len(reading.prefix)}")
    score = {}
    for k, chunk_id in enumerate(reading.recalled):
        mine = reading.chunk_of == chunk_id
        score[chunk_id] = (float(mass[mine].mean()) if mine.any() else 0.0, k)
    return sorted(reading.recalled, key=lambda c: (-score[c][0], score[c][1]))


def choose(conv, reading: Reading, attention, share: float) -> tuple[list[int], list[int]]:
    """What the message would keep of its recall in ``conv`` by attention: ``(kept,
    given_back)``, the kept most attended first (:func:`ranked`, then
    :func:`.relevance.choose` at ``share``).  Nothing is pruned here."""
    return relevance.choose(conv, ranked(reading, attention), share)
