"""The user's half of a turn: tokenize, wait briefly for indexing, resurrect, add, answer.

A mixin of :class:`~halo_weave.app.TurnController`; the answer itself is
:class:`~halo_weave.ui.generation_round.GenerationRounds`.  Order (DESIGN.md): tokenize
once on a thread → let pending embeddings land (≤ ``embed_wait_seconds``) → search and
resurrect within the budget (search on the embedder thread) → persist and index the user
turn before it is shown → make room in the model's window → stream the answer.
"""

from __future__ import annotations


class UserTurns:
    """From the send button to the first streamed token."""

    _answer_prefix: tuple | list = ()

    def send(self, text: str, answer_prefix: str = "") -> bool:
        """Start a turn with the user's message; False when it cannot start now.

        ``answer_prefix`` is put at the start of the answer before the model goes on
        (a prefill; a tool call in it runs first), e.g. for scripted demos and tests.
        """
        text = text.strip()
        reason = self.input_block_reason()
        if not text or reason:
            if reason:
                self.info.emit(reason)
            return False
        self._set_busy(True, "Reading your message…")
        self._stop_pending = False
        self._stream_count = 0
        client = self.client

        def tokenize():
            user = client.tokenize(text, add_special_tokens=False)
            return user, client.tokenize(answer_prefix, add_special_tokens=False) if answer_prefix else []

        self._call(
            tokenize,
            on_ok=lambda pieces: self._after_tokenize(text, *pieces),
            on_fail=lambda exc: self._turn_failed_early(exc, "Tokenizing your message"),
        )
        return True

    def _after_tokenize(self, text: str, pieces, prefix=()) -> None:
        ids = [int(i) for i, _ in pieces]
        texts = [t for _, t in pieces]
        self._answer_prefix = list(prefix)
        self._pending_send = lambda: self._resurrect_then_add(text, ids, texts)
        if self.index is not None and self._indexer.pending > 0:
            # Let the previous exchange's embeddings land, but not for long.
            self._set_busy(True, "Finishing memory indexing…")
            self._wait_timer.start(int(self.settings.embed_wait_seconds * 1000))
        else:
            self._run_pending_send()

    def _on_embed_idle(self) -> None:
        if self._wait_timer.isActive():
            self._wait_timer.stop()
            self._run_pending_send()

    def _run_pending_send(self) -> None:
        action, self._pending_send = self._pending_send, None
        if action is not None:
            action()

    def _resurrect_then_add(self, text: str, ids: list[int], texts: list[str]) -> None:
        index = self.index
        if index is None or not index.available or index.entry_count == 0 or not self.conv.graveyard():
            self.last_resurrected = 0
            self._add_user_turn(ids, texts)
            return
        self._set_busy(True, "Searching memory…")
        # The query embedding is the slow part: it runs on the embedder thread, ahead of
        # queued indexing; planning and resurrecting touch the conversation, so they run here.
        self._indexer.search(text, lambda matches, exc: self._resurrect(index, matches, ids, texts))

    def _resurrect(self, index, matches, ids, texts) -> None:
        from ..memory.resurrection import apply_plan

        conv = self.conv
        self.last_resurrected = 0
        if index is self._index and self.store is not None and matches:
            try:
                plan = index.plan(conv, matches, self.resurrection_budget(len(ids)))
                result = apply_plan(conv, plan, index.conn, self.settings.resurrection_brightness, self.store)
            except Exception as err:  # noqa: BLE001
                self.error.emit(err, "Resurrecting from memory")
            else:
                revived = [c for c in result.revived if not c.framing]
                self.last_resurrected = len(revived)
                if revived:
                    self.graveyard_changed.emit()
        self._add_user_turn(ids, texts)

    def resurrection_budget(self, user_tokens: int) -> int:
        """Seed 001's universal equation: room left after the message and the answer."""
        max_context = int(getattr(self.model_info, "max_context", 0) or 0)
        budget = max_context - self.conv.live_token_count() - user_tokens - self.settings.max_new_tokens
        if self.settings.resurrection_budget_cap > 0:
            budget = min(budget, self.settings.resurrection_budget_cap)
        return max(budget, 0)

    def _add_user_turn(self, ids: list[int], texts: list[str]) -> None:
        conv = self.conv
        turn = conv.add_turn("user", ids, texts)
        try:
            self.store.save_turn(conv, turn)  # DB-first: persisted before it is shown
        except Exception as exc:  # noqa: BLE001
            # Not on disk, so not shown and not answered; the user can send it again.
            self._turn_failed_early(exc, "Saving your message")
            return
        self._queue_indexing([c.id for c in conv.content_chunks(turn.turn_id)])
        self._fit_model_window()
        self._start_generation()  # shows the message (and any resurrection) with the answer

    def _fit_model_window(self) -> None:
        """Never send more than the model can read: prompt + answer within its context."""
        max_context = int(getattr(self.model_info, "max_context", 0) or 0)
        if max_context <= 0:
            return
        frame = sum(len(ids) for ids, _ in [self.framing.prefix.get("assistant", ([], []))]) if self.framing else 0
        limit = max_context - self.settings.max_new_tokens - frame
        if self.conv.live_token_count() > limit > 0:
            self._prune(limit)

