"""The chat model's attention over a message's recall (:mod:`halo_weave.memory.attended`):
our server's read-ahead with ``queries`` answers the attention a message pays each token
of the prompt before it, and the recalled paragraphs rank by it.  The benchmarks compare
this order with the app's (:mod:`halo_weave.memory.relevance`).  The real server with the
bundled model on 127.0.0.1."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from halo_weave.kobold_client import KoboldClient
from halo_weave.memory import attended

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def client(server):
    with KoboldClient(server.url) as c:
        c.model_info()  # what the server can do is read with its model
        yield c


def test_a_read_ahead_with_queries_answers_one_value_per_prompt_token(client):
    prefix = [i for i, _ in client.tokenize("The harbour light is violet tonight. The road is long.")]
    queries = [i for i, _ in client.tokenize(" What colour is the light?")]
    assert client.capabilities.weighs
    values = client.prepare(prefix, queries=queries)["attention"]
    assert len(values) == len(prefix) and all(v >= 0 for v in values)
    assert sum(values) <= len(queries) + 1e-3, "each query's attention sums to one over what it reads"


@pytest.mark.parametrize("body, words", [
    ({"input_ids": [1, 2, 3], "queries": "what"}, "queries must be a list"),
    ({"input_ids": [1, 2, 3], "queries": []}, "empty"),
    ({"input_ids": [1, 2, 3], "queries": [10**9]}, "outside the vocabulary"),
    ({"input_ids": [1, 2, 3], "queries": [True]}, "not an integer"),
])
def test_a_bad_weighing_request_gets_a_clear_error(server, body, words):
    answer = httpx.post(f"{server.url}/api/extra/prepare", json=body, timeout=30)
    assert answer.status_code == 400 and words in answer.text


def test_the_most_attended_paragraph_ranks_first():
    reading = attended.Reading(prefix=[0] * 8, queries=[1], chunk_of=np.array([-1, -1, 5, 5, 6, 6, 7, 7]),
                               recalled=(5, 6, 7))
    assert attended.ranked(reading, [0, 0, .1, .1, .3, .3, .1, .1]) == [6, 5, 7], "ties keep position order"
    with pytest.raises(ValueError):
        attended.ranked(reading, [0.5] * 3)
