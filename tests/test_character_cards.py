"""SillyTavern character cards (PNG with the card in a ``tEXt`` chunk, and JSON) import as a
new conversation: the card's text is the conversation's own system prompt, its greeting the
first answer; a card that cannot be used is refused with its reason and writes nothing."""

from __future__ import annotations

import base64
import json

import pytest

from card_files import SERAPHINA, V1_CARD, card_png, chunk, png, text_chunk, write_card
from halo_weave.conversation import Framing
from halo_weave.errors import TransferError
from halo_weave.settings import Settings
from halo_weave.exchange.character_card import (
    MAX_FIELD_CHARS, card_prompt, greeting, import_card, looks_like_card, read_card,
)
from halo_weave.store import ConversationStore, list_conversations


def words(text: str) -> list[tuple[int, str]]:
    """A tokenizer splitting at spaces (the import's shape without a server: the slow
    test below tokenizes with the real one)."""
    pieces = [(" " if i else "") + w for i, w in enumerate(text.split(" "))]
    return [(100 + i, p) for i, p in enumerate(pieces)]


def test_character_card_png_is_read_from_its_chara_chunk(tmp_path):
    path = write_card(tmp_path, "seraphina.png", card_png(SERAPHINA))
    assert looks_like_card(path)
    card = read_card(path)
    assert card.name == "Seraphina" and card.spec == "chara_card_v2"
    assert card.personality == "warm, protective, a little mischievous"
    prompt = card_prompt(card)
    assert "Seraphina is a forest guardian with pink hair" in prompt
    assert "Seraphina's personality: warm, protective" in prompt
    assert "Scenario: User wakes up in Seraphina's glade after a storm." in prompt
    assert "User: Who are you?\nSeraphina: I keep this forest" in prompt, "the example dialogue, names filled in"
    assert "{{" not in prompt and "<START>" not in prompt
    assert greeting(card) == "*Seraphina kneels beside you.* Welcome to my glade, User. You are safe now."


def test_character_card_v3_chunk_is_read_when_there_is_no_chara_chunk(tmp_path):
    v3 = {**SERAPHINA, "spec": "chara_card_v3", "spec_version": "3.0"}
    card = read_card(write_card(tmp_path, "v3.png", card_png(v3, keyword="ccv3")))
    assert card.name == "Seraphina" and card.spec == "chara_card_v3"


def test_character_card_json_v2_and_v1(tmp_path):
    v2 = read_card(write_card(tmp_path, "seraphina.json", SERAPHINA))
    assert v2.name == "Seraphina" and v2.scenario.startswith("{{user}} wakes up")
    v1 = read_card(write_card(tmp_path, "mora.json", V1_CARD))
    assert v1.spec == "v1" and v1.name == "Captain Mora"
    assert "Captain Mora commands the airship Kestrel." in card_prompt(v1), "TavernAI's <BOT> is the character"
    assert "Scenario: User has just signed on" in card_prompt(v1)
    assert greeting(v1) == "Welcome aboard, User. I'm Captain Mora. Don't touch the red lever."
    old = read_card(write_card(tmp_path, "old.json", {
        "char_name": "Ada", "char_persona": "A patient teacher.", "char_greeting": "Hello, {{user}}!",
        "world_scenario": "A classroom.", "example_dialogue": ""}))
    assert (old.name, old.description, old.first_mes, old.scenario) == (
        "Ada", "A patient teacher.", "Hello, {{user}}!", "A classroom.")


def test_character_card_own_system_prompt_opens_the_prompt_with_original_filled_in(tmp_path):
    card = json.loads(json.dumps(SERAPHINA))
    card["data"]["system_prompt"] = "{{original}} Play {{char}} for {{user}}."
    prompt = card_prompt(read_card(write_card(tmp_path, "own.json", card)), original="Be kind.")
    assert prompt.startswith("Be kind. Play Seraphina for User.")


def _bad(tmp_path, name: str, content) -> str:
    with pytest.raises(TransferError) as refused:
        import_card(write_card(tmp_path, name, content), tmp_path, words, Framing.none())
    return str(refused.value)


