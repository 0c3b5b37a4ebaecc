"""One chat session: the turn rules as plain methods, Qt-free (:class:`ChatSession`).

The app's :class:`~halo_weave.app.TurnController` decides only *when* (threads, timers,
signals) and calls these; the crash-safety test's writer (``tests/conversation_writer.py``)
drives the same methods with a scripted backend, so SIGKILL lands in these saves.

A turn, in order (docs/architecture.md, "The path of one message"), is
:class:`~.pipeline.TurnPipeline` (``session.pipeline``): the window calls its steps from
its threads and signals, scripts and benchmarks run them with ``send`` and ``answer``::

    plan = session.server.draft_plan(index, matches, pieces)  while the user types
    order = session.recall.ranking(plan.recalled, draft)()    (embedder thread; when
                                                              session.recall.keeps_part)
    ids = session.server.draft_prompt(plan, pieces, order, draft)
    backend.prepare(ids)                                    (read-ahead; ours only)
    message = session.pipeline.read(text)            tokenize, blocking: a thread in the app
    session.pipeline.recall(message, index, matches) within the budget (then ``keep``)
    session.pipeline.save(message)                   DB-first: saved before it is shown
    session.pipeline.saved(message)                  indexing queued, prompt + answer fit the model
    session.pipeline.open_answer(message.prefix)     the assistant turn opens
    for event in token_events(backend.stream(**session.pipeline.request()), backend):
        session.pipeline.receive(event)              attention, append, save every 16
    session.pipeline.finish(reason, rate)            save, queue indexing, prune

The *backend* is a :class:`~halo_weave.backends.interface.Backend` (the scripted test
backends implement what a turn uses: ``tokenize``, ``stream``, ``abort``, ``model_info``,
``capabilities``).

Errors of a save are handed to :attr:`ChatSession.report` (the app shows them and goes
on; by default they are raised), so one failed save never skips the rest of the turn;
:meth:`ChatSession.save` is the one saver every part goes through.

The class is in :mod:`.chat`; its parts, each a small class owning its own state and
reached as ``session.<part>``:

* ``answer`` (:class:`.answer.OpenAnswer`): the open answer's progress, speed and end;
* ``rounds`` (:class:`.rounds.Rounds`): tool steps and the attention recording;
* ``recall`` (:class:`.recall.Recall`): the semantic index, what a
  message recalls, its recall note;
* ``prompt`` (:class:`.system_prompt.SystemPrompt`): the conversation's system prompt;
* ``server`` (:class:`.server_use.ServerUse`): the template and model the conversation
  asks for, the model's window and tokenizer, and the server's cache of it (warm-up,
  read-ahead: :mod:`.read_ahead`);
* ``exchange`` (:class:`.last_exchange.LastExchange`): Continue, Regenerate, Edit and
  resend, answer versions;
* ``branches`` (:class:`.branches.Branches`): any earlier message edited or regenerated
  with branches, and switching between them;
* ``levers`` (:class:`.levers.Levers`): resurrect, pin, merge and prune by hand;
* ``documents`` (:class:`.documents.Documents`): a file attached as a ``document`` turn,
  its paragraphs in the memory (or live);
* ``pipeline`` (:class:`.pipeline.TurnPipeline`): a turn's steps in order, owning none
  of their state (a message's travels in its :class:`.pipeline.Message`).
"""

from ..events import token_events
from .chat import STOP_SEQUENCES, STREAM_SAVE_EVERY, ChatSession, Indexer, TurnEnd
from .pipeline import Answered, Message, TurnPipeline

__all__ = ["STOP_SEQUENCES", "STREAM_SAVE_EVERY", "Answered", "ChatSession", "Indexer", "Message", "TurnEnd",
           "TurnPipeline", "token_events"]
