"""The same conversation gives the same search order and the same resurrection plan on
every CPU: scores that another machine's kernels move by ~1e-6 rank as they did.

Another CPU is played by seeded noise of +-1e-6 on each stored vector (float sums of
AVX2 and AVX-512 kernels differ in their last bits; ``docs/memory-benchmark.md``).  The
entries' cosines with the query are built exactly (``entry``): several are tied in exact
arithmetic, the case where the raw floats let the noise pick the order.
"""

from __future__ import annotations

import numpy as np
import pytest

from halo_weave.core import ties, token_resurrection
from halo_weave.semantic_index import EntryDraft, SemanticIndex
from halo_weave.settings import Settings
from halo_weave.store import ConversationStore
from test_semantic_index import embedder, new_conversation, say  # noqa: F401
from test_vector_search import Named

DIM = 384
NOISE = 1e-6
SEEDS = range(12)
#: Cosine of each entry with the query: ties of three and four, a cut inside the fours.
COSINES = [0.8, 0.6, 0.8, 0.5, 0.3, 0.5, 0.8, 0.6, 0.5, 0.2, 0.5, 0.3]
QUERY = np.eye(DIM, dtype=np.float32)[0]


def entry(cosine: float, axis: int) -> np.ndarray:
    """A unit vector whose cosine with :data:`QUERY` is exactly ``cosine``."""
    v = np.zeros(DIM, np.float32)
    v[0], v[axis] = cosine, np.sqrt(1 - cosine ** 2)
    return v


def vectors(seed: int | None) -> np.ndarray:
    """Every entry's vector; with a ``seed``, as another CPU might have made them."""
    clean = np.stack([entry(c, i + 1) for i, c in enumerate(COSINES)])
    if seed is None:
        return clean
    noisy = clean + np.random.default_rng(seed).uniform(-NOISE, NOISE, clean.shape).astype(np.float32)
    return noisy / np.linalg.norm(noisy, axis=1, keepdims=True)


def best_first(limit: int, floor: float = -1.0) -> list[int]:
    """Chunk ids by cosine, best first, a tie going to the lower id (older chunk)."""
    ranked = sorted((i for i, c in enumerate(COSINES) if c >= floor), key=lambda i: (-COSINES[i], i))
    return ranked[:limit]


@pytest.fixture
def index_of(tmp_path):
    """``index_of(seed, **settings)``: a fresh index file holding the entries."""
    stores = []

    def make(seed: int | None, **settings) -> SemanticIndex:
        store = ConversationStore.open(tmp_path / f"conv-{seed}-{len(stores)}.halo.db")
        stores.append(store)
        # No feedback search: its moved query would leave the grid's centres, where the
        # entries' cosines sit so that 1e-6 never reaches a step boundary.
        index = SemanticIndex(store.conn, Settings.of(**{"query_feedback": 0.0, **settings}), Named())
        index.store([EntryDraft(i, i, 1, "assistant", f"entry {i}", 10, [], f"s{i}:t{i}", v)
                     for i, v in enumerate(vectors(seed))])
        return index

    yield make
    for store in stores:
        store.close()


@pytest.mark.parametrize("seed", [None, *SEEDS])
def test_search_order_is_the_same_when_the_vectors_move_in_their_last_bits(index_of, seed):
    found = [m.chunk_id for m in index_of(seed).search_vector(QUERY, 7)]
    assert found == best_first(7)  # the cut falls inside the four tied at 0.5


@pytest.mark.parametrize("seed", [None, *SEEDS])
def test_min_similarity_keeps_every_match_tied_at_the_floor(index_of, seed):
    index = index_of(seed, min_similarity=0.5, hybrid_search=False)  # scores are the cosines
    found = [m.chunk_id for m in index.search_vector(QUERY, 20)]
    assert found == best_first(20, floor=0.5)


def test_the_recall_plan_is_the_same_when_the_vectors_move_in_their_last_bits(embedder, tmp_path):  # noqa: F811
    """Tied matches compete for a budget that holds only some of them: the same ones come
    back whichever CPU embedded them."""
    conv = new_conversation(embedder)
    for i in range(len(COSINES)):
        say(conv, embedder, "user" if i % 2 == 0 else "assistant",
            f"Paragraph number {i} of a long talk about nothing in particular, said once.")
    content = sorted(c.id for c in conv.chunks.values() if not c.framing)
    assert len(content) == len(COSINES)
    conv.prune_to_fit(1)
    plans = set()
    for seed in [None, *SEEDS]:
        with ConversationStore.open(tmp_path / f"plan-{seed}.halo.db") as store:
            index = SemanticIndex(store.conn, conv.settings, Named())
            drafts = index.prepare(conv, content)
            for draft, vector in zip(drafts, vectors(seed)):
                draft.vector = vector
            index.store(drafts)
            matches = index.search_vector(QUERY, len(COSINES))
            cost = token_resurrection.cost(conv, conv.chunks[content[0]], with_anchors=True)
            plan = index.plan(conv, matches, 4 * cost)
            plans.add(tuple(plan.chunk_ids))
    assert len(plans) == 1, f"the plan depends on the CPU: {plans}"


@pytest.mark.parametrize("kind", ["cosines", "brightness", "with NaN"])
def test_the_best_of_many_scores_rank_by_level_then_chunk_id(kind):
    """A long index's top k (the coarse stage keeps 1,562 of 100k) is the top k by
    (level, chunk id): ties at the cut go to the older chunk, as in a short list."""
    rng = np.random.default_rng(7)
    n, k = 50_000, 1_562
    if kind == "brightness":
        scores = rng.integers(-800, 10_001, n).astype(np.float64) * 1_000  # wide levels
    else:
        scores = np.round(rng.random(n), 3).astype(np.float32)  # many exact ties
    if kind == "with NaN":
        scores[rng.integers(0, n, 40)] = np.nan
    keys = rng.permutation(n)
    with np.errstate(invalid="ignore"):
        got = ties.best(scores, keys, k)
        on_grid = ties.levels(scores)
    want = sorted(range(n), key=lambda i: (-int(on_grid[i]), keys[i]))[:k]  # NaN: the lowest level
    assert got.tolist() == want
