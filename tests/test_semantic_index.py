"""The semantic index with the real MiniLM and a real SQLite file.

Also home of the helpers the resurrection tests share (imported from there).
"""

from __future__ import annotations

import sqlite3

import pytest

from halo_weave.core.chat_template import build_framing
from halo_weave.conversation import Conversation
from halo_weave.memory.embedder import Embedder, EmbedderUnavailable
from halo_weave.semantic_index import SemanticIndex
from halo_weave.settings import Settings

pytestmark = pytest.mark.slow

SCHEMA = """
CREATE TABLE IF NOT EXISTS semantic_entries (chunk_id INTEGER PRIMARY KEY, turn_id INTEGER NOT NULL,
    chunk_index INTEGER NOT NULL, role TEXT NOT NULL, text TEXT NOT NULL,
    token_count INTEGER NOT NULL, context_hash TEXT NOT NULL, embedding BLOB, model TEXT,
    dim INTEGER, reference_count INTEGER NOT NULL DEFAULT 0, updated_at REAL NOT NULL);
CREATE VIRTUAL TABLE IF NOT EXISTS semantic_fts USING fts5(text, content='semantic_entries',
    content_rowid='chunk_id');
CREATE TRIGGER IF NOT EXISTS semantic_entries_ai AFTER INSERT ON semantic_entries BEGIN
    INSERT INTO semantic_fts(rowid, text) VALUES (new.chunk_id, new.text); END;
CREATE TRIGGER IF NOT EXISTS semantic_entries_ad AFTER DELETE ON semantic_entries BEGIN
    INSERT INTO semantic_fts(semantic_fts, rowid, text) VALUES ('delete', old.chunk_id, old.text); END;
CREATE TRIGGER IF NOT EXISTS semantic_entries_au AFTER UPDATE ON semantic_entries BEGIN
    INSERT INTO semantic_fts(semantic_fts, rowid, text) VALUES ('delete', old.chunk_id, old.text);
    INSERT INTO semantic_fts(rowid, text) VALUES (new.chunk_id, new.text); END;
"""


def open_db(path) -> sqlite3.Connection:
    """A conversation file with the semantic tables, opened the way the store opens it."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(SCHEMA)
    return conn


def tokenize(embedder: Embedder, text: str) -> tuple[list[int], list[str]]:
    """Real word-piece ids, with token texts that join back to ``text`` exactly."""
    return embedder.pieces(text)


def new_conversation(embedder: Embedder, **settings) -> Conversation:
    """A conversation whose index returns and plans every match (no floors, no cap): these
    tests are about search, ranking and resurrection themselves; what the floors leave out
    is tested with the app's own settings (test_recall_query.py)."""
    opts = dict(min_chunk_tokens=16, max_context_tokens=0, min_similarity=0.0,
                recall_relative_floor=0.0, recall_max_chunks=0)
    opts.update(settings)
    framing = build_framing(lambda t: list(zip(*tokenize(embedder, t))))
    return Conversation(Settings.of(**opts), framing)


def say(conv: Conversation, embedder: Embedder, role: str, *paragraphs: str):
    """Add a whole turn made of ``paragraphs`` (one chunk each when long enough)."""
    return conv.add_turn(role, *tokenize(embedder, "\n\n".join(paragraphs) + "\n\n"))


def index_all_pruned(store, conv: Conversation, embedder: Embedder) -> SemanticIndex:
    """Prune every chunk of ``conv`` into ``store`` and index it all: a search that finds
    something must bring it back."""
    store.save_chunks(conv, conv.prune_to_fit(1))
    index = SemanticIndex(store.conn, conv.settings, embedder, lock=store.lock)
    index.load()
    index.index_pending(conv)
    return index


def with_settings(index: SemanticIndex, **changes) -> SemanticIndex:
    """The same index read with other settings."""
    other = SemanticIndex(index.conn, index.settings.replace(**changes), index.embedder, lock=index._lock)
    other.load()
    return other


def chunk_with(conv: Conversation, phrase: str):
    """The content chunk whose text contains ``phrase``."""
    hits = [c for c in conv.chunks.values() if not c.framing and phrase in conv.chunk_text(c.id)]
    assert len(hits) == 1, f"{phrase!r} is in {len(hits)} chunks"
    return hits[0]


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    emb = Embedder()
    emb.load()
    return emb


