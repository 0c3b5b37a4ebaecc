"""How search results are ranked: cosine over the vectors (user entries boosted),
blended with BM25 over the chunk text when hybrid search is on.  Qt-free, no SQL (the
caller passes BM25 scores and a term counter, :mod:`halo_weave.storage.index_tables`).
"""

from __future__ import annotations

import re
from typing import Callable

import numpy as np

from ..core import ties
from ..settings import Search
from .search_pass import SearchPass
from .vector_matrix import VectorMatrix

#: Hybrid search uses only terms found in at most this share of the entries, or in at
#: most RARE_TERM_MIN of them (see distinctive_terms).
RARE_TERM_SHARE = 0.02
RARE_TERM_MIN = 1000
#: A term is never too common for relevance while it is in at most this many entries
#: (a young chat: a handful of entries must not make every word "common").
COMMON_TERM_MIN = 10

STOPWORDS = frozenset(
    "a an and are as at be but by did do does for from had has have how i in is it its me "
    "my of on or our so that the their them then there these they this to was we were what "
    "when where which who why will with you your".split()
)


def distinctive_terms(text: str, documents: Callable[[str], int | None], entries: int,
                      common_share: float = 1.0) -> list[str]:
    """The words of ``text`` worth a full-text query: not stop words, not common.

    A term found in more than :data:`RARE_TERM_SHARE` of the ``entries`` (and more than
    :data:`RARE_TERM_MIN`) is left out: FTS5 ranks every match before it can apply
    LIMIT, so one common word costs ~1 us per entry (115 ms at 30k for three), and
    such a word is not what hybrid search is for (names, codes, rare words).
    ``common_share`` (setting ``hybrid_common_share``) leaves out, for relevance, a term
    found in more than that share of the entries (and more than :data:`COMMON_TERM_MIN`):
    in a long chat between two people their names are such words, and BM25 then ranks
    the shortest line that names them ("Glad it helped, Mel!") above the one that
    answers.  ``documents(term)`` counts the entries holding a term (None: unknown form,
    e.g. accents: FTS decides).
    """
    terms = [t for t in dict.fromkeys(re.findall(r"\w+", text.lower())) if t not in STOPWORDS]
    cap = term_cap(entries, common_share)
    kept = []
    for term in terms:
        docs = documents(term)
        if docs is None or docs <= cap:
            kept.append(term)
    return kept


def term_cap(entries: int, common_share: float = 1.0) -> float:
    """The most entries a term may be found in and still be distinctive
    (:func:`distinctive_terms`): a counter may stop counting past it."""
    cap = max(RARE_TERM_MIN, RARE_TERM_SHARE * entries)
    if common_share < 1.0:
        cap = min(cap, max(COMMON_TERM_MIN, common_share * entries))
    return cap


def search_pass(vm: VectorMatrix, s: Search, limit: int) -> SearchPass:
    """A new search over ``vm`` for the ``limit`` best (:class:`.search_pass.SearchPass`):
    rank its query, then the query moved by :func:`feedback`, through it."""
    return SearchPass(vm, s.user_similarity_boost, limit)


