"""A reopened conversation's KV cache read back from disk instead of a prefill.

The engine saves the cache of the conversation its requests name once idle; a restore
reads it back when it was made with this model and starts with the same token ids, and
the model then answers exactly as after a prefill of those ids: the same next-token
logits and the same attention rows, bit for bit.  Otherwise a restore prefills.
"""

from __future__ import annotations

import threading
import time
import uuid

import numpy as np
import pytest

from halo_weave.kobold_client import KoboldClient
from halo_weave.server.kv_files import StateFiles, file_name

pytestmark = pytest.mark.slow

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed here")

CHAT = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
STORY = ("The lighthouse keeper of Port Quillan kept a logbook of every ship that passed, "
         "the weather at dawn and dusk, and the colour of the sea. ")
OTHER = "My sister Ana moved to Lisbon last spring and opened a small bakery near the river. "


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from halo_weave.server import loader
    from halo_weave.server.llamacpp.engine import LlamaEngine

    source = loader.resolve(None)
    engine = LlamaEngine(source.path / source.gguf_file, threads=2)
    engine.keep_states(StateFiles(tmp_path_factory.mktemp("kv-states")), idle_s=3600)  # saved by hand here
    yield engine
    engine.close_states()
    engine.close()


def next_token(engine, last: int):
    """Logits and per-layer attention rows of ``last`` run after the cache (then dropped)."""
    kv = engine.kv
    held = len(kv.ids)
    logits, rows = kv.step([last], attention=True, per_layer=True)
    kv.sync(kv.ids[:held])
    return logits, rows



def _kl(logits, reference) -> float:
    """KL divergence of the next-token distribution of ``reference`` logits from that of
    ``logits``: batches computed in another order move logits by a few hundredths, which
    no one reading the answer can see."""
    def softmax(x):
        x = np.asarray(x, np.float64)
        e = np.exp(x - x.max())
        return e / e.sum()
    p, q = softmax(reference), softmax(logits)
    return float(np.sum(p * (np.log(p + 1e-30) - np.log(q + 1e-30))))

def test_a_restored_cache_answers_exactly_as_a_prefill_of_the_same_ids(engine):
    ids = engine.encode(CHAT.format(STORY * 8), parse_special=True)
    context, last = ids[:-1], ids[-1]
    engine.kv.reset()
    engine.kv.sync(context)  # the reference: a prefill into an empty cache
    want_logits, want_rows = next_token(engine, last)

    engine.prepare(context, conversation="lighthouse")
    assert engine.save_state_if_changed()
    engine.prepare(engine.encode(CHAT.format(OTHER * 6), parse_special=True), conversation="bakery")  # another chat meanwhile
    answer = engine.restore(context, "lighthouse")

    assert answer["restored"] == len(context) and answer["ran"] == 0, answer
    assert engine.kv.ids == context
    logits, rows = next_token(engine, last)
    assert float(np.abs(logits - want_logits).max()) == 0.0
    assert rows.shape == want_rows.shape
    assert float(np.abs(rows - want_rows).max()) == 0.0


def test_a_cache_saved_with_another_model_is_not_read_back(engine):
    ids = engine.encode(CHAT.format(STORY * 3), parse_special=True)
    engine.prepare(ids, conversation="other-model")
    engine.save_state_if_changed()
    saved, _ = engine.state_files.load("other-model", engine.fingerprint())
    engine.state_files.save("other-model", "llamacpp|another.gguf", saved.ids, saved.blob)
    engine.prepare(engine.encode(CHAT.format(OTHER * 3), parse_special=True), conversation="bakery")

    answer = engine.restore(ids, "other-model")
    assert answer["restored"] == 0 and answer["reason"] == "saved with another model"
    assert engine.kv.ids == ids  # prefilled instead


def test_a_conversation_pruned_after_its_cache_was_saved_is_read_back_whole(engine):
    """Quitting right after an answer: the file holds the cache from before the app pruned
    the conversation to its budget.  Reopened, nothing is run: the file is read back and
    the pruned span taken out, as the running server would have done at the next message."""
    head = engine.encode(CHAT.format(STORY * 2), parse_special=True)
    span = engine.encode(CHAT.format(OTHER * 3), parse_special=True)
    rest = engine.encode(CHAT.format("Tell me about the weather at dawn. " * 3), parse_special=True)
    engine.prepare(head + span + rest, conversation="pruned-after")
    assert engine.save_state_if_changed()
    engine.prepare(engine.encode(CHAT.format(OTHER * 6), parse_special=True), conversation="bakery")  # another chat

    answer = engine.restore(head + rest, "pruned-after")
    assert answer["ran"] == 0 and answer["restored"] == len(head + rest), answer
    assert engine.kv.ids == head + rest
    reopened, _ = next_token(engine, rest[-1])

    engine.restore(head + span + rest, "pruned-after")  # the running server: the same prune
    engine.prepare(head + rest, conversation="pruned-after")
    running, _ = next_token(engine, rest[-1])
    assert int(np.argmax(reopened)) == int(np.argmax(running))
    assert _kl(reopened, running) < 0.01, "the same next-token distribution"