GARDEN = [
    ("user", "I want to grow tomatoes on my balcony this summer. What do I need to know first?"),
    ("assistant",
     "Tomatoes love sun, so a balcony that gets at least six hours of direct light is ideal for them.",
     "Pick a large pot of at least twenty litres with drainage holes, and fill it with a rich potting "
     "mix rather than garden soil, which compacts in containers.",
     "Water deeply every morning during hot weeks, and feed with a tomato fertiliser once the first "
     "flowers appear so the fruit sets well."),
    ("user", "Thanks! Separately, can you explain how a bicycle derailleur shifts gears?"),
    ("assistant",
     "A derailleur moves the chain sideways between sprockets of different sizes on the rear wheel.",
     "When you click the shifter, a cable pulls a spring-loaded cage, which guides the chain onto the "
     "next cog while the pedals keep turning forward."),
]


@pytest.fixture()
def garden(embedder, tmp_path):
    """Two exchanges about tomatoes and bicycles, indexed into a fresh file."""
    conv = new_conversation(embedder)
    for role, *paragraphs in GARDEN:
        say(conv, embedder, role, *paragraphs)
    conn = open_db(tmp_path / "conv.db")
    index = SemanticIndex(conn, conv.settings, embedder)
    index.load()
    index.index_pending(conv)
    return conv, conn, index


def count_rows(conn) -> int:
    return conn.execute("SELECT COUNT(*) FROM semantic_entries").fetchone()[0]


def content_ids(conv) -> list[int]:
    return sorted(c.id for c in conv.chunks.values() if not c.framing)


# ---------------------------------------------------------------------- indexing
def test_every_chunk_is_findable_by_meaning(garden, embedder):
    conv, conn, index = garden
    assert index.entry_count == len(content_ids(conv)) == count_rows(conn)
    answers = [m for m in index.search("How often should I water my tomato plants?")
               if m.role == "assistant"]
    assert "Water deeply every morning" in answers[0].text
    top = index.search("how do bike gears change")[0]
    assert top.turn_id in (2, 3)


def test_indexing_twice_never_duplicates(garden):
    conv, conn, index = garden
    rows = count_rows(conn)
    assert index.pending(conv) == []
    assert index.index_pending(conv) == 0  # nothing re-embedded
    assert index.index_chunks(conv, content_ids(conv)) == len(content_ids(conv))  # forced
    assert count_rows(conn) == rows == index.entry_count
    hits = [m.chunk_id for m in index.search("tomato fertiliser flowers", limit=50)]
    assert len(hits) == len(set(hits))


def test_reopen_and_search_after_restart(garden, embedder, tmp_path):
    conv, conn, _ = garden
    conn.close()
    again = SemanticIndex(open_db(tmp_path / "conv.db"), conv.settings, embedder)
    assert again.load() == len(content_ids(conv))
    assert again.pending(conv) == []  # nothing to re-embed on restart
    answers = [m for m in again.search("watering tomatoes every morning") if m.role == "assistant"]
    assert "Water deeply every morning" in answers[0].text


def test_another_models_vectors_are_reindexed_never_mixed(garden, embedder, tmp_path):
    conv, conn, _ = garden
    conn.execute("UPDATE semantic_entries SET model = 'other/model', dim = 768, "
                 "embedding = zeroblob(3072) WHERE turn_id >= 2")
    index = SemanticIndex(conn, conv.settings, embedder)
    index.load()
    stale = sorted(c.id for c in conv.chunks.values() if not c.framing and c.turn_id >= 2)
    assert index.entry_count == len(content_ids(conv)) - len(stale)
    assert index.search("bicycle derailleur chain")[0].turn_id < 2  # stale vectors unused
    assert index.pending(conv) == stale
    assert index.index_pending(conv) == len(stale)
    models = conn.execute("SELECT DISTINCT model, dim FROM semantic_entries").fetchall()
    assert models == [(embedder.name, 384)]
    assert index.search("bicycle derailleur chain")[0].turn_id >= 2


def test_crash_mid_indexing_keeps_committed_batches(embedder, tmp_path):
    conv = new_conversation(embedder)
    for role, *paragraphs in GARDEN:
        say(conv, embedder, role, *paragraphs)
    conn = open_db(tmp_path / "conv.db")
    index = SemanticIndex(conn, conv.settings, embedder)

    def crash(done, total):
        if done >= 2:
            raise KeyboardInterrupt("killed")

    with pytest.raises(KeyboardInterrupt):
        index.index_chunks(conv, index.pending(conv), batch_size=2, progress=crash)
    survivor = SemanticIndex(open_db(tmp_path / "conv.db"), conv.settings, embedder)
    assert survivor.load() == 2
    assert len(survivor.pending(conv)) == len(content_ids(conv)) - 2  # only the rest


