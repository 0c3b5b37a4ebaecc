"""The recall note: what a message recalled is repeated just before it in the request the
model reads, never in the conversation, its file or the window; the answer's attention
lands on the context it was given for.  A real SQLite file; the turns are scripted with a
character tokenizer (the framing built by the app's own :func:`build_framing`)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from halo_weave.core.chat_template import build_framing
from halo_weave.events import TokenEvent
from halo_weave.memory import recall_note
from halo_weave.session import ChatSession
from halo_weave.settings import Settings
from halo_weave.store import ConversationStore, new_conversation_path

FACTS = ["My cat is called Mochi and she sleeps a lot in boxes.",
         "I fly to Lisbon on the third of March from Berlin.",
         "My sister Ana works nights as a nurse at the hospital."]
SETTINGS = Settings.of(min_chunk_tokens=4, max_context_tokens=0)


def _chars(text: str) -> list[tuple[int, str]]:
    return [(1000 + ord(c), c) for c in text]


FRAMING = build_framing(_chars)


def _text(ids) -> str:
    return "".join(chr(int(i) - 1000) for i in ids)


def _say(session: ChatSession, text: str, recalled=()) -> int:
    pieces = _chars(text)
    return session.add_user_message([i for i, _ in pieces], [t for _, t in pieces], recalled=recalled).turn_id


def _answer(session: ChatSession, text: str = "Noted.") -> None:
    for token_id, piece in _chars(text):
        session.conv.append_token(token_id, piece)
    session.finish_turn("stop", prune=False)


@pytest.fixture
def asked(tmp_path):
    """Three facts told and pruned; a question that recalled the cat and the flight (best
    match: the cat).  (session, path, question turn id, the recalled chunks best first)."""
    path = new_conversation_path(tmp_path)
    session = ChatSession(SETTINGS)
    session.framing = FRAMING
    session.open(ConversationStore.open(path))
    conv = session.conv
    for fact in FACTS:
        _say(session, fact)
        session.begin_answer()
        _answer(session)
    session.prune(limit=20)
    pruned = {conv.chunk_text(c.id): c for c in conv.graveyard() if c.role == "user"}
    cat, flight = pruned[FACTS[0]], pruned[FACTS[1]]
    back = conv.resurrect([cat.id, flight.id], with_anchors=False)
    session.store.save_chunks(conv, back)
    question = _say(session, "What is my cat called?", recalled=[cat, flight])
    yield session, path, question, [cat, flight]
    if session.store is not None:
        session.store.close()


def _dated(session: ChatSession, chunk) -> str:
    """A note's line for ``chunk`` (a character a token): its day, then its first words."""
    from datetime import datetime

    day = datetime.fromtimestamp(session.conv.turns[chunk.turn_id].created_at)
    head = f"[{day.day} {day:%B}] " if day.year == datetime.now().year else f"[{day.day} {day:%B %Y}] "
    return head + session.conv.chunk_text(chunk.id)[:recall_note.NOTE_CHUNK_TOKENS - len(head)] + "…"


def test_the_request_repeats_what_the_message_recalled_just_before_it(asked):
    session, _, question, (cat, flight) = asked
    context = _text(session.conv.live_input_ids())
    session.begin_answer()
    sent = _text(session.generation_request()["input_ids"])
    note = f"From earlier in our conversation:\n- {_dated(session, cat)}\n- {_dated(session, flight)}\n\n"
    assert note + "What is my cat called?" in sent, "best match first, each line dated and cut with …"
    user_open = _text(FRAMING.prefix["user"][0])
    assert sent.count(note) == 1 and (user_open + note + "What is my cat called?") in sent, \
        "inside the message's turn, after its opening framing"
    assert sent.replace(note, "", 1) == context + _text(FRAMING.prefix["assistant"][0]), \
        "nothing else in the request changes"
    assert "From earlier" not in _text(session.conv.live_input_ids()), "the conversation holds no note"


