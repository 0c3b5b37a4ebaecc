"""Fuzzing every endpoint of the real server: no request gets a 500 or a failing stream.

A fixed budget (``EXAMPLES`` per endpoint), a fixed seed (``derandomize``) and no
per-example deadline: the run is the same every time and cannot turn flaky on a busy
machine.  The number of cases run is printed (``-s``) for the closing note.
"""

from __future__ import annotations

import json
from collections import Counter

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.slow

EXAMPLES = 150
RAW_EXAMPLES = 150

POSTS = ("/api/v1/tokenize", "/api/extra/tokencount", "/api/v1/detokenize", "/api/extra/detokenize",
         "/api/extra/generate/stream", "/api/extra/abort")
GETS = ("/api/v1/model", "/api/latest/model", "/api/v1/info/version", "/api/extra/version",
        "/api/v1/config/max_context_length", "/api/v1/config/max_length")

FUZZ = settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))

seen: Counter = Counter()

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
# Surrogates included: JSON can spell a lone one, and a tokenizer cannot take it.
texts = st.text(max_size=200) | st.text(st.characters(categories=["Cs", "Ll", "Zs", "Po"]), max_size=20)
big_ints = st.integers(min_value=-(2**70), max_value=2**70)
ids = st.lists(st.integers(min_value=-5, max_value=60_000) | big_ints, max_size=40)
field_values = {
    "prompt": texts,
    "input_ids": ids,
    "max_length": st.integers(min_value=-3, max_value=12) | big_ints,
    "max_context_length": st.integers(min_value=-3, max_value=10_000) | big_ints,
    "temperature": st.floats() | big_ints,
    "top_p": st.floats() | big_ints,
    "top_k": big_ints,
    "rep_pen": st.floats() | big_ints,
    "rep_pen_range": big_ints,
    "sampler_seed": big_ints | st.floats(),
    "stop_sequence": st.lists(texts, max_size=5) | texts,
    "output_attentions": st.booleans(),
    "per_token": st.booleans(),
    "attention_format": st.sampled_from(["aggregated", "per_layer", "raw", ""]),
    "request_id": texts | big_ints,
    "genkey": texts,
    "text": texts,
    "content": texts,
    "add_special_tokens": st.booleans(),
    "with_pieces": st.booleans(),
    "token_ids": ids,
    "tokens": ids,
}
bodies = st.fixed_dictionaries(
    {}, optional={name: strategy | json_values for name, strategy in field_values.items()}
)


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=httpx.Timeout(120, connect=5)) as client:
        yield client
    print(f"\nfuzz: {sum(seen.values())} requests, status counts {dict(sorted(seen.items()))}")


def send(http: httpx.Client, method: str, path: str, **kwargs) -> int:
    """Send one request; a 200 stream is read to its first event and then dropped."""
    with http.stream(method, path, **kwargs) as response:
        status = response.status_code
        seen[status] += 1
        if status == 200 and path.endswith("/stream"):
            for line in response.iter_lines():
                if line.startswith("data: "):
                    event = json.loads(line[len("data: "):])
                    assert event.get("type") != "error", event  # accepted, then failed inside
                    break
        else:
            response.read()
            if status >= 400:
                assert "error" in response.json()
    assert status < 500, f"{method} {path} -> {status}: {kwargs}"
    return status


@pytest.mark.parametrize("path", POSTS)
def test_fuzzed_json_bodies_never_get_500(http, path):
    @FUZZ
    @given(body=bodies | json_values)
    def run(body):
        if path.endswith("/stream") and isinstance(body, dict) and isinstance(body.get("max_length"), int):
            body = {**body, "max_length": min(body["max_length"], 4)}  # keep answers short
        send(http, "POST", path, content=json.dumps(body), headers={"Content-Type": "application/json"})

    run()


@pytest.mark.parametrize("method, path", [("POST", p) for p in POSTS] + [("GET", p) for p in GETS])
def test_fuzzed_raw_bodies_and_methods_never_get_500(http, method, path):
    @settings(FUZZ, max_examples=RAW_EXAMPLES // 4)
    @given(raw=st.binary(max_size=300),
           content_type=st.sampled_from(["application/json", "application/json; charset=utf-8", "text/plain", ""]),
           other_method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]))
    def run(raw, content_type, other_method):
        headers = {"Content-Type": content_type} if content_type else {}
        send(http, method, path, content=raw, headers=headers)
        send(http, other_method, path, content=raw, headers=headers)

    run()
