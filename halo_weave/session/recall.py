"""Recall, the session's part: what a message brings back from memory, and the recall
note its answer carries.

Recall's other pieces (docs/architecture.md, "Recall"): the plan within the budget
(:mod:`halo_weave.memory.recall_plan`), the conversation's log of what each message
recalled (:mod:`halo_weave.core.recall`), its rows in the file
(:mod:`halo_weave.storage.recall_rows`) and the window's marks
(:mod:`halo_weave.ui.heatmap_recall`, :mod:`halo_weave.ui.recall_line`).

The user's message brings back what its search found, with each match's anchors, within
the budget: the universal equation, with the live context counted as at most
``resurrection_keep_share`` of the max context (or of the window, pruning only for
room); just enough older context is pruned first when the plan needs it
(:mod:`halo_weave.memory.room`).  The message then keeps the part of it most relevant to
it, the rest going back to the graveyard (:mod:`halo_weave.memory.relevance`).  The
answer's requests then carry a recall note: a copy of what the question recalled, before
the question (:mod:`halo_weave.memory.recall_note`).
"""

from __future__ import annotations

import logging

import numpy as np

from ..conversation import Chunk
from ..memory import recall_note, relevance, room
from ..memory.recall_note import best_first
from ..memory.recall_plan import apply_plan
from ..memory.recall_plan import budget as equation_budget
from ..memory.room import plan_with_room

log = logging.getLogger("halo_weave.session")