def test_in_exact_mode_only_the_token_ids_a_saved_cache_shares_are_read_back(engine):
    from halo_weave.server.kv_surgery import EXACT

    ids = engine.encode(CHAT.format(STORY * 3), parse_special=True)
    engine.prepare(ids, conversation="edited")
    engine.save_state_if_changed()
    engine.prepare(engine.encode(CHAT.format(OTHER * 3), parse_special=True), conversation="bakery")

    mode, engine.kv.mode = engine.kv.mode, EXACT
    try:
        edited = ids[:40] + engine.encode(" Nothing else happened.") + ids[40:]  # changed from token 40 on
        answer = engine.restore(edited, "edited")
        assert answer["restored"] == 40 and answer["ran"] == len(edited) - 40, answer
        assert engine.kv.ids == edited

        engine.prepare(engine.encode(CHAT.format(OTHER * 3), parse_special=True), conversation="bakery")
        different = engine.encode("<|im_start|>system\nBe terse.<|im_end|>\n", parse_special=True) + ids
        answer = engine.restore(different, "edited")
        assert answer["restored"] == 0 and answer["ran"] > len(ids) - 10
        assert engine.kv.ids == different
    finally:
        engine.kv.mode = mode


def test_spans_pruned_before_a_restart_are_put_back_not_run_after_it(engine):
    """A message after reopening brings back a span pruned before the server restarted: its
    states come from the conversation's span file, and the answer is the one the running
    server gives with the span in memory."""
    from halo_weave.server.llamacpp.engine import LlamaEngine

    head = engine.encode(CHAT.format(STORY * 3), parse_special=True)
    span = engine.encode(" ".join(f"Ship {k} ({(k * 7919) % 65536:04x}) passed at dawn." for k in range(12)))
    tail = engine.encode(CHAT.format(OTHER * 2), parse_special=True)
    turn = engine.encode(CHAT.format("Which ship passed first?"), parse_special=True)  # the prune's turn
    key = f"restart-{uuid.uuid4().hex}"
    engine.prepare(head + span + tail, conversation=key)
    pruned = engine.prepare(head + tail + turn, conversation=key)
    assert pruned["kv"]["stored"] == len(span), pruned
    assert engine.save_state_if_changed()
    back = engine.prepare(head + span + tail + turn, conversation=key)  # the running server: from memory
    assert back["kv"]["restored"] == len(span) and back["kv"]["inserted"] == 0, back
    want_logits, _ = next_token(engine, turn[-1])

    restarted = LlamaEngine(engine.path, threads=2)
    restarted.keep_states(type(engine.state_files)(engine.state_files.folder), idle_s=3600)
    try:
        reopened = restarted.restore(head + tail + turn, key)
        assert reopened["restored"] == len(head + tail + turn), reopened
        message = restarted.prepare(head + span + tail + turn, conversation=key)
        assert message["kv"]["restored"] == len(span) and message["kv"]["inserted"] == 0, message
        logits, _ = next_token(restarted, turn[-1])
        assert int(np.argmax(logits)) == int(np.argmax(want_logits))
        assert _kl(logits, want_logits) < 0.01, "the same next-token distribution"
    finally:
        restarted.close_states()
        restarted.close()


def test_the_transformers_engine_reads_a_saved_cache_back_exactly_too(tmp_path):
    from halo_weave.server.transformers_engine import TransformersEngine

    engine = TransformersEngine.load("smollm2", threads=2)  # the default's 0.5B weights would be dequantized first
    engine.keep_states(StateFiles(tmp_path), idle_s=3600)
    try:
        ids = engine.encode(CHAT.format(STORY * 3), parse_special=True)
        context, last = ids[:-1], ids[-1]
        engine.kv.reset()
        engine.kv.sync(context)
        want_logits, want_rows = next_token(engine, last)
        engine.prepare(context, conversation="lighthouse")
        assert engine.save_state_if_changed()
        engine.prepare(engine.encode(CHAT.format(OTHER * 3), parse_special=True), conversation="bakery")

        answer = engine.restore(context, "lighthouse")
        assert answer["restored"] == len(context) and answer["ran"] == 0, answer
        logits, rows = next_token(engine, last)
        assert float(np.abs(logits - want_logits).max()) == 0.0
        assert float(np.abs(rows - want_rows).max()) == 0.0
    finally:
        engine.close_states()


# ------------------------------------------------------------------ the real server


@pytest.fixture(scope="module")
def client(server):
    with KoboldClient(server.url) as c:
        c.model_info()
        yield c


