"""LoCoMo conversations as Halo Weave turns, and their questions with canonical evidence.

Mapping (documented in docs/memory-benchmark.md): ``speaker_a`` is the user and
``speaker_b`` the assistant, so the model's attention while "writing" speaker_b's lines
is what scores the context.  A turn that shared a photo gets its ``blip_caption`` as
text (``"<text> [photo: <caption>]"``).  Every turn of a session carries the session's
date and time as its timestamp (plus one second per turn, to keep them ordered).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

#: Categories scored (5, adversarial, has no evidence to recall).
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}

_SESSION = re.compile(r"session_(\d+)$")
_DIA = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")


@dataclass
class DialogueTurn:
    """One LoCoMo turn mapped to a Halo Weave role."""

    dia_id: str  # canonical "D<session>:<turn>"
    role: str  # "user" (speaker_a) or "assistant" (speaker_b)
    speaker: str
    text: str
    session: int
    created_at: float


@dataclass
class Question:
    """One scored question with its evidence as canonical dia ids."""

    index: int
    question: str
    answer: str
    category: int
    evidence: list[str]  # canonical, existing turns only
    dangling: list[str] = field(default_factory=list)  # canonical ids of missing turns
    malformed: int = 0  # raw strings that needed splitting or canonicalising


@dataclass
class Dialogue:
    """One LoCoMo conversation."""

    sample_id: str
    speaker_a: str
    speaker_b: str
    turns: list[DialogueTurn]
    questions: list[Question]

    def turn_index(self) -> dict[str, int]:
        return {t.dia_id: i for i, t in enumerate(self.turns)}


def canonical_evidence(raw: str) -> tuple[list[str], bool]:
    """Split and canonicalise one evidence string; returns (ids, was_malformed).

    Handles ``"D8:6; D9:17"``, ``"D:11:26"``, ``"D30:05"`` and space-joined lists.  A
    string with no ``D<n>:<m>`` in it (e.g. ``"D"``) gives no id.

    >>> canonical_evidence("D8:6; D9:17")
    (['D8:6', 'D9:17'], True)
    >>> canonical_evidence("D30:05")
    (['D30:5'], True)
    """
    ids = [f"D{int(s)}:{int(t)}" for s, t in _DIA.findall(str(raw))]
    return ids, ids != [str(raw)]


def parse_session_time(text: str | None) -> float | None:
    """``"1:56 pm on 8 May, 2023"`` -> a UTC timestamp (None when unparseable)."""
    if not text:
        return None
    for fmt in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y"):
        try:
            return datetime.strptime(text.strip(), fmt).replace(tzinfo=timezone.utc).timestamp()
        except ValueError:
            continue
    return None


def turn_text(turn: dict) -> str:
    """A turn's text, with its photo caption when it shared one."""
    text = str(turn.get("text", "")).strip()
    caption = turn.get("blip_caption")
    if caption:
        text = f"{text} [photo: {str(caption).strip()}]".strip()
    return text


def parse_dialogue(item: dict) -> Dialogue:
    """One item of a LoCoMo-format list as a :class:`Dialogue`."""
    conv = item["conversation"]
    speaker_a, speaker_b = conv["speaker_a"], conv["speaker_b"]
    sessions = sorted(
        (int(m.group(1)), key) for key in conv
        if (m := _SESSION.match(key)) and isinstance(conv[key], list)
    )
    turns: list[DialogueTurn] = []
    last_time = 0.0
    for number, key in sessions:
        start = parse_session_time(conv.get(f"{key}_date_time"))
        start = max(start if start is not None else last_time, last_time)
        for i, raw in enumerate(conv[key]):
            ids, _ = canonical_evidence(raw.get("dia_id", ""))
            dia_id = ids[0] if ids else f"D{number}:{i + 1}"
            role = "user" if raw.get("speaker") == speaker_a else "assistant"
            last_time = start + i
            turns.append(DialogueTurn(dia_id, role, raw.get("speaker", ""), turn_text(raw),
                                      number, last_time))
        last_time += 1
    known = {t.dia_id for t in turns}
    questions = []
    for index, qa in enumerate(item.get("qa", [])):
        category = int(qa.get("category", 0))
        if category not in CATEGORIES:
            continue
        evidence, dangling, malformed = [], [], 0
        for raw in qa.get("evidence", []):
            ids, bad = canonical_evidence(raw)
            malformed += bad
            for dia_id in ids:
                target = evidence if dia_id in known else dangling
                if dia_id not in target:
                    target.append(dia_id)
        questions.append(Question(index, str(qa["question"]), str(qa.get("answer", "")),
                                  category, evidence, dangling, malformed))
    return Dialogue(item["sample_id"], speaker_a, speaker_b, turns, questions)


def load(path: str | Path) -> list[Dialogue]:
    """Every conversation of a LoCoMo-format JSON file."""
    with open(path, encoding="utf-8") as f:
        return [parse_dialogue(item) for item in json.load(f)]


def truncate(dialogue, n: int):
    """The first ``n`` turns, and only the questions whose evidence lies in them."""
    from dataclasses import replace

    turns = dialogue.turns[:n]
    known = {t.dia_id for t in turns}
    questions = [q for q in dialogue.questions if q.evidence and set(q.evidence) <= known]
    return replace(dialogue, turns=turns, questions=questions)
