"""What a message keeps of its recall: the paragraphs that came back are ranked by their
relevance to the message (the search's order, their own text's cosine, the message's
words they hold, fused), and the least relevant go back to the graveyard.  The real
server with the bundled model on 127.0.0.1 tokenizes, the real MiniLM embedder ranks,
in a real SQLite file."""

from __future__ import annotations

import numpy as np
import pytest

from halo_weave.core.chat_template import build_framing, detect_template
from halo_weave.kobold_client import KoboldClient
from halo_weave.memory import relevance
from halo_weave.memory.embedder import Embedder, EmbedderUnavailable
from halo_weave.semantic_index import SemanticIndex
from halo_weave.session import ChatSession
from halo_weave.settings import Settings
from halo_weave.store import ConversationStore, new_conversation_path

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


# ---------------------------------------------------------------- the order alone


def test_fusion_ranks_what_every_view_puts_high_first_and_ties_keep_the_plan_order():
    assert relevance.fused([[1, 2, 3], [3, 2, 1], [2, 3, 1]]) == [2, 3, 1]
    assert relevance.fused([[1, 2], [2, 1]]) == [1, 2], "a tie keeps the first order's order"
    assert relevance.by_score([7, 8, 9], [0.5, 0.50000001, 0.9]) == [9, 7, 8], "scores a CPU's last bits apart tie"


def test_the_paragraph_holding_the_message_words_and_meaning_comes_first():
    texts = {1: "We talked about the weather all afternoon.", 2: "My cat is called Mochi.", 3: "Boxes everywhere."}
    message = "What is my cat called?"
    vectors = np.eye(4, dtype=np.float32)
    vectors[2] = vectors[0]  # the cat's paragraph means what the message asks
    assert relevance.ranked([1, 2, 3], texts, message, vectors)[0] == 2
    assert relevance.words("What is my cat called, Mochi?") == {"cat", "call", "mochi"}
    with pytest.raises(ValueError):
        relevance.ranked([1, 2, 3], texts, message, vectors[:3])


def test_the_least_relevant_go_first_and_the_most_relevant_always_stays():
    assert relevance.kept([6, 5, 7], {5: 10, 6: 10, 7: 10}, 0.5) == ([6], [5, 7])
    assert relevance.kept([6, 5, 7], {5: 10, 6: 100, 7: 10}, 0.1) == ([6], [5, 7]), "the first stays"
    assert relevance.kept([6, 5, 7], {5: 10, 6: 10, 7: 10}, 1.0) == ([6, 5, 7], [])


def test_a_long_message_is_ranked_against_its_end():
    paste = " ".join(["The quarterly report lists revenue, costs and the weather in Oslo."] * 20)
    focus = relevance.focus(paste + "\n\nAfter all that: what is my cat called?")
    assert focus.endswith("what is my cat called?") and len(focus.split()) == relevance.FOCUS_WORDS
    assert relevance.focus("What is my cat called?") == "What is my cat called?"


# ---------------------------------------------------------------- in a chat


@pytest.fixture(scope="module")
def client(server):
    with KoboldClient(server.url) as c:
        yield c


@pytest.fixture(scope="module")
def embedder():
    emb = Embedder()
    emb.load()
    return emb


class _Counting:
    """The real embedder, counting the texts it is asked to embed."""

    def __init__(self, embedder) -> None:
        self.inner, self.name, self.texts = embedder, embedder.name, 0

    def encode(self, texts):
        self.texts += len(texts)
        return self.inner.encode(texts)


def test_ranking_the_same_recall_again_embeds_only_the_message(embedder):
    """A read-ahead ranks the draft's recall while the user types; at Enter the same
    paragraphs are ranked again for the message: only the message is embedded then, and
    the order is the one a fresh embedding gives."""
    counting, known = _Counting(embedder), relevance.ParagraphVectors()
    texts = dict(enumerate(FACTS.values()))
    ids = list(texts)
    draft, message = "What is my cat", QUESTIONS["cat"]
    relevance.rank_with(counting, ids, texts, draft, known)
    assert counting.texts == 1 + len(ids)
    order = relevance.rank_with(counting, ids, texts, message, known)
    assert counting.texts == 1 + len(ids) + 1, "the paragraphs came from the first ranking"
    assert order == relevance.rank_with(embedder, ids, texts, message)
    assert order[0] == 0, "the cat paragraph first"
    texts[3] = "I bought a red bicycle last week."  # an edited paragraph is embedded again
    relevance.rank_with(counting, ids, texts, message, known)
    assert counting.texts == 1 + len(ids) + 1 + 2


