"""Which part of a message's recall it keeps: three views of relevance, fused.

A message's search brings back its matches and the neighbouring turns each brings
(:mod:`.recall_plan`).  Each paragraph that came back is then ranked three ways:

- the plan's order: the search's score (the cosine of the paragraph's turn pair, blended
  with BM25), each neighbour right after the match that brought it;
- the cosine of the paragraph's own text with the message (MiniLM), so that a neighbour
  is ranked on what it says, not on its match's score;
- the share of the message's words it holds (stems, stop words left out): the names,
  places and things that an embedding blurs.

A long message is ranked against by its end (:func:`focus`).

Reciprocal rank fusion of the three orders (:func:`fused`, k = :data:`FUSION_K`) ranks
the recall; the lowest ranked go back to the graveyard until ``recall_keep_share`` of its
tokens are left, the first always kept (:func:`kept`).  The note before the question
copies the recall in this order.  On LoCoMo's questions this order keeps more of the
evidence from half the tokens than the search's order or the chat model's attention,
and needs no server (docs/answers.md, "Which paragraphs a message keeps").

Qt-free and server-free; every score is ranked on the grid of :mod:`..core.ties`, ties
by the plan's order, so every CPU keeps the same paragraphs.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from typing import Mapping, Sequence

import numpy as np

from ..core import ties
from .ranking import STOPWORDS, stem

#: Reciprocal rank fusion's constant: a paragraph scores ``1 / (FUSION_K + rank)`` in each
#: order.  A larger constant flattens the head of each list; 10 and 60 kept as much of the
#: evidence as 30 (docs/answers.md).
FUSION_K = 30
#: Words shorter than this are not looked for ("ok", "go").
MIN_WORD = 3
#: A message longer than this many words is ranked against by its last ones: the
#: question at the end of a pasted page is what it asks (the embedder reads only a
#: text's first 256 word pieces, and the page's words would match anything).
FOCUS_WORDS = 40


def focus(message: str) -> str:
    """What of ``message`` the recall is ranked against: its last :data:`FOCUS_WORDS` words."""
    parts = message.split()
    return message if len(parts) <= FOCUS_WORDS else " ".join(parts[-FOCUS_WORDS:])


def words(text: str) -> set[str]:
    """The stems of ``text``'s words worth looking for: not stop words, not shorter than
    :data:`MIN_WORD` letters."""
    return {stem(w) for w in re.findall(r"\w+", text.lower()) if len(w) >= MIN_WORD and w not in STOPWORDS}


def word_share(asked: set[str], text: str) -> float:
    """The share of the stems ``asked`` (:func:`words` of a message) found in ``text``."""
    return len(asked & words(text)) / len(asked) if asked else 0.0


def by_score(ids: Sequence[int], scores: Sequence[float]) -> list[int]:
    """``ids`` by ``scores``, the best first; equal levels keep the order of ``ids``."""
    return [ids[k] for k in sorted(range(len(ids)), key=lambda k: (-ties.level(scores[k]), k))]


def fused(orders: Sequence[Sequence[int]], k: int = FUSION_K,
          weights: Sequence[float] | None = None) -> list[int]:
    """Reciprocal rank fusion of ``orders`` (each a ranking of the same ids, best first):
    the ids by the sum of ``weight / (k + rank)`` over the orders (each weight 1 unless
    ``weights`` says), the best first; equal sums keep the first order's order."""
    first = list(orders[0])
    total = {c: 0 for c in first}
    for order, weight in zip(orders, weights or [1] * len(orders)):
        for rank, c in enumerate(order):
            total[c] += weight / (k + rank)
    # The sums are of a few exact fractions: rank them on the grid all the same.
    return by_score(first, [total[c] for c in first])


def ranked(plan_order: Sequence[int], texts: Mapping[int, str], message: str, vectors: np.ndarray) -> list[int]:
    """The recalled chunk ids ``plan_order`` (the plan's order: :func:`.recall_note.best_first`),
    the most relevant to ``message`` first.  ``texts``: each chunk's text; ``vectors``: unit
    embeddings of the message and then of each text, in ``plan_order``."""
    ids = list(plan_order)
    if len(ids) < 2:
        return ids
    vectors = np.asarray(vectors, np.float32)
    if vectors.shape[0] != len(ids) + 1:
        raise ValueError(f"{vectors.shape[0]} vectors for a message and {len(ids)} paragraphs")
    cosine = vectors[1:] @ vectors[0]
    asked = words(message)
    shares = [word_share(asked, texts[c]) for c in ids]
    return fused([ids, by_score(ids, cosine.tolist()), by_score(ids, shares)])


