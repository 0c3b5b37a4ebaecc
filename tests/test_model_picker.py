"""A server that serves several models: the app lists them, uses the one asked for, and
says so when the one asked for is not served."""

from __future__ import annotations

import pytest

from halo_weave.backends import connect, probe
from halo_weave.backends.local_tokenizer import shared
from halo_weave.backends.model_template import resolve

from replay_servers import LlamaSwapReplay, LMStudioReplay, OllamaReplay

PROMPT = "<|im_start|>user\nWho are you?<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture
def swap():
    server = LlamaSwapReplay(shared())
    yield server
    server.close()


def _answer(backend) -> str:
    return "".join(event.text for event in backend.stream(prompt=PROMPT, max_length=16))


def test_every_model_is_listed_and_the_first_answers_by_default(swap):
    with connect(swap.url) as backend:
        assert backend.models == list(LlamaSwapReplay.served)
        assert backend.model_info().name == "qwen2.5-coder-1.5b"
        assert _answer(backend) == "I am qwen2.5-coder-1.5b."
    assert probe(swap.url + "/v1").as_json()["models"] == list(LlamaSwapReplay.served)


def test_the_model_asked_for_answers_and_every_request_names_it(swap):
    with connect(swap.url + "/v1", model="phi-3-mini") as backend:
        assert backend.model_info().name == "phi-3-mini" and backend.missing_model is None
        assert _answer(backend) == "I am phi-3-mini."
    assert [b["model"] for b in swap.bodies("/v1/completions")] == ["phi-3-mini"]


def test_a_model_no_longer_served_falls_back_to_the_first_and_says_which(swap):
    with connect(swap.url, model="mixtral-8x7b") as backend:
        assert backend.missing_model == "mixtral-8x7b"
        assert backend.model_id == "qwen2.5-coder-1.5b"
        assert _answer(backend) == "I am qwen2.5-coder-1.5b."


def test_ollamas_go_template_is_read_and_not_run():
    server = OllamaReplay(shared(), num_ctx=8192)
    try:
        with connect(server.url + "/v1") as backend:
            info = backend.model_info()
            assert info.chat_template == "{{ .Prompt }}" and info.template_origin == "Ollama /api/show"
            used = resolve(info.chat_template, origin=info.template_origin)
            assert used.template.label == "ChatML"
            assert used.words == "Template: ChatML (built-in fallback: Ollama /api/show publishes a Go template, not Jinja)"
    finally:
        server.close()


def test_lm_studio_lists_its_chat_models_and_uses_the_loaded_one():
    server = LMStudioReplay(shared(), loaded_ctx=8192)
    try:
        with connect(server.url + "/v1") as backend:
            assert backend.models == ["qwen2-vl-7b-instruct", "meta-llama-3.1-8b-instruct"], "no embedding model"
            assert backend.model_info().name == "meta-llama-3.1-8b-instruct"
        with connect(server.url, model="qwen2-vl-7b-instruct") as backend:
            assert backend.model_info().name == "qwen2-vl-7b-instruct"
    finally:
        server.close()


class OllamaWithSeveral(OllamaReplay):
    """Ollama with three models pulled: an embedder, and two chat models of which the
    second is running."""

    pulled = ("llama3.2:latest", "nomic-embed-text:latest", "qwen2.5:7b")

    def __init__(self, tokenizer) -> None:
        super().__init__(tokenizer, running_ctx=8192)
        self.model_id = "qwen2.5:7b"  # the running one (/api/ps)

    def models(self) -> dict:
        return {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "library"} for m in self.pulled]}

    def native_post(self, handler, body: dict) -> None:
        if handler.path == "/api/show" and body.get("model") in self.pulled:
            embedder = body["model"].startswith("nomic")
            self.send_json(handler, {"template": "{{ .Prompt }}", "parameters": "", "model_info": {},
                                     "capabilities": ["embedding"] if embedder else ["completion", "tools"]})
        else:
            super().native_post(handler, body)


def test_ollama_lists_its_chat_models_and_uses_the_running_one():
    server = OllamaWithSeveral(shared())
    try:
        with connect(server.url) as backend:
            assert backend.models == ["llama3.2:latest", "qwen2.5:7b"], "no embedding model"
            info = backend.model_info()
            assert info.name == "qwen2.5:7b" and info.server_max_context == 8192
        with connect(server.url, model="llama3.2:latest") as backend:
            assert backend.model_info().name == "llama3.2:latest"
    finally:
        server.close()