def test_malformed_character_cards_are_refused_with_their_reason_and_nothing_is_written(tmp_path):
    encoded = lambda card: base64.b64encode(json.dumps(card).encode())  # noqa: E731
    cases = {
        "not a PNG": ("fake.png", b"GIF89a not a png at all"),
        "no character card in it": ("plain.png", png()),
        "not base64": ("bad64.png", png(text_chunk("chara", b"%%% not base64 %%%"))),
        "not valid JSON": ("badjson.png", png(text_chunk("chara", base64.b64encode(b"{name: Seraphina")))),
        "has no name": ("noname.png", png(text_chunk("chara", encoded({"spec": "chara_card_v2",
                                                                       "data": {"description": "x"}})))),
        "more than the 32,000": ("huge.json", {"spec": "chara_card_v2",
                                               "data": {"name": "Big", "description": "x" * (MAX_FIELD_CHARS + 1)}}),
        "must be text": ("typed.json", {"name": "Num", "first_mes": 42}),
        "cut short": ("cut.png", card_png(SERAPHINA)[:-30]),
        "checksum": ("crc.png", png(chunk(b"tEXt", b"chara\0" + encoded(SERAPHINA), crc=1))),
        "unknown character card spec": ("spec.json", {"spec": "chara_card_v9", "data": {"name": "X"}}),
    }
    for reason, (name, content) in cases.items():
        message = _bad(tmp_path, name, content)
        assert reason in message and name in message, (name, message)
    assert list_conversations(tmp_path) == [], "a refused card writes no conversation"
    assert not list(tmp_path.rglob(".import-*")), "nor leaves a half-written file"


def test_character_card_import_writes_a_conversation_whose_prompt_is_the_card(tmp_path):
    path = import_card(write_card(tmp_path, "seraphina.png", card_png(SERAPHINA)), tmp_path, words,
                       Framing.none(), Settings())
    with ConversationStore.open(path, create=False) as store:
        conv = store.load(Settings())
        assert store.get_meta("title") == "Seraphina"
        own = store.get_meta("prompt")
        assert own == card_prompt(read_card(tmp_path / "seraphina.png"))
        assert store.get_meta("role_names") == {"assistant": "Seraphina"}
    [turn] = conv.turns.values()
    assert turn.role == "assistant"
    text = "".join(conv.chunk_text(c.id) for c in conv.content_chunks(turn.turn_id))
    assert text == "*Seraphina kneels beside you.* Welcome to my glade, User. You are safe now."


def test_character_card_without_greeting_starts_an_empty_conversation(tmp_path):
    card = {"name": "Quiet", "description": "Says little."}
    path = import_card(write_card(tmp_path, "quiet.json", card), tmp_path, words, Framing.none())
    with ConversationStore.open(path, create=False) as store:
        assert store.load(Settings()).turns == {}
        assert "Says little." in store.get_meta("prompt")


@pytest.mark.slow
def test_character_card_greeting_is_tokenized_by_the_real_server_and_framed(tmp_path, server):
    from halo_weave.core.chat_template import build_framing
    from halo_weave.kobold_client import KoboldClient

    with KoboldClient(server.url) as client:
        framing = build_framing(lambda text: client.tokenize(text, parse_special=True))
        path = import_card(write_card(tmp_path, "seraphina.png", card_png(SERAPHINA)), tmp_path,
                           lambda text: client.tokenize(text, add_special_tokens=False), framing)
        expected = client.tokenize(greeting(read_card(tmp_path / "seraphina.png")), add_special_tokens=False)
    with ConversationStore.open(path, create=False) as store:
        conv = store.load(Settings(), framing)
    [turn] = conv.turns.values()
    ids = [int(i) for c in conv.content_chunks(turn.turn_id) for i in conv.chunk_tokens(c.id).token_ids]
    assert ids == [int(i) for i, _ in expected]
    framed = [int(i) for c in turn.chunk_ids if conv.chunks[c].framing for i in conv.chunk_tokens(c).token_ids]
    assert framed == framing.prefix["assistant"][0] + framing.suffix["assistant"][0]