def test_the_note_is_not_saved_shown_or_counted(asked):
    session, path, question, _ = asked
    live = session.conv.live_token_count()
    session.begin_answer()
    session.generation_request()
    _answer(session, "Mochi.")
    assert session.conv.live_token_count() == live + len(FRAMING.prefix["assistant"][0]) + len("Mochi.") + \
        len(FRAMING.suffix["assistant"][0])
    session.store.close()
    session.store = None
    with ConversationStore.open(path, create=False) as store:
        conv = store.load(SETTINGS, FRAMING)
        assert "From earlier" not in "".join(conv.chunk_text(c.id) for c in conv.live_chunks())
        assert conv.chunk_text(conv.content_chunks(question)[0].id) == "What is my cat called?"


def test_the_answer_attention_lands_on_the_context_not_the_note(asked):
    session, _, question, _ = asked
    conv = session.conv
    session.begin_answer()
    request = session.generation_request()["input_ids"]
    note = session.recall.note()
    assert note is not None and len(request) == conv.live_token_count() + len(note)
    first = conv.content_chunks(question)[0]
    row = int(np.searchsorted(conv.table.position, first.start))
    before = float(conv.table.brightness[row])
    attention = np.full(len(request), 1e-4, np.float32)
    attention[note.offset + len(note)] = 0.9  # the message's first token, as the request has it
    attention[note.offset] = 0.09  # the note's first token
    assert session.receive(TokenEvent(1000 + ord("M"), "M", attention / attention.sum()))
    brightness = conv.table.brightness
    assert float(brightness[row]) == before > float(brightness[row + 1]), \
        "the message's first token kept its brightness, the unread one beside it lost some"


def test_the_next_message_has_no_note_and_a_regenerated_answer_the_same(asked):
    session, _, question, _ = asked
    session.begin_answer()
    first = session.generation_request()["input_ids"]
    _answer(session, "Luna.")
    session.exchange.regenerate()
    session.begin_answer()
    assert session.generation_request()["input_ids"] == first, "Regenerate reads the same note"
    _answer(session, "Mochi.")
    _say(session, "Thanks!")
    session.begin_answer()
    assert "From earlier" not in _text(session.generation_request()["input_ids"])


def test_a_setting_turns_it_off(asked):
    session, _, _, _ = asked
    session.use_settings(session.settings.replace(recall_note=False))
    session.begin_answer()
    assert _text(session.generation_request()["input_ids"]) == \
        _text(session.conv.live_input_ids())


def test_the_recall_keeps_its_order_through_the_file(asked):
    session, path, question, (cat, flight) = asked
    assert session.conv.recalls.of(question) == (cat.id, flight.id)
    session.store.close()
    session.store = None
    with ConversationStore.open(path, create=False) as store:
        conv = store.load(SETTINGS, FRAMING)
        assert conv.recalls.of(question) == (cat.id, flight.id), "best match first, as recalled"


def test_a_note_copies_at_most_four_paragraphs_within_its_budget():
    words = FRAMING.note
    def note(paragraphs):
        return recall_note.note_tokens(words, [([i for i, _ in p], [t for _, t in p]) for p in paragraphs])

    ids, texts = note([_chars(f"Paragraph {k} is short.") for k in range(6)])
    text = "".join(texts)
    assert text.count("\n- ") == 4 and text.startswith("From earlier") and "Paragraph 4" not in text
    ids, texts = note([_chars(f"Paragraph {k} " + "word " * 30) for k in range(6)])
    assert 0 < len(ids) <= recall_note.NOTE_TOKENS and "".join(texts).endswith("…\n\n"), \
        "long paragraphs: fewer lines, within the budget"
    assert recall_note.note_tokens({}, iter([([1], ["x"])])) == ([], []), "no note words: no note"
    blank = _chars("\n\n  ")
    assert recall_note.note_tokens(words, [([i for i, _ in blank], [t for _, t in blank])]) == ([], [])


def test_a_line_starting_with_its_own_space_gets_no_second_one():
    words = FRAMING.note
    spaced = [(5000, " I"), (5001, " fly"), (5002, " today.")]
    ids, texts = recall_note.note_tokens(words, [([i for i, _ in spaced], [t for _, t in spaced])])
    assert "".join(texts) == "From earlier in our conversation:\n- I fly today.\n\n"


