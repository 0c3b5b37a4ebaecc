"""One chat session: the turn rules as plain methods, Qt-free (:class:`ChatSession`).

The app's :class:`~halo_weave.app.TurnController` decides only *when* (threads, timers,
signals) and calls these; the crash-safety test's writer (``tests/conversation_writer.py``)
drives the same methods with a scripted backend, so SIGKILL lands in these saves.

A turn, in order (docs/architecture.md, "The path of one message")::

    ids = session.draft_ids(index, matches, pieces)  while the user types (read-ahead,
    backend.prepare(ids)                             :mod:`.read_ahead`; ours only)
    pieces = session.tokenize(text)                  blocking: a thread in the app
    session.resurrect_for(matches, len(pieces))      search results, within the budget
    turn = session.add_user_message(ids, texts)      DB-first: saved before it is shown
    session.fit_model_window()                       prompt + answer within the model
    session.begin_answer(prefix)                     the assistant turn opens
    for event in token_events(backend.stream(**session.generation_request()), backend):
        session.receive(event)                       attention, append, save every 16
    session.finish_turn(reason, rate)                save, queue indexing, prune

The *backend* is any object with ``tokenize(text, add_special_tokens=False,
parse_special=False)`` → ``[(id, piece)]``, ``stream(input_ids=…, **params)`` → iterable of
:class:`~halo_weave.events.TokenEvent` (``.done`` afterwards), ``abort()``,
``model_info()``, and optionally ``capabilities`` with ``attention`` (True, False, None =
unknown until the first answer) and ``token_ids`` (False: events carry text only;
:func:`token_events` tokenizes it).  :class:`~halo_weave.kobold_client.KoboldClient` is one.

Errors of a save are handed to :attr:`report` (the app shows them and goes on; by
default they are raised), so one failed save never skips the rest of the turn.

The class is in :mod:`.chat`; the last exchange changed after the fact (Continue,
Regenerate, Edit and resend) in :mod:`.last_exchange`, any earlier message edited or
regenerated with branches in :mod:`.branches` (``session.branches``), tool steps and the attention
recording in :mod:`.rounds`, the prompt of a message being typed in :mod:`.read_ahead`, the user's levers on chunks in :mod:`.levers`, resurrection
for a message (and, pruning only for room, the prune that makes room) in :mod:`.resurrect`, the chat
template and the system prompt in :mod:`.system_prompt`.
"""

from ..events import token_events
from .chat import STOP_SEQUENCES, STREAM_SAVE_EVERY, ChatSession, Indexer, TurnEnd

__all__ = ["STOP_SEQUENCES", "STREAM_SAVE_EVERY", "ChatSession", "Indexer", "TurnEnd", "token_events"]
