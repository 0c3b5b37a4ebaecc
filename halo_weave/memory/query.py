"""What a message searches for, beyond its own text (multi-hop and temporal recall).

* :func:`date_spans`: the days and months a message names ("on 8 May, 2023", "in
  December 2023", "October 24, 2023").  Every turn keeps the time it was said
  (``turns.created_at``), so the index can find what was said *then*, though the turn's
  own text never names its date.  Times are local, as the user reads them.
* :func:`sub_queries`: the parts of a message worth a search of their own ("what did X do
  and where did Y go"): each part is searched apart and the lists interleaved
  (:func:`interleave`), so the second part's turns are not crowded out by near-copies of
  the first's.
* :func:`with_neighbours`: each match followed by the turns beside it in the same
  sitting (turns less than ``session_gap`` seconds apart): a fact is often spread over
  a question and its answer.

Qt-free, no SQL (the index passes what it reads).
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime
from typing import Sequence

from ..conversation import Conversation
from ..core import ties
from .recall_plan import Match

_MONTHS = {m: i + 1 for i, m in enumerate(
    "january february march april may june july august september october november december".split())}
_MONTHS.update({m[:3]: i for m, i in list(_MONTHS.items())})
_MONTHS["sept"] = 9
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
#: "8 May, 2023" / "8th of May 2023" / "May 8, 2023" / "May 8th 2023" / "May 2023".
_PATTERNS = [
    re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s*{_YEAR}\b", re.I),
    re.compile(rf"\b{_MONTH}\s+{_DAY},?\s*{_YEAR}\b", re.I),
    re.compile(rf"\b{_MONTH},?\s+{_YEAR}\b", re.I),
]

_SPLIT = re.compile(r",|;|\band\b|\bor\b|\bthen\b", re.IGNORECASE)
#: Parts shorter than this many words are not worth a search of their own.
MIN_PART_WORDS = 3


def date_spans(text: str) -> list[tuple[float, float]]:
    """``[start, end)`` epoch seconds of each day or month ``text`` names (local time).

    A bare year is left out: it names too many turns to say which one is meant.
    """
    spans: list[tuple[float, float]] = []
    taken: list[tuple[int, int]] = []  # character ranges already read (a day wins its month)
    for pattern in _PATTERNS:
        for m in pattern.finditer(text):
            if any(a < m.end() and m.start() < b for a, b in taken):
                continue
            year, month = int(m["year"]), _MONTHS[m["month"].lower()]
            day = int(m["day"]) if "day" in m.groupdict() and m["day"] else None
            taken.append((m.start(), m.end()))
            try:
                if day is not None:
                    start = datetime(year, month, day)
                    end = datetime.fromordinal(start.toordinal() + 1)
                else:
                    start = datetime(year, month, 1)
                    end = datetime(year + month // 12, month % 12 + 1, 1)
            except ValueError:
                continue  # "31 February": no such day (nor its month) to look in
            spans.append((start.timestamp(), end.timestamp()))
    return spans


def sub_queries(text: str) -> list[str]:
    """The parts of ``text`` worth a search of their own (3+ words each), or [] when
    it has fewer than two."""
    parts = [p.strip(" ?.!") for p in _SPLIT.split(text)]
    parts = [p for p in parts if len(p.split()) >= MIN_PART_WORDS]
    return parts if len(parts) > 1 else []


def interleave(lists: Sequence[Sequence[Match]], limit: int) -> list[Match]:
    """Round-robin over ranked lists, best first; a chunk is kept at its first place."""
    out: list[Match] = []
    seen: set[int] = set()
    for rank in range(max((len(x) for x in lists), default=0)):
        for found in lists:
            if rank < len(found) and found[rank].chunk_id not in seen:
                seen.add(found[rank].chunk_id)
                out.append(found[rank])
                if len(out) >= limit:
                    return out
    return out


def relevant(matches: Sequence[Match], floor: float) -> list[Match]:
    """The matches scoring at least ``floor`` times the best one's score (setting
    ``recall_relative_floor``; 0 keeps them all).  Scores are compared on the rank grid of
    :mod:`..core.ties`, so the cut does not move with a CPU's last bits."""
    if floor <= 0 or not matches:
        return list(matches)
    best = max(m.score for m in matches)
    if best <= 0:
        return list(matches)
    least = ties.level(floor * best)
    return [m for m in matches if ties.level(m.score) >= least]


def with_neighbours(conv: Conversation, matches: Sequence[Match], reach: int,
                    session_gap: float, first: int = 0) -> list[Match]:
    """Each match, then the opening chunk of up to ``reach`` turns on each side of its
    turn, as long as no gap of ``session_gap`` seconds or more lies between them; with
    ``first`` > 0 only the first ``first`` matches bring neighbours (setting
    ``neighbour_matches``), the later ones come alone.

    A neighbour comes as a :class:`Match` with its match's scores and no text (it is
    planned right after it; reading a long-pruned chunk's text would cost a database
    read the plan does not need); a chunk already listed is not listed again.
    """
    if reach <= 0:
        return list(matches)
    out: list[Match] = []
    seen: set[int] = set()

    def add(match: Match) -> None:
        if match.chunk_id not in seen:
            seen.add(match.chunk_id)
            out.append(match)

    for i, match in enumerate(matches):
        add(match)
        if first > 0 and i >= first:
            continue
        for step in (-1, 1):
            turn_id, at = match.turn_id, _time(conv, match.turn_id)
            for _ in range(reach):
                turn_id += step
                when = _time(conv, turn_id)
                if when is None or at is None or abs(when - at) >= session_gap:
                    break
                at = when
                content = conv.content_chunks(turn_id)
                if content:
                    c = content[0]
                    add(replace(match, chunk_id=c.id, turn_id=turn_id, chunk_index=c.chunk_index,
                                role=c.role, text="", token_count=c.token_count))
    return out


def _time(conv: Conversation, turn_id: int) -> float | None:
    turn = conv.turns.get(turn_id)
    return None if turn is None else turn.created_at
