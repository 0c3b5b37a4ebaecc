"""Chats from other apps (SillyTavern ``.jsonl``, KoboldAI Lite ``.json``) import as new
conversations, all or nothing.  The files in ``tests/data/foreign`` are written by hand
after how each app writes its files (see :mod:`halo_weave.exchange.foreign_import`)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from halo_weave.core.chat_template import build_framing
from halo_weave.conversation import Framing
from halo_weave.exchange.foreign_import import (
    import_foreign, is_halo_weave_export, parse_st_date, read_foreign,
)
from halo_weave.settings import Settings
from halo_weave.store import ConversationStore, list_conversations
from halo_weave.errors import TransferError

DATA = Path(__file__).parent / "data" / "foreign"


def roles_and_texts(path: str) -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in read_foreign(DATA / path).messages]


def test_sillytavern_current_chat():
    chat = read_foreign(DATA / "sillytavern_current.jsonl")
    assert chat.source == "SillyTavern" and chat.title == "Seraphina (SillyTavern)"
    assert [(m.role, m.text) for m in chat.messages] == [
        ("assistant", "*Seraphina smiles.* Welcome to the glade, traveller."),
        ("user", "Where am I?\nI remember a storm."),  # mes, not the translated display text
        ("assistant", "You are safe in my forest. The storm brought you here."),  # the chosen swipe
        ("user", "Thank you. Can I stay until morning?"),
    ]
    assert chat.skipped == 1, "the hidden narrator message is left out"
    assert chat.messages[1].created_at == pytest.approx(1717599430.0)  # 2024-06-05T14:57:10Z


def test_sillytavern_old_tavernai_chat_with_millisecond_dates():
    chat = read_foreign(DATA / "sillytavern_tavernai_old.jsonl")
    assert [m.role for m in chat.messages] == ["assistant", "user", "assistant"]
    assert chat.messages[0].created_at == pytest.approx(1681234567.89)
    assert chat.messages[2].created_at == pytest.approx(1681234610.0)


def test_sillytavern_group_chat_has_no_header():
    assert roles_and_texts("sillytavern_group.jsonl") == [
        ("assistant", "Morning, everyone!"), ("assistant", "Coffee is ready."),
        ("user", "Great, I will bring the bagels."),
    ]


def test_sillytavern_chub_export():
    assert roles_and_texts("sillytavern_chub.jsonl") == [("assistant", "Hi there from Chub."), ("user", "Hello Chub.")]


@pytest.mark.parametrize(("value", "expected"), [
    ("June 19, 2023 2:20pm", time.mktime((2023, 6, 19, 14, 20, 0, 0, 0, -1))),
    ("June 19, 2023 12:05am", time.mktime((2023, 6, 19, 0, 5, 0, 0, 0, -1))),
    ("2024-7-12@01h31m37s", time.mktime((2024, 7, 12, 1, 31, 37, 0, 0, -1))),
    ("2024-6-5 @14h 56m 50s 682ms", time.mktime((2024, 6, 5, 14, 56, 50, 0, 0, -1))),
    ("2024-06-05T14:57:10.000Z", 1717599430.0),
    ("2024-06-05T16:57:10+02:00", 1717599430.0),
    (1681234567890, 1681234567.89),
    ("yesterday", None),
    (None, None),
])
def test_sillytavern_send_dates(value, expected):
    assert parse_st_date(value) == (pytest.approx(expected) if expected is not None else None)


def test_kobold_lite_instruct_save():
    chat = read_foreign(DATA / "kobold_lite_instruct.json")
    assert chat.source == "KoboldAI Lite"
    assert [(m.role, m.text) for m in chat.messages] == [
        ("user", "What is the capital of France?"),
        ("assistant", "The capital of France is Paris."),  # the image marker is gone
        ("user", "And of Italy?"),
        ("assistant", "Rome is the capital of Italy.\n\nIt is also its largest city."),
    ]
    assert chat.skipped == 1, "the system block is not a chat message"


def test_kobold_lite_older_instruct_save_with_literal_tags():
    assert roles_and_texts("kobold_lite_instruct_old_tags.json") == [
        ("user", "Name a fruit."), ("assistant", "An apple."), ("user", "Another one?"), ("assistant", "A pear."),
    ]


def test_kobold_lite_chat_mode_with_two_opponents():
    assert roles_and_texts("kobold_lite_chat_group.json") == [
        ("assistant", "[The following is a chat between Kim, Bob and Alice.]"),
        ("assistant", "Bob: Hey Kim!"),
        ("assistant", "Alice: Hi, good to see you."),
        ("user", "What are you baking today?"),
        ("assistant", "Bob: Sourdough.\nIt needs another hour."),
        ("assistant", "Alice: And cinnamon rolls!"),
    ]


def test_koboldai_united_v2_save():
    assert roles_and_texts("koboldai_united_v2.json") == [
        ("assistant", "Hello, how can I help?"),
        ("user", "Tell me a joke."),
        ("assistant", "Why did the scarecrow win an award? He was outstanding in his field."),
    ]


def test_kobold_lite_share_file_and_adventure():
    assert roles_and_texts("kobold_lite_share.json") == [("user", "Say hi."), ("assistant", "Hi!")]
    assert roles_and_texts("kobold_lite_adventure.json") == [
        ("assistant", "You stand before a dark cave."), ("user", "go inside"),
        ("assistant", "It is cold and damp. A torch flickers."), ("user", "take the torch"),
        ("assistant", "You take the torch."),
    ]


@pytest.mark.parametrize(("name", "words"), [
    ("sillytavern_truncated.jsonl", "line 3"),
    ("sillytavern_bad_is_user.jsonl", "is_user"),
    ("kobold_lite_bad_action.json", "action 1"),
    ("kobold_lite_story.json", "story-mode"),
])
def test_broken_or_unusable_files_are_refused_and_nothing_is_written(tmp_path, name, words):
    before = list_conversations(tmp_path)
    with pytest.raises(TransferError) as caught:
        import_foreign(DATA / name, tmp_path, lambda text: [(1, text)], Framing.none())
    assert words in str(caught.value)
    assert list_conversations(tmp_path) == before
    assert not [p for p in (tmp_path / "conversations").glob("*") if p.is_file()], "no file, not even a temporary one"


def test_tokenizer_failure_midway_writes_nothing(tmp_path):
    calls = []

    def tokenize(text):
        calls.append(text)
        if len(calls) == 3:
            raise ConnectionError("the server went away")
        return [(1, text)]

    with pytest.raises(ConnectionError):
        import_foreign(DATA / "sillytavern_current.jsonl", tmp_path, tokenize, Framing.none())
    assert list_conversations(tmp_path) == []


def test_our_own_export_is_recognised(tmp_path):
    ours = tmp_path / "ours.json"
    ours.write_text('{"format":"halo-weave","version":1}')
    assert is_halo_weave_export(ours)
    assert not is_halo_weave_export(DATA / "kobold_lite_instruct.json")
    assert not is_halo_weave_export(DATA / "sillytavern_current.jsonl")


@pytest.mark.slow
def test_import_is_tokenized_by_the_server_and_framed(tmp_path, server):
    from halo_weave.kobold_client import KoboldClient

    with KoboldClient(server.url) as client:
        def tokenize(text):
            return client.tokenize(text, add_special_tokens=False)

        framing = build_framing(lambda text: client.tokenize(text, parse_special=True))
        path = import_foreign(DATA / "sillytavern_current.jsonl", tmp_path, tokenize, framing,
                              Settings.of(max_context_tokens=0))
        expected = client.tokenize("Where am I?\nI remember a storm.", add_special_tokens=False)
    with ConversationStore.open(path, create=False) as store:
        conv = store.load(Settings(), framing)
        assert store.get_meta("title") == "Seraphina (SillyTavern)"
    turns = [conv.turns[t] for t in sorted(conv.turns)]
    assert [t.role for t in turns] == ["assistant", "user", "assistant", "user"]
    user = turns[1]
    content = conv.content_chunks(user.turn_id)
    assert [int(i) for c in content for i in conv.chunk_tokens(c.id).token_ids] == [int(i) for i, _ in expected]
    framing_chunks = [conv.chunks[c] for c in user.chunk_ids if conv.chunks[c].framing]
    assert framing_chunks, "each turn is wrapped in the chat template like a turn typed here"
    framed = [int(i) for c in framing_chunks for i in conv.chunk_tokens(c.id).token_ids]
    assert framed == framing.prefix["user"][0] + framing.suffix["user"][0]


def test_a_sillytavern_chat_keeps_who_speaks_and_a_group_keeps_no_single_name():
    single = read_foreign(DATA / "sillytavern_current.jsonl")
    assert single.names == {"user": "Sam", "assistant": "Seraphina"}
    group = read_foreign(DATA / "sillytavern_group.jsonl")
    assert "assistant" not in group.names, "Alice and Bob both answer: neither names the role"
    assert group.names.get("user") == "Kim"
