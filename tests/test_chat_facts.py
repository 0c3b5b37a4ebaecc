"""The fact chat's scoring (bench/chat_facts.py): an answer counts when it states the
fact in any usual spelling, and not when it states something else."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench import chat_facts

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"

FACT = {fact.name: fact for fact in chat_facts.FACTS}


@pytest.mark.parametrize("answer", [
    "Your flight to Lisbon is on 3 March.",
    "It's on March 3rd, early in the morning.",
    "You fly on the 3rd of March.",
    "On **March 3**.",
    "the third of March",
    "March the third",
    "03/03",
    "3rd March",
])
def test_every_usual_spelling_of_the_date_counts(answer):
    assert chat_facts.contains_fact(answer, FACT["flight"])


@pytest.mark.parametrize("answer", [
    "Your flight is on 13 March.",
    "You fly on March 30.",
    "You are going by train, on the Eurostar.",
    "It is on 3 May.",
])
def test_another_date_or_no_date_does_not_count(answer):
    assert not chat_facts.contains_fact(answer, FACT["flight"])


def test_names_count_whatever_their_case_and_markup():
    assert chat_facts.contains_fact("Your cat is called MOCHI!", FACT["cat"])
    assert chat_facts.contains_fact("Ana is a registered nurse.", FACT["sister"])
    assert chat_facts.contains_fact("She works in nursing.", FACT["sister"])
    assert chat_facts.contains_fact("The function was `add_vat`.", FACT["function"])
    assert chat_facts.contains_fact(r"It was add\_vat", FACT["function"])
    assert not chat_facts.contains_fact("Your cat is called Bella.", FACT["cat"])
    assert not chat_facts.contains_fact("She is a doctor.", FACT["sister"])
    assert not chat_facts.contains_fact("It was calculate_vat.", FACT["function"])


def test_the_chat_says_the_facts_first_and_asks_about_them_last():
    sent = chat_facts.messages()
    kinds = [kind for _, _, kind in sent]
    assert kinds == ["fact"] * 4 + ["unrelated"] * 11 + ["question"] * 4
    for text, fact, kind in sent:
        if kind == "fact":
            assert fact.marker in text
            assert chat_facts.contains_fact(text, fact), "the statement itself contains the fact"
        if kind == "question":
            assert not chat_facts.contains_fact(text, fact), "the question does not give the answer away"


def test_help_names_the_options():
    out = subprocess.run([sys.executable, str(SCRIPTS / "chat_facts.py"), "--help"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    for option in ("--server-kind", "--model", "--target", "--seed", "--json"):
        assert option in out.stdout
