"""Every server kind behind one declared interface, and detection as a table of probes.

What a user would notice when this breaks: a kind that lacks a member the window asks
(the model picker, the template, the cache warm-up) fails only once that kind is
connected; a probe that recognises the wrong server frames and counts with the wrong API.
"""

from __future__ import annotations

import inspect

import pytest

from halo_weave.backends import PROBES, Backend, connect, probe
from halo_weave.backends.base import Http
from halo_weave.backends.chat_completions import ChatCompletions
from halo_weave.backends.interface import MEMBERS
from halo_weave.backends.koboldcpp import StockKobold
from halo_weave.backends.llama_server import LlamaServer
from halo_weave.backends.local_tokenizer import shared
from halo_weave.backends.openai_compat import OpenAICompat
from halo_weave.backends.probe import Asking
from halo_weave.kobold_client import KoboldClient

from conversation_writer import ScriptedBackend
from replay_servers import KoboldReplay, LlamaReplay, OpenAIReplay
from test_backends import _ForkLike

#: A port nothing listens on: building a backend asks nothing yet.
NOWHERE = "http://127.0.0.1:9"


@pytest.fixture(scope="module")
def tok():
    return shared()


def unconnected(tok) -> list:
    """One backend of each class, built without asking a server (and the crash test's
    scripted one, which the session drives the same way)."""
    return [KoboldClient(NOWHERE), KoboldClient(NOWHERE, kind="koboldcpp-fork", version="1.76"),
            StockKobold(NOWHERE, tokenizer=tok), OpenAICompat(NOWHERE, tokenizer=tok),
            ChatCompletions(NOWHERE, tokenizer=tok), LlamaServer(NOWHERE),
            ScriptedBackend()]


def test_every_backend_class_has_every_member_the_interface_declares(tok):
    backends = unconnected(tok)
    try:
        for backend in backends:
            assert isinstance(backend, Backend), type(backend).__name__
            missing = [name for name in MEMBERS if not hasattr(backend, name)]
            assert missing == [], (type(backend).__name__, missing)
            # Each method takes what the interface passes it, by the same names.
            for name in MEMBERS:
                declared = vars(Backend).get(name)
                if not inspect.isfunction(declared):
                    continue
                own = inspect.signature(getattr(backend, name)).parameters
                takes_any = any(p.kind is p.VAR_KEYWORD for p in own.values())
                wanted = [p for p in inspect.signature(declared).parameters if p != "self"]
                assert all(p in own or takes_any for p in wanted if p != "options"), (type(backend).__name__, name)
            # What the window shows and decides by, before anything is asked.
            assert list(backend.models) == [] and backend.model_id is None and backend.missing_model is None
            assert backend.template is None and backend.template_in_use is None and backend.template_choice is None
            assert isinstance(backend.label, str) and backend.label
            assert backend.save_cache() == 0  # nothing held yet: nothing saved, nothing asked
    finally:
        for backend in backends:
            backend.close()


def test_a_kind_without_read_ahead_says_so_instead_of_failing_oddly(tok):
    backends = unconnected(tok)
    try:
        for backend in backends:
            if not backend.read_ahead and not isinstance(backend, KoboldClient):
                with pytest.raises(Exception, match="takes no prompt ahead"):
                    backend.prepare([1, 2, 3])
    finally:
        for backend in backends:
            backend.close()


def first_probe(url: str) -> str:
    """The family of the first probe in the table that recognises the server at ``url``."""
    asking = Asking(Http(url), url, None)
    try:
        return next(p.family for p in PROBES if p.answer(asking) is not None)
    finally:
        asking.http.close()


@pytest.mark.parametrize("replay, family, kind", [
    (KoboldReplay, "KoboldCPP", "koboldcpp"),
    (_ForkLike, "KoboldCPP", "koboldcpp-fork"),
    (LlamaReplay, "llama-server", "llama-server"),
    (OpenAIReplay, "OpenAI-compatible", "openai"),
])
def test_the_probe_table_tells_each_kind_from_its_loopback_server(replay, family, kind, tok):
    server = replay(tok)
    try:
        assert first_probe(server.url) == family
        with connect(server.url, tokenizer=tok) as backend:
            assert isinstance(backend, Backend) and backend.kind == kind
            info = backend.model_info()
            assert info.kind == kind and backend.capabilities.token_ids == (kind in ("koboldcpp-fork", "llama-server"))
        assert probe(server.url, tokenizer=tok).server == backend.label
    finally:
        if hasattr(server, "close"):
            server.close()
        else:
            server.httpd.shutdown()
            server.httpd.server_close()


def test_the_probe_table_finds_our_own_server_with_attention(server):
    assert first_probe(server.url) == "KoboldCPP"
    with connect(server.url) as backend:
        assert isinstance(backend, Backend) and backend.kind == "halo"
        assert backend.capabilities.attention is True and backend.read_ahead and backend.restores
        assert backend.label.startswith("Halo Weave server")