def rank_with(embedder, plan_order: Sequence[int], texts: Mapping[int, str], message: str,
              known: ParagraphVectors | None = None) -> list[int]:
    """:func:`ranked`, embedding the message and the texts with ``embedder`` (blocking:
    the window calls it on the embedder's thread); with ``known``, a paragraph embedded
    for an earlier ranking is not embedded again."""
    ids = list(plan_order)
    if len(ids) < 2:
        return ids
    message = focus(message)
    known = known if known is not None else ParagraphVectors()
    return ranked(ids, texts, message, known.encode(embedder, message, [texts[c] for c in ids]))


class ParagraphVectors:
    """The vectors of the paragraphs the last rankings embedded, by text, so that the
    next ranking embeds only its message and what is new.

    While the user types, each read-ahead ranks the draft's recall (the same paragraphs
    from one draft to the next, mostly); at Enter the message's recall is ranked again.
    Embedding those paragraphs was most of the time between Enter and the request (8
    paragraphs: ~0.4 s on a 2-core Zen 4, ``scripts/bench_resume.py``); a paragraph's
    vector depends on its text only, so it is kept here.  The message is always embedded
    afresh.  Thread-safe (the embedder's thread and a benchmark's may share one);
    the :data:`SIZE` newest texts are kept, per embedder name.
    """

    #: Texts kept (a vector is 1.5 KB: at most ~0.8 MB).
    SIZE = 512

    def __init__(self) -> None:
        self._vectors: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def encode(self, embedder, message: str, paragraphs: Sequence[str]) -> np.ndarray:
        """Unit vectors of ``message`` and then of each of ``paragraphs`` (``embedder.encode``'s
        rows), the paragraphs known already taken from here."""
        name = str(getattr(embedder, "name", ""))
        with self._lock:
            known = {t: self._vectors[(name, t)] for t in paragraphs if (name, t) in self._vectors}
        new = list(dict.fromkeys(t for t in paragraphs if t not in known))
        fresh = embedder.encode([message] + new)
        found = dict(zip(new, fresh[1:]))
        with self._lock:
            for text, vector in found.items():
                self._vectors[(name, text)] = vector
            for text in paragraphs:
                self._vectors.move_to_end((name, text))
            while len(self._vectors) > self.SIZE:
                self._vectors.popitem(last=False)
        found.update(known)
        return np.stack([fresh[0]] + [found[t] for t in paragraphs])


def kept(order: list[int], token_count: dict[int, int], share: float) -> tuple[list[int], list[int]]:
    """Split ``order`` (the most relevant first) into the chunks kept and those given
    back: the last go until at most ``share`` of the tokens are left, the first always
    kept.  Returns ``(kept, given_back)``, each in the order of ``order``."""
    if share >= 1.0 or len(order) <= 1:
        return list(order), []
    left = sum(token_count[c] for c in order)
    target = max(0.0, share) * left
    keep = list(order)
    back: list[int] = []
    while len(keep) > 1 and left > target:
        dropped = keep.pop()
        left -= token_count[dropped]
        back.append(dropped)
    return keep, back[::-1]


def choose(conv, order: list[int], share: float) -> tuple[list[int], list[int]]:
    """What a message keeps of its recall in ``conv``: ``(kept, given_back)`` of the
    chunks of ``order`` (the most relevant first) still live, split by :func:`kept` at
    ``share``.  A pinned chunk is kept whatever its rank: the user's pin outranks the
    order.  Nothing is pruned here."""
    order = [c for c in order if conv.chunks[c].live]
    keep, back = kept(order, {c: conv.chunks[c].token_count for c in order}, share)
    return keep + [c for c in back if conv.chunks[c].pinned], [c for c in back if not conv.chunks[c].pinned]
