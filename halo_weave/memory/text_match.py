"""The text side of a search: what the query's words and dates find in the entry tables.

Hybrid search blends cosine with BM25 over the best full-text matches of the query's
distinctive terms (:func:`.ranking.distinctive_terms`); ``date_weight`` favours the
entries said on a date the query names (:func:`.query.date_spans`).  Both read the
index tables (:mod:`halo_weave.storage.index_tables`); :func:`.ranking.rank` takes what
they find.
"""

from __future__ import annotations

import sqlite3

from ..settings import Search
from ..storage import index_tables as tables
from . import query, ranking, relevance


class TermCounts:
    """How many entries hold each term (:func:`.index_tables.term_documents`, counted up to
    a cap), remembered while the tables do not change: a draft searched at every word
    asks for the same words again and again (~0.3 ms a word at 100k entries on a 2-core
    Zen 3).  The tables are taken as unchanged while neither this connection's change
    count nor SQLite's ``data_version`` (other connections' commits) moves.  Owned by
    one index, used under its lock."""

    #: Terms remembered at most (then forgotten all at once).
    SIZE = 4096

    def __init__(self) -> None:
        self._counts: dict[tuple[str, int], int | None] = {}
        self._at: tuple[int, int] | None = None

    def counter(self, conn: sqlite3.Connection, enough: int):
        """``term -> count`` (None: not in the vocabulary as written), up to ``enough``."""
        at = (conn.total_changes, conn.execute("PRAGMA data_version").fetchone()[0])
        if at != self._at or len(self._counts) > self.SIZE:
            self._counts.clear()
            self._at = at

        def documents(term: str) -> int | None:
            key = (term, enough)
            if key not in self._counts:
                self._counts[key] = tables.term_documents(conn, term, enough)
            return self._counts[key]
        return documents


def bm25_scores(conn: sqlite3.Connection, text: str, entries: int, search: Search,
                limit: int, counts: TermCounts | None = None) -> dict[int, float]:
    """Chunk id -> BM25 of the ``limit`` best FTS matches of ``text``'s distinctive terms,
    over ``entries`` entries in all; empty when hybrid search is off or no term qualifies.
    ``counts``: the terms' entry counts remembered across searches."""
    if not search.hybrid_search or not text:
        return {}
    enough = int(ranking.term_cap(entries, search.hybrid_common_share)) + 1  # "more than the cap"
    documents = (counts or TermCounts()).counter(conn, enough)
    terms = ranking.distinctive_terms(text, documents, entries, search.hybrid_common_share)
    if not terms:
        return {}
    return tables.bm25(conn, ranking.fts_query(terms, search.hybrid_prefix_stems), limit)


def hop_scores(conn: sqlite3.Connection, text: str, chunk_id: int, entries: int, search: Search,
               limit: int, counts: TermCounts | None = None) -> dict[int, float]:
    """The second hop: chunk id -> BM25 (scaled to the best, 1) of the ``limit`` best FTS
    matches of the ``query_hop_terms`` rarest distinctive words of entry ``chunk_id`` (the
    best match: its names and things) that ``text`` does not hold, ``chunk_id`` left out;
    empty when off or there are none."""
    found = tables.entry_text(conn, chunk_id) if search.query_hop_terms > 0 else None
    if found is None:
        return {}
    asked = relevance.words(text)
    enough = int(ranking.term_cap(entries, search.hybrid_common_share)) + 1
    documents = (counts or TermCounts()).counter(conn, enough)
    words = [t for t in ranking.distinctive_terms(found, documents, entries, search.hybrid_common_share)
             if ranking.stem(t) not in asked and len(t) >= relevance.MIN_WORD and not t.isdigit()]
    rarest = sorted(words, key=lambda t: (enough if documents(t) is None else documents(t), t))
    rarest = rarest[: search.query_hop_terms]
    if not rarest:
        return {}
    scores = tables.bm25(conn, ranking.fts_query(rarest, search.hybrid_prefix_stems), limit + 1)
    scores.pop(chunk_id, None)
    best = max(scores.values(), default=0.0)
    return {c: v / best for c, v in scores.items()} if best > 0 else {}


def dated_chunks(conn: sqlite3.Connection, text: str, search: Search) -> frozenset[int]:
    """Chunk ids said on a date ``text`` names; empty when ``date_weight`` is off."""
    if search.date_weight <= 0 or not text:
        return frozenset()
    return tables.said_between(conn, query.date_spans(text))
