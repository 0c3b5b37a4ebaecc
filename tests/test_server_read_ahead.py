"""Read-ahead on the real server (``/api/extra/prepare``): the draft prompt sent while the
user types is in the cache when Enter comes, so the answer waits only for what is new; a
read-ahead never makes an answer wait, never waits for one, and gives way to a newer draft.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from halo_weave.kobold_client import BackendHTTPError, KoboldClient
from halo_weave.server.engine_base import PREPARE_WAIT_S

pytestmark = pytest.mark.slow

CHAT = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
STORY = ("The lighthouse keeper of Port Quillan kept a logbook of every ship that passed, "
         "the weather at dawn and dusk, and the colour of the sea. ")


@pytest.fixture(scope="module")
def client(server):
    with KoboldClient(server.url) as c:
        c.model_info()
        yield c


def prompt_ids(client: KoboldClient, text: str) -> list[int]:
    return [i for i, _ in client.tokenize(CHAT.format(text), parse_special=True)]


def test_the_server_declares_read_ahead(client):
    assert client.read_ahead is True


def test_after_a_read_ahead_the_answer_runs_only_the_last_words(client):
    ids = prompt_ids(client, STORY * 4 + "What did the keeper write down at dawn? Answer briefly please.")
    draft = ids[:-12]  # typed up to "Answer": the last words, the closing and the answer's opening are new
    ahead = client.prepare(draft)
    assert ahead["prepared"] is True and ahead["prompt_tokens"] == len(draft)

    stream = client.stream(input_ids=ids, max_length=4, sampler_seed=3, output_attentions=True)
    tokens = list(stream)
    kv = stream.done.raw["kv"]
    assert len(tokens) >= 1
    # The prompt but its last token is synced before the first token; only 11 were new.
    assert kv["appended"] == len(ids) - 1 - len(draft) == 11
    assert kv["reused"] == len(draft)
    assert kv["rerun"] == 0


def test_a_read_ahead_does_not_queue_behind_a_running_answer(client):
    # A count to go on with, not a story: no model ends it within 400 tokens, whatever
    # this CPU's last bits make of the sampling (a story could end at once).
    ids = [i for i, _ in client.tokenize(", ".join(str(n) for n in range(1, 61)) + ",")]
    stream = client.stream(input_ids=ids, max_length=400, sampler_seed=5, output_attentions=True,
                           stop_sequence=[])
    events = iter(stream)
    next(events)  # the answer is streaming (400 tokens: several seconds)
    started = time.monotonic()
    with pytest.raises(BackendHTTPError) as refused:
        client.prepare(ids + [1, 2, 3])
    waited = time.monotonic() - started
    assert refused.value.status == 503 and "busy" in refused.value.message
    assert waited < PREPARE_WAIT_S + 1.0
    client.abort()
    list(events)
    assert stream.done.finish_reason == "abort"


def test_a_read_ahead_right_after_an_answer_is_taken(client):
    """The server packs its cache after the last token while the client has the answer:
    the user's first words (read ahead at once) must not be turned away meanwhile."""
    context = prompt_ids(client, STORY * 40)
    client.prepare(context)
    for attempt in range(3):
        # A prune of ~700 tokens leaves holes: the generation packs the cache after its answer.
        pruned = context[:200] + context[900 + 10 * attempt:]
        stream = client.stream(input_ids=pruned, max_length=2, sampler_seed=1, output_attentions=True)
        list(stream)
        assert stream.done.raw["kv"]["dropped"] >= 600
        ahead = client.prepare(pruned + [i for i, _ in client.tokenize(" And then")])
        assert ahead["prepared"] is True
        client.prepare(context)  # back to the whole story for the next attempt


def long_read_ahead(client: KoboldClient, server) -> tuple[list[int], float, threading.Thread, dict]:
    """A read-ahead of ~2,200 tokens the cache does not hold, started on a thread and
    running its first batch: its ids, what reading it whole would take on this machine now
    (the same kind of text, a third of it, timed alone, so that a bound holds on a slow or
    busy one), the thread and the dict its answer goes into."""
    long_draft = prompt_ids(client, " ".join(f"Row {n}: the tide at {n % 12} o'clock was {n % 7} feet."
                                             for n in range(120)))
    sample = prompt_ids(client, " ".join(f"Line {n}: the wind at {n % 12} o'clock was {n % 5} knots."
                                         for n in range(40)))
    with httpx.Client(base_url=server.url, timeout=120) as http:
        timed = http.post("/api/extra/prepare", json={"input_ids": sample}).json()
    assert timed["prepared"] is True
    whole = timed["seconds"] * len(long_draft) / len(sample)
    result: dict = {}

    def read_ahead():
        with httpx.Client(base_url=server.url, timeout=120) as http:
            result.update(http.post("/api/extra/prepare", json={"input_ids": long_draft}).json())

    thread = threading.Thread(target=read_ahead)
    thread.start()
    time.sleep(0.5)  # the read-ahead is running its first batch
    return long_draft, whole, thread, result


def test_an_answer_stops_a_long_read_ahead_instead_of_waiting_for_it(client, server):
    _draft, whole, thread, result = long_read_ahead(client, server)
    other = prompt_ids(client, "Say hello.")
    started = time.monotonic()
    stream = client.stream(input_ids=other, max_length=2, sampler_seed=1, output_attentions=True)
    tokens = list(stream)
    waited = time.monotonic() - started
    thread.join(60)
    assert tokens and stream.done.finish_reason in ("length", "stop")
    assert result["prepared"] is False  # stopped after its batch, not run to the end
    assert waited < 0.5 * whole, (f"the answer waited {waited:.1f} s for a read-ahead "
                                  f"that would take {whole:.1f} s whole")


def test_a_newer_draft_replaces_a_read_ahead_still_running(client, server):
    """The user typed on while the server read an older draft's prompt (a recall the newer
    words no longer bring back): the newer read-ahead stops it after its current batch
    instead of waiting for it to end."""
    client.prepare(prompt_ids(client, "Hello."))
    older, whole, thread, result = long_read_ahead(client, server)
    newer = older[:40] + prompt_ids(client, "What was the tide at noon?")
    started = time.monotonic()
    answer = client.prepare(newer)
    waited = time.monotonic() - started
    thread.join(60)
    assert result["prepared"] is False  # stopped after its batch, not run to the end
    assert answer["prepared"] is True and answer["prompt_tokens"] == len(newer)
    assert waited < 0.5 * whole, (f"the newer draft waited {waited:.1f} s for an older read-ahead "
                                  f"that would take {whole:.1f} s whole")
