"""Continue, Regenerate, Edit: changes to the last exchange, each one transaction.

Qt-free; the turn sequence that streams the new tokens calls these, then generates as
for any answer.  Every function changes the database in one transaction first, then the
conversation in memory to match, so a crash at any moment leaves a file that opens
consistent: before the commit nothing changed, after it the file holds exactly the new
state (an answer being continued or regenerated is an incomplete last turn, which
:meth:`~halo_weave.store.ConversationStore.load` closes like any interrupted answer).

Regenerate keeps earlier answers as **versions** (SillyTavern's swipes) in the file's
``answer_versions`` table, not in the graveyard: a rejected answer must not come back by
itself through the semantic index or take a place in the context, and the user flips
between versions of the one answer instead of hunting for it among pruned paragraphs.
Versions are ordered by when each answer was generated; flipping puts the chosen one back
in the conversation and the one shown so far among the versions.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..conversation import Chunk, Conversation, Turn
from ..errors import ConversationError
from . import recall_rows
from .handle import StoreHandle
from .schema import pack_tokens, unpack_tokens


@dataclass(frozen=True)
class AnswerVersion:
    """One stored version of an answer (not in the conversation now)."""

    id: int
    user_turn_id: int
    created_at: float
    question: str | None
    token_ids: np.ndarray
    texts: list[str]

    @property
    def text(self) -> str:
        return "".join(self.texts)


@dataclass(frozen=True)
class VersionState:
    """Where the answer shown stands among its versions ("2 of 3")."""

    number: int
    count: int
    previous: AnswerVersion | None
    next: AnswerVersion | None


class TurnEditError(ConversationError):
    """The change does not apply now (``str`` is meant for the user)."""


# ---------------------------------------------------------------------- reading
def last_exchange(conv: Conversation) -> tuple[Turn | None, Turn | None]:
    """(the last user turn, the answer after it or None); (None, None) when the last turn
    is an attached document (the exchange before it is no longer the last)."""
    last_id = conv.turns.last()
    if last_id is None:
        return None, None
    last = conv.turns[last_id]
    if last.role == "document":
        return None, None
    if last.role == "user":
        return last, None
    question_id = conv.turns.last("user")
    if question_id is None:
        return None, last
    ids = list(conv.turns)  # ids only, ascending: the question must come right before
    before = conv.turns[question_id] if len(ids) > 1 and ids[-2] == question_id else None
    return before, last


def versions(store: StoreHandle, user_turn_id: int) -> list[AnswerVersion]:
    """The stored versions of the answer to a question, oldest first."""
    rows = store.conn.execute(
        "SELECT id, user_turn_id, created_at, question, token_ids, brightness, text, text_lengths "
        "FROM answer_versions WHERE user_turn_id = ? ORDER BY created_at, id", (user_turn_id,))
    out = []
    for vid, turn_id, created, question, *blobs in rows:
        tokens = unpack_tokens(*blobs)
        out.append(AnswerVersion(vid, turn_id, created, question, tokens.token_ids, tokens.texts))
    return out


def version_state(conv: Conversation, store: StoreHandle) -> VersionState | None:
    """The shown answer's place among its versions; None without a last answer."""
    question, answer = last_exchange(conv)
    if question is None or answer is None:
        return None
    stored = versions(store, question.turn_id)
    earlier = [v for v in stored if v.created_at <= answer.created_at]
    later = [v for v in stored if v.created_at > answer.created_at]
    return VersionState(len(earlier) + 1, len(stored) + 1, earlier[-1] if earlier else None,
                        later[0] if later else None)


# ---------------------------------------------------------------------- changing
def _content_tokens(conv: Conversation, store: StoreHandle, turn: Turn) -> tuple[np.ndarray, list[str]]:
    """Token ids and texts of a turn's content, live or pruned."""
    ids: list[np.ndarray] = []
    texts: list[str] = []
    chunks = conv.content_chunks(turn.turn_id)
    missing = [c.id for c in chunks if conv.tokens_in_memory(c.id) is None]
    loaded = store.load_chunk_tokens(missing) if missing else {}
    for chunk in chunks:
        tokens = conv.tokens_in_memory(chunk.id) or loaded[chunk.id]
        ids.append(np.asarray(tokens.token_ids))
        texts += list(tokens.texts)
    return (np.concatenate(ids) if ids else np.zeros(0, np.int32)), texts


def _delete_turn_rows(store: StoreHandle, turn: Turn) -> None:
    """Delete a turn, its chunks, their tokens and index entries (inside a transaction)."""
    conn = store.conn
    chunk_ids = [(c,) for c in turn.chunk_ids]
    conn.executemany("DELETE FROM semantic_entries WHERE chunk_id = ?", chunk_ids)
    conn.executemany("DELETE FROM chunk_tokens WHERE chunk_id = ?", chunk_ids)
    conn.executemany("DELETE FROM chunks WHERE id = ?", chunk_ids)
    conn.execute("DELETE FROM turns WHERE turn_id = ?", (turn.turn_id,))
    recall_rows.delete_turn(conn, turn.turn_id)


def _insert_version(store: StoreHandle, user_turn_id: int, created_at: float,
                    question: str | None, ids: np.ndarray, texts: list[str]) -> None:
    blobs = pack_tokens(ids, texts, np.zeros(len(ids), np.int32))
    store.conn.execute(
        "INSERT INTO answer_versions (user_turn_id, created_at, question, token_ids, brightness, text, "
        "text_lengths) VALUES (?, ?, ?, ?, ?, ?, ?)", (user_turn_id, created_at, question, *blobs))


