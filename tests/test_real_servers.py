"""Opt-in: the app's backends against the real third-party servers people run.

Skipped unless ``HALO_WEAVE_LLAMA_SERVER`` (llama.cpp's ``llama-server``) and/or
``HALO_WEAVE_KOBOLDCPP`` (KoboldCPP's ``koboldcpp.py``) point at binaries built outside
this repository (see tests/real_servers.py); ``make test`` never builds them.  Each
server serves the bundled SmolLM2 GGUF on loopback.  What is checked is what a user
would notice: the kind and context the window shows, the answer being exactly what the
server itself writes for the same prompt, its own token counts, Stop really stopping
the server, and a server that dies mid-answer giving a clear error with what arrived.

    HALO_WEAVE_LLAMA_SERVER=/path/llama-server HALO_WEAVE_KOBOLDCPP=/path/koboldcpp.py \\
        python -m pytest -q tests/test_real_servers.py tests/ui/test_real_servers_window.py
"""

from __future__ import annotations

import time

import httpx
import pytest

from halo_weave.backends import connect, probe
from halo_weave.kobold_client import StreamInterrupted

from real_servers import KoboldCppProcess, LlamaServerProcess, started

pytestmark = pytest.mark.slow

PROMPT = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
          "<|im_start|>user\nName three fruits.<|im_end|>\n<|im_start|>assistant\n")
LONG_PROMPT = ("<|im_start|>user\nWrite a very long story about a dragon who loves tea.<|im_end|>\n"
               "<|im_start|>assistant\n")
GREEDY = dict(temperature=0.0, top_p=1.0, top_k=1, rep_pen=1.0, sampler_seed=1)
STOPS = ["<|im_end|>", "<|im_start|>"]


@pytest.fixture(scope="module")
def kobold():
    with KoboldCppProcess(n_ctx=3072) as server:
        yield server


@pytest.fixture(scope="module")
def llama():
    with LlamaServerProcess(n_ctx=1536) as server:
        yield server


def _ids(backend, text: str) -> list[int]:
    return [i for i, _ in backend.tokenize(text)]


def _stop_after(stream, n: int) -> int:
    """Iterate ``stream``, pressing Stop after ``n`` events; the number of events seen."""
    seen = 0
    for seen, _ in enumerate(stream, 1):
        if seen == n:
            stream.abort()
    return seen


# ---------------------------------------------------------------- KoboldCPP


def test_real_koboldcpp_is_probed_as_stock_koboldcpp_with_its_context(kobold):
    result = probe(kobold.url)
    assert result.usable and result.kind == "koboldcpp" and result.version
    assert result.context_size == 3072 and result.context_known
    assert (result.attention, result.token_ids, result.exact_tokens) == (False, False, True)


def test_real_koboldcpp_answer_and_counts_are_the_servers_own(kobold):
    with connect(kobold.url) as backend:
        assert backend.model_info().max_context == 3072, "same vocabulary: the table's window is the server's"
        stream = backend.stream(input_ids=_ids(backend, PROMPT), max_length=40, stop_sequence=STOPS, **GREEDY)
        list(stream)
        text, count = stream.text, backend.count_tokens("Name three fruits.")
    assert stream.prompt == PROMPT, "the prompt text is rebuilt exactly from the table's ids"
    body = {"prompt": PROMPT, "max_length": 40, "max_context_length": 3072, "temperature": 0.0, "top_p": 1.0,
            "top_k": 1, "rep_pen": 1.0, "sampler_seed": 1, "stop_sequence": STOPS, "trim_stop": True}
    own = httpx.post(f"{kobold.url}/api/v1/generate", json=body, timeout=300).json()["results"][0]["text"]
    assert text.strip() and text == own
    server = httpx.post(f"{kobold.url}/api/extra/tokencount", json={"prompt": PROMPT}).json()["value"]
    assert stream.done.raw["server_prompt_tokens"] == server
    plain = httpx.post(f"{kobold.url}/api/extra/tokencount",
                       json={"prompt": "Name three fruits.", "special": False}).json()["value"]
    assert count == (plain, True)


def test_real_koboldcpp_stop_stops_the_server_generating(kobold):
    with connect(kobold.url) as backend:
        stream = backend.stream(input_ids=_ids(backend, LONG_PROMPT), max_length=300, temperature=0.7,
                                stop_sequence=STOPS)
        started = time.monotonic()
        seen = _stop_after(stream, 4)
        ended = time.monotonic() - started
    assert stream.done.finish_reason == "abort" and stream.text.strip()
    perf = httpx.get(f"{kobold.url}/api/extra/perf").json()
    # The server's own count of what it generated for that request: far from the 300 asked.
    assert perf["last_token_count"] < 300 and seen < 300, (perf, seen, ended)


# ---------------------------------------------------------------- llama-server


