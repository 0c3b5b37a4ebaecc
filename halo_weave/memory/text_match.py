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
from . import query, ranking


def bm25_scores(conn: sqlite3.Connection, text: str, entries: int, search: Search,
                limit: int) -> dict[int, float]:
    """Chunk id -> BM25 of the ``limit`` best FTS matches of ``text``'s distinctive terms,
    over ``entries`` entries in all; empty when hybrid search is off or no term qualifies."""
    if not search.hybrid_search or not text:
        return {}
    enough = int(ranking.term_cap(entries, search.hybrid_common_share)) + 1  # "more than the cap"
    terms = ranking.distinctive_terms(text, lambda t: tables.term_documents(conn, t, enough),
                                      entries, search.hybrid_common_share)
    if not terms:
        return {}
    return tables.bm25(conn, ranking.fts_query(terms, search.hybrid_prefix_stems), limit)


def dated_chunks(conn: sqlite3.Connection, text: str, search: Search) -> frozenset[int]:
    """Chunk ids said on a date ``text`` names; empty when ``date_weight`` is off."""
    if search.date_weight <= 0 or not text:
        return frozenset()
    return tables.said_between(conn, query.date_spans(text))
