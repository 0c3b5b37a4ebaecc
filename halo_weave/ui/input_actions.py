"""The window's message box and the changes to the conversation: send, stop, continue,
regenerate, edit the last message or any earlier one, switch branches.

A mixin of :class:`~.main_window.MainWindow`; the state of the box and of the buttons is
derived from the controller's alone (:meth:`InputActions._sync_input`).
"""

from __future__ import annotations

from PySide6.QtGui import QTextCursor

#: The message box's placeholder whenever the user can type and send.
IDLE_PLACEHOLDER = "Message — Enter sends, Shift+Enter new line, Esc stops"

class InputActions:
    """Intents from the message box and the answer bar, and the box's state.

    Owns ``_editing_turn``: the message whose new words the box holds (None: a new one).
    """

    def _start_input_actions(self) -> None:
        self._editing_turn: int | None = None

    # ------------------------------------------------------------------ input
    def send(self) -> None:
        text = self.input.toPlainText()
        if not text.strip():
            return
        if self._editing_turn is not None:
            sent = self.controller.actions.edit_message(self._editing_turn, text)
        else:
            sent = self.controller.message.send(text)
        if sent:
            self._editing_turn = None
            self.input.clear()
            self.heatmap.follower.jump_to_latest()  # the user wants to see the answer

    def _on_escape(self) -> None:
        if self._editing_turn is not None:
            self._editing_turn = None
            self.input.clear()
            self._sync_input()
        else:
            self.controller.turn.stop()

    # ------------------------------------------------------------------ the last exchange
    def continue_answer(self) -> None:
        if self.controller.actions.continue_answer():
            self.heatmap.follower.jump_to_latest()

    def regenerate(self) -> None:
        if self.controller.actions.regenerate():
            self.heatmap.follower.jump_to_latest()

    def edit_last_message(self) -> None:
        """Put the last message into the box to change it; Enter resends, Esc cancels."""
        question, _ = self.controller.session.exchange.last_exchange()
        if question is None:
            reason = self.controller.actions.can_change_last_exchange()
            self.messages.info(reason or "There is no message of yours to edit.")
            return
        self.edit_message(question.turn_id)

    def edit_message(self, turn_id: int) -> None:
        """Put a message of the user's into the box to change it: Enter sends the new
        words (an earlier message starts a new branch there), Esc cancels."""
        actions = self.controller.actions
        reason = actions.can_change_last_exchange()
        text = actions.message_text(turn_id) if not reason else ""
        if not text:
            self.messages.info(reason or "There is no message of yours to edit.")
            return
        self._editing_turn = turn_id
        live = [c.id for c in self.controller.conv.content_chunks(turn_id) if c.live]
        if live and turn_id != self.controller.conv.turns.last("user"):
            self.heatmap.finder.show_chunk(live[0])  # the message being changed, outlined
        self.input.setPlainText(text)
        self.input.moveCursor(QTextCursor.MoveOperation.End)
        self.input.setFocus()
        self._sync_input()

    def regenerate_answer(self, turn_id: int) -> None:
        """Answer again (an earlier answer: a new branch there)."""
        if self.controller.actions.regenerate_answer(turn_id):
            self.heatmap.follower.jump_to_latest()

    def switch_branch(self, turn_id: int, step: int) -> None:
        """Show the previous or next branch where branches part at ``turn_id``, and scroll
        to where it starts."""
        first = self.controller.actions.switch_branch(turn_id, step)
        conv = self.controller.conv
        if first is None or conv is None or first not in conv.turns:
            return
        live = [c.id for c in conv.content_chunks(first) if c.live]
        if live:
            self.heatmap.finder.show_chunk(live[0])
        self.conversation_list.refresh()  # its count of messages

    def _sync_turn_actions(self) -> None:
        """Enable Continue / Regenerate / Edit / versions for what the conversation ends with."""
        c, menus = self.controller, self.menus
        free = not c.gate.busy and not c.gate.input_block_reason()
        question, answer = c.session.exchange.last_exchange()
        state = c.actions.answer_versions() if answer is not None else None
        has_versions = state is not None and state.count > 1
        enabled = {
            "continue": free and answer is not None,
            "regenerate": free and question is not None and answer is not None,
            "edit": free and question is not None,
            "previous": free and has_versions and state.previous is not None,
            "next": free and has_versions and state.next is not None,
        }
        self.answer_bar.sync(enabled, f"{state.number} / {state.count}" if has_versions else "")
        for name, action in (("continue", menus.continue_action), ("regenerate", menus.regenerate_action),
                             ("edit", menus.edit_action), ("previous", menus.previous_version_action),
                             ("next", menus.next_version_action)):
            action.setEnabled(enabled[name])
        self.answer_bar.setVisible(question is not None or answer is not None)

    def _on_message_returned(self, text: str) -> None:
        """A message that could not be sent goes back into the input box (unless the
        user has started typing another one)."""
        if not self.input.toPlainText().strip():
            self.input.setPlainText(text)

    def _on_busy(self, _busy: bool, _reason: str) -> None:
        self._sync_input()

    def _sync_input(self) -> None:
        """Derive the message box, its placeholder and the buttons from the controller's
        state alone (busy, why input waits, editing), so no path leaves a stale one."""
        c = self.controller
        busy, reason = c.gate.busy, c.gate.input_block_reason()
        ready = not busy and not reason
        self.input.setReadOnly(not ready)
        self.send_button.setEnabled(ready)
        self.stop_button.setEnabled(c.turn.stoppable)
        self.menus.stop_action.setEnabled(c.turn.stoppable)
        for action in (self.menus.new_action, self.menus.open_action, self.menus.import_action):
            action.setEnabled(not busy)
        if c.turn.generating:
            self.stats_bar.show_connection("generating")
        elif self.stats_bar.connection_state() == "generating":
            self.stats_bar.show_connection(c.link.state)
        if self._editing_turn is not None and ready:
            shown = ("Editing your last message — Enter sends it again (its answer stays as a version), Esc cancels"
                     if self.controller.session.branches.is_last_exchange(self._editing_turn) else
                     "Editing an earlier message — Enter sends it as a new branch from there "
                     "(the old one stays: ‹ 1 / 2 › on the message), Esc cancels")
        else:
            shown = reason
        self.reason.setText(shown)
        self.reason.setVisible(bool(shown))
        self.input.setPlaceholderText(IDLE_PLACEHOLDER if ready else reason)
        self._sync_turn_actions()
        if ready and not self._closed:
            self.input.setFocus()