def test_real_llama_server_is_probed_with_token_ids_and_its_context(llama):
    result = probe(llama.url)
    assert result.usable and result.kind == "llama-server" and result.version
    assert result.context_size == 1536 and result.context_known
    assert (result.attention, result.token_ids, result.exact_tokens) == (False, True, True)


def test_real_llama_server_answer_ids_and_prefix_reuse(llama):
    with connect(llama.url) as backend:
        info = backend.model_info()
        assert info.max_context == 1536 and info.chat_template, "the model's own template from /props"
        pairs = backend.tokenize(PROMPT)
        assert "".join(p for _, p in pairs) == PROMPT
        ids = [i for i, _ in pairs]
        stream = backend.stream(input_ids=ids, max_length=40, stop_sequence=STOPS, **GREEDY)
        events = list(stream)
        body = {"prompt": ids, "n_predict": 40, "temperature": 0.0, "top_p": 1.0, "top_k": 1,
                "repeat_penalty": 1.0, "seed": 1, "stop": STOPS, "cache_prompt": True}
        own = httpx.post(f"{llama.url}/completion", json=body, timeout=300).json()
        assert stream.text.strip() and stream.text == own["content"]
        assert backend.detokenize([e.token_id for e in events]) == stream.text, "the events carry the server's ids"
        assert stream.done.prompt_tokens == len(ids) == own["tokens_evaluated"]
        # The next turn extends this one: the server reuses what its slot holds.
        follow = ids + [e.token_id for e in events] + _ids(backend, "<|im_end|>\n<|im_start|>user\nMore?<|im_end|>\n")
        again = backend.stream(input_ids=follow, max_length=4, **GREEDY)
        list(again)
    assert len(ids) <= again.done.reused_prefix_tokens < len(follow), again.done.raw.get("timings")


def test_real_llama_server_stop_frees_its_slot(llama):
    with connect(llama.url) as backend:
        stream = backend.stream(input_ids=_ids(backend, LONG_PROMPT), max_length=300, temperature=0.7,
                                stop_sequence=STOPS)
        seen = _stop_after(stream, 4)
    assert stream.done.finish_reason == "abort" and seen < 300
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        slots = httpx.get(f"{llama.url}/slots").json()
        if not any(slot.get("is_processing") for slot in slots):
            break
        time.sleep(0.2)
    assert not any(slot.get("is_processing") for slot in slots), "the server stopped generating"


def test_real_llama_server_reopens_a_conversation_from_its_saved_slot(tmp_path):
    """Started with --slot-save-path, the slot saved after an answer is read back when the
    conversation is reopened: the server then runs none of its context again."""
    with LlamaServerProcess(n_ctx=1536, extra=("--slot-save-path", str(tmp_path))) as server, \
            connect(server.url) as backend:
        context = _ids(backend, PROMPT * 8)
        backend.conversation = "first"
        cold = backend.restore(context)  # nothing saved yet: the whole context is run
        assert cold["restored"] == 0 and cold["ran"] >= len(context) - 1, cold
        assert backend.save_cache() >= len(context)
        backend.conversation = "second"
        backend.restore(_ids(backend, LONG_PROMPT))  # the slot holds another conversation
        backend.conversation = "first"
        warm = backend.restore(context)
        assert warm["restored"] >= len(context) and warm["ran"] <= 1, warm


def test_real_llama_server_without_slot_saves_prefills_a_reopened_conversation(llama):
    with connect(llama.url) as backend:
        context = _ids(backend, PROMPT * 4)
        backend.conversation = "unsaved"
        answer = backend.restore(context)
        assert answer["restored"] == 0 and "--slot-save-path" in answer["reason"]
        again = backend.stream(input_ids=context + _ids(backend, "<|im_start|>user\nHi<|im_end|>\n"),
                               max_length=2, **GREEDY)
        list(again)
    assert again.done.reused_prefix_tokens >= len(context) - 1, "the warm-up's prefill was reused"


# ---------------------------------------------------------------- both


@pytest.mark.parametrize("kind", ["koboldcpp", "llama-server"])
def test_real_server_killed_mid_answer_gives_a_clear_error_with_what_arrived(kind):
    with started(kind, n_ctx=1024 if kind == "koboldcpp" else 512) as server:
        with connect(server.url) as backend:
            stream = backend.stream(input_ids=_ids(backend, LONG_PROMPT), max_length=300, temperature=0.7,
                                    stop_sequence=STOPS)
            with pytest.raises(StreamInterrupted) as cut:
                for n, _ in enumerate(stream, 1):
                    if n == 3:
                        server.kill()
    assert "mid-answer" in str(cut.value) or "ended before" in str(cut.value), str(cut.value)
    assert cut.value.partial_text and cut.value.partial_text == stream.text
