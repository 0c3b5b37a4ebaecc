"""Test helpers for the store, and the child process of the crash-safety test.

* :func:`tokenize` is a small deterministic tokenizer (words, whitespace runs and
  ``<|special|>`` tokens); it is the input data of the store tests, not a stand-in for a
  component under test.
* :class:`ScriptedBackend` is a model server made of test data: it answers with the text
  it is given, that tokenizer's ids, and random attention over the context.
* :func:`child` chats
  forever through the app's own :class:`~halo_weave.session.ChatSession` and the scripted
  backend: user turn (saved DB-first), streamed answer (batched progress), end of turn
  (save, brightness, prune), the occasional resurrection by hand, and now and then
  Regenerate, Edit and resend, Continue, a flip to another answer version, an edit or
  regenerate of an earlier message (a branch) or a switch between branches, printing
  ``<role> <turn_id> <count> <sum>`` after each turn's commit returns (``retiring`` /
  ``growing`` before such a change, ``removed`` after it).  :func:`crash_trials` kills it with SIGKILL at random
  moments and checks that every reported turn survived, shown or in a stashed branch.
"""

from __future__ import annotations

import os
import random
import re
import signal
import sqlite3
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from halo_weave.core.chat_template import build_framing, system_text
from halo_weave.conversation import Conversation
from halo_weave.events import Capabilities, ModelInfo, TokenEvent
from halo_weave.session import ChatSession, token_events
from halo_weave.settings import Settings
from halo_weave.storage import branches
from halo_weave.store import ConversationStore, StoreError

_PIECES = re.compile(r"<\|[a-z_]+\|>|\n|[^\S\n]*[^\s<]+|[^\S\n]+|<")
WORDS = ("apple river stone maple orbit cedar lantern violet harbor quartz ember willow "
         "falcon meadow copper saffron glacier thimble walnut comet").split()


def tokenize(text: str) -> list[tuple[int, str]]:
    """Deterministic (token_id, text) pieces; ids depend only on the text."""
    return [(_token_id(piece), piece) for piece in _PIECES.findall(text)]


def _token_id(piece: str) -> int:
    value = 7
    for ch in piece:
        value = (value * 131 + ord(ch)) % 49_999
    return value + 1


FRAMING = build_framing(tokenize)


def settings(**changes) -> Settings:
    return Settings.of(min_chunk_tokens=16, max_context_tokens=0).replace(**changes)


def new_conversation(**changes) -> Conversation:
    conv = Conversation(settings(**changes), FRAMING)
    text = system_text("You are a careful assistant.")
    pieces = tokenize(text)
    conv.set_system_prompt(text, [i for i, _ in pieces], [t for _, t in pieces])
    return conv


def message(rng: random.Random, paragraphs: int, words: int = 30) -> str:
    """Random text of a few paragraphs (each long enough to become a chunk)."""
    return "\n\n".join(
        " ".join(rng.choice(WORDS) for _ in range(words)) for _ in range(paragraphs)
    )


