"""Branches, the session's part: edit any earlier message, regenerate any earlier answer,
and switch between branches.

:class:`Branches` is the session's part for them (``session.branches``); the file's part
is :mod:`halo_weave.storage.branches` (its export part
:mod:`halo_weave.storage.branches_transfer`), the window's :mod:`halo_weave.ui.branch_marks`
(docs/architecture.md, "Branches").  Each change
is one transaction of :mod:`halo_weave.storage.branches` (file first, then memory);
after an edit or a regenerate the answer streams as any other (``begin_answer`` /
``generation_request`` / ``receive`` / ``finish_turn``).  The last exchange keeps its own
changes (:mod:`.last_exchange`: Regenerate keeps answer versions, Edit and resend):
a branch carries a whole tail, a version a single answer, and the file and export keep
both.
"""

from __future__ import annotations

from ..conversation import Chunk, Turn


def _storage():
    """storage.branches, imported on first use (it brings the store and sqlite-utils)."""
    from ..storage import branches

    return branches


class Branches:
    """The branch points of the session's conversation and the changes that make or
    switch them.  Reads the session's conversation, file and index; holds no state of
    its own between calls beyond the session it serves."""

    def __init__(self, session) -> None:
        self._session = session

    # ------------------------------------------------------------------ reading
    def states(self) -> dict:
        """Every branch point shown: first turn shown after it -> ``BranchState``
        ("‹ n / m ›"); empty without a file."""
        conv, store = self._session.conv, self._session.store
        if conv is None or store is None:
            return {}
        return _storage().states(conv, store)

    def state_of(self, turn_id: int):
        """The ``BranchState`` of the branch point whose shown tail starts at ``turn_id``
        (None when no branch starts there)."""
        return self.states().get(turn_id)

    def message_text(self, turn_id: int) -> str:
        """The words of a message (to edit them), pruned or live."""
        conv, store = self._session.conv, self._session.store
        turn = conv.turns.get(turn_id) if conv is not None else None
        if turn is None:
            raise _storage().BranchError("That message is not in the conversation shown.")
        texts = []
        chunks = conv.content_chunks(turn_id)
        missing = [c.id for c in chunks if conv.tokens_in_memory(c.id) is None]
        loaded = store.load_chunk_tokens(missing) if missing and store is not None else {}
        for chunk in chunks:
            tokens = conv.tokens_in_memory(chunk.id) or loaded[chunk.id]
            texts += list(tokens.texts)
        return "".join(texts)

    def is_last_exchange(self, turn_id: int) -> bool:
        """True when ``turn_id`` is the last question or the last answer (those have
        versions and Edit and resend instead of branches)."""
        question, answer = self._session.exchange.last_exchange()
        return turn_id in {t.turn_id for t in (question, answer) if t is not None}

    # ------------------------------------------------------------------ changing
    def edit_message(self, turn_id: int, ids: list[int], texts: list[str]) -> Turn:
        """A new branch from an earlier message: it and what follows are stashed, the new
        wording is saved (DB-first); then answer it as any message."""
        session = self._session
        turn, removed = _storage().edit_message(session.conv, session.store, turn_id, ids, texts)
        self._forget(removed)
        if session.indexer is not None:
            session.indexer.queue(session.conv, [c.id for c in session.conv.content_chunks(turn.turn_id)])
        session.server.name_conversation()  # the new branch's cache is saved apart
        return turn

    def regenerate_answer(self, turn_id: int) -> list[Chunk]:
        """A new branch from an earlier answer: it and what follows are stashed; the
        conversation ends with its question, to be answered again."""
        session = self._session
        removed = self._forget(_storage().retire_answer(session.conv, session.store, turn_id))
        session.server.name_conversation()  # the new branch's cache is saved apart
        return removed

    def switch(self, turn_id: int, step: int) -> int:
        """Show the previous (``step`` < 0) or next branch at the branch point whose shown
        tail starts at ``turn_id``; the conversation is read again from the file.  Returns
        the first turn of the branch now shown."""
        storage = _storage()
        session = self._session
        if session.conv is None or session.conv.open_turn is not None:
            raise storage.BranchError("Wait for the answer to finish before switching branches.")
        state = self.state_of(turn_id)
        target = state and (state.previous if step < 0 else state.next)
        if not target:
            raise storage.BranchError("No other branch here.")
        gone, back = storage.switch(session.store, target)
        session.reload()
        index = session.recall.index
        if index is not None:
            session.save(lambda: index.reread(gone + back), "Updating the memory index")
        if session.indexer is not None:
            session.indexer.queue_pending(session.conv)
        session.server.name_conversation()  # the branch shown has its own saved cache
        return target.first_turn_id

    def _forget(self, removed: list[Chunk]) -> list[Chunk]:
        """Their index entries left the table with the tail: drop their vectors too."""
        session = self._session
        if removed and session.recall.index is not None:
            session.save(lambda: session.recall.index.reread([c.id for c in removed]), "Updating the memory index")
        if session.indexer is not None:
            session.indexer.queue_pending(session.conv)
        return removed
