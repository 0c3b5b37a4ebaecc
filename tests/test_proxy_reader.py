"""Proxy attention without the window: the bundled model (llama.cpp, in process) reads a
text-mode conversation's last exchange teacher-forced, and its votes move the brightness
the heatmap shows.  Real tokenizer, real model, real conversation rules."""

from __future__ import annotations

import numpy as np
import pytest

from halo_weave.backends.local_tokenizer import shared
from halo_weave.conversation import Conversation
from halo_weave.core.chat_template import CHATML, build_framing
from halo_weave.memory import proxy
from halo_weave.settings import MAX_BRIGHTNESS, Settings

pytestmark = pytest.mark.slow

FILLER = ("The weather report said clouds in the morning and some wind later on. "
          "Traffic was slow near the bridge, as it often is on a Monday.")


@pytest.fixture(scope="module")
def reader():
    from halo_weave.server.reader import ProxyReader, ReaderUnavailable

    try:
        r = ProxyReader.load(window=1024)
    except ReaderUnavailable as exc:
        pytest.skip(f"the bundled model cannot run on llama.cpp here: {exc}")
    yield r
    r.close()


@pytest.fixture(scope="module")
def tok():
    return shared()


def _conversation(tok, exchanges) -> Conversation:
    """A conversation as text mode fills it: every id is the bundled tokenizer's."""
    framing = build_framing(lambda t: tok.tokenize(t, parse_special=True), CHATML)
    conv = Conversation(Settings.of(min_chunk_tokens=8), framing)
    pieces = framing.wrap("system", tok.tokenize("You are brief."))
    conv.set_system_prompt("You are brief.", [i for i, _ in pieces], [t for _, t in pieces])
    for role, text in exchanges:
        pieces = tok.tokenize(text)
        conv.add_turn(role, [i for i, _ in pieces], [t for _, t in pieces])
    return conv


def test_the_reader_splits_text_exactly_as_the_token_table_does(reader, tok):
    # The table holds text mode's tokens; the reader must read the same ids, or its
    # attention would light the wrong words.
    text = ("<|im_start|>user\nCafé naïve 東京 Привет 🙂 — x**2 == 4?\n\n```py\ndef f(a):\n    return a\n```"
            "<|im_end|>\n<|im_start|>assistant\nSure: 1234567890.")
    assert reader.tokenize(text) == tok.ids(text)
    assert reader.vocab_size() > max(tok.ids(text))


def test_the_readers_attention_lights_what_the_answer_used(reader, tok):
    conv = _conversation(tok, [
        ("user", FILLER), ("assistant", "Noted."),
        ("user", "My cat is called Mochi and she sleeps in a cardboard box.\n\n" + FILLER),
        ("assistant", "Understood."),
        ("user", "What is my cat called?"),
        ("assistant", "Your cat is called Mochi, and she sleeps in a cardboard box."),
    ])
    assert (conv.table.brightness == MAX_BRIGHTNESS).all(), "text mode: nothing measured yet"
    plan = proxy.plan_read(conv, reader.window)
    assert plan.cut == 0 and plan.n_system == len(conv.system.ids)
    result = reader.read(plan.context_ids, plan.answer_ids)
    assert result.rows.shape == (len(plan.answer_ids), plan.tokens - 1)
    assert np.allclose(result.rows[np.arange(len(plan.answer_ids)), :].sum(axis=1), 1.0, atol=1e-3)
    delta = proxy.votes(plan, result.rows, conv.settings)
    assert proxy.apply(conv, plan, delta, conv.settings) > 0
    b = conv.table.brightness
    content = ~conv.table.framing
    assert b[content].min() < MAX_BRIGHTNESS, "the reader's votes moved brightness"
    # The words the answer repeats ("Mochi", "cardboard") end brighter than the filler
    # about the weather that nothing asked about.
    texts = [t for c in conv.live_chunks() for t in conv.chunk_texts(c.id)]
    assert len(texts) == len(conv.table)
    mochi = [k for k, t in enumerate(texts) if t.strip() in ("M", "och", "i", "cardboard", "box")
             and conv.table.turn_id[k] == 2]
    weather = [k for k, t in enumerate(texts) if conv.table.turn_id[k] == 0 and content[k]]
    assert mochi and b[mochi].mean() > np.median(b[weather])


def test_a_long_context_is_read_within_the_readers_window_and_a_prune_meanwhile_is_kept(reader, tok):
    conv = _conversation(tok, [("user", FILLER * 6), ("assistant", "Yes.")] * 6
                         + [("user", "Anything else?"), ("assistant", "No, that is all for today.")])
    assert conv.live_token_count() > reader.window
    plan = proxy.plan_read(conv, reader.window)
    assert plan.tokens <= reader.window and plan.cut > 0, "the oldest context was left out"
    result = reader.read(plan.context_ids, plan.answer_ids)
    delta = proxy.votes(plan, result.rows, conv.settings)
    # While the reader read, the oldest chunks were pruned (oldest-first) by the app.
    before_rows = {int(p): int(v) for p, v in zip(conv.table.position, conv.table.brightness)}
    conv.prune_to_fit(conv.live_token_count() // 2, order="age")
    proxy.apply(conv, plan, delta, conv.settings)
    unread = conv.table.position < plan.positions[0]
    assert all(before_rows[int(p)] == int(v) for p, v in zip(conv.table.position[unread], conv.table.brightness[unread]))
    read = np.isin(conv.table.position, plan.positions) & ~conv.table.framing
    assert read.any() and (conv.table.brightness[read] != MAX_BRIGHTNESS).any()
