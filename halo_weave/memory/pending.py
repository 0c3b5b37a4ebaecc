"""Which chunks the semantic index must (re-)embed: those without an entry, and those
whose embedding context changed since (their signature no longer hashes to the entry's
digest, see :mod:`.turn_pair`).

The check runs on the UI thread after every turn, over every chunk of a long
conversation, so it reads the registry's columns (no chunk object is made) and remembers
which signatures agreed: after a reopen the first check hashes each signature once, later
ones only the signatures that are new.
"""

from __future__ import annotations

import numpy as np

from .turn_pair import signature_hash, signatures


class AgreedSignatures:
    """Per chunk id, the signature and entry digest last found to agree, as arrays indexed
    by id (chunk ids are counters), so checking thousands is a few numpy steps."""

    def __init__(self) -> None:
        self.reset(None)

    def reset(self, limit: int | None) -> None:
        """Forget everything; ``limit`` is the word-piece limit the digests are for."""
        self.limit = limit
        self.sig = np.full((0, 6), -2, np.int64)
        self.digest = np.zeros(0, "S16")

    def agrees(self, ids: np.ndarray, sigs: np.ndarray, digests: np.ndarray) -> np.ndarray:
        inside = ids < len(self.digest)
        out = np.zeros(len(ids), bool)
        at = ids[inside]
        out[inside] = (self.digest[at] == digests[inside]) & (self.sig[at] == sigs[inside]).all(axis=1)
        return out

    def remember(self, chunk_id: int, sig: np.ndarray, digest: bytes, cap: int) -> None:
        """Keep an agreement (ids from ``cap`` on are not kept: a file with sparse ids
        would cost memory)."""
        if chunk_id >= cap:
            return
        if chunk_id >= len(self.digest):
            size = min(max(chunk_id + 1, 2 * len(self.digest), 1024), cap)
            grown = np.full((size, 6), -2, np.int64)
            grown[: len(self.sig)] = self.sig
            digests = np.zeros(size, "S16")
            digests[: len(self.digest)] = self.digest
            self.sig, self.digest = grown, digests
        self.sig[chunk_id] = sig
        self.digest[chunk_id] = digest


def due_chunks(conv, vectors, agreed: AgreedSignatures, limit: int) -> list[int]:
    """Ids of the content chunks of ``conv`` (complete turns only) whose entry in
    ``vectors`` (a :class:`~.vector_matrix.VectorMatrix`) is missing or out of date,
    ascending.  ``limit``: the embedding word-piece limit (part of every digest)."""
    ids, turn_ids, chunk_index, roles, counts = conv.chunks.current_columns()
    wanted = chunk_index >= 0
    if conv.open_turn is not None:
        wanted &= turn_ids != conv.open_turn.turn_id
    sigs = signatures(ids, turn_ids, chunk_index, roles, counts, conv.turns.incomplete())[wanted]
    ids = ids[wanted]
    n = vectors.n
    if not n:
        return sorted(ids.tolist())
    order = np.argsort(vectors.ids[:n], kind="stable")
    known = vectors.ids[:n][order]
    at = np.minimum(np.searchsorted(known, ids), n - 1)
    found = known[at] == ids
    digests = vectors.structure[order[at[found]]]
    entry_ids, entry_sigs = ids[found], sigs[found]
    if agreed.limit != limit:
        agreed.reset(limit)
    due = ids[~found].tolist()
    cap = 8 * len(ids) + 4096
    for i in np.flatnonzero(~agreed.agrees(entry_ids, entry_sigs, digests)).tolist():
        if digests[i].decode() == signature_hash(tuple(entry_sigs[i].tolist()), limit):
            agreed.remember(int(entry_ids[i]), entry_sigs[i], digests[i], cap)
        else:
            due.append(int(entry_ids[i]))
    return sorted(due)