class ScriptedBackend:
    """A model server made of test data: answers ``answer`` with random attention.

    Implements :class:`halo_weave.backends.interface.Backend` (no cache, one model, the
    framing chosen by the test); its stream yields typed token events, the attention of
    each covering the context as it is then.
    """

    kind = "halo"
    version = None
    label = "scripted test server"
    base_url = "scripted://"
    capabilities = Capabilities(attention=True, token_ids=True, exact_tokens=True,
                                prefix_cache="no", abort="yes", template="the test's")
    read_ahead = restores = saves_cache = takes_messages = False
    missing_model = None

    def __init__(self, rng: random.Random | None = None, answer: str = "") -> None:
        self.noise = np.random.default_rng((rng or random.Random(0)).getrandbits(32))
        self.answer = answer
        self.conversation: str | None = None
        self.models: list[str] = []
        self.model_id: str | None = None
        self.template = self.template_in_use = self.template_choice = None

    def tokenize(self, text: str, add_special_tokens: bool = False, *,
                 parse_special: bool = False) -> list[tuple[int, str]]:
        return tokenize(text)

    def detokenize(self, ids) -> str:
        raise NotImplementedError("the scripted tokenizer keeps no vocabulary")

    def count_tokens(self, text: str) -> tuple[int, bool]:
        return len(tokenize(text)), True

    def table_context(self, server_context: int) -> int:
        return server_context

    def assume_context(self, server_context: int) -> int:
        return server_context

    def model_info(self) -> ModelInfo:
        return ModelInfo("scripted", 1, 1, 1, 1, 0, None, None, None, True, {})

    def abort(self, request_id: str | None = None) -> bool:
        return True

    def stream(self, *, input_ids, **params):
        for n, (token_id, piece) in enumerate(tokenize(self.answer)):
            attention = self.noise.random(len(input_ids) + n, np.float32) ** 4
            yield TokenEvent(token_id, piece, attention / attention.sum())

    def prepare(self, input_ids, max_length: int = 0, request_id: str | None = None, timeout: float = 60.0,
                queries=None) -> dict:
        raise NotImplementedError("the scripted server takes no prompt ahead")

    def restore(self, input_ids, max_length: int = 0, conversation: str | None = None,
                request_id: str | None = None) -> dict:
        raise NotImplementedError("the scripted server keeps no cache")

    def save_cache(self) -> int:
        return 0

    def use_template(self, used, choice: str | None) -> None:
        self.template, self.template_in_use, self.template_choice = used.template, used, choice

    def close(self) -> None:
        pass


def add_user(conv: Conversation, text: str):
    pieces = tokenize(text)
    return conv.add_turn("user", [i for i, _ in pieces], [t for _, t in pieces])


def stream_answer(conv: Conversation, text: str, store: ConversationStore | None = None,
                  rng: random.Random | None = None):
    """Stream an answer token by token through a session (brightness, a save every 16)."""
    session = ChatSession(conv.settings)
    session.adopt(conv, store)
    backend = ScriptedBackend(rng, text)
    session.begin_answer()
    turn = conv.open_turn
    for event in backend.stream(**session.generation_request()):
        session.receive(event)
    conv.end_turn()
    return turn


def content_signature(conv: Conversation, turn_id: int) -> tuple[int, int]:
    """(token count, sum of token ids) of a turn's content chunks."""
    count = total = 0
    for chunk in conv.content_chunks(turn_id):
        ids = conv.chunk_tokens(chunk.id).token_ids
        count += len(ids)
        total += int(ids.sum())
    return count, total


# ---------------------------------------------------------------------- the child
def child(db: Path, seed: int, out=sys.stdout) -> None:
    """Chat forever into ``db``, writing a line to ``out`` after each committed turn."""
    rng = random.Random(seed)
    backend = ScriptedBackend(rng)
    session = ChatSession(settings(max_context_tokens=600))
    session.connect(backend, backend.model_info(), FRAMING)
    store = ConversationStore.open(db)
    conv = session.open(store)
    if not conv.system.text:
        text = system_text("You are a careful assistant.")
        session.prompt.apply(text, tokenize(text))
    print("ready", file=out, flush=True)

    def report(role: str, turn) -> None:
        print(role, turn.turn_id, *content_signature(session.conv, turn.turn_id), file=out, flush=True)

    while True:
        if not (_edit_last_exchange(session, rng, out, report) or _branch(session, rng, out, report)):
            pieces = session.server.tokenize(message(rng, rng.randint(1, 3), rng.randint(8, 30)))
            turn = session.add_user_message([i for i, _ in pieces], [t for _, t in pieces])
            report("user", turn)
        session.fit_model_window()
        backend.answer = message(rng, rng.randint(1, 4))
        session.begin_answer()
        for event in token_events(backend.stream(**session.generation_request()), backend):
            session.receive(event)
        turn = session.finish_turn("stop").turn  # saves the answer and brightness, prunes
        report("assistant", turn)
        _continue_or_flip(session, backend, rng, out, report)
        pruned = session.conv.graveyard()
        if pruned and rng.random() < 0.3:
            session.levers.resurrect(rng.choice(pruned).id, pin=False)
        if rng.random() < 0.2:
            store.save_tool_data("notes", {"turn": turn.turn_id})


