"""The semantic index: every chunk embedded with its turn-pair context, searchable.

Public API (Qt-free, blocking; the UI runs the slow calls on its embedder QThread)::

    embedder = Embedder()                     # bundled MiniLM; nothing loaded yet
    embedder.load()                           # seconds; raises EmbedderUnavailable once
    index = SemanticIndex(store.conn, settings, embedder)
    index.load()                              # vectors: snapshot file + change log (fast)
    index.index_pending(conv)                 # embed new / changed chunks, commit per batch
    matches = index.search(user_text)         # list[Match], best first
    result = index.recall_for(conv, user_text, user_tokens,
                              model_max_context, max_new_tokens, store=store)
    result.resurrected, result.tokens_used, result.budget   # what to show

Finer steps for a worker thread that must not touch the conversation or the database:
``drafts = index.prepare(conv, index.pending(conv))`` (UI thread, no model, cheap) ->
``index.embed(drafts)`` (worker thread, slow, pure) -> ``index.store(drafts)`` (UI thread,
one commit; the drafts are :mod:`.memory.drafts`).  ``index_chunks`` / ``index_pending`` /
``reindex_all`` do all three in a row, ``batch_size`` chunks per commit, so a crash loses
no committed batch.

Entries live in ``semantic_entries`` (keyed by chunk id, upserted: indexing twice never
duplicates) with the FTS5 table ``semantic_fts`` kept in sync by the store's triggers.
``context_hash`` is ``"<structure>:<text>"``: the digest of which chunks (and sizes) form
the turn-pair context (see :mod:`.memory.turn_pair`), then the digest of their text.  Pending
chunks are those with no entry, a changed structure (a user chunk whose answer has
arrived, a merged chunk) or a vector from another model (re-index, never mixed vectors);
entries of chunks that no longer exist (absorbed by a merge) are removed.

Search is cosine over a contiguous, normalised float32 matrix (:mod:`.memory.vector_matrix`):
brute force below ``SearchTuning.two_stage_min`` entries, above it a coarse PCA stage
picks candidates that are then scored exactly.  Top ``query_max_results``, user-role
matches x ``user_similarity_boost``, at least ``min_similarity``; with ``hybrid_search``
the score is blended with FTS5 BM25 (``hybrid_weight``) over the candidates and the best
FTS matches of the query's distinctive terms (:mod:`.memory.text_match`).  Liveness is not
filtered here: a live chunk simply costs nothing in the recall plan
(:mod:`.memory.recall_plan`).  :meth:`SemanticIndex.sharing` gives a second index
over the same vectors with other settings (``exact=True``: every entry scored exactly),
to compare searches on one set of entries.

Loading: with the store's change log (migration ``m002_semantic_changes``) the vectors
come from a snapshot file next to the conversation (``<file>.vectors``), tied to the
file by ``semantic_state.uid`` and to a change sequence number; entries changed since
(by any path, the store's merge included) are re-read from the table, and anything that
does not add up falls back to reading the table.  The index rewrites the snapshot once
``snapshot_stale_fraction`` of its entries changed; :meth:`SemanticIndex.save_snapshot`
does it on demand.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from .conversation import Conversation
from .errors import EmbedderUnavailable, SnapshotInvalid
from .memory import query, ranking, speakers, text_match
from .memory.drafts import EntryDraft, embed as embed_drafts, prepare as prepare_drafts
from .memory.embedder import Embedder
from .memory.recall_plan import Match, RecallPlan, RecallResult, apply_plan, make_plan
from .memory.recall_plan import budget as equation_budget
from .memory.pending import AgreedSignatures, due_chunks
from .memory.vector_matrix import SearchTuning, VectorMatrix, one_blas_thread
from .settings import Settings
from .storage import index_tables as tables
from .storage.sql import transaction

__all__ = ["Embedder", "EmbedderUnavailable", "EntryDraft", "Match", "RecallPlan",
           "RecallResult", "SearchTuning", "SemanticIndex"]

#: The vector snapshot sits next to the conversation file: ``<file>.vectors``.
SNAPSHOT_SUFFIX = ".vectors"
#: With ``speaker_weight``, the speakers a message names are looked for among this many
#: times ``query_max_results`` of its best matches.
SPEAKER_POOL = 3
Progress = Callable[[int, int], None]


class SemanticIndex:
    """Vectors of one conversation's chunks, mirrored from ``semantic_entries``."""

    def __init__(self, conn: sqlite3.Connection, settings: Settings, embedder: Embedder,
                 *, lock: threading.RLock | None = None, tuning: SearchTuning | None = None,
                 snapshot_path: Path | None = None) -> None:
        """``lock`` guards ``conn`` across threads: pass ``store.lock`` when sharing the
        store's connection, so an index commit never interleaves with a store commit.

        ``snapshot_path`` defaults to ``<database file>.vectors`` (none for an in-memory
        database); a snapshot is only used when the file has the store's change log.
        """
        self.conn = conn
        self.settings = settings
        self.embedder = embedder
        self.tuning = tuning or SearchTuning()
        self._lock = lock if lock is not None else threading.RLock()
        with self._lock:  # made on a worker thread while the store may be closing
            self._snapshot_path = snapshot_path if snapshot_path is not None else _default_snapshot(conn)
        self._changed = 0  # entries changed since the snapshot was written
        self._term_counts = text_match.TermCounts()  # BM25's term counts, while the tables stay
        #: The signatures last found to agree with their entries' digests (:meth:`pending`).
        self._checked = AgreedSignatures()
        #: Where the last :meth:`load` read the vectors: "snapshot", "table" or None.
        self.loaded_from: str | None = None
        self._reset(embedder.dim or 1)

    def _reset(self, dim: int, capacity: int = 1024) -> None:
        self._vectors = VectorMatrix(dim, capacity, self.tuning)
        self._stale: set[int] = set()  # entries holding another model's vector
        self._seq: int | None = None  # change-log sequence the vectors reflect

    def use_settings(self, settings: Settings) -> None:
        """Search by ``settings`` from the next query on."""
        self.settings = settings

    # ------------------------------------------------------------------ state
    @property
    def available(self) -> bool:
        """False once the embedder failed to load: search finds nothing, chat goes on."""
        return self.embedder.available

    @property
    def entry_count(self) -> int:
        """Searchable entries (vectors of the current model)."""
        return self._vectors.n

    @property
    def two_stage(self) -> bool:
        """True when searches go through the coarse stage (enough entries, axes fitted)."""
        return self._vectors.two_stage

    def sharing(self, *, settings: Settings | None = None, embedder: Embedder | None = None,
                exact: bool = False) -> SemanticIndex:
        """Another index over this one's connection and vectors (shared, not copied) that
        searches by its own ``settings`` and ``embedder`` (each this one's unless given);
        ``exact``: every entry scored exactly, no coarse stage.  For comparing searches on
        one set of entries: search it while this index does not change."""
        vectors = self._vectors.brute_force() if exact else self._vectors
        twin = SemanticIndex(self.conn, settings or self.settings, embedder or self.embedder,
                             lock=self._lock, tuning=vectors.tuning, snapshot_path=self._snapshot_path)
        twin._vectors = vectors
        twin._stale, twin._seq, twin.loaded_from = set(self._stale), self._seq, self.loaded_from
        return twin

    @property
    def snapshot_path(self) -> Path | None:
        """Where the vector snapshot lives (None when this database keeps none)."""
        return self._snapshot_path if self._change_log() is not None else None

    def load(self) -> int:
        """Read every entry's vector; returns the searchable count.

        From the snapshot file when it belongs to this database and its model (caught up
        with the entries changed since it was written), else from the table.
        """
        with self._lock:
            state = self._change_log()
            self.loaded_from = "snapshot"
            if state is None or not self._load_snapshot(state):
                self._load_table()
                self._seq = state[1] if state is not None else None
                self._changed = self._vectors.n  # no snapshot yet: write one when it pays
                self.loaded_from = "table"
            return self._vectors.n

    def _load_table(self) -> None:
        name, dim = self.embedder.name, self.embedder.dim
        rows = tables.entries(self.conn)
        good = [r for r in rows if r[3] == name and r[4] == dim and r[5] is not None
                and len(r[5]) == 4 * dim]
        n = len(good)
        self._reset(dim, capacity=max(1024, n + n // 8))  # room to grow without a copy
        self._stale = {r[0] for r in rows} - {r[0] for r in good}
        if n:
            self._vectors.fill([r[0] for r in good], [r[1] == "user" for r in good],
                               np.frombuffer(b"".join(r[5] for r in good), "<f4").reshape(n, dim),
                               [r[2].split(":")[0] for r in good])

    def _load_snapshot(self, state: tuple[str, int, int]) -> bool:
        uid, seq, count = state
        path = self._snapshot_path
        if path is None or not path.exists():
            return False
        try:
            vectors, head = VectorMatrix.read(path, self.tuning)
        except SnapshotInvalid:
            return False
        if (head.get("uid") != uid or head.get("model") != self.embedder.name
                or vectors.dim != self.embedder.dim or not 0 <= int(head.get("seq", -1)) <= seq):
            return False
        changed = self._changes_since(int(head["seq"]))
        if len(changed) > max(1000, vectors.n // 4):
            return False  # reading that many rows costs about what a table scan does
        self._vectors, self._stale = vectors, set(head.get("stale", []))
        self._refresh(changed)
        if self._vectors.n + len(self._stale) != count:  # not this file's history after all
            return False
        self._seq, self._changed = seq, len(changed)
        return True

    def _change_log(self) -> tuple[str, int, int] | None:
        return tables.change_log(self.conn)

    def _changes_since(self, seq: int) -> list[int]:
        return tables.changes_since(self.conn, seq)

    def _refresh(self, chunk_ids: Sequence[int]) -> None:
        """Re-read the given entries from the table (gone, other model, or new vector)."""
        name, dim = self.embedder.name, self.embedder.dim
        vm = self._vectors
        found = set()
        for chunk_id, role, digest, model, vdim, blob in tables.entries_of(self.conn, chunk_ids):
            found.add(chunk_id)
            if model == name and vdim == dim and blob is not None and len(blob) == 4 * dim:
                vm.put_many([chunk_id], [role == "user"], np.frombuffer(blob, "<f4"),
                            [digest.split(":")[0]])
                self._stale.discard(chunk_id)
            else:
                vm.drop(chunk_id)
                self._stale.add(chunk_id)
        for chunk_id in set(chunk_ids) - found:
            vm.drop(chunk_id)
            self._stale.discard(chunk_id)

    def save_snapshot(self) -> bool:
        """Write the vector snapshot now (after catching up with the change log).

        Returns False when this database keeps none.  Called by the index itself once
        enough entries changed; the app may also call it when it closes a conversation.
        """
        with self._lock:
            state = self._change_log()
            if state is None or self._snapshot_path is None:
                return False
            if self._seq is None or self._seq > state[1]:
                self.load()  # the file was not ours to follow: start over from it
                state = self._change_log()
            else:
                self._refresh(self._changes_since(self._seq))
            self._seq = state[1]
            try:
                self._vectors.write(self._snapshot_path, {
                    "uid": state[0], "seq": state[1], "model": self.embedder.name,
                    "stale": sorted(self._stale)})
            except OSError:
                return False  # a full or read-only disk: the table is still the truth
            self._changed = 0
            return True

    def _maybe_snapshot(self) -> None:
        t, n = self.tuning, self._vectors.n
        if n >= t.snapshot_min and self._changed > t.snapshot_stale_fraction * n:
            self.save_snapshot()

    # ------------------------------------------------------------------ what to index
    def pending(self, conv: Conversation) -> list[int]:
        """Content chunks of complete turns whose entry is missing, changed or stale
        (:func:`.memory.pending.due_chunks`: no chunk object is made)."""
        with self._lock:
            return due_chunks(conv, self._vectors, self._checked, self.settings.search.embedding_max_tokens)

    def orphans(self, conv: Conversation) -> list[int]:
        """Entries whose chunk no longer exists (absorbed by a merge)."""
        with self._lock:
            known = set(self._vectors.row) | self._stale
        return sorted(c for c in known if c not in conv.chunks)

    def prepare(self, conv: Conversation, chunk_ids: Iterable[int]) -> list[EntryDraft]:
        """Read what embedding needs from the conversation (cheap, no model; see
        :func:`.memory.drafts.prepare`)."""
        return prepare_drafts(conv, chunk_ids, self.settings.search.embedding_max_tokens)

    def embed(self, drafts: Sequence[EntryDraft], batch_size: int = 32) -> Sequence[EntryDraft]:
        """Fill each draft's vector (slow; touches neither conversation nor database)."""
        return embed_drafts(self.embedder, drafts, self.settings.search.embedding_max_tokens, batch_size)

    def store(self, drafts: Sequence[EntryDraft]) -> None:
        """Upsert embedded drafts in one transaction and add them to the search matrix."""
        now = time.time()
        name, dim = self.embedder.name, self.embedder.dim
        rows = [(d.chunk_id, d.turn_id, d.chunk_index, d.role, d.text, d.token_count,
                 d.context_hash, d.vector.astype("<f4").tobytes(), name, dim, now) for d in drafts]
        with self._lock:
            with transaction(self.conn):
                tables.upsert(self.conn, rows)
            if self._vectors.dim != dim:  # only reached before any vector of this model
                self._reset(dim)
            if drafts:
                self._vectors.put_many([d.chunk_id for d in drafts], [d.role == "user" for d in drafts],
                                       np.stack([d.vector for d in drafts]),
                                       [d.context_hash.split(":")[0] for d in drafts])
                self._stale.difference_update(d.chunk_id for d in drafts)
            self._changed += len(drafts)
            self._maybe_snapshot()

    def remove(self, chunk_ids: Sequence[int]) -> None:
        """Delete entries (one transaction)."""
        if not chunk_ids:
            return
        with self._lock:
            with transaction(self.conn):
                tables.delete(self.conn, chunk_ids)
            for chunk_id in chunk_ids:
                self._vectors.drop(chunk_id)
                self._stale.discard(chunk_id)
            self._changed += len(chunk_ids)
            self._maybe_snapshot()

    def reread(self, chunk_ids: Sequence[int]) -> None:
        """Follow entries another writer put into the table or took out of it (a branch
        switch restores a tail's entries with their vectors): re-read ``chunk_ids``."""
        if not chunk_ids:
            return
        with self._lock:
            self._refresh(chunk_ids)
            self._changed += len(chunk_ids)
            self._maybe_snapshot()

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
            self._vectors.structure[:] = b""  # matches no context: every chunk is pending
        return self.index_pending(conv, progress=progress)

    # ------------------------------------------------------------------ search
    def search(self, text: str, limit: int | None = None) -> list[Match]:
        """Best entries for ``text`` (see the module docstring); [] when unavailable.

        With ``query_split`` each part of the message (:func:`.memory.query.sub_queries`)
        is searched too, in the same embedding batch, and the lists interleaved.
        """
        limit = self.settings.search.query_max_results if limit is None else limit
        if not text.strip() or limit <= 0 or not self.available or self._vectors.n == 0:
            return []
        texts = [text] + (query.sub_queries(text) if self.settings.search.query_split else [])
        try:
            vectors = self.embedder.encode(texts)
        except EmbedderUnavailable:
            return []
        found = [self.search_vector(v, limit, t) for v, t in zip(vectors, texts)]
        return found[0] if len(found) == 1 else query.interleave(found, limit)

    def search_vector(self, vector: np.ndarray, limit: int | None = None,
                      text: str = "") -> list[Match]:
        """:meth:`search` for an already embedded (unit) query; ``text`` feeds BM25 and
        names the dates to look in (``date_weight``)."""
        s = self.settings
        limit = s.search.query_max_results if limit is None else limit
        with self._lock, one_blas_thread():
            if self._vectors.n == 0 or limit <= 0:
                return []
            bm25_ids = text_match.bm25_scores(self.conn, text, self._vectors.n, s.search, max(3 * limit, 50),
                                              self._term_counts)
            dated = text_match.dated_chunks(self.conn, text, s.search)
            vector = np.asarray(vector, np.float32)
            within = ranking.search_pass(self._vectors, s.search, limit)
            found = ranking.rank(within, vector, s.search, limit, bm25_ids, dated)
            if s.search.query_feedback > 0 and found:
                # The moved query stays near the first one: its candidates are chosen
                # within the same shortlist and its rows mostly copied out already, so
                # only one pass reads every row.
                vector = ranking.feedback(self._vectors, vector, list(found)[: s.search.query_feedback_top],
                                          s.search.query_feedback)
                found = ranking.rank(within, vector, s.search, limit, bm25_ids, dated)
            hop = None
            if s.search.query_hop_terms > 0 and found:
                hop = text_match.hop_scores(self.conn, text, next(iter(found)), self._vectors.n, s.search, limit,
                                            self._term_counts)
                if hop:
                    found = ranking.rank(within, vector, s.search, limit, bm25_ids, dated, hop)
            meta: dict[int, tuple] = {}
            if s.search.speaker_weight > 0 and found and text:
                pool = ranking.rank(within, vector, s.search, SPEAKER_POOL * limit, bm25_ids, dated, hop)
                meta = tables.meta(self.conn, list(pool))  # holds every entry the boost can rank
                spoken = speakers.spoken_by(text, {cid: row[3] for cid, row in meta.items()})
                if spoken:
                    found = ranking.rank(within, vector, s.search, limit, bm25_ids, dated, hop, spoken)
            if not meta.keys() >= found.keys():
                meta = tables.meta(self.conn, list(found))
        return [Match(cid, *meta[cid], *found[cid]) for cid in found if cid in meta]

    # ------------------------------------------------------------------ recall
    def plan(self, conv: Conversation, matches: Sequence[Match], budget: int) -> RecallPlan:
        """Which matches come back within ``budget`` tokens (see :mod:`.memory.recall_plan`):
        those scoring at least ``recall_relative_floor`` of the best, each followed by its
        neighbours of the same sitting (``resurrect_neighbours``), at most
        ``recall_max_chunks`` paragraphs."""
        s = self.settings
        matches = query.relevant(matches, s.recall.recall_relative_floor)
        matches = query.with_neighbours(conv, matches, s.recall.resurrect_neighbours, s.recall.session_gap_seconds,
                                        s.recall.neighbour_matches)
        return make_plan(conv, matches, budget, s.recall.resurrection_anchors, s.recall.recall_max_chunks)

    def recall_for(self, conv: Conversation, user_text: str, user_tokens: int,
                   model_max_context: int, max_new_tokens: int,
                   store=None) -> RecallResult:
        """Search with the user's message and bring the best pruned chunks back in place.

        Budget (the universal equation): ``model_max_context - live tokens - user_tokens -
        max_new_tokens``, capped by ``resurrection_budget_cap`` when it is > 0.  The
        conversation change and its persistence (``store.save_chunks`` and the
        ``reference_count`` increments) are one transaction.
        """
        budget = equation_budget(conv, user_tokens, model_max_context, max_new_tokens,
                                 self.settings.recall.resurrection_budget_cap)
        if not self.available:
            return RecallResult(budget, reason="semantic index unavailable")
        plan = self.plan(conv, self.search(user_text), budget)
        with self._lock:
            return apply_plan(conv, plan, self.conn, self.settings.recall.resurrection_brightness, store)


def _default_snapshot(conn: sqlite3.Connection) -> Path | None:
    """``<database file>.vectors``; None for an in-memory or temporary database."""
    file = tables.database_file(conn)
    return Path(file + SNAPSHOT_SUFFIX) if file else None