class Recall:
    """Recall for a message and the recall note of its answer (``session.recall``).

    Owns: ``index`` (the open conversation's semantic index, searched for what a message
    brings back; None until one is loaded for it: :meth:`use_index`), ``kept``
    (how many chunks the last message brought back and kept), ``given_back`` (how many of
    those went back as less relevant: :meth:`keep_ranked`) and the note
    the open answer's requests carry (set by :meth:`with_note`, taken out of each
    token's attention by :meth:`without_note`, dropped by :meth:`end_note`).
    """

    def __init__(self, session) -> None:
        self._session = session
        self.index = None
        self.kept = 0
        self.given_back = 0
        self._note: recall_note.RecallNote | None = None
        #: Paragraphs embedded for a ranking, kept for the next (a read-ahead's, then Enter's).
        self._paragraphs = relevance.ParagraphVectors()

    def use_index(self, index) -> None:
        """Search and index the open conversation with ``index`` (loaded for it; None: none)."""
        self.index = index
        self._paragraphs = relevance.ParagraphVectors()

    @property
    def makes_room(self) -> bool:
        """Whether a message's resurrection prunes just enough to make its room
        (:mod:`halo_weave.memory.room`): pruning only for room, or a keep share below 1."""
        server = self._session.server
        return server.prunes_for_room or (room.shares_room(self._session.settings) and server.window_limit() > 0)

    def can_recall(self) -> bool:
        """Whether a search for the next message could bring anything back."""
        session = self._session
        index = self.index
        return bool(index is not None and index.available and index.entry_count > 0 and session.conv.graveyard())

    def skip(self) -> None:
        """The message searches nothing: it brings nothing back."""
        self.kept = self.given_back = 0

    def budget(self, user_tokens: int) -> int:
        """The universal equation: room left after the message and the answer."""
        session = self._session
        s = session.settings
        return equation_budget(session.conv, user_tokens, session.server.max_context, s.sampling.max_new_tokens,
                               s.recall.resurrection_budget_cap)

    def room_terms(self, user_tokens: int) -> dict:
        """The terms of the room a message makes (:func:`~halo_weave.memory.room.plan_with_room`):
        the model's window less the answer's opening framing, the room counted from
        :func:`~halo_weave.memory.room.floor` live tokens at most."""
        session = self._session
        s = session.settings
        return dict(user_tokens=user_tokens, max_context=session.server.window_limit() + s.sampling.max_new_tokens,
                    max_new_tokens=s.sampling.max_new_tokens, floor=room.floor(s), cap=s.recall.resurrection_budget_cap,
                    order=session.prune_order)

    def recall_for(self, index, matches, user_tokens: int) -> list[Chunk]:
        """Bring back what the search for the message found; the content chunks resurrected,
        best match first (:func:`~halo_weave.memory.recall_note.best_first`).

        ``index`` is the index the search ran on: results for one closed since are dropped.
        ``user_tokens``: the message's; the plan keeps room for its recall note too.
        """
        session = self._session
        self.kept = self.given_back = 0
        if index is not self.index or session.store is None or not matches:
            return []
        conv, s = session.conv, session.settings
        user_tokens += self.note_reserve
        try:
            if self.makes_room:
                # The window less the answer's opening framing: fit_model_window then has
                # nothing left to prune (it would take the dim chunks just brought back first).
                made = plan_with_room(conv, matches, index.plan, **self.room_terms(user_tokens))
                plan = made.plan
                if made.pruned:
                    session.save(lambda: session.store.save_chunks(conv, made.pruned), "Saving pruned chunks")
            else:
                plan = index.plan(conv, matches, self.budget(user_tokens))
            result = apply_plan(conv, plan, index.conn, s.recall.resurrection_brightness, session.store)
        except Exception as err:  # noqa: BLE001
            session.report(err, "Resurrecting from memory")
            return []
        self.kept = len(result.resurrected)
        order = best_first(plan, result.resurrected)
        return [conv.chunks[c] for c in order]

    # -- keeping the part of it most relevant to the message (halo_weave.memory.relevance)

    def keeps_part(self, recalled: list[Chunk]) -> bool:
        """Whether the message keeps only part of ``recalled`` (what :meth:`recall_for`
        brought back): the setting keeps less than all, and there are two to choose from."""
        return self._session.settings.recall.recall_keep_share < 1 and len(recalled) >= 2

    def ranking(self, recalled: list[Chunk], message: str):
        """A blocking call that ranks ``recalled`` for ``message``, the most relevant
        first (:func:`~halo_weave.memory.relevance.rank_with`: it embeds the message and
        the paragraphs no earlier ranking embedded): for the embedder's thread.  The
        texts are read here."""
        conv, index = self._session.conv, self.index
        ids = [c.id for c in recalled]
        texts = {c: conv.chunk_text(c) for c in ids}
        known = self._paragraphs
        return lambda: relevance.rank_with(index.embedder, ids, texts, message, known)

    def keep_ranked(self, order: list[int]) -> list[Chunk]:
        """Keep the first of ``order`` (:meth:`ranking`'s answer) up to
        ``recall_keep_share`` of its tokens; the rest goes back to the graveyard, saved.
        Returns the chunks kept, the most relevant first."""
        session = self._session
        conv = session.conv
        keep, back = relevance.choose(conv, [c for c in order if c in conv.chunks],
                                      session.settings.recall.recall_keep_share)
        pruned: list[Chunk] = []
        for chunk_id in back:
            pruned += conv.prune_chunk(chunk_id)
        if pruned:
            session.save(lambda: session.store.save_chunks(conv, pruned), "Saving pruned chunks")
        self.kept, self.given_back = len(keep), len(back)
        return [conv.chunks[c] for c in keep]

    def keep_relevant(self, recalled: list[Chunk], message: str) -> list[Chunk]:
        """:meth:`ranking` and :meth:`keep_ranked` in one blocking call (scripts; the
        window ranks on the embedder's thread); ``recalled`` as it was when the embedder
        fails (logged)."""
        self.given_back = 0
        if not self.keeps_part(recalled) or self.index is None:
            return recalled
        try:
            order = self.ranking(recalled, message)()
        except Exception as err:  # noqa: BLE001 - the message keeps all it recalled
            log.warning("what came back was not ranked: %s", err)
            return recalled
        return self.keep_ranked(order)

    # -- the recall note

    @property
    def writes_notes(self) -> bool:
        """Whether answers get recall notes: the setting, and note words in the framing."""
        session = self._session
        framing = session.conv.framing if session.conv is not None else session.framing
        return bool(session.settings.recall.recall_note and framing is not None and framing.note)

    @property
    def note_reserve(self) -> int:
        """Tokens a message's recall plans keep free for its note (0 without notes)."""
        return recall_note.SHAPE.tokens if self.writes_notes else 0

    def note_room(self, prompt_tokens: int) -> int:
        """Tokens a recall note may take beside a prompt of ``prompt_tokens`` (the
        model's window less the answer; the most a note takes when the window is unknown)."""
        limit = self._session.server.window_limit()
        return recall_note.SHAPE.tokens if limit <= 0 else max(0, limit - prompt_tokens)

    def note(self) -> recall_note.RecallNote | None:
        """The note the open answer's request carries: a copy of what its question
        recalled, before the question (:mod:`halo_weave.memory.recall_note`)."""
        conv = self._session.conv
        turn = conv.open_turn if conv is not None else None
        if turn is None or turn.role != "assistant" or not self.writes_notes:
            return None
        question = conv.turns.last("user")
        if question is None or question > turn.turn_id:
            return None
        return recall_note.for_message(conv, question, self.note_room(conv.live_token_count()))

    def with_note(self, ids: list[int]) -> list[int]:
        """A request's prompt ``ids`` with the open answer's note in it (kept for :meth:`without_note`)."""
        self._note = self.note()
        return self._note.insert(ids) if self._note is not None else ids

    @property
    def open_note(self) -> recall_note.RecallNote | None:
        """The note the last request of the open answer carried (None: none)."""
        return self._note

    def without_note(self, attention: np.ndarray | None, live_tokens: int) -> np.ndarray | None:
        """A token's ``attention`` over the prompt as sent, the note's part taken out."""
        note = self._note
        if attention is not None and note is not None and attention.size == live_tokens + len(note):
            return note.remove(attention)
        return attention

    def end_note(self) -> None:
        """The answer ended: its requests carry no note any more."""
        self._note = None
