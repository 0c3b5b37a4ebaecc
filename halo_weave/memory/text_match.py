"""The text side of a search: what the query's words and dates find in the entry tables.

Hybrid search blends cosine with BM25 over the best full-text matches of the query's
distinctive terms (:func:`.ranking.distinctive_terms`); ``date_weight`` favours the
entries said on a date the query names (:func:`.query.date_spans`).  Both read the
index tables (:mod:`halo_weave.storage.index_tables`); :func:`.ranking.rank` takes what
they find.
"""

from __future__ import annotations

import re
import sqlite3

from ..settings import Search
from ..storage import index_tables as tables
from . import query, ranking

#: The second hop's words are at least this long ("Ann", "cat" are words; "ok", "go" not).
HOP_MIN_WORD = 3


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


def hop_scores(conn: sqlite3.Connection, text: str, chunk_id: int, entries: int, search: Search,
               limit: int) -> dict[int, float]:
    """The second hop: chunk id -> BM25 (scaled to the best, 1) of the ``limit`` best FTS
    matches of the ``query_hop_terms`` rarest distinctive words of entry ``chunk_id`` (the
    best match: its names and things) that ``text`` does not hold, ``chunk_id`` left out;
    empty when off or there are none."""
    found = tables.entry_text(conn, chunk_id) if search.query_hop_terms > 0 else None
    if found is None:
        return {}
    asked = {ranking.stem(t) for t in re.findall(r"\w+", text.lower())}
    enough = int(ranking.term_cap(entries, search.hybrid_common_share)) + 1
    counts: dict[str, int] = {}

    def documents(term: str) -> int | None:
        n = tables.term_documents(conn, term, enough)
        counts[term] = enough if n is None else n
        return n

    words = [t for t in ranking.distinctive_terms(found, documents, entries, search.hybrid_common_share)
             if ranking.stem(t) not in asked and len(t) >= HOP_MIN_WORD and not t.isdigit()]
    rarest = sorted(words, key=lambda t: (counts[t], t))[: search.query_hop_terms]
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
