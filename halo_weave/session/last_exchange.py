"""The last exchange changed after the fact: Continue, Regenerate, Edit and resend, and
the answer versions Regenerate keeps.

Each change is one transaction of :mod:`halo_weave.storage.turn_edits` (file first, then
memory); then the answer streams as any other (``begin_answer`` / ``generation_request``
/ ``receive`` / ``finish_turn``; for Continue, ``ChatSession.resume_answer`` instead of
``begin_answer``).  :class:`LastExchange` is the session's part ``session.exchange``.
"""

from __future__ import annotations

from ..conversation import Chunk, Turn


def _turn_edits():
    """storage.turn_edits, imported on first use: it brings the store (and sqlite-utils),
    which the window does not need before its first paint."""
    from ..storage import turn_edits

    return turn_edits


class LastExchange:
    """The last question and its answer, changed after the fact (``session.exchange``).

    Owns no state of its own: the turns are the conversation's, the versions the file's;
    it reads and changes them through its session's conversation, store and index.
    """

    def __init__(self, session) -> None:
        self._session = session

    def last_exchange(self) -> tuple[Turn | None, Turn | None]:
        """(the last question, its answer or None); (None, None) while a turn is open."""
        conv = self._session.conv
        if conv is None or conv.open_turn is not None or not len(conv.turns):
            return None, None
        return _turn_edits().last_exchange(conv)

    def answer_versions(self):
        """Where the last answer stands among its versions (a ``VersionState``; None without
        an answer)."""
        session = self._session
        if session.store is None or self.last_exchange()[1] is None:
            return None
        return _turn_edits().version_state(session.conv, session.store)

    def question_text(self) -> str:
        """The words of the last question (to edit them)."""
        return _turn_edits().question_text(self._session.conv, self._session.store)

    def regenerate(self) -> list[Chunk]:
        """Take the last answer out (it joins the versions); then answer the question again."""
        return self._forget(_turn_edits().retire_answer(self._session.conv, self._session.store))

    def show_version(self, step: int) -> Turn:
        """Put the previous (``step`` < 0) or next version of the last answer in its place."""
        edits = _turn_edits()
        state = self.answer_versions()
        target = state and (state.previous if step < 0 else state.next)
        if not target:
            raise edits.TurnEditError("No other version of this answer.")
        turn, removed = edits.show_version(self._session.conv, self._session.store, target)
        self._forget(removed)
        return turn

    def replace_question(self, ids: list[int], texts: list[str]) -> Turn:
        """Edit and resend: the last question's new words (its answer joins the versions)."""
        session = self._session
        turn, removed = _turn_edits().replace_question(session.conv, session.store, ids, texts)
        self._forget(removed)
        if session.indexer is not None:
            session.indexer.queue(session.conv, [c.id for c in session.conv.content_chunks(turn.turn_id)])
        return turn

    def reopen_answer(self) -> Turn:
        """Continue: reopen the last answer (file first); new tokens join its last chunk."""
        return _turn_edits().begin_continue(self._session.conv, self._session.store)

    def _forget(self, removed: list[Chunk]) -> list[Chunk]:
        """Drop removed chunks from the index; re-embed what changed context."""
        session = self._session
        if removed and session.recall.index is not None:
            session.save(lambda: session.recall.index.remove([c.id for c in removed]), "Updating the memory index")
        if session.indexer is not None:
            session.indexer.queue_pending(session.conv)
        return removed
