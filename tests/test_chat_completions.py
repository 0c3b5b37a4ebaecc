"""The chat-completions backend against llama-cpp-python's real ``/v1/chat/completions``
(the bundled SmolLM2 GGUF on loopback), driven through the session as the app drives it:
the live context goes as messages in order (a pruned paragraph leaves its message, a
recalled one comes back at its place, an emptied turn sends nothing, the recall note
reaches the question), the answer streams in, Stop ends it; and a chat-only server on
loopback that fails or streams garbage gives a clear error and loses nothing."""

from __future__ import annotations

import json

import pytest

from halo_weave.backends import BackendUnusable, connect, probe
from halo_weave.core.chat_template import build_framing, detect_template
from halo_weave.errors import BackendHTTPError, ProtocolError
from halo_weave.session import ChatSession, token_events
from halo_weave.session.messages import live_messages
from halo_weave.settings import Settings
from halo_weave.store import ConversationStore, new_conversation_path

from chat_only_server import ChatOnlyServer, chat_sse
from llama_cpp_server import LlamaCppServer

pytestmark = pytest.mark.slow

SYSTEM = "You are brief."
GREETING = "Good morning! I have some news for you today."
CAT = "My cat is called Mochi and she sleeps a lot in boxes."
FLIGHT = "I fly to Lisbon on the third of March from Berlin."
SISTER = "My sister Ana works nights as a nurse at the hospital."
SETTINGS = Settings.of(min_chunk_tokens=4, max_context_tokens=0, max_new_tokens=6, temperature=0.0,
                       system_prompt=SYSTEM)


@pytest.fixture(scope="module")
def llama():
    server = LlamaCppServer()
    yield server
    server.stop()


@pytest.fixture
def chat_only():
    server = ChatOnlyServer()
    yield server
    server.close()


def _session(url: str, tmp_path, settings: Settings = SETTINGS):
    backend = connect(url, api="chat")
    info = backend.model_info()
    framing = build_framing(lambda t: backend.tokenize(t, parse_special=True), detect_template(None))
    session = ChatSession(settings)
    session.connect(backend, info, framing)
    path = new_conversation_path(tmp_path)
    session.open(ConversationStore.open(path))
    session.prompt.apply(settings.chat.system_prompt, session.prompt.pieces(settings.chat.system_prompt))
    return session, path


def _say(session: ChatSession, text: str, recalled=()) -> int:
    pieces = session.server.tokenize(text)
    return session.add_user_message([i for i, _ in pieces], [t for _, t in pieces], recalled=recalled).turn_id


def _answer(session: ChatSession) -> tuple[dict, str]:
    """Stream the answer from the server as the app does: (the request, the finish reason)."""
    session.fit_model_window()
    session.begin_answer()
    request = session.generation_request()
    stream = session.backend.stream(**request)
    for event in token_events(stream, session.backend):
        session.receive(event)
    session.finish_turn(stream.done.finish_reason, prune=False)
    return request, stream.done.finish_reason


def _contents(session) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in live_messages(session.conv)]


def test_chat_completions_is_chosen_by_the_setting_or_where_only_chat_is_served(llama, chat_only):
    # llama-cpp-python serves both: completions unless chat completions are asked for.
    assert probe(llama.url).kind == "openai"
    chat = probe(llama.url, api="chat")
    assert chat.usable and chat.kind == "openai-chat" and chat.server == "OpenAI-compatible (chat)"
    assert chat.exact_tokens, "llama-cpp-python's own counter counts the budgets"
    assert probe(llama.url + "/v1", api="chat").kind == "openai-chat", "a pasted .../v1 URL too"
    # A server without /v1/completions is spoken to through chat completions by itself.
    only = probe(chat_only.url)
    assert only.usable and only.kind == "openai-chat" and only.model == "chat-only-model"
    assert not only.exact_tokens, "no counter there: the counts are estimates, and say so"
    with pytest.raises(ValueError):
        connect(llama.url, api="chat-ish")


