"""Two-stage search and vector snapshots: real MiniLM vectors, real conversation files."""

from __future__ import annotations

import itertools
import sqlite3

import numpy as np
import pytest

from halo_weave.semantic_index import EntryDraft, SearchTuning, SemanticIndex
from halo_weave.settings import Settings
from halo_weave.store import ConversationStore
from test_semantic_index import embedder  # noqa: F401

#: Two stages at any size, an eighth of the rows reranked (at 100k it is one in 64).
TWO_STAGE = SearchTuning(two_stage_min=0, candidates=0, candidate_factor=4, candidate_share=8)
EXACT = SearchTuning(two_stage_min=10**12)
#: Two stages, the coarse one itself in two passes: 32 head axes keep a third of the rows.
SHORTLISTED = SearchTuning(two_stage_min=0, candidates=0, candidate_factor=2, candidate_share=8,
                           head_dim=32, head_share=3, head_factor=1)

SUBJECTS = ["my sister", "the new neighbour", "our football coach", "a retired pilot",
            "the bakery owner", "my grandfather", "a marine biologist", "the landlord"]
ACTIVITIES = ["started painting watercolour landscapes", "adopted a three-legged dog",
              "moved to a small island in Greece", "is training for a marathon in October",
              "opened a vegan restaurant downtown", "lost her passport at the airport",
              "builds wooden canoes in the garage", "teaches chess to refugee kids",
              "found an old map in the attic", "collects vintage vinyl records"]
FEELINGS = ["and feels happier than ever.", "although money is tight this year.",
            "after a long and painful divorce.", "because the doctor recommended it."]
QUESTIONS = ["Who adopted a dog?", "Which person moved abroad to an island?",
             "What sport is someone preparing for?", "Who lost travel documents?",
             "Tell me about the restaurant that opened.", "Who is into boats and woodwork?",
             "Does anyone teach board games to children?", "What was discovered in the attic?",
             "Who listens to old music records?", "Who paints pictures of nature?",
             "Is anybody going through a divorce?", "Who was told to do it by a doctor?"]


def corpus() -> list[str]:
    return [f"{s.capitalize()} {a} {f}"
            for s, a, f in itertools.product(SUBJECTS, ACTIVITIES, FEELINGS)]


class Named:
    """Name and dimension of the real model, for indexes that are handed vectors."""

    name, dim, available = "sentence-transformers/all-MiniLM-L6-v2", 384, True


@pytest.fixture(scope="module")
def vectors(embedder):  # noqa: F811
    texts = corpus()
    return texts, embedder.encode(texts, batch_size=64), embedder.encode(QUESTIONS)


def drafts(texts, vectors, first_id=0):
    return [EntryDraft(first_id + i, i // 2, i % 2, "user" if i % 3 == 0 else "assistant",
                       text, 20, [], f"s{i}:t{i}", vector)
            for i, (text, vector) in enumerate(zip(texts, vectors))]


@pytest.fixture
def store(tmp_path):
    store = ConversationStore.open(tmp_path / "conv.halo.db")
    yield store
    store.close()


@pytest.mark.parametrize("tuning", [TWO_STAGE, SHORTLISTED], ids=["coarse", "shortlisted"])
def test_two_stage_search_equals_exact_search(vectors, store, tuning):
    texts, entries, queries = vectors
    fast = SemanticIndex(store.conn, Settings(), Named(), tuning=tuning)
    fast.store(drafts(texts, entries))
    exact = SemanticIndex(store.conn, Settings(), Named(), tuning=EXACT)
    exact.load()
    assert fast._vectors.two_stage and not exact._vectors.two_stage
    for query in queries:
        want = [(m.chunk_id, round(m.score, 5)) for m in exact.search_vector(query, 20)]
        got = [(m.chunk_id, round(m.score, 5)) for m in fast.search_vector(query, 20)]
        assert got == want
    if tuning is SHORTLISTED:
        assert fast._vectors.shortlist(queries[0], 1.0, 20) is not None


def test_an_index_sharing_the_vectors_searches_them_its_own_way(vectors, store):
    texts, entries, queries = vectors
    fast = SemanticIndex(store.conn, Settings(), Named(), tuning=TWO_STAGE)
    fast.store(drafts(texts, entries))
    before = [[m.chunk_id for m in fast.search_vector(q, 20)] for q in queries]
    exact = SemanticIndex(store.conn, Settings(), Named(), tuning=EXACT)
    exact.load()
    twin = fast.sharing(exact=True)
    assert fast.two_stage and not twin.two_stage and twin.entry_count == fast.entry_count == len(texts)
    for query in queries:
        want = [(m.chunk_id, round(m.score, 5)) for m in exact.search_vector(query, 20)]
        assert [(m.chunk_id, round(m.score, 5)) for m in twin.search_vector(query, 20)] == want
    boosted = fast.sharing(settings=Settings.of(user_similarity_boost=3.0))
    assert all(m.role == "user" for m in boosted.search_vector(queries[0], 3))
    assert [[m.chunk_id for m in fast.search_vector(q, 20)] for q in queries] == before