def test_merged_chunk_is_reembedded_and_absorbed_entry_removed(garden, embedder):
    conv, conn, index = garden
    pot = chunk_with(conv, "Pick a large pot")
    water = chunk_with(conv, "Water deeply")
    kept, absorbed = conv.merge_with_next(pot.id)
    assert index.pending(conv) == [kept.id]
    index.index_pending(conv)
    assert conn.execute("SELECT COUNT(*) FROM semantic_entries WHERE chunk_id = ?",
                        (water.id,)).fetchone()[0] == 0
    top = [m for m in index.search("watering tomatoes every morning") if m.role == "assistant"][0]
    assert top.chunk_id == kept.id and "Water deeply" in top.text
    assert count_rows(conn) == len(content_ids(conv)) == index.entry_count


def test_user_chunk_is_reembedded_once_its_answer_arrives(embedder, tmp_path):
    conv = new_conversation(embedder)
    say(conv, embedder, "user", "Quick question about something I saw yesterday, it puzzled me.")
    question = next(c for c in conv.chunks.values() if not c.framing)
    index = SemanticIndex(open_db(tmp_path / "conv.db"), conv.settings, embedder)
    index.index_pending(conv)
    query = "octopus camouflage skin colour"

    def similarity():
        return next(m.similarity for m in index.search(query, limit=10) if m.chunk_id == question.id)

    before = similarity()
    say(conv, embedder, "assistant",
        "An octopus changes the colour of its skin with chromatophores to camouflage itself.")
    assert question.id in index.pending(conv)
    index.index_pending(conv)
    assert index.pending(conv) == []
    assert similarity() > before + 0.2  # the question is now findable by its answer


def test_open_turn_waits_until_complete(embedder, tmp_path):
    conv = new_conversation(embedder)
    say(conv, embedder, "user", "Tell me about volcanoes and how they erupt, in simple words.")
    conv.begin_turn("assistant")
    for token_id, text in zip(*tokenize(embedder, "Volcanoes erupt when magma rises")):
        conv.append_token(token_id, text)
    index = SemanticIndex(open_db(tmp_path / "conv.db"), conv.settings, embedder)
    index.index_pending(conv)
    assert index.entry_count == 1  # the streaming answer is not embedded half-written
    conv.end_turn()
    assert len(index.pending(conv)) == 2  # the answer, and the question with its answer


# ---------------------------------------------------------------------- search
def test_user_matches_get_the_similarity_boost(garden):
    conv, _, index = garden
    index.settings = conv.settings.replace(hybrid_search=False)
    conv.use_settings(index.settings)
    for match in index.search("tomatoes on a balcony"):
        boost = conv.settings.search.user_similarity_boost if match.role == "user" else 1.0
        assert match.score == pytest.approx(match.similarity * boost, abs=1e-5)
        assert match.bm25 is None  # vector-only search


def test_min_similarity_drops_weak_matches(garden):
    conv, conn, _ = garden
    strict = SemanticIndex(conn, conv.settings.replace(min_similarity=0.45), garden[2].embedder)
    strict.load()
    matches = strict.search("derailleur chain sprockets")
    assert matches and all(m.score >= 0.45 for m in matches)
    assert all(m.turn_id >= 2 for m in matches)


def test_hybrid_search_finds_rare_identifiers(garden, embedder):
    conv, conn, _ = garden
    say(conv, embedder, "user",
        "The spare part I ordered for the bike has the reference QZR-7741 on the box, is it right?")
    say(conv, embedder, "assistant",
        "I cannot check stock numbers, but the shop that sold it can confirm the part fits.")
    plain = SemanticIndex(conn, conv.settings.replace(hybrid_search=False), embedder)
    plain.load()
    plain.index_pending(conv)
    code = chunk_with(conv, "QZR-7741")
    hybrid = SemanticIndex(conn, conv.settings.replace(hybrid_search=True), embedder)
    hybrid.load()
    query = "qzr 7741"
    assert hybrid.search(query)[0].chunk_id == code.id
    top = hybrid.search(query)[0]
    assert top.bm25 == pytest.approx(1.0) and top.score > plain.search(query)[0].score - 1
    plain_rank = [m.chunk_id for m in plain.search(query)].index(code.id)
    hybrid_scores = {m.chunk_id: m.score for m in hybrid.search(query)}
    plain_scores = {m.chunk_id: m.score for m in plain.search(query)}
    gap_plain = plain_scores[code.id] - max(v for k, v in plain_scores.items() if k != code.id)
    gap_hybrid = hybrid_scores[code.id] - max(v for k, v in hybrid_scores.items() if k != code.id)
    assert gap_hybrid > gap_plain  # BM25 pulls the exact identifier ahead
    assert plain_rank >= 0