def test_a_note_of_another_shape_copies_more_of_fewer_paragraphs():
    words = FRAMING.note
    paragraphs = [_chars(f"P{k} " + "x" * 40 + f" end{k}") for k in range(4)]
    tokens = [([i for i, _ in p], [t for _, t in p]) for p in paragraphs]
    app = "".join(recall_note.note_tokens(words, tokens)[1])
    shape = recall_note.NoteShape(lines=2, line_tokens=200, tokens=400)
    wide = "".join(recall_note.note_tokens(words, tokens, limit=400, shape=shape)[1])
    assert "end0" in wide and "end1" in wide and "P2" not in wide, "two whole paragraphs"
    assert "end0" not in app and "P1" in app, "the app's: the first words of each"


def test_a_timeline_note_writes_the_best_paragraphs_in_the_order_they_were_said():
    words = FRAMING.note
    said = [30, 10, 40, 20, 0]  # where each paragraph is, best match first
    tokens = [([i for i, _ in p], [t for _, t in p]) for p in (_chars(f"Said at {at}.") for at in said)]
    shape = recall_note.NoteShape(timeline=True)
    text = "".join(recall_note.note_tokens(words, tokens, shape=shape, at=said)[1])
    assert [line[len("- Said at "):] for line in text.splitlines()[1:5]] == ["10.", "20.", "30.", "40."], \
        "the four best, oldest first; the fifth best left out though said first"
    swapped = [tokens[1], tokens[0], tokens[3], tokens[2], tokens[4]]
    again = "".join(recall_note.note_tokens(words, swapped, shape=shape, at=[10, 30, 20, 40, 0])[1])
    assert again == text, "the same paragraphs ranked otherwise: the same note"
    best_first = "".join(recall_note.note_tokens(words, tokens, at=said)[1])
    assert best_first.splitlines()[1] == "- Said at 30.", "the app's: best first"


def _words(text: str) -> list[tuple[int, str]]:
    """A word tokenizer: each word with the space before it, as BPE pieces are."""
    import re

    return [(6000 + k, piece) for k, piece in enumerate(re.findall(r"\s*\S+", text))]


def test_a_focused_note_copies_the_sentences_that_hold_the_question_words():
    words = FRAMING.note
    paragraph = _words("[8 May 2023] Caroline: I spent the weekend painting the fence with my neighbours. "
                       "It took ages and the paint ran out twice. Then on Sunday we adopted a puppy "
                       "called Biscuit from the shelter downtown. We also baked bread.")
    tokens = [([i for i, _ in paragraph], [t for _, t in paragraph])]
    shape = recall_note.NoteShape(line_tokens=16, focused=True)
    asked = frozenset(recall_note.relevance.words("What is the name of Caroline's puppy from the shelter?"))
    focused = "".join(recall_note.note_tokens(words, tokens, shape=shape, asked=asked)[1])
    first = "".join(recall_note.note_tokens(words, tokens, shape=recall_note.NoteShape(line_tokens=16))[1])
    assert "Biscuit" in focused and "Biscuit" not in first, "the sentence that holds the answer is copied"
    assert "[8 May 2023] Caroline:" in focused, "with the speaker and the date before it"
    assert "fence" not in focused and focused.endswith("…\n\n")
    unrelated = frozenset(recall_note.relevance.words("Do you like opera?"))
    plain = "".join(recall_note.note_tokens(words, tokens, shape=shape, asked=unrelated)[1])
    assert plain == first, "no sentence holds a word of the question: its first words, as before"


@pytest.mark.parametrize("message, kind", [
    ("When did Caroline go to the support group?", "when"),
    ("What year did she move? Answer in a few words.", "when"),
    ("I loved it. So when is the party?", "when"),
    ("How many times has Jon been to Paris?", "count"),
    ("Thanks! Where was that?", "where"),
    ("What is Jon's dance studio like?", None),
    ("Tell me when you are free", None),
    ("Whereas I think so", None),
])
def test_the_kind_of_answer_a_question_asks_for(message, kind):
    assert recall_note.answer_kind(message) == kind


def _local(year: int, month: int, day: int, hour: int = 12) -> float:
    from datetime import datetime

    return datetime(year, month, day, hour).timestamp()