def test_a_changed_user_boost_reaches_the_shortlist(vectors, store):
    texts, entries, queries = vectors
    fast = SemanticIndex(store.conn, Settings(), Named(), tuning=SHORTLISTED)
    fast.store(drafts(texts, entries))
    boosted = Settings.of(user_similarity_boost=3.0)
    exact = SemanticIndex(store.conn, boosted, Named(), tuning=EXACT)
    exact.load()
    fast.use_settings(boosted)
    for query in queries[:4]:
        want = [m.chunk_id for m in exact.search_vector(query, 10)]
        assert [m.chunk_id for m in fast.search_vector(query, 10)] == want
        assert all(m.role == "user" for m in fast.search_vector(query, 3))


def test_two_stage_hybrid_search_finds_a_rare_identifier(vectors, store, embedder):  # noqa: F811
    texts, entries, _ = vectors
    code = "The spare part for the canoe has the reference QZR-7741 on its box."
    index = SemanticIndex(store.conn, Settings.of(hybrid_search=True), embedder, tuning=TWO_STAGE)
    index.store(drafts(texts + [code], np.vstack([entries, embedder.encode([code])])))
    top = index.search("qzr 7741")[0]
    assert top.text == code and top.bm25 == pytest.approx(1.0)


def test_snapshot_load_equals_table_load_and_catches_up(vectors, store, tmp_path):
    texts, entries, queries = vectors
    tuning = SearchTuning(two_stage_min=0, snapshot_min=10)
    writer = SemanticIndex(store.conn, Settings(), Named(), tuning=tuning)
    writer.load()
    writer.store(drafts(texts, entries))  # enough new entries: the snapshot is written
    assert writer.snapshot_path.exists()
    # changes the snapshot has not seen, by paths that bypass the index
    store.conn.execute("DELETE FROM semantic_entries WHERE chunk_id IN (3, 4)")
    store.conn.execute("UPDATE semantic_entries SET model = 'other/model' WHERE chunk_id = 5")
    store.conn.execute("UPDATE semantic_entries SET reference_count = 7 WHERE chunk_id = 6")
    SemanticIndex(store.conn, Settings(), Named(), tuning=SearchTuning(snapshot_min=10**9)).store(
        drafts(["A late entry about a lighthouse keeper."], queries[:1], first_id=1000))

    def loaded(snapshot):
        index = SemanticIndex(sqlite3.connect(store.path), Settings(), Named(), tuning=tuning,
                              snapshot_path=snapshot)
        index.load()
        return index

    from_snapshot = loaded(None)
    from_table = loaded(tmp_path / "none.vectors")
    assert (from_snapshot.loaded_from, from_table.loaded_from) == ("snapshot", "table")
    assert from_snapshot.entry_count == from_table.entry_count == len(texts) - 3 + 1
    assert from_snapshot._stale == from_table._stale == {5}
    for query in queries:
        assert ([m.chunk_id for m in from_snapshot.search_vector(query, 20)]
                == [m.chunk_id for m in from_table.search_vector(query, 20)])


def test_a_snapshot_that_does_not_belong_is_ignored(vectors, store, tmp_path):
    texts, entries, queries = vectors
    tuning = SearchTuning(snapshot_min=10)
    index = SemanticIndex(store.conn, Settings(), Named(), tuning=tuning)
    index.store(drafts(texts, entries))
    index.save_snapshot()
    good = index.snapshot_path.read_bytes()

    other = ConversationStore.open(tmp_path / "other.halo.db")  # another file, fewer entries
    SemanticIndex(other.conn, Settings(), Named(), tuning=EXACT).store(drafts(texts[:5], entries[:5]))
    foreign = SemanticIndex(other.conn, Settings(), Named(), snapshot_path=index.snapshot_path)
    assert foreign.load() == 5 and foreign.loaded_from == "table"  # uid differs
    other.close()

    again = SemanticIndex(store.conn, Settings(), Named())
    assert again.load() == len(texts) and again.loaded_from == "snapshot"
    for damaged in (good[: len(good) // 2], b"not a snapshot"):
        index.snapshot_path.write_bytes(damaged)
        assert again.load() == len(texts) and again.loaded_from == "table"
