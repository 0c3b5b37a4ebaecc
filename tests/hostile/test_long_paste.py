"""Pasting a million characters of mixed scripts: tokenized without a timeout, saved exactly."""

from __future__ import annotations

import pytest

from halo_weave.kobold_client import TOKENIZE_TIMEOUT_S, KoboldClient, tokenize_timeout
from halo_weave.store import ConversationStore

pytestmark = pytest.mark.slow

MIXED = "Hello wörld — 你好，世界 · مرحبا بالعالم · שלום · Привет 🌍🧵 नमस्ते\n"
PASTE = (MIXED * (1_000_000 // len(MIXED) + 1))[:1_000_000]


def test_timeout_grows_with_the_text():
    assert tokenize_timeout(10) == pytest.approx(TOKENIZE_TIMEOUT_S, abs=0.01)
    assert tokenize_timeout(1_000_000) >= 10 * 5.5  # ten times what 1M characters took


@pytest.mark.timeout(600)
def test_a_million_characters_tokenize_and_save_exactly(server, tmp_path):
    with KoboldClient(server.url) as client:  # the default timeouts, as the app uses them
        pieces = client.tokenize(PASTE)
    assert "".join(text for _, text in pieces) == PASTE
    path = tmp_path / "paste.halo.db"
    with ConversationStore.open(path) as store:
        conv = store.load()
        turn = conv.add_turn("user", [i for i, _ in pieces], [t for _, t in pieces])
        store.save_turn(conv, turn)
    with ConversationStore.open(path, create=False) as store:
        conv = store.load()
        assert "".join(conv.chunk_text(c) for c in conv.turns[turn.turn_id].chunk_ids) == PASTE
