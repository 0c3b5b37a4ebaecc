"""Character cards and presets in the window, on the real server, model and store: File →
Import of a card opens a new conversation with the character's greeting shown and the card
as its system prompt; a malformed card is refused with its reason and the open
conversation stays as it was."""

from __future__ import annotations

import pytest

from card_files import SERAPHINA, card_png, write_card
from halo_weave.exchange.character_card import card_prompt, read_card
from halo_weave.store import list_conversations
from test_app import TURN_TIMEOUT_MS, make_app  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow


def test_character_card_import_opens_the_character_with_its_greeting(make_app, qtbot, tmp_path):
    app = make_app(max_context_tokens=60).start()
    c = app.controller
    folder = tmp_path / "cards"
    folder.mkdir()
    card = write_card(folder, "Seraphina.png", card_png(SERAPHINA))
    with qtbot.wait_signal(c.signals.conversation_opened, timeout=TURN_TIMEOUT_MS):
        c.files.import_json(card)  # File → Import recognises a card by its content
    app.settle()
    qtbot.waitUntil(lambda: not c.prompt.syncing and "forest guardian" in c.conv.system.text, timeout=TURN_TIMEOUT_MS)
    text = app.window.heatmap.toPlainText()
    assert "Welcome to my glade, User. You are safe now." in text, "the greeting is the first answer shown"
    assert "Seraphina\n" in text, "the character speaks under its own name"
    assert app.window.conversation_list.titles()[0] == "Seraphina"
    assert c.session.prompt.own() == card_prompt(read_card(card)), "the card is this conversation's system prompt"
    assert len(c.conv.system.ids) > 50, "framed and tokenized by the server"
    # The card's text is anchored: however much is pruned, the system prompt stays whole.
    app.say("Who are you, and where am I?")
    app.say("Tell me more about the forest.")
    assert "Scenario: User wakes up in Seraphina's glade" in c.conv.system.text
    assert c.session.prompt.own() == card_prompt(read_card(card))


def test_malformed_character_card_is_refused_and_the_open_conversation_stays(make_app, qtbot, tmp_path):
    app = make_app().start()
    c = app.controller
    app.say("My cat is called Mochi.")
    before_path, before_turns = c.files.path, len(c.conv.turns)
    files_before = len(list_conversations(tmp_path))
    bad = dict(SERAPHINA, data={**SERAPHINA["data"], "name": ""})
    folder = tmp_path / "cards"
    folder.mkdir()
    card = write_card(folder, "Nameless.png", card_png(bad))
    assert app.window.menus.card_action.text() == "Import &character card…"
    with qtbot.wait_signal(c.signals.error, timeout=30_000):
        c.files.import_card(card)
    qtbot.waitUntil(lambda: not c.gate.busy, timeout=10_000)
    said = [m.text for m in app.window.messages.history if m.serious]
    assert any("Nameless.png" in s and "has no name" in s for s in said), said
    assert c.files.path == before_path and len(c.conv.turns) == before_turns
    assert "Mochi" in app.window.heatmap.toPlainText()
    assert len(list_conversations(tmp_path)) == files_before
