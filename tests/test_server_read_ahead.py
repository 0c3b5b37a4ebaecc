"""Read-ahead on the real server (``/api/extra/prepare``): the draft prompt sent while the
user types is in the cache when Enter comes, so the answer waits only for what is new; a
read-ahead never makes an answer wait, and never waits itself.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from halo_weave.kobold_client import BackendHTTPError, KoboldClient

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
    return [i for i, _ in client.tokenize(CHAT.format(text))]


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


def test_a_read_ahead_is_refused_at_once_while_an_answer_streams(client):
    ids = prompt_ids(client, "Tell me a long story about a lighthouse.")
    stream = client.stream(input_ids=ids, max_length=40, sampler_seed=5, output_attentions=True)
    events = iter(stream)
    next(events)  # the answer is streaming
    started = time.monotonic()
    with pytest.raises(BackendHTTPError) as refused:
        client.prepare(ids + [1, 2, 3])
    assert refused.value.status == 503 and time.monotonic() - started < 1.0
    client.abort()
    list(events)
    assert stream.done.finish_reason == "abort"


def test_an_answer_stops_a_long_read_ahead_instead_of_waiting_for_it(client, server):
    long_draft = prompt_ids(client, STORY * 40)  # ~1,300 tokens: several seconds of prompt
    result: dict = {}

    def read_ahead():
        with httpx.Client(base_url=server.url, timeout=120) as http:
            result.update(http.post("/api/extra/prepare", json={"input_ids": long_draft}).json())

    thread = threading.Thread(target=read_ahead)
    thread.start()
    time.sleep(0.5)  # the read-ahead is running its first batch
    other = prompt_ids(client, "Say hello.")
    started = time.monotonic()
    stream = client.stream(input_ids=other, max_length=2, sampler_seed=1, output_attentions=True)
    tokens = list(stream)
    waited = time.monotonic() - started
    thread.join(60)
    assert tokens and stream.done.finish_reason in ("length", "stop")
    assert result["prepared"] is False  # stopped after its batch, not run to the end
    assert waited < 4.0, f"the answer waited {waited:.1f} s for a read-ahead"
