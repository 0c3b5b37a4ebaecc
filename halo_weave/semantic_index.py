"""The semantic index: every chunk embedded with its turn-pair context, searchable.

Public API (Qt-free, blocking; the UI runs the slow calls on its embedder QThread)::

    embedder = Embedder()                     # bundled MiniLM; nothing loaded yet
    embedder.load()                           # seconds; raises EmbedderUnavailable once
    index = SemanticIndex(store.conn, settings, embedder)
    index.load()                              # vectors from SQLite -> float32 matrix (fast)
    index.index_pending(conv)                 # embed new / changed chunks, commit per batch
    matches = index.search(user_text)         # list[Match], best first
    result = index.resurrect_for(conv, user_text, user_tokens,
                                 model_max_context, max_new_tokens, store=store)
    result.revived, result.tokens_used, result.budget   # what to show

Finer steps for a worker thread that must not touch the conversation or the database:
``drafts = index.prepare(conv, index.pending(conv))`` (UI thread, no model, cheap) ->
``index.embed(drafts)`` (worker thread, slow, pure) -> ``index.store(drafts)`` (UI thread,
one commit).  ``index_chunks`` / ``index_pending`` / ``reindex_all`` do all three in a row,
``batch_size`` chunks per commit, so a crash loses no committed batch.

Entries live in ``semantic_entries`` (keyed by chunk id, upserted: indexing twice never
duplicates) with the FTS5 table ``semantic_fts`` kept in sync by the store's triggers.
``context_hash`` is ``"<structure>:<text>"``: the digest of which chunks (and sizes) form
the turn-pair context (see :mod:`turn_pair`), then the digest of their text.  Pending
chunks are those with no entry, a changed structure (a user chunk whose answer has
arrived, a merged chunk) or a vector from another model (re-index, never mixed vectors);
entries of chunks that no longer exist (absorbed by a merge) are removed.

Search is brute-force cosine over a contiguous, normalised float32 matrix: top
``query_max_results``, user-role matches x ``user_similarity_boost``, at least
``min_similarity``; with ``hybrid_search`` the score is blended with FTS5 BM25
(``hybrid_weight``).  Liveness is not filtered here: a live chunk simply costs nothing
in the resurrection plan (:mod:`resurrection`).
"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np

from .conversation import Conversation
from .embedder import Embedder, EmbedderUnavailable
from .resurrection import (Match, ResurrectionPlan, ResurrectionResult, apply_plan, make_plan,
                           transaction)
from .settings import Settings
from .turn_pair import context_parts, context_pieces, fit_context, signature_hash, text_hash

__all__ = ["Embedder", "EmbedderUnavailable", "EntryDraft", "Match", "ResurrectionPlan",
           "ResurrectionResult", "SemanticIndex"]

Progress = Callable[[int, int], None]

_STOPWORDS = frozenset(
    "a an and are as at be but by did do does for from had has have how i in is it its me "
    "my of on or our so that the their them then there these they this to was we were what "
    "when where which who why will with you your".split()
)


@dataclass
class EntryDraft:
    """One chunk on its way into the index (see the module docstring)."""

    chunk_id: int
    turn_id: int
    sentence_id: int
    role: str
    text: str
    token_count: int
    pieces: list[tuple[int, str]]
    context_hash: str
    vector: np.ndarray | None = field(default=None, repr=False)


class SemanticIndex:
    """Vectors of one conversation's chunks, mirrored from ``semantic_entries``."""

    def __init__(self, conn: sqlite3.Connection, settings: Settings, embedder: Embedder,
                 *, lock: threading.RLock | None = None) -> None:
        """``lock`` guards ``conn`` across threads: pass ``store.lock`` when sharing the
        store's connection, so an index commit never interleaves with a store commit."""
        self.conn = conn
        self.settings = settings
        self.embedder = embedder
        self._lock = lock if lock is not None else threading.RLock()
        self._reset(embedder.dim or 1)

    def _reset(self, dim: int, capacity: int = 1024) -> None:
        self._n = 0
        self._matrix = np.zeros((capacity, dim), np.float32)
        self._ids = np.zeros(capacity, np.int64)
        self._user = np.zeros(capacity, np.bool_)
        self._row: dict[int, int] = {}
        self._structure: dict[int, str] = {}  # chunk id -> structure digest of its vector
        self._stale: set[int] = set()  # entries holding another model's vector

    # ------------------------------------------------------------------ state
    @property
    def available(self) -> bool:
        """False once the embedder failed to load: search finds nothing, chat goes on."""
        return self.embedder.available

    @property
    def entry_count(self) -> int:
        """Searchable entries (vectors of the current model)."""
        return self._n

    def load(self) -> int:
        """Read every entry's vector from the database; returns the searchable count."""
        name, dim = self.embedder.name, self.embedder.dim
        with self._lock:
            rows = self.conn.execute(
                "SELECT chunk_id, role, context_hash, model, dim, embedding FROM semantic_entries"
            ).fetchall()
            good = [r for r in rows if r[3] == name and r[4] == dim and r[5] is not None
                    and len(r[5]) == 4 * dim]
            n = len(good)
            self._reset(dim, capacity=max(1024, n + n // 8))  # room to grow without a copy
            self._stale = {r[0] for r in rows} - {r[0] for r in good}
            if n:
                self._matrix[:n] = np.frombuffer(b"".join(r[5] for r in good), "<f4").reshape(n, dim)
                self._ids[:n] = [r[0] for r in good]
                self._user[:n] = [r[1] == "user" for r in good]
            self._n = n
            self._row = {r[0]: i for i, r in enumerate(good)}
            self._structure = {r[0]: r[2].split(":")[0] for r in good}
            return n

    # ------------------------------------------------------------------ what to index
    def pending(self, conv: Conversation) -> list[int]:
        """Content chunks of complete turns whose entry is missing, changed or stale."""
        limit = self.settings.embedding_max_tokens
        open_turn = conv.open_turn.turn_id if conv.open_turn is not None else None
        out = []
        with self._lock:
            for chunk in conv.chunks.values():
                if chunk.framing or chunk.turn_id == open_turn:
                    continue
                known = self._structure.get(chunk.id)
                if known is None or known != signature_hash(context_parts(conv, chunk), limit):
                    out.append(chunk.id)
        return sorted(out)

    def orphans(self, conv: Conversation) -> list[int]:
        """Entries whose chunk no longer exists (absorbed by a merge)."""
        with self._lock:
            known = set(self._structure) | self._stale
        return sorted(c for c in known if c not in conv.chunks)

    def prepare(self, conv: Conversation, chunk_ids: Iterable[int]) -> list[EntryDraft]:
        """Read what embedding needs from the conversation (cheap, no model)."""
        limit = self.settings.embedding_max_tokens
        drafts = []
        for chunk_id in chunk_ids:
            chunk = conv.chunks[chunk_id]
            parts = context_parts(conv, chunk)
            pieces = context_pieces(conv, parts)
            digest = f"{signature_hash(parts, limit)}:{text_hash(chr(30).join(t for _, t in pieces))}"
            drafts.append(EntryDraft(chunk.id, chunk.turn_id, chunk.sentence_id, chunk.role,
                                     pieces[0][1], chunk.token_count, pieces, digest))
        return drafts

    def embed(self, drafts: Sequence[EntryDraft], batch_size: int = 32) -> Sequence[EntryDraft]:
        """Fill each draft's vector (slow; touches neither conversation nor database)."""
        emb = self.embedder
        limit = min(self.settings.embedding_max_tokens, emb.max_tokens)
        contexts = [fit_context(d.pieces, emb.count, emb.truncate, limit) for d in drafts]
        vectors = emb.encode(contexts, batch_size=batch_size)
        for draft, vector in zip(drafts, vectors):
            draft.vector = vector
        return drafts

    def store(self, drafts: Sequence[EntryDraft]) -> None:
        """Upsert embedded drafts in one transaction and add them to the search matrix."""
        now = time.time()
        name, dim = self.embedder.name, self.embedder.dim
        rows = [(d.chunk_id, d.turn_id, d.sentence_id, d.role, d.text, d.token_count,
                 d.context_hash, d.vector.astype("<f4").tobytes(), name, dim, now) for d in drafts]
        with self._lock:
            with transaction(self.conn):
                self.conn.executemany(
                    """INSERT INTO semantic_entries (chunk_id, turn_id, sentence_id, role, text,
                           token_count, context_hash, embedding, model, dim, updated_at)
                       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                       ON CONFLICT(chunk_id) DO UPDATE SET turn_id = excluded.turn_id,
                           sentence_id = excluded.sentence_id, role = excluded.role,
                           text = excluded.text, token_count = excluded.token_count,
                           context_hash = excluded.context_hash, embedding = excluded.embedding,
                           model = excluded.model, dim = excluded.dim,
                           updated_at = excluded.updated_at""",
                    rows,
                )
            for d in drafts:
                self._put(d.chunk_id, d.role == "user", d.vector, d.context_hash.split(":")[0])

    def remove(self, chunk_ids: Sequence[int]) -> None:
        """Delete entries (one transaction)."""
        if not chunk_ids:
            return
        with self._lock:
            with transaction(self.conn):
                self.conn.executemany("DELETE FROM semantic_entries WHERE chunk_id = ?",
                                      [(c,) for c in chunk_ids])
            for chunk_id in chunk_ids:
                self._drop(chunk_id)

    def index_chunks(self, conv: Conversation, chunk_ids: Sequence[int], batch_size: int = 32,
                     progress: Progress | None = None) -> int:
        """Embed and upsert ``chunk_ids``, one commit per batch; returns how many.

        Loads the embedder on first use (may raise :class:`EmbedderUnavailable` once);
        does nothing when the embedder is unavailable.
        """
        if not self.available or not chunk_ids:
            return 0
        self.embedder.load()
        done = 0
        for start in range(0, len(chunk_ids), batch_size):
            batch = self.prepare(conv, chunk_ids[start:start + batch_size])
            self.store(self.embed(batch, batch_size))
            done += len(batch)
            if progress is not None:
                progress(done, len(chunk_ids))
        return done

    def index_pending(self, conv: Conversation, batch_size: int = 32,
                      progress: Progress | None = None) -> int:
        """Drop orphaned entries, then embed every pending chunk; returns chunks embedded."""
        self.remove(self.orphans(conv))
        return self.index_chunks(conv, self.pending(conv), batch_size, progress)

    def reindex_all(self, conv: Conversation, progress: Progress | None = None) -> int:
        """Re-embed every chunk (e.g. after a model change)."""
        with self._lock:
            self._structure.clear()
        return self.index_pending(conv, progress=progress)

    # ------------------------------------------------------------------ search
    def search(self, text: str, limit: int | None = None) -> list[Match]:
        """Best entries for ``text`` (see the module docstring); [] when unavailable."""
        limit = self.settings.query_max_results if limit is None else limit
        if not text.strip() or limit <= 0 or not self.available or self._n == 0:
            return []
        try:
            query = self.embedder.encode([text])[0]
        except EmbedderUnavailable:
            return []
        s = self.settings
        with self._lock:
            n = self._n
            similarity = self._matrix[:n] @ query
            score = np.where(self._user[:n], similarity * s.user_similarity_boost, similarity)
            bm25 = np.zeros(n, np.float32)
            if s.hybrid_search:
                for chunk_id, value in self._bm25(text, max(3 * limit, 50)).items():
                    if chunk_id in self._row:
                        bm25[self._row[chunk_id]] = value
                if bm25.max() > 0:
                    bm25 /= bm25.max()
                score = (1 - s.hybrid_weight) * score + s.hybrid_weight * bm25
            k = min(limit, n)
            top = np.argpartition(-score, k - 1)[:k]
            top = top[np.argsort(-score[top], kind="stable")]
            top = top[score[top] >= s.min_similarity] if s.min_similarity > 0 else top
            found = {int(self._ids[i]): (float(similarity[i]), float(score[i]),
                                         float(bm25[i]) if s.hybrid_search else None) for i in top}
            meta = self._meta(list(found))
        return [Match(cid, *meta[cid], *found[cid]) for cid in found if cid in meta]

    def _bm25(self, text: str, limit: int) -> dict[int, float]:
        terms = [t for t in re.findall(r"\w+", text.lower()) if t not in _STOPWORDS]
        if not terms:
            return {}
        query = " OR ".join(f'"{t}"' for t in dict.fromkeys(terms))
        rows = self.conn.execute(
            "SELECT rowid, -bm25(semantic_fts) FROM semantic_fts WHERE semantic_fts MATCH ? "
            "ORDER BY rank LIMIT ?", (query, limit)).fetchall()
        return {int(r[0]): max(float(r[1]), 0.0) for r in rows}

    def _meta(self, chunk_ids: list[int]) -> dict[int, tuple]:
        if not chunk_ids:
            return {}
        marks = ",".join("?" * len(chunk_ids))
        rows = self.conn.execute(
            f"SELECT chunk_id, turn_id, sentence_id, role, text, token_count, reference_count "
            f"FROM semantic_entries WHERE chunk_id IN ({marks})", chunk_ids).fetchall()
        return {r[0]: tuple(r[1:]) for r in rows}

    # ------------------------------------------------------------------ resurrection
    def plan(self, conv: Conversation, matches: Sequence[Match], budget: int) -> ResurrectionPlan:
        """Which matches come back within ``budget`` tokens (see :mod:`resurrection`)."""
        return make_plan(conv, matches, budget)

    def resurrect_for(self, conv: Conversation, user_text: str, user_tokens: int,
                      model_max_context: int, max_new_tokens: int,
                      store=None) -> ResurrectionResult:
        """Search with the user's message and bring the best dead chunks back in place.

        Budget (seed 001): ``model_max_context - live tokens - user_tokens -
        max_new_tokens``, capped by ``resurrection_budget_cap`` when it is > 0.  The
        conversation change and its persistence (``store.save_chunks`` and the
        ``reference_count`` increments) are one transaction.
        """
        budget = model_max_context - conv.live_token_count() - user_tokens - max_new_tokens
        if self.settings.resurrection_budget_cap > 0:
            budget = min(budget, self.settings.resurrection_budget_cap)
        budget = max(budget, 0)
        if not self.available:
            return ResurrectionResult(budget, reason="semantic index unavailable")
        plan = self.plan(conv, self.search(user_text), budget)
        with self._lock:
            return apply_plan(conv, plan, self.conn, self.settings.resurrection_brightness, store)

    # ------------------------------------------------------------------ matrix
    def _grow(self, n: int) -> None:
        capacity = len(self._ids)
        if n <= capacity:
            return
        while capacity < n:
            capacity *= 2
        matrix = np.zeros((capacity, self._matrix.shape[1]), np.float32)
        matrix[: self._n] = self._matrix[: self._n]
        self._matrix = matrix
        self._ids = np.resize(self._ids, capacity)
        self._user = np.resize(self._user, capacity)

    def _put(self, chunk_id: int, is_user: bool, vector: np.ndarray, structure: str) -> None:
        if self._matrix.shape[1] != vector.shape[0]:
            self._reset(vector.shape[0])  # only reached before any vector of this model
        row = self._row.get(chunk_id)
        if row is None:
            self._grow(self._n + 1)
            row = self._n
            self._n += 1
            self._row[chunk_id] = row
        self._matrix[row] = vector
        self._ids[row] = chunk_id
        self._user[row] = is_user
        self._structure[chunk_id] = structure
        self._stale.discard(chunk_id)

    def _drop(self, chunk_id: int) -> None:
        self._structure.pop(chunk_id, None)
        self._stale.discard(chunk_id)
        row = self._row.pop(chunk_id, None)
        if row is None:
            return
        last = self._n - 1
        if row != last:  # move the last row into the hole: the matrix stays contiguous
            moved = int(self._ids[last])
            self._matrix[row] = self._matrix[last]
            self._ids[row] = moved
            self._user[row] = self._user[last]
            self._row[moved] = row
        self._n = last