def test_a_cued_note_ends_with_the_kind_of_answer_asked_for():
    words = FRAMING.note
    line = _words("[8 May 2023] Caroline: We adopted a puppy on Sunday.")
    tokens = [([i for i, _ in line], [t for _, t in line])]
    dated = recall_note.NoteShape(cue=True, dated=True)
    cued = "".join(recall_note.note_tokens(words, tokens, shape=dated, kind="when", said=[_local(2023, 5, 8)])[1])
    assert cued == ("From earlier in our conversation:\n- [8 May 2023] Caroline: We adopted a puppy on Sunday.\n"
                    "(The lines above are dated: answer with the date.)\n\n"), \
        "a transcript line keeps its own day, written once"
    plain = "".join(recall_note.note_tokens(words, tokens)[1])
    assert "(" not in plain and plain.endswith("Sunday.\n\n"), "no cue without a kind"
    counted = "".join(recall_note.note_tokens(words, tokens, shape=recall_note.NoteShape(cue=True), kind="count")[1])
    assert counted.endswith("Sunday.\n(Answer with the number.)\n\n")


def test_a_day_of_this_year_is_written_without_its_year():
    """A small model given this year's date lends the year to dates it reads ("3 March,
    2026" for a flight said on a day of 2026): a day of the present year has none."""
    words = FRAMING.note
    now = _local(2026, 12, 7)
    for said, written in [(_local(2026, 3, 2), "[2 March]"), (_local(2025, 12, 30), "[30 December 2025]")]:
        assert "".join(recall_note.day_tokens(words, said, now)[1]) == written
    assert recall_note.day_tokens(words, None, now) == ([], []) and recall_note.day_tokens({}, now, now) == ([], [])
    line = _words("We adopted a puppy on Sunday.")
    tokens = [([i for i, _ in line], [t for _, t in line])]
    plain = recall_note.note_tokens(words, tokens)
    for broken in (1e20, float("nan"), -5.0):  # an imported file's time: no day, and the note is still written
        assert recall_note.day_tokens(words, broken, now) == ([], [])
        assert recall_note.note_tokens(words, tokens, shape=recall_note.SHAPE, said=[broken]) == plain


def test_a_note_says_its_lines_are_dated_only_when_they_are():
    words = FRAMING.note
    line = _words("We adopted a puppy on Sunday.")
    tokens = [([i for i, _ in line], [t for _, t in line])]
    undated = "".join(recall_note.note_tokens(words, tokens, shape=recall_note.NoteShape(cue=True), kind="when")[1])
    assert "dated" not in undated and undated.endswith("Sunday.\n\n")
    shape = recall_note.NoteShape(cue=True, dated=True)
    unknown = "".join(recall_note.note_tokens(words, tokens, shape=shape, kind="when", said=[None])[1])
    assert unknown == undated, "a paragraph with no time (an attached document's) has no day"


def test_a_dated_note_opens_each_line_with_the_day_it_was_said(tmp_path):
    """The app's context holds no dates: a dated note writes, before each line, the day
    its message was sent, within the line's length."""
    session = ChatSession(SETTINGS)
    session.framing = FRAMING
    session.open(ConversationStore.open(new_conversation_path(tmp_path)))
    conv = session.conv
    from datetime import datetime

    for fact, said in zip(FACTS, [_local(2023, 3, 1), time.time(), _local(2024, 12, 7)]):
        pieces = _chars(fact)
        session.add_user_message([i for i, _ in pieces], [t for _, t in pieces], created_at=said)
        session.begin_answer()
        _answer(session)
    chunks = {conv.chunk_text(c.id): c for c in conv.live_chunks() if c.role == "user"}
    shape = recall_note.NoteShape(dated=True, cue=True, tokens=400)  # a character a token: room for both
    question = _say(session, "When did I say I fly to Lisbon?", recalled=[chunks[FACTS[1]], chunks[FACTS[0]]])
    note = _text(recall_note.for_message(session.conv, question, 400, shape).ids)
    today = datetime.now()
    this_year = f"[{today.day} {today:%B}] "  # this year's day without its year
    assert note == ("From earlier in our conversation:\n"
                    f"- {this_year}{FACTS[1][:40 - len(this_year)]}…\n"
                    f"- [1 March 2023] {FACTS[0][:40 - len('[1 March 2023] ')]}…\n"
                    "(The lines above are dated: answer with the date.)\n\n")
    plain = _text(recall_note.for_message(session.conv, question, shape=recall_note.NoteShape()).ids)
    assert "[" not in plain and "dated" not in plain, "an undated note, for a shape without dates"
    session.store.close()
