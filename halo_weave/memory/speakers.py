"""Whose line a paragraph is, and which of those people a message names.

A transcript, a group chat or a pasted meeting log writes who speaks at the start of each
line: ``"Caroline: ..."``, or ``"[8 May 2023] Caroline: ..."`` with its day.  In a long
chat between two people their names are in most entries, so BM25 leaves them out
(``hybrid_common_share``) and the vector hardly weighs them; yet a question that names
one of them ("What does Melanie do to relax?") is almost always answered by that
person's own lines (97 % of LoCoMo's evidence turns, when a question names one
speaker).  :func:`spoken_by` finds, among a search's candidates, the lines of the
speakers a message names, which :func:`.ranking.rank` then favours
(``speaker_weight``).  Qt-free, no SQL.
"""

from __future__ import annotations

import re
#: A line's speaker: up to three capitalised words and a colon at its start, after an
#: optional bracketed day.  ``"Note: ..."``-style labels are matched too; they are only
#: used when a message names them as a whole word, which a question rarely does.
SPEAKER = re.compile(r"\s*(?:\[[^\]\n]{1,40}\]\s*)?([A-Z][\w'’.-]{0,30}(?: [A-Z][\w'’.-]{0,30}){0,2}):\s")


def speaker_of(text: str) -> str | None:
    """The name a line opens with (``"Caroline"`` for ``"[8 May 2023] Caroline: Hi"``)."""
    found = SPEAKER.match(text[:120])
    return found.group(1) if found else None


def spoken_by(message: str, texts: dict[int, str]) -> frozenset[int]:
    """Of ``texts`` (chunk id -> text), the ids of the lines whose speaker ``message``
    names as a whole word (any case); empty when it names none of them, or names every
    speaker found (then no one is favoured)."""
    speakers = {cid: speaker_of(text) for cid, text in texts.items()}
    names = {name for name in speakers.values() if name}
    named = {name for name in names if _names(message, name)}
    if not named or named == names and len(names) > 1:
        return frozenset()
    return frozenset(cid for cid, name in speakers.items() if name in named)


def _names(message: str, name: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(name)}(?!\w)", message, re.IGNORECASE) is not None
