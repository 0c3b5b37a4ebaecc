"""What a message keeps of its recall: the chat model reads what came back with the
message, and the paragraphs the message attends to least go back to the graveyard.  The
real server with the bundled model on 127.0.0.1, a real SQLite file."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from halo_weave.core.chat_template import build_framing, detect_template
from halo_weave.kobold_client import KoboldClient
from halo_weave.memory import attended
from halo_weave.session import ChatSession
from halo_weave.settings import Settings
from halo_weave.store import ConversationStore, new_conversation_path

pytestmark = pytest.mark.slow

FACTS = {
    "cat": "My cat is called Mochi and she sleeps a lot in boxes.",
    "flight": "I fly to Lisbon on the third of March from Berlin.",
    "sister": "My sister Ana works nights as a nurse at the hospital.",
    "bicycle": "I bought a green bicycle last week for my commute.",
}
QUESTIONS = {
    "cat": "What is my cat called?",
    "flight": "When do I fly to Lisbon?",
    "sister": "What does my sister do?",
    "bicycle": "What colour is my bicycle?",
}


@pytest.fixture(scope="module")
def client(server):
    with KoboldClient(server.url) as c:
        yield c


@pytest.fixture
def told(client, tmp_path):
    """Four facts told and answered, then pruned (the last exchange stays live).
    (session, file path, {fact: its pruned chunk})."""
    settings = Settings.of(min_chunk_tokens=4, max_context_tokens=0, system_prompt="You are a helpful assistant.")
    info = client.model_info()
    framing = build_framing(lambda t: client.tokenize(t, parse_special=True), detect_template(info.chat_template))
    session = ChatSession(settings)
    session.connect(client, info, framing)
    path = new_conversation_path(tmp_path)
    session.open(ConversationStore.open(path))
    session.prompt.apply(settings.chat.system_prompt, session.prompt.pieces(settings.chat.system_prompt))
    conv = session.conv
    for text in [*FACTS.values(), "Thanks for listening today."]:
        pieces = client.tokenize(text)
        session.add_user_message([i for i, _ in pieces], [t for _, t in pieces])
        session.begin_answer()
        for token_id, piece in client.tokenize("Noted."):
            conv.writer.append(token_id, piece)
        session.finish_turn("stop", prune=False)
    session.prune(limit=30)
    by_text = {conv.chunk_text(c.id): c for c in conv.graveyard() if c.role == "user"}
    yield session, path, {name: by_text[text] for name, text in FACTS.items()}
    if session.store is not None:
        session.store.close()


def _recall_all(session, chunks):
    """Bring ``chunks`` back as a message's search would, saved."""
    back = session.conv.resurrect([c.id for c in chunks], with_anchors=False)
    session.store.save_chunks(session.conv, back)
    return list(chunks)


@pytest.mark.parametrize("fact", list(FACTS))
def test_the_message_keeps_the_paragraph_it_asks_about(told, fact):
    session, _, chunks = told
    conv = session.conv
    recalled = _recall_all(session, list(chunks.values()))
    total = sum(c.token_count for c in recalled)
    pieces = session.server.tokenize(QUESTIONS[fact])
    kept = session.recall.weigh(recalled, [i for i, _ in pieces], [t for _, t in pieces])
    assert kept[0].id == chunks[fact].id, f"{QUESTIONS[fact]!r} attends most to {FACTS[fact]!r}"
    assert sum(c.token_count for c in kept) <= total / 2 or len(kept) == 1, "at most half the recall stays"
    back = [c for c in recalled if c.id not in {k.id for k in kept}]
    assert back and session.recall.given_back == len(back)
    assert all(c.live for c in kept) and not any(c.live for c in back), "the rest went back to the graveyard"


