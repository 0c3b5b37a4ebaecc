"""The compiled first pass of a long index's search: the same results as exact search,
with or without a C compiler, and the same after the file is closed and reopened."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from halo_weave.memory import scan
from halo_weave.semantic_index import SemanticIndex
from halo_weave.settings import Settings
from halo_weave.store import ConversationStore
from test_semantic_index import embedder  # noqa: F401
from test_vector_search import EXACT, SHORTLISTED, Named, drafts, vectors  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(params=["compiled", "numpy"])
def first_pass(request, monkeypatch):
    """Each test runs with the compiled scan and with the numpy path a machine without a
    C compiler takes (``HALO_WEAVE_C_SCAN=0``)."""
    if request.param == "numpy":
        monkeypatch.setenv(scan.ENV_SWITCH, "0")
    elif scan.kernel() is None:
        pytest.skip("no C compiler here")
    return request.param


def ranked(index: SemanticIndex, queries, k: int = 20) -> list[list[tuple[int, float]]]:
    return [[(m.chunk_id, round(m.score, 4)) for m in index.search_vector(q, k)] for q in queries]


def test_a_shortlisted_search_finds_what_exact_search_finds(vectors, tmp_path, first_pass):  # noqa: F811
    texts, entries, queries = vectors
    with ConversationStore.open(tmp_path / "conv.halo.db") as store:
        fast = SemanticIndex(store.conn, Settings(), Named(), tuning=SHORTLISTED)
        fast.store(drafts(texts, entries))
        exact = SemanticIndex(store.conn, Settings(), Named(), tuning=EXACT)
        exact.load()
        assert fast.two_stage and fast._vectors.shortlist(queries[0], 1.0, 20) is not None
        assert ranked(fast, queries) == ranked(exact, queries)
        # the relevance-feedback search off: the first ranking alone agrees too
        plain = Settings.of(query_feedback=0.0)
        assert ranked(fast.sharing(settings=plain), queries) == ranked(exact.sharing(settings=plain), queries)


def test_search_results_are_the_same_after_reopening(vectors, tmp_path, first_pass):  # noqa: F811
    texts, entries, queries = vectors
    path = tmp_path / "conv.halo.db"
    tuning = dataclasses.replace(SHORTLISTED, snapshot_min=10)
    with ConversationStore.open(path) as store:
        index = SemanticIndex(store.conn, Settings(), Named(), tuning=tuning)
        index.store(drafts(texts, entries)[:200])  # the axes are fitted on these
        index.store(drafts(texts, entries)[200:])  # coded on the same axes
        before = ranked(index, queries)
        assert index.save_snapshot()
    for reads in ("snapshot", "table"):
        with ConversationStore.open(path) as store:
            snapshot = None if reads == "snapshot" else tmp_path / "none.vectors"
            again = SemanticIndex(store.conn, Settings(), Named(), tuning=tuning, snapshot_path=snapshot)
            again.load()
            assert again.loaded_from == reads and again.two_stage
            assert ranked(again, queries) == before


def test_the_compiled_scan_sums_exactly():
    kernel = scan.kernel()
    if kernel is None:
        pytest.skip("no C compiler here")
    rng = np.random.default_rng(3)
    for width in (64, 32, 24):
        codes = rng.integers(-127, 128, (1000, width), dtype=np.int8)
        query = rng.integers(-32767, 32768, width, dtype=np.int16)
        want = codes.astype(np.int64) @ query.astype(np.int64)
        assert np.array_equal(kernel.scan(codes, query), want)
        rows = np.sort(rng.choice(1000, 97, replace=False))
        assert np.array_equal(kernel.scan(codes, query, rows), want[rows])
        threshold = int(np.median(want))
        assert np.array_equal(kernel.at_least(want.astype(np.int32), threshold), np.flatnonzero(want >= threshold))
    with pytest.raises(IndexError):
        kernel.scan(codes, query, np.array([1000]))
    with pytest.raises(ValueError):
        kernel.scan(codes.astype(np.int16), query)


def test_without_a_working_compiler_the_search_still_runs(tmp_path):
    """A machine whose compiler fails: one warning, and a long index is searched with
    numpy (a real process: the library is loaded once per process)."""
    code = textwrap.dedent("""
        import logging, numpy as np
        logging.basicConfig(level=logging.WARNING)
        from halo_weave.memory import scan
        from halo_weave.memory.vector_matrix import SearchTuning, VectorMatrix
        assert scan.kernel() is None
        rng = np.random.default_rng(0)
        rows = rng.standard_normal((400, 384)).astype(np.float32)
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        vm = VectorMatrix(384, tuning=SearchTuning(two_stage_min=0, candidates=0, candidate_factor=2,
                                                   candidate_share=8, head_share=3, head_factor=1))
        vm.put_many(list(range(400)), [False] * 400, rows, ["s"] * 400)
        assert vm.two_stage and vm.shortlist(rows[7], 1.0, 5) is not None
        print("found", 7 in vm.candidates(rows[7], 1.0, 5, vm.shortlist(rows[7], 1.0, 5)))
    """)
    env = dict(os.environ, CC="false", HALO_WEAVE_CACHE=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    env.pop(scan.ENV_SWITCH, None)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "found True"
    assert "no compiled first pass" in done.stderr and "false failed" in done.stderr


@pytest.mark.parametrize("shape", ["spread", "ties", "top rows the sample skips", "constant"])
def test_the_first_pass_keeps_every_row_at_or_above_the_cut_however_scores_fall(shape):
    """The cut is estimated on a sample first; the rows kept must be exactly those at or
    above the keep-th best score, whatever the scores look like (a search must not
    depend on which rows a sample happened to read)."""
    from halo_weave.memory.vector_matrix import SAMPLE_STRIDE, top_rows

    rng = np.random.default_rng(5)
    n, keep = 100_000, 6_248
    if shape == "spread":
        scores = rng.integers(-2**24, 2**24, n).astype(np.int32)
    elif shape == "ties":
        scores = rng.integers(0, 7, n).astype(np.int32)
    elif shape == "constant":
        scores = np.full(n, 3, np.int32)
    else:  # every sampled row low, the best rows all between the samples
        scores = rng.integers(0, 1000, n).astype(np.int32)
        between = np.flatnonzero(np.arange(n) % SAMPLE_STRIDE)
        scores[rng.choice(between, 2 * keep, replace=False)] += 10_000
    expected = np.flatnonzero(scores >= np.partition(scores, n - keep)[n - keep])
    kernel = scan.kernel()
    ways = [lambda cut: np.flatnonzero(scores >= cut)]
    if kernel is not None:
        ways.append(lambda cut: kernel.at_least(scores, cut))
    for at_least in ways:
        assert np.array_equal(top_rows(scores, keep, at_least), expected)
        assert np.array_equal(top_rows(scores.astype(np.float32), keep, lambda cut: np.flatnonzero(scores >= cut)),
                              expected)