@pytest.fixture
def told(client, embedder, tmp_path):
    """Four facts told and answered, then pruned (the last exchange stays live), the
    conversation indexed.  (session, file path, {fact: its pruned chunk})."""
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
            conv.append_token(token_id, piece)
        session.finish_turn("stop", prune=False)
    session.prune(limit=30)
    index = SemanticIndex(session.store.conn, settings, embedder, lock=session.store.lock)
    index.index_pending(conv)
    session.recall.use_index(index)
    by_text = {conv.chunk_text(c.id): c for c in conv.graveyard() if c.role == "user"}
    yield session, path, {name: by_text[text] for name, text in FACTS.items()}
    if session.store is not None:
        session.store.close()


def _recall_all(session, chunks, message):
    """Bring ``chunks`` back as the search for ``message`` would, saved: in the search's
    order (the plan's), the best match first."""
    found = [m.chunk_id for m in session.recall.index.search(message)]
    chunks = sorted(chunks, key=lambda c: found.index(c.id) if c.id in found else len(found))
    back = session.conv.resurrect([c.id for c in chunks], with_anchors=False)
    session.store.save_chunks(session.conv, back)
    return chunks


@pytest.mark.slow
@pytest.mark.parametrize("fact", list(FACTS))
def test_the_message_keeps_the_paragraph_it_asks_about(told, fact):
    session, _, chunks = told
    recalled = _recall_all(session, list(chunks.values()), QUESTIONS[fact])
    total = sum(c.token_count for c in recalled)
    kept = session.recall.keep_relevant(recalled, QUESTIONS[fact])
    assert kept[0].id == chunks[fact].id, f"{QUESTIONS[fact]!r} ranks {FACTS[fact]!r} first"
    assert sum(c.token_count for c in kept) <= total / 2 or len(kept) == 1, "at most half the recall stays"
    back = [c for c in recalled if c.id not in {k.id for k in kept}]
    assert back and session.recall.given_back == len(back)
    assert all(c.live for c in kept) and not any(c.live for c in back), "the rest went back to the graveyard"


@pytest.mark.slow
def test_what_went_back_is_pruned_in_the_file_and_the_message_lists_what_it_kept(told):
    session, path, chunks = told
    recalled = _recall_all(session, list(chunks.values()), QUESTIONS["cat"])
    pieces = session.server.tokenize(QUESTIONS["cat"])
    ids, texts = [i for i, _ in pieces], [t for _, t in pieces]
    kept = session.recall.keep_relevant(recalled, QUESTIONS["cat"])
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
        assert conv.recalls.of(question) == tuple(c.id for c in kept), "the most relevant first, as the note lists it"
        live = {c.id for c in conv.live_chunks()}
        assert [name for name, c in chunks.items() if c.id in live] == \
            [name for name, c in chunks.items() if c.id in {k.id for k in kept}]


@pytest.mark.slow
def test_keeping_everything_ranks_nothing(told):
    session, _, chunks = told
    session.use_settings(session.settings.replace(recall_keep_share=1.0))
    recalled = _recall_all(session, list(chunks.values()), QUESTIONS["cat"])
    assert not session.recall.keeps_part(recalled)
    assert session.recall.keep_relevant(recalled, QUESTIONS["cat"]) == recalled
    assert all(c.live for c in recalled) and session.recall.given_back == 0


@pytest.mark.slow
def test_a_pinned_paragraph_stays_whatever_its_rank(told):
    session, _, chunks = told
    recalled = _recall_all(session, list(chunks.values()), QUESTIONS["cat"])
    session.conv.pin(chunks["bicycle"].id)
    kept = session.recall.keep_relevant(recalled, QUESTIONS["cat"])
    assert kept[0].id == chunks["cat"].id and chunks["bicycle"].id in {c.id for c in kept}
    assert chunks["bicycle"].live


@pytest.mark.slow
def test_an_embedder_that_fails_leaves_the_recall_whole(told, monkeypatch):
    session, _, chunks = told
    recalled = _recall_all(session, list(chunks.values()), QUESTIONS["cat"])

    def fail(*args, **kwargs):
        raise EmbedderUnavailable("the embedder is gone")

    monkeypatch.setattr(session.recall.index.embedder, "encode", fail)
    assert session.recall.keep_relevant(recalled, QUESTIONS["cat"]) == recalled
    assert all(c.live for c in recalled) and session.recall.given_back == 0