def test_what_went_back_is_pruned_in_the_file_and_the_message_lists_what_it_kept(told):
    session, path, chunks = told
    recalled = _recall_all(session, list(chunks.values()))
    pieces = session.server.tokenize(QUESTIONS["cat"])
    ids, texts = [i for i, _ in pieces], [t for _, t in pieces]
    kept = session.recall.weigh(recalled, ids, texts)
    question = session.add_user_message(ids, texts, recalled=kept).turn_id
    session.begin_answer()
    request = session.backend.detokenize(session.generation_request()["input_ids"])
    went_back = [FACTS[name] for name, c in chunks.items() if c.id not in {k.id for k in kept}]
    assert FACTS["cat"] in request and went_back and not any(text in request for text in went_back), \
        "the request holds what was kept (its note too), and not what went back"
    session.store.close()
    session.store = None
    with ConversationStore.open(path, create=False) as store:
        conv = store.load(session.settings, session.framing)
        assert conv.recalls.of(question) == tuple(c.id for c in kept), "the most attended first, as the note lists it"
        live = {c.id for c in conv.live_chunks()}
        assert chunks["cat"].id in live
        assert [name for name, c in chunks.items() if c.id in live] == \
            [name for name, c in chunks.items() if c.id in {k.id for k in kept}]


def test_keeping_everything_asks_the_server_nothing(told):
    session, _, chunks = told
    session.use_settings(session.settings.replace(attention_keep_share=1.0))
    recalled = _recall_all(session, list(chunks.values()))
    pieces = session.server.tokenize(QUESTIONS["cat"])
    assert session.recall.reading(recalled, [i for i, _ in pieces], [t for _, t in pieces]) is None
    assert session.recall.weigh(recalled, [i for i, _ in pieces], [t for _, t in pieces]) == recalled
    assert all(c.live for c in recalled) and session.recall.given_back == 0


def test_a_server_that_does_not_answer_leaves_the_recall_whole(told, monkeypatch):
    session, _, chunks = told
    recalled = _recall_all(session, list(chunks.values()))

    def refuse(*args, **kwargs):
        raise httpx.ConnectError("connection refused")

    monkeypatch.setattr(session.backend, "prepare", refuse)
    pieces = session.server.tokenize(QUESTIONS["cat"])
    assert session.recall.weigh(recalled, [i for i, _ in pieces], [t for _, t in pieces]) == recalled
    assert all(c.live for c in recalled)


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


def test_the_least_attended_go_first_and_the_most_attended_always_stays():
    reading = attended.Reading(prefix=[0] * 8, queries=[1], chunk_of=np.array([-1, -1, 5, 5, 6, 6, 7, 7]),
                               recalled=(5, 6, 7))
    assert attended.ranked(reading, [0, 0, .1, .1, .3, .3, .1, .1]) == [6, 5, 7], "ties keep position order"
    assert attended.kept([6, 5, 7], {5: 10, 6: 10, 7: 10}, 0.5) == ([6], [5, 7])
    assert attended.kept([6, 5, 7], {5: 10, 6: 100, 7: 10}, 0.1) == ([6], [5, 7]), "the first stays"
    assert attended.kept([6, 5, 7], {5: 10, 6: 10, 7: 10}, 1.0) == ([6, 5, 7], [])
    with pytest.raises(ValueError):
        attended.ranked(reading, [0.5] * 3)


def test_a_long_message_is_weighed_by_its_end(told):
    session, _, chunks = told
    recalled = _recall_all(session, list(chunks.values()))
    paste = " ".join(["The quarterly report lists revenue, costs and the weather in Oslo."] * 20)
    pieces = session.server.tokenize(paste + "\n\nAfter all that: what is my cat called?")
    ids, texts = [i for i, _ in pieces], [t for _, t in pieces]
    reading = session.recall.reading(recalled, ids, texts)
    assert len(reading.queries) == attended.END_QUERIES < len(ids), "weighed by its end: the page is read once"
    assert len(reading.chunk_of) == len(reading.prefix)
    kept = session.recall.keep_attended(reading, session.recall.ask(reading))
    assert kept[0].id == chunks["cat"].id, "the question at its end still finds the cat"
