"""Top-k and the repetition penalty reach an OpenAI-compatible server in text mode: a
local one reads them (llama-cpp-python's real server), and a strict one that refuses
fields it does not know still answers (asked again with the standard fields only)."""

from __future__ import annotations

import pytest

from halo_weave.backends import connect
from halo_weave.backends.local_tokenizer import shared

from llama_cpp_server import LlamaCppServer
from replay_servers import OpenAIReplay

PROMPT = "<|im_start|>user\nWrite one sentence about the sea.<|im_end|>\n<|im_start|>assistant\n"
STANDARD = {"model", "prompt", "max_tokens", "temperature", "top_p", "stream", "stop", "seed"}


class StrictOpenAI(OpenAIReplay):
    """Refuses a completion request with any field OpenAI does not define, as hosted APIs do."""

    def post(self, handler, body: dict) -> None:
        unknown = sorted(set(body) - STANDARD)
        if handler.path == "/v1/completions" and unknown:
            self.send_json(handler, {"error": {"message": f"Unrecognized request argument supplied: {unknown[0]}",
                                               "type": "invalid_request_error"}}, 400)
            return
        super().post(handler, body)


def _answer(backend, **sampling) -> str:
    stream = backend.stream(prompt=PROMPT, max_length=16, **sampling)
    return "".join(event.text for event in stream)


def test_a_strict_server_that_refuses_top_k_still_answers_and_is_sent_standard_fields():
    server = StrictOpenAI(shared())
    try:
        with connect(server.url) as backend:
            assert _answer(backend, top_k=40, rep_pen=1.1) == "Mochi is your cat."
            assert _answer(backend, top_k=40, rep_pen=1.1) == "Mochi is your cat."
        sent = server.bodies("/v1/completions")
        assert [("top_k" in b, "repeat_penalty" in b) for b in sent] == [(True, True), (False, False), (False, False)]
    finally:
        server.close()


@pytest.mark.slow
def test_top_k_reaches_llama_cpp_pythons_server():
    """top_k = 1 keeps only the likeliest token: at a high temperature the answer is the
    greedy one whatever the seed (without top_k it would wander)."""
    server = LlamaCppServer()
    try:
        with connect(server.url) as backend:
            greedy = _answer(backend, temperature=0.0, top_k=0, rep_pen=1.0)
            hot = {_answer(backend, temperature=1.8, top_p=1.0, top_k=1, rep_pen=1.0, sampler_seed=seed)
                   for seed in (1, 2, 3)}
            assert hot == {greedy}, (greedy, hot)
            wild = {_answer(backend, temperature=1.8, top_p=1.0, top_k=0, rep_pen=1.0, sampler_seed=seed)
                    for seed in (1, 2, 3)}
            assert wild != {greedy}, "without top_k the hot answers differ from the greedy one"
    finally:
        server.stop()
