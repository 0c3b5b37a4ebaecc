"""Ollama and LM Studio say their context size only through their native APIs: real
loopback servers answering as those APIs are documented; the window's status line and
``halo-weave --probe`` must report the context the server really uses."""

from __future__ import annotations

import json

import pytest

from halo_weave.backends import connect, probe, status_line
from halo_weave.backends.local_tokenizer import shared

from replay_servers import LMStudioReplay, OllamaReplay, OpenAIReplay


@pytest.fixture(scope="module")
def tok():
    return shared()


def test_ollama_running_model_context_is_the_one_used(tok):
    server = OllamaReplay(tok, train_ctx=131072, num_ctx=8192, running_ctx=16384)
    try:
        with connect(server.url) as backend:
            info = backend.model_info()
            assert info.server_max_context == 16384 and info.context_known
            line = status_line(backend, info)
            assert line.startswith("Ollama 0.12.6 · no attention · 16384 ctx")
            assert "(assumed)" not in line
        assert ("/api/ps", None) in server.requests
    finally:
        server.close()


def test_ollama_modelfile_num_ctx_when_the_model_is_not_loaded(tok):
    server = OllamaReplay(tok, num_ctx=8192, running_ctx=None)
    try:
        result = probe(server.url)
        assert (result.kind, result.server, result.context_size, result.context_known) == (
            "openai", "Ollama 0.12.6", 8192, True)
        assert server.bodies("/api/show") == [{"model": "llama3.2:latest"}]
    finally:
        server.close()


def test_ollama_default_is_said_to_be_assumed_and_capped_by_the_model(tok):
    server = OllamaReplay(tok, train_ctx=2048, num_ctx=None, running_ctx=None)
    try:
        with connect(server.url) as backend:
            info = backend.model_info()
            # Ollama's 4096 default cannot exceed what the model was trained for.
            assert info.server_max_context == 2048 and not info.context_known
            assert "2048 ctx (assumed)" in status_line(backend, info)
    finally:
        server.close()


def test_lmstudio_loaded_context_length(tok):
    server = LMStudioReplay(tok, max_ctx=131072, loaded_ctx=8192)
    try:
        result = probe(server.url)
        assert (result.server, result.context_size, result.context_known) == ("LM Studio", 8192, True)
        with connect(server.url) as backend:
            stream = backend.stream(prompt="Hi", max_length=20)
            assert "".join(e.text for e in stream) == "Mochi is your cat."
            assert stream.done.finish_reason == "stop"
    finally:
        server.close()


def test_lmstudio_model_not_loaded_assumes_less_than_its_maximum_and_says_so(tok):
    server = LMStudioReplay(tok, max_ctx=131072, loaded_ctx=None)
    try:
        with connect(server.url) as backend:
            info = backend.model_info()
            assert info.server_max_context == 4096 and not info.context_known
            assert status_line(backend, info).startswith("LM Studio · no attention · 4096 ctx (assumed)")
    finally:
        server.close()


def test_plain_openai_server_is_not_mistaken_for_ollama_or_lmstudio(tok):
    server = OpenAIReplay(tok)
    try:
        result = probe(server.url)
        assert result.server == "OpenAI-compatible" and result.context_size == 2048 and not result.context_known
    finally:
        server.close()


def test_probe_command_reports_ollama_and_lmstudio_context(tok, capsys):
    from halo_weave.ui.cli import probe_main

    ollama = OllamaReplay(tok, running_ctx=32768)
    lmstudio = LMStudioReplay(tok, loaded_ctx=16384)
    try:
        assert probe_main(ollama.url) == 0
        found = json.loads(capsys.readouterr().out)
        assert (found["server"], found["context_size"], found["context_known"]) == ("Ollama 0.12.6", 32768, True)
        assert probe_main(lmstudio.url + "/v1") == 0
        found = json.loads(capsys.readouterr().out)
        assert (found["server"], found["context_size"], found["context_known"]) == ("LM Studio", 16384, True)
    finally:
        ollama.close()
        lmstudio.close()