def retire_answer(conv: Conversation, store: StoreHandle) -> list[Chunk]:
    """Regenerate, first half: move the last answer among the versions of its question.

    One transaction; returns the removed chunks (drop their index vectors).  The
    conversation then ends with the question, ready for a new answer.
    """
    question, answer = last_exchange(conv)
    if question is None or answer is None or conv.open_turn is not None:
        raise TurnEditError("There is no finished answer to regenerate.")
    ids, texts = _content_tokens(conv, store, answer)
    with store.transaction():
        _insert_version(store, question.turn_id, answer.created_at, None, ids, texts)
        _delete_turn_rows(store, answer)
        store.set_meta("updated_at", time.time())
    return conv.remove_turns_from()


def show_version(conv: Conversation, store: StoreHandle, version: AnswerVersion) -> tuple[Turn, list[Chunk]]:
    """Flip: put ``version`` in the conversation as the answer, the shown one among the versions.

    One transaction.  Returns the new answer turn and the removed chunks.
    """
    question, answer = last_exchange(conv)
    if question is None or answer is None or conv.open_turn is not None or version.user_turn_id != question.turn_id:
        raise TurnEditError("Only the last answer has versions to flip through.")
    ids, texts = _content_tokens(conv, store, answer)
    with store.transaction():
        _insert_version(store, question.turn_id, answer.created_at, None, ids, texts)
        _delete_turn_rows(store, answer)
        store.conn.execute("DELETE FROM answer_versions WHERE id = ?", (version.id,))
        removed = conv.remove_turns_from()
        turn = conv.begin_turn("assistant", created_at=version.created_at)
        for token_id, text in zip(version.token_ids.tolist(), version.texts):
            conv.append_token(int(token_id), text)
        conv.end_turn()
        store.save_turn(conv, turn)
    return turn, removed


def begin_continue(conv: Conversation, store: StoreHandle) -> Turn:
    """Continue, first half: reopen the last answer (its closing framing goes), one transaction.

    Tokens then stream into the same turn and its last chunk, exactly as if the answer had
    not stopped; :meth:`TurnWriter.end` and ``store.save_turn`` close it again.
    """
    question, answer = last_exchange(conv)
    if answer is None or conv.open_turn is not None:
        raise TurnEditError("There is no answer to continue.")
    content = conv.content_chunks(answer.turn_id)
    if not content or not content[-1].live:
        raise TurnEditError("The end of the last answer was pruned; it cannot be continued.")
    closing = [conv.chunks[c] for c in answer.chunk_ids
               if conv.chunks[c].framing and conv.chunks[c].start > content[-1].start]
    with store.transaction():
        conn = store.conn
        conn.executemany("DELETE FROM chunk_tokens WHERE chunk_id = ?", [(c.id,) for c in closing])
        conn.executemany("DELETE FROM chunks WHERE id = ?", [(c.id,) for c in closing])
        conn.execute("UPDATE turns SET complete = 0 WHERE turn_id = ?", (answer.turn_id,))
        if closing:  # the new tokens take the framing's positions (see TurnWriter.reopen_answer)
            store.set_meta("next_position", min(c.start for c in closing))
    turn, _ = conv.reopen_answer()
    return turn


def replace_question(conv: Conversation, store: StoreHandle, token_ids, texts) -> tuple[Turn, list[Chunk]]:
    """Edit and resend: the last question gets new words; its answer becomes a version.

    One transaction: the old answer joins the versions (with the old wording, so it is
    clear what it answered), the old question goes, the new one is saved (DB-first, as a
    typed message is) and inherits the versions and what the old one recalled.  Returns
    the new user turn and the removed chunks.
    """
    question, answer = last_exchange(conv)
    if question is None or conv.open_turn is not None:
        raise TurnEditError("There is no message of yours to edit.")
    old_ids, old_texts = _content_tokens(conv, store, question)
    old_wording = "".join(old_texts)
    recalled = conv.recalls.of(question.turn_id)
    removed: list[Chunk] = []
    with store.transaction():
        if answer is not None:
            answer_ids, answer_texts = _content_tokens(conv, store, answer)
            _insert_version(store, question.turn_id, answer.created_at, old_wording, answer_ids, answer_texts)
            _delete_turn_rows(store, answer)
            removed += conv.remove_turns_from()
        store.conn.execute("UPDATE answer_versions SET question = COALESCE(question, ?) WHERE user_turn_id = ?",
                           (old_wording, question.turn_id))
        _delete_turn_rows(store, question)
        removed += conv.remove_turns_from()
        turn = conv.add_turn("user", token_ids, texts)
        conv.move_recall(question.turn_id, turn.turn_id, recalled)
        store.save_turn(conv, turn)
        store.conn.execute("UPDATE answer_versions SET user_turn_id = ? WHERE user_turn_id = ?",
                           (turn.turn_id, question.turn_id))
    return turn, removed


def question_text(conv: Conversation, store: StoreHandle) -> str:
    """The words of the last question (to edit them)."""
    question, _ = last_exchange(conv)
    if question is None:
        raise TurnEditError("There is no message of yours to edit.")
    return "".join(_content_tokens(conv, store, question)[1])