def test_chat_completions_messages_follow_pruning_and_recall_in_order(llama, tmp_path):
    session, _ = _session(llama.url, tmp_path)
    conv = session.conv
    first = _say(session, f"{GREETING}\n\n{CAT}")
    request, reason = _answer(session)
    assert reason in ("stop", "length") and conv.content_chunks(first + 1), "the real server answered"
    assert [m["role"] for m in request["messages"]] == ["system", "user"]
    assert request["messages"][0]["content"] == SYSTEM and CAT in request["messages"][1]["content"]
    second = _say(session, FLIGHT)
    _answer(session)
    third = _say(session, SISTER)
    _answer(session)
    roles = [r for r, _ in _contents(session)]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]
    assert "<|im_start|>" not in json.dumps(live_messages(conv)), "the app's framing is never sent"

    # A pruned paragraph leaves its message; the rest of the message stays where it was.
    cat = next(c for c in conv.content_chunks(first) if "Mochi" in conv.chunk_text(c.id))
    session.levers.prune(cat.id)
    messages = _contents(session)
    assert messages[1][1].strip() == GREETING and len(messages) == 7

    # An exchange with nothing live sends no message, and nothing else moves.
    for turn in (second, second + 1):
        for chunk in reversed(conv.content_chunks(turn)):
            if chunk.live:
                session.levers.prune(chunk.id)
    messages = _contents(session)
    assert "Lisbon" not in json.dumps(messages)
    assert [r for r, _ in messages] == ["system", "user", "assistant", "user", "assistant"]
    assert SISTER in messages[3][1]

    # Recalled: back in its own message, at its place (after the greeting, before the next turn).
    session.levers.resurrect(cat.id)
    messages = _contents(session)
    assert messages[1][0] == "user" and messages[1][1].index(GREETING) < messages[1][1].index("Mochi")
    assert SISTER in messages[3][1]

    # A paragraph back without its question: two answers in a row are one message.
    flight_answer = conv.content_chunks(second + 1)[0]
    back = conv.resurrect([flight_answer.id], with_anchors=False)
    session.store.save_chunks(conv, back)
    roles = [r for r, _ in _contents(session)]
    assert roles == ["system", "user", "assistant", "user", "assistant"], "roles still alternate"
    assert conv.chunk_text(flight_answer.id).strip() in _contents(session)[2][1]

    # The recall note reaches the model: inside the question's message, before its words.
    question = _say(session, "What is my cat called?", recalled=[cat])
    request, reason = _answer(session)
    last = request["messages"][-1]
    assert last["role"] == "user" and last["content"].startswith("From earlier in our conversation:\n- [")
    assert "] My cat" in last["content"].split("\n")[1], "the line opens with the day it was said"
    assert last["content"].endswith("What is my cat called?")
    assert reason in ("stop", "length") and conv.content_chunks(question + 1), "the real server answered it"
    assert "From earlier" not in json.dumps(live_messages(conv)), "the note is not part of the conversation"


def test_chat_completions_llama_cpp_python_takes_two_messages_of_one_role_in_a_row(llama):
    # What the merge guards against elsewhere (Mistral's and Gemma's templates refuse it);
    # llama-cpp-python's template for this model takes them as they are.
    with connect(llama.url, api="chat") as backend:
        stream = backend.stream(messages=[{"role": "user", "content": "Hi."}, {"role": "user", "content": "Name a fruit."}],
                                prompt="Hi. Name a fruit.", max_length=6, temperature=0.0)
        assert "".join(e.text for e in stream).strip() and stream.done.finish_reason in ("stop", "length")