def _edit_last_exchange(session, rng, out, report) -> bool:
    """Now and then, instead of a new question: regenerate the last answer or edit the last
    question (True when the conversation now ends with a question to answer)."""
    question, answer = session.exchange.last_exchange()
    if question is None or answer is None:
        return False
    roll = rng.random()
    if roll < 0.15:  # Regenerate: the answer becomes a version
        print("retiring", answer.turn_id, file=out, flush=True)
        session.exchange.regenerate()
        print("removed", answer.turn_id, file=out, flush=True)
        return True
    if roll < 0.25:  # Edit and resend
        print("retiring", answer.turn_id, file=out, flush=True)
        print("retiring", question.turn_id, file=out, flush=True)
        pieces = session.server.tokenize(message(rng, 1, rng.randint(5, 20)))
        turn = session.exchange.replace_question([i for i, _ in pieces], [t for _, t in pieces])
        print("removed", answer.turn_id, file=out, flush=True)
        print("removed", question.turn_id, file=out, flush=True)
        report("user", turn)
        return True
    return False


def _branch(session, rng, out, report) -> bool:
    """Now and then: edit an earlier question or regenerate an earlier answer (a new
    branch), or switch to another branch (True when the conversation now ends with a
    question to answer).  Nothing is reported as gone: a turn that leaves the
    conversation must be in a stashed branch (the checker looks there)."""
    conv = session.conv
    question, answer = session.exchange.last_exchange()
    earlier = [t for t in conv.turns if t not in {question and question.turn_id, answer and answer.turn_id}]
    roll = rng.random()
    if roll < 0.06 and earlier:
        turn_id = rng.choice(earlier)
        print("branching", turn_id, file=out, flush=True)
        if conv.turns[turn_id].role == "user":
            pieces = session.server.tokenize(message(rng, 1, rng.randint(5, 20)))
            report("user", session.branches.edit_message(turn_id, [i for i, _ in pieces], [t for _, t in pieces]))
        else:
            session.branches.regenerate_answer(turn_id)
        return True
    states = session.branches.states()
    if roll < 0.12 and states:
        state = rng.choice(list(states.values()))
        print("switching", state.first_turn_id, file=out, flush=True)
        session.branches.switch(state.first_turn_id, -1 if state.previous else 1)
        return conv is not session.conv and session.conv.turns[session.conv.turns.last()].role == "user"
    return False


def _continue_or_flip(session, backend, rng, out, report) -> None:
    """Now and then: continue the last answer, or flip to another version of it."""
    from halo_weave.storage import turn_edits

    roll = rng.random()
    _, answer = session.exchange.last_exchange()
    if roll < 0.2:
        try:
            print("growing", answer.turn_id, file=out, flush=True)
            session.resume_answer()
        except turn_edits.TurnEditError:
            return
        backend.answer = " " + message(rng, rng.randint(1, 2))
        for event in token_events(backend.stream(**session.generation_request()), backend):
            session.receive(event)
        turn = session.finish_turn("stop").turn
        report("assistant", turn)
    elif roll < 0.3:
        state = session.exchange.answer_versions()
        if state and state.count > 1:
            print("retiring", answer.turn_id, file=out, flush=True)
            turn = session.exchange.show_version(-1 if state.previous else 1)
            print("removed", answer.turn_id, file=out, flush=True)
            report("assistant", turn)


def _version_signatures(store) -> set[tuple[int, int]]:
    from halo_weave.storage.schema import unpack_ints

    return {(len(ids), int(ids.sum())) for ids in
            (unpack_ints(blob) for (blob,) in store.conn.execute("SELECT token_ids FROM answer_versions"))}


