"""The real server against web pages, the network, and malformed or oversize requests."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import httpx
import pytest

from halo_weave.server.launcher import start_server
from halo_weave.server.limits import MAX_DETOKENIZE_IDS, MAX_STOP_CHARS, MAX_STOP_STRINGS

pytestmark = pytest.mark.slow

CHAT = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=httpx.Timeout(120, connect=5)) as client:
        yield client


def ids_of(http, text: str) -> list[int]:
    return http.post("/api/v1/tokenize", json={"text": text, "parse_special": True}).json()["token_ids"]


def not_busy(http) -> bool:
    """True when no generation holds the model (an abort finds nothing to stop)."""
    return http.post("/api/extra/abort", json={"request_id": "nobody"}).json()["success"] == "false" and \
        http.post("/api/extra/abort", json={}).json()["success"] == "false"


# ---------------------------------------------------------------------- web pages
def test_a_web_page_can_neither_start_nor_abort_generations(http, server):
    # What a page on another site can send without a CORS preflight: a simple POST.
    browser = {"Origin": "https://evil.example", "Content-Type": "text/plain;charset=UTF-8",
               "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}
    body = json.dumps({"prompt": CHAT, "max_length": 50})
    for path in ("/api/extra/generate/stream", "/api/extra/abort", "/api/v1/tokenize"):
        response = http.post(path, content=body, headers=browser)
        assert response.status_code == 403, (path, response.text)
        assert "web pages" in response.json()["error"]
    # Even a page that sends JSON (it would need a preflight, never granted) is refused.
    response = http.post("/api/extra/generate/stream", json={"prompt": CHAT, "max_length": 50},
                         headers={"Origin": "http://localhost:8080"})
    assert response.status_code == 403
    form = http.post("/api/extra/abort", content="genkey=x",
                     headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert form.status_code == 415
    assert not_busy(http)  # nothing was started
    # No CORS grant either, so a page cannot read a GET answer.
    assert "access-control-allow-origin" not in http.get("/api/v1/model").headers


def test_dns_rebinding_host_is_refused(http):
    response = http.get("/api/v1/model", headers={"Host": "attacker.example:5001"})
    assert response.status_code == 403 and "loopback" in response.json()["error"]


def test_the_server_itself_and_the_app_are_served(http, server):
    own = http.post("/api/v1/tokenize", json={"text": "hi"}, headers={"Origin": server.url})
    assert own.status_code == 200
    assert http.post("/api/v1/tokenize", json={"text": "hi"}).status_code == 200


def test_post_without_json_content_type_is_415(http):
    response = http.post("/api/v1/tokenize", content=b'{"text": "hi"}')
    assert response.status_code == 415 and "application/json" in response.json()["error"]


# ---------------------------------------------------------------------- malformed and oversize
@pytest.mark.parametrize("path, raw, fragment", [
    ("/api/extra/generate/stream", "[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ("/api/v1/tokenize", '{"text": ' + "[" * 100_000, "not valid JSON|nested too deeply"),
    ("/api/extra/generate/stream", '{"input_ids": [1], "max_length": ' + "9" * 5000 + "}", "not usable JSON"),
    ("/api/extra/generate/stream", b'{"prompt": "\xff\xfe"}', "not valid JSON"),
    ("/api/extra/abort", "{" * 50_000, "nested too deeply|not valid JSON"),
])
def test_malformed_json_is_400_never_500(http, path, raw, fragment):
    response = http.post(path, content=raw, headers=JSON)
    if path == "/api/extra/abort":  # abort ignores a body it cannot read, as KoboldCPP
        assert response.status_code == 200 and response.json()["success"] == "false"
        return
    assert response.status_code == 400, response.text
    assert any(f in response.json()["error"] for f in fragment.split("|"))


@pytest.mark.parametrize("field, value, fragment", [
    ("sampler_seed", 10**30, "sampler_seed must be between"),
    ("sampler_seed", 1e30, "sampler_seed must be"),
    ("sampler_seed", -(2**40), "sampler_seed must be between"),
    ("top_p", 3.5, "top_p must be between 0 and 1"),
    ("temperature", 1e300, "temperature must be between"),
    ("max_length", 0, "max_length must be between"),
    ("stop_sequence", ["x"] * (MAX_STOP_STRINGS + 1), "at most 64"),
    ("stop_sequence", ["y" * (MAX_STOP_CHARS + 1)], "stop_sequence[0] is 1001 characters"),
    ("request_id", "r" * 300, "request_id is longer"),
    ("prompt", "hi \udfff", "prompt holds text that is not valid Unicode"),
    ("stop_sequence", ["ok", "\ud800"], "stop_sequence[1] holds text that is not valid Unicode"),
])
def test_out_of_range_fields_are_400_before_the_stream(http, field, value, fragment):
    body = {"input_ids": ids_of(http, CHAT), "max_length": 4, field: value}
    # json.dumps escapes a lone surrogate as \udXXX, as a hostile client would send it.
    response = http.post("/api/extra/generate/stream", content=json.dumps(body), headers=JSON)
    assert response.status_code == 400, response.text
    assert fragment in response.json()["error"]


def test_lone_surrogate_to_tokenize_is_400(http):
    response = http.post("/api/v1/tokenize", content=json.dumps({"text": "a\ud800b"}), headers=JSON)
    assert response.status_code == 400 and "not valid Unicode" in response.json()["error"]


def test_oversize_inputs_are_refused(http):
    limit = http.get("/api/v1/config/max_context_length").json()["value"]
    response = http.post("/api/extra/generate/stream", json={"input_ids": [1] * (limit + 1)})
    assert response.status_code == 400 and "more than the context size" in response.json()["error"]
    response = http.post("/api/v1/tokenize", json={"text": "a" * 1_000_001})
    assert response.status_code == 400
    response = http.post("/api/v1/detokenize", json={"token_ids": [1] * (MAX_DETOKENIZE_IDS + 1)})
    assert response.status_code == 400 and f"at most {MAX_DETOKENIZE_IDS}" in response.json()["error"]


# ---------------------------------------------------------------------- /abort under load
@pytest.mark.timeout(300)
def test_abort_is_answered_while_a_30_mb_stop_string_is_processed(http, server):
    """A 30 MB stop string (sent as a client uploading slowly would) blocks nothing.

    Timings go to ``scripts/bench_server.py``; here only the order: aborts are answered
    while that request is still in flight, and it ends with a 400, not a 500.
    """
    prefix = json.dumps({"input_ids": ids_of(http, CHAT), "max_length": 4})[:-1] + ', "stop_sequence": ["'
    payload = prefix.encode() + b"z" * (30 * 1024 * 1024) + b'"]}'
    pieces = [payload[i : i + (1 << 20)] for i in range(0, len(payload), 1 << 20)]
    result: dict = {}

    def upload():
        for piece in pieces:
            yield piece
            time.sleep(0.02)

    def big_request():
        with httpx.Client(base_url=server.url, timeout=120) as client:
            result["response"] = client.post("/api/extra/generate/stream", content=upload(), headers=JSON)
        result["finished"] = time.monotonic()

    worker = threading.Thread(target=big_request)
    worker.start()
    answered = []
    while worker.is_alive():
        response = http.post("/api/extra/abort", json={})
        assert response.status_code == 200
        answered.append(time.monotonic())
        time.sleep(0.05)
    worker.join()
    assert [t for t in answered if t < result["finished"]], "no abort was answered while the request ran"
    response = result["response"]
    assert response.status_code == 400 and "no field accepts that much" in response.json()["error"]


# ---------------------------------------------------------------------- the network
def test_listening_beyond_loopback_without_a_key_is_refused():
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "halo_weave.server", "--host", "0.0.0.0", "--port", "0"],
        capture_output=True, text=True, timeout=120, env={**__import__("os").environ, "HALO_WEAVE_API_KEY": ""},
    )
    assert result.returncode == 1
    assert "refusing to listen on 0.0.0.0 without a key" in result.stderr
    assert "--api-key" in result.stderr
    assert time.monotonic() - started < 60  # refused before loading the model


@pytest.mark.timeout(600)
def test_the_key_is_checked_on_every_request():
    from conftest import SERVER_START_TIMEOUT_S, TEST_CACHE_DIR

    process = start_server(port=0, extra_args=["--api-key", "s3cret"],
                           env={"HALO_WEAVE_CACHE": str(TEST_CACHE_DIR)})
    try:
        process.wait_ready(timeout=SERVER_START_TIMEOUT_S)
        with httpx.Client(base_url=process.url, timeout=60) as client:
            for method, path in (("GET", "/api/v1/model"), ("POST", "/api/v1/tokenize"),
                                 ("POST", "/api/extra/abort"), ("GET", "/api/v9/nothing")):
                for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
                    response = client.request(method, path, json={"text": "hi"}, headers=headers)
                    assert response.status_code == 401, (method, path, headers)
            good = {"Authorization": "Bearer s3cret"}
            assert client.get("/api/v1/model", headers=good).status_code == 200
            assert client.post("/api/v1/tokenize", json={"text": "hi"}, headers=good).status_code == 200
        from halo_weave.kobold_client import BackendHTTPError, KoboldClient

        with KoboldClient(process.url, api_key="s3cret") as app_client:  # the app, given the key
            assert app_client.tokenize("hi")
            assert [e.text for e in app_client.stream(prompt=CHAT, max_length=2)]
        with KoboldClient(process.url) as app_client, pytest.raises(BackendHTTPError, match="401"):
            app_client.model_info()
    finally:
        process.stop()