def test_chat_completions_stop_ends_the_answer_and_the_server_answers_again(llama):
    with connect(llama.url, api="chat") as backend:
        story = [{"role": "user", "content": "Write a very long story about a dragon who loves tea."}]
        stream = backend.stream(messages=story, prompt=story[0]["content"], max_length=300, temperature=0.0)
        seen = 0
        for seen, _ in enumerate(stream, 1):
            if seen == 4:
                stream.abort()
        assert stream.done.finish_reason == "abort" and seen < 300 and stream.text.strip()
        again = backend.stream(messages=[{"role": "user", "content": "Say hi."}], prompt="Say hi.", max_length=4)
        assert "".join(e.text for e in again).strip(), "the stopped stream left the server free"


def test_chat_completions_needs_messages(llama):
    with connect(llama.url, api="chat") as backend, pytest.raises(ValueError):
        backend.stream(prompt="Hi.")


def test_chat_completions_broken_server_gives_a_clear_error_and_loses_nothing(chat_only, tmp_path):
    session, path = _session(chat_only.url, tmp_path)
    question = _say(session, CAT)
    request, reason = _answer(session)
    assert reason == "stop" and "".join(session.conv.chunk_text(c.id)
                                        for c in session.conv.content_chunks(question + 1)) == "Hello there."
    sent = chat_only.requests[-1]
    assert sent["model"] == "chat-only-model" and sent["stream"] is True and "prompt" not in sent
    assert [m["role"] for m in sent["messages"]] == ["system", "user"] and sent["messages"][1]["content"] == CAT

    # A server error: its own words, and the message stays saved.
    chat_only.respond(b'{"error": {"message": "model overloaded"}}', status=500, content_type="application/json")
    failing = _say(session, "And my sister?")
    with pytest.raises(BackendHTTPError, match="model overloaded"):
        _answer(session)
    session.finish_turn("error", prune=False)
    # Garbage where the events should be: named, with what arrived kept.
    chat_only.respond(chat_sse("Half an ")[:-20] + b"\n\ndata: {not json\n\n")
    _say(session, "Still there?")
    with pytest.raises(ProtocolError, match="not JSON"):
        _answer(session)
    session.finish_turn("error", prune=False)
    # A stream that is not one.
    chat_only.respond(b"<html>502 Bad Gateway</html>", content_type="text/html")
    _say(session, "Hello?")
    with pytest.raises(ProtocolError, match="not an event stream"):
        _answer(session)
    session.finish_turn("error", prune=False)
    session.store.close()

    reopened = ChatSession(SETTINGS)
    reopened.framing = session.framing
    reopened.open(ConversationStore.open(path))
    texts = [reopened.conv.chunk_text(c.id) for t in sorted(reopened.conv.turns) for c in reopened.conv.content_chunks(t)]
    assert CAT in texts and "And my sister?" in texts and "Still there?" in texts and "Hello?" in texts
    assert "Hello there." in texts, "the answer before the failures is kept"
    assert failing in reopened.conv.turns
    reopened.store.close()


def test_a_chat_only_server_that_lists_no_model_says_so(chat_only, monkeypatch):
    import chat_only_server

    monkeypatch.setitem(chat_only_server.MODELS, "data", [])
    with pytest.raises(BackendUnusable, match="serves no model"):
        connect(chat_only.url)


def test_chat_completions_sends_an_attached_document_as_a_user_message(llama, tmp_path):
    session, _ = _session(llama.url, tmp_path)
    _say(session, GREETING)
    _answer(session)
    notes = tmp_path / "notes.md"
    notes.write_text("The spare key is under the blue flowerpot.\n\nThe wifi password is pelican42.\n")
    session.documents.attach(session.documents.prepare(notes), live=True)
    messages = live_messages(session.conv)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"], \
        "the document is a user message: servers know no 'document' role"
    assert "pelican42" in messages[-1]["content"] and "notes.md" in messages[-1]["content"]
    _say(session, "What is the wifi password?")
    request, _ = _answer(session)
    roles = [m["role"] for m in request["messages"]]
    assert roles == ["system", "user", "assistant", "user"], "the question joins the document's message"
    assert "pelican42" in request["messages"][-1]["content"]