def _start_child(db: Path, seed: int) -> tuple[int, "object"]:
    """Fork a writer (already-imported modules make this ~1000x cheaper than exec)."""
    read_fd, write_fd = os.pipe()
    with warnings.catch_warnings():
        # numpy's BLAS threads make Python warn about fork; the child never uses BLAS.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: never returns into the caller
        os.close(read_fd)
        try:
            child(db, seed, os.fdopen(write_fd, "w"))
        finally:
            os._exit(1)
    os.close(write_fd)
    return pid, os.fdopen(read_fd)


def crash_trials(db: Path, trials: int = 50, seed: int = 0, max_delay: float = 0.15,
                 stats: dict | None = None) -> list[str]:
    """Kill a writing child ``trials`` times; returns the failures (empty when all passed).

    The child is a forked process killed with SIGKILL at a random moment after it is
    ready.  After each kill the file must open (integrity check included), rehydrate,
    and hold every turn the child had reported as committed, with the same content.
    ``stats`` (if given) counts the kills that cut an answer mid-stream.
    """
    stats = stats if stats is not None else {}
    stats.setdefault("mid_answer", 0)
    rng = random.Random(seed)
    failures: list[str] = []
    committed: dict[int, tuple[int, int]] = {}
    roles: dict[int, str] = {}
    retiring: set[int] = set()  # being regenerated, edited or flipped: here, or a version
    growing: set[int] = set()  # being continued: here, at least as long as committed
    for trial in range(trials):
        pid, lines = _start_child(db, seed * 1000 + trial)
        if lines.readline().strip() != "ready":
            os.waitpid(pid, 0)
            failures.append(f"trial {trial}: the writer did not start")
            continue
        time.sleep(rng.uniform(0.0, max_delay))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        for line in lines.read().splitlines():
            word, turn_id, *signature = line.split()
            turn_id = int(turn_id)
            stats[word] = stats.get(word, 0) + 1
            if word in ("branching", "switching"):
                continue
            if word == "retiring":
                retiring.add(turn_id)
            elif word == "growing":
                growing.add(turn_id)
            elif word == "removed":
                retiring.discard(turn_id)
                growing.discard(turn_id)
                committed.pop(turn_id, None)
            else:
                committed[turn_id] = (int(signature[0]), int(signature[1]))
                roles[turn_id] = word
                growing.discard(turn_id)
        lines.close()
        # Read-only peek, so the store below meets the file exactly as the kill left it.
        peek = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
        last = peek.execute("SELECT complete FROM turns ORDER BY turn_id DESC LIMIT 1").fetchone()
        peek.close()
        stats["mid_answer"] += bool(last and not last[0])
        try:
            with ConversationStore.open(db, create=False) as store:
                conv = store.load(settings(), FRAMING)
                versions = _version_signatures(store)
                stashed = branches.tail_turn_signatures(store)
                stats["stashed"] = max(stats.get("stashed", 0), len(stashed))
                for turn_id, signature in list(committed.items()):
                    if turn_id not in conv.turns and turn_id in stashed and turn_id not in retiring:
                        if stashed[turn_id][1:] != signature and turn_id not in growing:
                            failures.append(f"trial {trial}: stashed turn {turn_id} content differs")
                        continue
                    present = turn_id in conv.turns and conv.turns[turn_id].complete
                    if turn_id in retiring and not present:
                        # The change committed before the child could say so: an answer
                        # must then be among the versions (a replaced question is gone).
                        if roles.get(turn_id) == "assistant" and signature not in versions:
                            failures.append(f"trial {trial}: retired answer {turn_id} is in no version")
                        committed.pop(turn_id)
                    elif not present:
                        failures.append(f"trial {trial}: committed turn {turn_id} is missing")
                    elif turn_id in growing:
                        if content_signature(conv, turn_id)[0] < signature[0]:
                            failures.append(f"trial {trial}: continued turn {turn_id} lost tokens")
                        committed[turn_id] = content_signature(conv, turn_id)
                    elif content_signature(conv, turn_id) != signature:
                        failures.append(f"trial {trial}: turn {turn_id} content differs")
                retiring.clear()
                growing.clear()
        except StoreError as exc:
            failures.append(f"trial {trial}: {exc}")
    return failures