# ---------------------------------------------------------------------- degradation
def test_unavailable_embedder_degrades_to_no_search(tmp_path):
    folder = tmp_path / "not-a-model"
    folder.mkdir()
    (folder / "notes.txt").write_text("nothing here")
    broken = Embedder(folder)
    with pytest.raises(EmbedderUnavailable, match="not-a-model"):
        broken.load()
    broken.load()  # reported once: no second error
    assert not broken.available
    conv = Conversation(Settings.of(max_context_tokens=0))
    conv.add_turn("user", [1, 2, 3], ["Hello", " there", "\n\n"])
    index = SemanticIndex(open_db(tmp_path / "conv.db"), conv.settings, broken)
    index.load()
    assert not index.available
    assert index.search("hello") == []
    assert index.index_pending(conv) == 0
    result = index.recall_for(conv, "hello", 3, 2048, 200)
    assert result.resurrected == [] and result.reason
    assert conv.live_token_count() == 3  # chat goes on untouched


def test_pending_after_a_reopen_reads_only_the_columns(embedder, tmp_path):
    """Reopening a long conversation: the check for chunks to (re-)embed makes no object of
    the pruned history (the UI thread runs it), and after a change it finds exactly the
    chunks whose embedding context changed, as :func:`context_parts` defines them."""
    import random

    from conversation_writer import FRAMING, add_user, message, settings
    from conversation_writer import new_conversation as scripted
    from conversation_writer import tokenize as tokenize_scripted
    from halo_weave.memory.turn_pair import context_parts, signature_hash
    from halo_weave.store import ConversationStore, new_conversation_path
    from test_store import chat

    path = new_conversation_path(tmp_path)
    with ConversationStore.open(path) as store:
        conv = scripted()
        chat(conv, store, random.Random(11), exchanges=6, max_tokens=300)
        index = SemanticIndex(store.conn, conv.settings, embedder, lock=store.lock)
        index.load()
        index.index_pending(conv)
    with ConversationStore.open(path, create=False) as store:
        conv = store.load(settings(), FRAMING)
        index = SemanticIndex(store.conn, conv.settings, embedder, lock=store.lock)
        index.load()
        made = conv.chunks.materialised
        assert len(conv.graveyard()) > 5, "the reopened conversation has a pruned history"
        assert index.pending(conv) == [] and index.pending(conv) == []
        assert conv.chunks.materialised == made, "no pruned chunk was made an object"

        # A new exchange, and its answer's opening merged with its next paragraph: the new
        # chunks and every chunk embedded with the merged opening are due.
        add_user(conv, message(random.Random(5), 2))
        answer = conv.add_turn("assistant", *zip(*tokenize_scripted(message(random.Random(6), 3))))
        first = conv.content_chunks(answer.turn_id)[0]
        conv.merge_with_next(first.id)
        stored = index._vectors.structure_of()
        limit = conv.settings.search.embedding_max_tokens
        expected = sorted(c.id for c in conv.chunks.values() if not c.framing
                          and stored.get(c.id) != signature_hash(context_parts(conv, c), limit))
        assert first.id in expected and index.pending(conv) == expected


def test_an_index_made_while_its_file_closes_waits_and_fails_cleanly(embedder, tmp_path):
    """The window loads a conversation's index on a worker thread; opening another
    conversation closes the first file meanwhile. The index reads the file only under
    the store's lock, so it waits for the close and then fails with a Python error,
    never reading a connection as it closes (that crashed SQLite, and the app)."""
    import threading

    from halo_weave.store import ConversationStore

    store = ConversationStore.open(tmp_path / "a.sqlite")
    outcome: list = []

    def make() -> None:
        try:
            outcome.append(SemanticIndex(store.conn, Settings(), embedder, lock=store.lock))
        except Exception as exc:  # noqa: BLE001 - the outcome is what the test checks
            outcome.append(exc)

    with store.lock:  # the window closes the file while the worker starts
        worker = threading.Thread(target=make)
        worker.start()
        worker.join(0.5)
        assert worker.is_alive() and not outcome, "the index waits for the store's lock"
        store.close()
    worker.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], sqlite3.ProgrammingError)
    assert "closed" in str(outcome[0])