def rank(within: SearchPass, query: np.ndarray, s: Search, limit: int,
         bm25_ids: dict[int, float], dated: frozenset[int] = frozenset(),
         hop: dict[int, float] | None = None,
         spoken: frozenset[int] = frozenset()) -> dict[int, tuple[float, float, float | None]]:
    """The ``limit`` best entries, best first: chunk id -> (cosine, score, normalised BM25
    or None).  Ranked by :func:`.ties.rank_key`: scores closer than the grid rank by chunk
    id, so a plan does not depend on the CPU's last bits.

    ``dated``: entries said on a day the query names; each gets ``s.date_weight`` more.
    ``hop``: the second hop's entries (:func:`.text_match.hop_scores`, each in 0..1); each
    gets ``s.query_hop_weight`` times its score more.
    ``spoken``: lines of a speaker the query names (:func:`.speakers.spoken_by`); each
    gets ``s.speaker_weight`` more.
    ``within``: the search these rankings belong to; it picks the rows scored exactly
    (every row below the two-stage size) and keeps what it read for the next query.
    """
    vm, boost = within.vectors, s.user_similarity_boost
    rows = within.candidates(query)
    hop = hop or {}
    if rows is not None and (bm25_ids or dated or hop or spoken):  # blend only candidates: the vector's and BM25's
        rows = _with_rows(rows, np.fromiter((vm.row[c] for c in (*bm25_ids, *dated, *hop, *spoken) if c in vm.row),
                                            np.int64))
    similarity = within.similarity(query, rows)
    user = vm.user[: vm.n] if rows is None else vm.user[rows]
    score = np.where(user, similarity * boost, similarity)
    bm25 = np.zeros(len(score), np.float32)
    if s.hybrid_search:
        at, values = _placed(vm, rows, bm25_ids)
        bm25[at] = values
        if bm25.max() > 0:
            bm25 /= bm25.max()
        score = (1 - s.hybrid_weight) * score + s.hybrid_weight * bm25
    if dated and s.date_weight > 0:
        rows_dated = np.fromiter((vm.row[c] for c in dated if c in vm.row), np.int64)
        at = rows_dated if rows is None else np.searchsorted(rows, rows_dated)
        score = score.copy()
        score[at] += s.date_weight
    if hop and s.query_hop_weight > 0:
        at, values = _placed(vm, rows, hop)
        score = score.copy()
        score[at] += np.float32(s.query_hop_weight) * values
    if spoken and s.speaker_weight > 0:
        at, _ = _placed(vm, rows, dict.fromkeys(spoken, 1.0))
        score = score.copy()
        score[at] += np.float32(s.speaker_weight)
    row_ids = vm.ids[: vm.n] if rows is None else vm.ids[rows]
    top = ties.best(score, row_ids, limit)
    if s.min_similarity > 0:
        top = top[ties.levels(score[top]) >= ties.level(s.min_similarity)]
    ids = row_ids[top]
    return {int(c): (float(similarity[i]), float(score[i]), float(bm25[i]) if s.hybrid_search else None)
            for c, i in zip(ids, top)}


def _placed(vm: VectorMatrix, rows: np.ndarray | None,
            values: dict[int, float]) -> tuple[np.ndarray, np.ndarray]:
    """Where the entries of ``values`` (chunk id -> value) sit among the scores of ``rows``
    (every row when None; ``rows`` holds each of them), and their values (float32)."""
    found = [(vm.row[c], value) for c, value in values.items() if c in vm.row]
    at = np.fromiter((row for row, _ in found), np.int64, len(found))
    return (at if rows is None else np.searchsorted(rows, at)), np.array([v for _, v in found], np.float32)


def _with_rows(rows: np.ndarray, extra: np.ndarray) -> np.ndarray:
    """``np.union1d(rows, extra)`` for ascending unique ``rows`` and a few ``extra`` rows:
    those not there yet are inserted in order (no sort of the whole union)."""
    extra = np.unique(extra)
    if not len(rows):
        return extra
    at = np.searchsorted(rows, extra)
    new = rows[np.minimum(at, len(rows) - 1)] != extra
    return np.insert(rows, at[new], extra[new])


#: Endings cut from a query term before it is searched as a prefix ("painted" ->
#: "paint"*); longest first.  A crude stemmer on the query side only: the index keeps
#: the words as written (FTS5's unicode61), so no migration is needed.
_ENDINGS = ("ing", "ies", "ed", "es", "er", "s")
#: A stem shorter than this is searched as the word itself ("uses" stays "uses").
MIN_STEM = 4


def fts_query(terms: list[str], prefix_stems: bool) -> str:
    """The FTS5 MATCH expression for ``terms``: any of them; with ``prefix_stems`` each
    term's stem as a prefix, so "painted" also finds "painting" and "paints"."""
    return " OR ".join(f'"{stem(t)}"*' if prefix_stems and len(stem(t)) >= MIN_STEM else f'"{t}"'
                       for t in terms)


def stem(term: str) -> str:
    """``term`` without its first matching ending of :data:`_ENDINGS` when at least
    :data:`MIN_STEM` characters remain, else ``term``."""
    for ending in _ENDINGS:
        if term.endswith(ending) and len(term) - len(ending) >= MIN_STEM:
            return term[: -len(ending)]
    return term


def feedback(vm: VectorMatrix, query: np.ndarray, chunk_ids: list[int], weight: float) -> np.ndarray:
    """Pseudo-relevance feedback (Rocchio): the unit query plus ``weight`` times the mean of
    ``chunk_ids``' vectors (the first search's best), normalised, to be searched again."""
    rows = [vm.row[c] for c in chunk_ids if c in vm.row]
    if not rows:
        return query
    moved = query + weight * vm.matrix[rows].mean(axis=0)
    return (moved / np.linalg.norm(moved)).astype(np.float32)
