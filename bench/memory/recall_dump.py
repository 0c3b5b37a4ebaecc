"""What a question's recall brought back, paragraph by paragraph, written for study offline.

``bench_memory --dump-recall FILE`` writes one JSON object a line for each question of
each ``kept`` method (:func:`paragraphs`): the question's category and evidence turns, the
evidence already live before the recall, and every recalled paragraph in the plan's order
with its text, what the app's relevance order reads of it (its own text's cosine with the
message, the share of the message's words it holds) and what the search said (its match's score,
the best score among the matches of the turns beside it).  ``scripts/bench_recall_fit.py``
reads the file and compares ways of choosing what to keep, without the model or the replay.
"""

from __future__ import annotations

import json
from typing import IO

import numpy as np

from halo_weave.memory import relevance
from halo_weave.memory.recall_note import best_first


def paragraphs(conv, before: set[int], plan, matches, message: str, embedder) -> list[dict]:
    """The paragraphs that ``plan`` (applied to ``conv``) brought back, the live chunks of
    ``conv`` not in ``before``, in the plan's order, each with its features."""
    back = [c for c in conv.live_chunks() if c.id not in before and not c.framing]
    ids = best_first(plan, back)
    if not ids:
        return []
    texts = {c: conv.chunk_text(c) for c in ids}
    focus = relevance.focus(message)
    vectors = np.asarray(embedder.encode([focus] + [texts[c] for c in ids]), np.float32)
    asked = relevance.words(focus)
    own = {m.chunk_id: m.score for m in matches}
    by_turn: dict[int, float] = {}
    for m in matches:
        by_turn[m.turn_id] = max(by_turn.get(m.turn_id, 0.0), m.score)
    rows = []
    for k, c in enumerate(ids):
        turn = conv.chunks[c].turn_id
        rows.append({
            "chunk": c, "turn": turn, "tokens": conv.chunks[c].token_count,
            "cosine": round(float(vectors[k + 1] @ vectors[0]), 6),
            "word_share": round(relevance.word_share(asked, texts[c]), 6),
            "match_score": round(own[c], 6) if c in own else None,
            "neighbour_score": round(max(by_turn.get(turn - 1, 0.0), by_turn.get(turn + 1, 0.0)), 6),
            "text": texts[c],
        })
    return rows


def framing(conv, before: set[int], rows: list[dict]) -> dict[str, int]:
    """The framing tokens (chat-template chunks) that came back with each recalled turn of
    ``rows``: a turn kept costs them once, whatever of its paragraphs are kept."""
    turns = {row["turn"] for row in rows}
    return {str(t): sum(c.token_count for c in map(conv.chunks.get, conv.turns[t].chunk_ids)
                        if c.framing and c.live and c.id not in before) for t in sorted(turns)}


def write(out: IO[str], method: str, conversation: str, question, turn_of: dict[str, int],
          live_before: set[int], rows: list[dict], turn_framing: dict[str, int]) -> None:
    """One question's line: ``live_before`` the turns with a live chunk before the recall."""
    evidence = sorted({turn_of[d] for d in question.evidence})
    out.write(json.dumps({
        "method": method, "conversation": conversation, "category": question.category,
        "question": question.question,
        "evidence": evidence, "live_evidence": [t for t in evidence if t in live_before],
        "paragraphs": rows, "framing": turn_framing,
    }) + "\n")


def recorder(out: IO[str]):
    """A factory of ``record`` callbacks for :func:`bench.memory.methods.answer_halo_kept`,
    each writing one question's line to ``out``."""
    def for_question(method: str, conversation: str, question, turn_of: dict[str, int], matches,
                     message: str, embedder):
        def record(conv, before: set[int], plan) -> None:
            live_before = {conv.chunks[c].turn_id for c in before if not conv.chunks[c].framing}
            rows = paragraphs(conv, before, plan, matches, message, embedder)
            write(out, method, conversation, question, turn_of, live_before, rows, framing(conv, before, rows))
        return record
    return for_question
