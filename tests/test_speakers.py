"""Whose line a paragraph is (the name it opens with) and which speakers a message names."""

from __future__ import annotations

from halo_weave.memory.speakers import speaker_of, spoken_by

LINES = {1: "[8 May 2023] Melanie: I signed up for a pottery class.",
         2: "[8 May 2023] Caroline: That's great, Mel!",
         3: "Melanie: The bowls came out lopsided.",
         4: "no one's line: just text"}


def test_a_line_opens_with_its_speaker_after_an_optional_day():
    assert speaker_of(LINES[1]) == "Melanie"
    assert speaker_of("[1:56 pm on 8 May, 2023] Jon Smith: ok") == "Jon Smith"
    assert speaker_of(LINES[4]) is None
    assert speaker_of("Caroline said: hi") is None  # a sentence, not a speaker label


def test_a_message_naming_one_speaker_marks_that_speakers_lines():
    assert spoken_by("What does Melanie do to relax?", LINES) == {1, 3}
    assert spoken_by("what does MELANIE do?", LINES) == {1, 3}  # any case


def test_naming_no_one_or_everyone_marks_nothing():
    assert spoken_by("What did Mel make?", LINES) == frozenset()  # a whole word only
    assert spoken_by("What do Melanie and Caroline share?", LINES) == frozenset()
    assert spoken_by("What do they share?", LINES) == frozenset()