def wait_for_file(key: str, since: float, timeout: float = 60.0) -> None:
    from conftest import TEST_CACHE_DIR

    path = TEST_CACHE_DIR / "kv-states" / file_name(key)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.stat().st_mtime >= since:
            return
        time.sleep(0.2)
    raise AssertionError(f"the server did not save the cache of {key} within {timeout} s")


def answer(client: KoboldClient, ids: list[int]):
    stream = client.stream(input_ids=ids, max_length=3, temperature=0, sampler_seed=1,
                           output_attentions=True, attention_format="per_layer", stop_sequence=[])
    tokens = list(stream)
    return tokens, stream.done.raw["kv"]


def test_the_server_declares_restore(client):
    assert client.restores is True
    assert client.model_info().raw["restores_from_disk"] is True


def test_a_reopened_conversation_is_read_back_and_answers_as_after_a_prefill(client):
    ids = [i for i, _ in client.tokenize(CHAT.format(STORY * 6), parse_special=True)]
    key = f"test-{uuid.uuid4().hex}"
    # The reference: a conversation never saved is prefilled (the cache holds another one).
    client.conversation = f"other-{uuid.uuid4().hex}"
    client.prepare([i for i, _ in client.tokenize(CHAT.format(OTHER * 6), parse_special=True)])
    client.conversation = f"never-saved-{uuid.uuid4().hex}"
    first = client.restore(ids)
    assert first["restored"] == 0 and first["reason"] == "no saved cache"
    want, _ = answer(client, ids)

    client.conversation = key
    since = time.time() - 1
    client.prepare(ids)
    wait_for_file(key, since)  # saved once the server was idle
    client.conversation = f"other-{uuid.uuid4().hex}"
    client.prepare([i for i, _ in client.tokenize(CHAT.format(OTHER * 6), parse_special=True)])

    client.conversation = key
    reopened = client.restore(ids)
    assert reopened["restored"] == len(ids) and reopened["ran"] == 0, reopened
    got, kv = answer(client, ids)
    assert kv["reused"] == len(ids) - 1 and kv["rerun"] == 0 and kv["appended"] == 0
    assert [t.token_id for t in got] == [t.token_id for t in want]
    for a, b in zip(got, want):
        if a.attention is None or b.attention is None:
            assert a.attention is b.attention
            continue
        np.testing.assert_allclose(np.asarray(a.attention), np.asarray(b.attention), atol=1e-5)


def test_a_generate_waits_for_a_restore_instead_of_running_the_prompt_again(client):
    ids = [i for i, _ in client.tokenize(CHAT.format(STORY * 30), parse_special=True)]
    client.conversation = f"slow-{uuid.uuid4().hex}"  # never saved: the restore prefills

    result = {}
    thread = threading.Thread(target=lambda: result.update(client.restore(ids)))
    thread.start()
    time.sleep(0.5)  # the prefill is under way
    _, kv = answer(client, ids)
    thread.join()
    assert result["ran"] > 500
    assert kv["reused"] == len(ids) - 1 and kv["rerun"] == 0


def test_the_last_answers_cache_is_saved_when_the_server_stops(tmp_path):
    """Quitting right after an answer (before the idle save) still leaves its cache on disk."""
    from halo_weave.server.launcher import start_server

    process = start_server(port=0, extra_args=["--kv-dir", str(tmp_path), "--threads", "2"])
    try:
        process.wait_ready(timeout=300)
        with KoboldClient(process.url) as c:
            ids = [i for i, _ in c.tokenize(CHAT.format(STORY * 2), parse_special=True)]
            c.conversation = "quit-at-once"
            c.prepare(ids)
    finally:
        process.stop()  # at once: well within the idle time
    saved, reason = StateFiles(tmp_path).load("quit-at-once", _fingerprint_of(tmp_path))
    assert saved is not None and saved.ids == ids, reason


def _fingerprint_of(folder) -> str:
    """The fingerprint written in the folder's one file (the server's, whatever it is here)."""
    import json
    import struct

    from halo_weave.server.kv_files import MAGIC

    (path,) = folder.glob("*.kvstate")
    data = path.read_bytes()
    (length,) = struct.unpack_from("<I", data, len(MAGIC))
    return json.loads(data[len(MAGIC) + 4:len(MAGIC) + 4 + length])["fingerprint"]


def test_a_restore_stops_its_prefill_when_aborted_by_its_request_id(client):
    # Text found nowhere in the cache (a repeated one would be moved there, not run).
    text = " ".join(f"Ship {k} ({uuid.uuid4().hex[:6]}) passed at dawn." for k in range(150))
    ids = [i for i, _ in client.tokenize(CHAT.format(text), parse_special=True)]
    client.conversation = f"left-at-once-{uuid.uuid4().hex}"  # never saved: the restore prefills
    result = {}
    thread = threading.Thread(target=lambda: result.update(client.restore(ids, request_id="warm-1")))
    thread.start()
    time.sleep(0.5)  # the prefill is under way
    assert client.abort("warm-1")
    thread.join()
    assert result["stopped"] is True and result["ran"] < len(ids), result


def test_a_cache_is_saved_when_the_server_stops_during_a_read_ahead(tmp_path):
    """Quitting while a read-ahead holds the model (before the idle save came): the
    read-ahead is stopped after its batch and the cache saved, and the next start reads it
    back."""
    from halo_weave.server.launcher import start_server

    # However long the batch takes on this machine (not what is tested): the app's server
    # waits 3 s, within the 5 s the app gives it.
    args = ["--kv-dir", str(tmp_path), "--threads", "2", "--model", "smollm2", "--exit-wait", "300"]
    process = start_server(port=0, extra_args=args)
    try:
        process.wait_ready(timeout=300)
        with KoboldClient(process.url) as c:
            ids = [i for i, _ in c.tokenize(CHAT.format(STORY * 2), parse_special=True)]
            # A pasted page found nowhere in the cache: one batch, longer than uvicorn's own
            # second of shutdown on any machine.
            text = " ".join(f"Ship {k} ({uuid.uuid4().hex[:6]}) passed at dawn." for k in range(32))
            draft = ids + [i for i, _ in c.tokenize(text)]
            c.conversation = "quit-reading-ahead"
            c.prepare(ids)
            thread = threading.Thread(target=lambda: _ignore_errors(c.prepare, draft), daemon=True)
            thread.start()
            time.sleep(0.3)  # the read-ahead holds the model
    finally:
        process.stop(grace_s=300)
    saved, reason = StateFiles(tmp_path).load("quit-reading-ahead", _fingerprint_of(tmp_path))
    assert saved is not None, reason
    assert len(saved.ids) >= len(ids) and saved.ids == draft[:len(saved.ids)]

    process = start_server(port=0, extra_args=args)
    try:
        process.wait_ready(timeout=300)
        with KoboldClient(process.url) as c:
            c.model_info()
            c.conversation = "quit-reading-ahead"
            reopened = c.restore(ids)
    finally:
        process.stop()
    assert reopened["restored"] == len(ids) and reopened["ran"] == 0, reopened


def _ignore_errors(call, *args):
    try:
        call(*args)
    except Exception:  # noqa: BLE001 - the server stops under it: no answer is expected
        pass


def test_a_conversations_branches_keep_their_own_caches_and_share_its_spans(tmp_path):
    """``KEY#BRANCH`` names a branch: its cache has a file of its own, and spans pruned in
    one branch come back from the conversation's span file in another after a restart."""
    from halo_weave.server import loader
    from halo_weave.server.llamacpp.engine import LlamaEngine

    # An engine of its own: the module's has saved other conversations' caches and spans.
    source = loader.resolve(None)
    engine = LlamaEngine(source.path / source.gguf_file, threads=2)
    (tmp_path / "kv-states").mkdir()
    engine.keep_states(StateFiles(tmp_path / "kv-states"), idle_s=3600)
    key = f"branches-{uuid.uuid4().hex}"
    head = engine.encode(CHAT.format(STORY * 3), parse_special=True)
    span = engine.encode(" ".join(f"Ship {k} ({(k * 7919) % 65536:04x}) passed at dawn." for k in range(12)))
    tail = engine.encode(CHAT.format(OTHER * 2), parse_special=True)
    first = engine.encode(CHAT.format("Which ship passed first?"), parse_special=True)
    other = engine.encode(CHAT.format("Where is the bakery?"), parse_special=True)
    engine.prepare(head + span + tail, conversation=key)
    pruned = engine.prepare(head + tail + first, conversation=key)
    assert pruned["kv"]["stored"] == len(span), pruned
    assert engine.save_state_if_changed()
    engine.prepare(head + tail + other, conversation=key + "#b")  # another branch: the first is saved
    assert engine.save_state_if_changed()

    restarted = LlamaEngine(engine.path, threads=2)
    restarted.keep_states(type(engine.state_files)(engine.state_files.folder), idle_s=3600)
    try:
        shown = restarted.restore(head + tail + other, key + "#b")
        assert shown["restored"] == len(head + tail + other) and shown["ran"] == 0, shown
        message = restarted.prepare(head + span + tail + other, conversation=key + "#b")
        assert message["kv"]["restored"] == len(span) and message["kv"]["inserted"] == 0, message
        back = restarted.restore(head + tail + first, key)
        assert back["restored"] >= len(head + tail + first) - 1 and back["ran"] <= 1, back
    finally:
        restarted.close_states()
        restarted.close()
        engine.close_states()
        engine.close()
