"""What every engine behind the server offers, and the parts they share.

Two engines serve the same wire protocol:
:class:`halo_weave.server.transformers_engine.TransformersEngine` (transformers + torch, the
reference, any Hugging Face checkpoint) and
:class:`halo_weave.server.llamacpp.LlamaEngine` (llama.cpp, GGUF files, several times
faster on a CPU).  Both subclass :class:`EngineBase`, which owns request validation,
the one-generation-at-a-time lock, abort, and stop tokens; an engine adds its model
facts (:meth:`EngineBase.describe`), tokenization, and a KV cache object (``kv``) with

* ``sync(ids, should_stop, step=None) -> SyncReport | None``: make the cache hold exactly ``ids``
  (reusing what it can, see :mod:`halo_weave.server.kv_surgery`); ``None`` if stopped;
* ``step(ids, attention, per_layer) -> (logits, row)``: run ``ids`` after the cache;
  ``logits`` of the last one (1-D NumPy), ``row`` the attention of the last query over
  every cached position (``[positions]`` mean over layers and heads, or
  ``[layers, heads, positions]``), ``None`` without attention.

Importing this module loads neither torch nor llama.cpp.
"""

from __future__ import annotations

import itertools
import threading
import time

from ..rules.attention_formats import ATTENTION_FORMATS as FORMATS
from .errors import EngineBusy, RequestError
from .generation import Generation, GenerationRequest, pack
from .kv_files import common_prefix
from .kv_surgery import EXACT
from .saved_caches import SavedCaches
from .sampling import sampler_settings

AGGREGATED = "aggregated"
PER_LAYER = "per_layer"
#: The attention formats a request may name (:data:`halo_weave.rules.ATTENTION_FORMATS`).
ATTENTION_FORMATS = tuple(FORMATS)

#: Stop-token names looked up in the vocabulary besides the configured EOS ids.
STOP_TOKEN_NAMES = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end|>", "</s>")

#: ChatML, used when the model ships no template but has the ChatML tokens.
CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


#: Seconds a generate waits for a read-ahead (:meth:`EngineBase.prepare`) it has asked to
#: stop: the read-ahead ends at its next batch of tokens (a pasted page at most a few
#: seconds of prompt on two cores), and what it ran is the generate's own prompt.
PREEMPT_WAIT_S = 30.0

#: New tokens a read-ahead runs per batch: a generate that stops it waits for one such
#: batch (under a second on two cores) rather than for a whole ``n_batch`` (several
#: seconds); the smaller batches read about 5 % slower.
READ_AHEAD_STEP = 64

#: Seconds between a waiting read-ahead's looks at who holds the model (a read-ahead that
#: took it meanwhile is stopped in turn).
PREPARE_POLL_S = 0.05

#: Seconds a generate waits for a restore (:meth:`EngineBase.restore`) to finish: a generate
#: never stops a restore (reading a file back is one copy; its fallback prefill is the
#: generate's own prompt), and a prefill of a whole conversation may take minutes on a
#: slow machine.
RESTORE_WAIT_S = 600.0

#: Seconds a read-ahead waits for the model: a generation keeps it for a moment after its
#: last token (it packs the cache while the client is already typing), so a read-ahead
#: sent right after an answer must not be turned away; a longer wait means another
#: client's answer is running, and a read-ahead is not worth queueing behind it.
PREPARE_WAIT_S = 2.0


class Preparation:
    """A read-ahead or a restore holding the model (see :meth:`EngineBase.prepare` and
    :meth:`EngineBase.restore`); a generate stops a read-ahead, and waits for a restore."""

    def __init__(self, request_id: str | None, *, yields: bool = True, on_abort=None, ticket: int = 0) -> None:
        self.request_id = request_id
        #: A read-ahead's place in the order read-aheads came (a newer one stops an older).
        self.ticket = ticket
        #: Whether a generate stops it (a read-ahead) or waits for it (a restore).
        self.yields = yields
        self._abort = threading.Event()
        self._on_abort = on_abort  # stops the batch under way (the cache's interrupt)

    def abort(self, wanted: list[int] | None = None) -> None:
        """Stop after the current batch, or within it (``wanted``: the prompt that comes
        next, which keeps a batch it would run too; see ``LlamaCache.interrupt``)."""
        self._abort.set()
        if self._on_abort is not None:
            self._on_abort(wanted)

    @property
    def aborted(self) -> bool:
        return self._abort.is_set()


class EngineBase(SavedCaches):
    """Validation, locking and abort shared by the engines (see the module docstring).

    Subclasses set ``name``, ``device``, ``context_size``, ``default_attention_format``,
    ``text`` (a :class:`~halo_weave.server.tokens.TokenText`), ``stop_ids``, ``kv`` and
    ``kind``, implement :meth:`encode`, :meth:`describe`, ``num_layers``, ``num_heads``,
    and call :meth:`_init_locks` while initialising.
    """

    kind = "engine"
    #: How prunes and insertions are applied: ``"surgery"`` or ``"exact"`` (re-run).
    kv_mode = "surgery"
    #: Why the model served is not the one asked for (set by :func:`.engine_choice.load_engine`).
    model_note: str | None = None

    def _init_locks(self) -> None:
        self._lock = threading.Lock()
        self._tokenizer_lock = threading.Lock()
        self._prepares = itertools.count(1)  # tickets of read-aheads, in the order they came
        self._newest_prepare = 0
        self._answers = 0  # generates asked for so far: a read-ahead older than one gives way
        self._running: Generation | None = None
        self._init_saved_caches()

    # ---------------------------------------------------------------- tokens

    @property
    def vocab_size(self) -> int:
        return self.text.vocab_size

    def encode(self, text: str, add_special_tokens: bool = False, parse_special: bool = False) -> list[int]:
        """Token ids of ``text``; ``parse_special``: its control-token strings (``<|im_end|>``)
        become those tokens, otherwise they are text like any other."""
        raise NotImplementedError

    def tokenize(self, text: str, add_special_tokens: bool = False,
                 parse_special: bool = False) -> list[tuple[int, str]]:
        """``(token_id, piece)`` pairs; pieces join to :meth:`detokenize` of the ids."""
        return list(zip(*self.token_columns(text, add_special_tokens, parse_special)))

    def token_columns(self, text: str, add_special_tokens: bool = False,
                      parse_special: bool = False) -> tuple[list[int], list[str]]:
        """The ids and pieces of :meth:`tokenize` as two lists (no per-token objects for
        the garbage collector to walk: a million of them stalled every thread)."""
        with self._tokenizer_lock:
            ids = self.encode(text, add_special_tokens=add_special_tokens, parse_special=parse_special)
        return ids, self.text.pieces(ids)

    def count_prompt(self, prompt: str, add_bos: bool = True) -> list[int]:
        """The ids KoboldCPP's ``/api/extra/tokencount`` answers for ``prompt``: read as a
        text prompt is (control-token strings parsed), with the model's BOS in front
        unless ``add_bos`` is false or the prompt already starts with it."""
        with self._tokenizer_lock:
            ids = self.encode(prompt, parse_special=True)
        bos = self.describe().get("bos_token_id")
        if add_bos and isinstance(bos, int) and bos >= 0 and ids[:1] != [bos]:
            ids.insert(0, bos)
        return ids

    def detokenize(self, ids) -> str:
        """Text of ``ids`` (control tokens dropped); raises RequestError on bad ids."""
        ids = self.check_ids(ids, allow_empty=True)
        return self.text.decode(ids)

    def check_ids(self, ids, *, allow_empty: bool = False) -> list[int]:
        """``ids`` as a list of in-vocabulary ints, or :class:`RequestError`."""
        if not isinstance(ids, (list, tuple)):
            raise RequestError("token ids must be a list of integers")
        if not ids and not allow_empty:
            raise RequestError("token id list is empty")
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, int):
                raise RequestError(f"token id {i!r} is not an integer")
            if not 0 <= i < self.vocab_size:
                raise RequestError(f"token id {i} is outside the vocabulary (0..{self.vocab_size - 1})")
        return list(ids)

    def describe(self) -> dict:
        """Model facts for ``/api/v1/model`` (see :func:`halo_weave.server.app.model_info`)."""
        raise NotImplementedError

    # ---------------------------------------------------------------- generation

    def generate(
        self,
        input_ids,
        *,
        max_length: int = 200,
        temperature: float = 0.7,
        top_p: float = 0.9,
        top_k: int = 40,
        rep_pen: float = 1.1,
        rep_pen_range: int = 320,
        sampler_seed: int = -1,
        stop_sequence=(),
        output_attentions: bool = True,
        attention_format: str | None = None,
        request_id: str | None = None,
        wait_s: float = 0.0,
        conversation: str | None = None,
    ) -> Generation:
        """Start a generation; iterate it for ``TokenRecord``s then one ``DoneRecord``.

        Raises :class:`RequestError` for invalid input and :class:`EngineBusy` when another
        generation is still running after ``wait_s`` seconds.  Call ``.abort()`` on the
        result (or :meth:`abort`) to stop it after the current token.  ``conversation``
        names the conversation the prompt belongs to (its cache is saved once idle).
        """
        ids = self.check_ids(input_ids)
        if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
            raise RequestError("max_length must be a positive integer")
        if len(ids) + max_length > self.context_size:
            raise RequestError(
                f"prompt of {len(ids)} tokens + max_length {max_length} exceeds the "
                f"context size of {self.context_size} tokens"
            )
        fmt = attention_format or self.default_attention_format
        if fmt not in ATTENTION_FORMATS:
            raise RequestError(f"attention_format must be one of {list(ATTENTION_FORMATS)}")
        request = GenerationRequest(
            input_ids=ids,
            max_length=max_length,
            sampler=sampler_settings(temperature, top_p, top_k, rep_pen, rep_pen_range, sampler_seed),
            stop_sequences=self._stop_strings(stop_sequence),
            stop_ids=self.stop_ids | self._single_token_stops(stop_sequence),
            attention=bool(output_attentions),
            per_layer=FORMATS[fmt].per_layer,
            request_id=request_id,
        )
        running = self._running
        if isinstance(running, Preparation):
            if running.yields:
                # A read-ahead never keeps an answer waiting: stop it (what it ran stays cached).
                running.abort(ids)
                wait_s = max(wait_s, PREEMPT_WAIT_S)
            else:  # a restore: what it loads or runs is this prompt's start
                wait_s = max(wait_s, RESTORE_WAIT_S)
        waiting_since = time.perf_counter()
        self._answers += 1  # a read-ahead that came before sees a changed count and gives way
        acquired = self._lock.acquire(timeout=wait_s) if wait_s > 0 else self._lock.acquire(False)
        if not acquired:
            raise EngineBusy("another generation is running; abort it or retry when it ends")
        self._follow(conversation)
        self._active()
        generation = Generation(self.kv, self.text, request, release=self._release,
                                waited_s=time.perf_counter() - waiting_since)
        self._running = generation
        return generation

    def prepare(self, input_ids, *, max_length: int = 0, request_id: str | None = None,
                conversation: str | None = None, queries=None) -> dict:
        """Read ahead: make the cache hold ``input_ids`` now, so that a generate whose
        prompt starts with them (or differs from them by spans the cache can move or
        restore) runs only what is new.  The app sends its draft prompt while the user
        types; no token is generated and nothing is sampled.

        Raises :class:`RequestError` for invalid ids and :class:`EngineBusy` when a
        generation still runs after :data:`PREPARE_WAIT_S`.  A generate arriving meanwhile
        stops this one after its current batch, and so does a newer read-ahead (the draft
        has moved on; what this one ran stays in the cache for the newer one); one still
        waiting for the model when a newer one or a generate comes is not run.  Returns ``prepared``
        (False when stopped or not run), ``prompt_tokens``, ``seconds`` and ``kv`` (the
        sync's report, as a done event's).
        ``max_length``: the answer the generate will ask for, so that a cache that must
        grow for it grows now, not after Enter.

        ``queries`` (where :attr:`weighs`): ids then read after ``input_ids``, kept in the
        cache; ``attention`` answers what they pay each position of ``input_ids`` (summed
        over queries, mean over layers and heads).  The app sends them at Enter to weigh
        a message's recall (:mod:`halo_weave.memory.attended`): see :meth:`_take_model`.
        """
        ids = self.check_ids(input_ids)
        asked = None if queries is None else self.check_ids(queries)
        if asked is not None and not self.weighs:
            raise RequestError(f"the {self.kind} engine reads no queries' attention")
        if len(ids) + len(asked or ()) >= self.context_size:
            raise RequestError(f"prompt of {len(ids) + len(asked or ())} tokens leaves no room in the context "
                               f"size of {self.context_size} tokens")
        ticket, answers = next(self._prepares), self._answers
        self._newest_prepare = ticket

        def replaced() -> bool:
            # A newer draft came while this one waited: it is read instead, not this one;
            # or an answer was asked for (Enter came): its prompt replaces any draft.
            return asked is None and (ticket != self._newest_prepare or answers != self._answers)

        taken = self._take_model(asked is not None, ids, ticket, replaced)
        if taken is None:
            return self._prepared(None, len(ids), 0.0, False)
        if not taken:
            raise EngineBusy("a generation is running; a read-ahead does not queue behind it")
        if replaced():
            self._lock.release()
            return self._prepared(None, len(ids), 0.0, False)
        # A read-ahead's batch of new tokens stops part way when an answer or a newer
        # draft comes (where the cache can: :meth:`LlamaCache.interrupt`).
        preparation = Preparation(request_id, on_abort=getattr(self.kv, "interrupt", None), ticket=ticket)
        self._running = preparation
        started = time.perf_counter()
        attention: list[float] = []
        try:
            self._follow(conversation)
            self._reserve(len(ids) + len(asked or ()), max_length, preparation)
            report = self.kv.sync(ids, should_stop=lambda: preparation.aborted, step=READ_AHEAD_STEP,
                                  stoppable=True)
            # A read-ahead's prunes and restores spread the cache out as a generation's do,
            # and a dozen of them may come before one Enter: pack it now, while the user
            # types, as a generation does after its answer (the answer attends over holes).
            compacted = report is not None and not preparation.aborted and pack(self.kv)
            if asked and report is not None and not preparation.aborted:
                attention = [float(v) for v in self.kv.attend_all(asked)[:, :len(ids)].sum(axis=0)]
        finally:
            self._running = None
            self._lock.release()
            self._touched()
        answer = self._prepared(report, len(ids), time.perf_counter() - started, compacted)
        return answer if asked is None else {**answer, "attention": attention}

    def _prepared(self, report, prompt_tokens: int, seconds: float, compacted: bool) -> dict:
        """:meth:`prepare`'s answer (``report``: the sync's, None when stopped or not run)."""
        return {"prepared": report is not None, "prompt_tokens": prompt_tokens, "seconds": round(seconds, 4),
                "kv": report.as_dict() if report is not None else {}, "compacted": compacted,
                "spread_cells": int(self.kv.spread()) if hasattr(self.kv, "spread") else 0}

    def _take_model(self, at_enter: bool, ids: list[int], ticket: int, replaced) -> bool | None:
        """Take the lock for the read-ahead ``ticket`` of ``ids``; False when it stayed
        taken too long, None (not taken) once ``replaced()`` says a newer draft or an answer
        came: this one is not read then.

        A generation is waited for :data:`PREPARE_WAIT_S`; a restore, by one with queries
        (sent at Enter), as long as a generate waits for it.  A read-ahead still running is
        stopped and waited for: the newer draft replaces it (a typed message's recall
        changes as its words come, and reading an older draft's to the end made the
        newer one wait seconds for paragraphs it no longer brings back).  Who holds the
        lock is looked at again every :data:`PREPARE_POLL_S`: a read-ahead that took it
        meanwhile is stopped too (an older one: a newer one that took it is not stopped by
        this, which it replaces), and the wait is that of what holds it now."""
        started = time.monotonic()
        while not self._lock.acquire(timeout=PREPARE_POLL_S):
            if replaced():
                return None
            running = self._running
            if isinstance(running, Preparation) and running.yields and running.ticket < ticket:
                running.abort(ids)
                started, wait = time.monotonic(), PREEMPT_WAIT_S
            elif isinstance(running, Preparation) and at_enter:
                wait = RESTORE_WAIT_S
            else:
                wait = PREPARE_WAIT_S
            if time.monotonic() - started >= wait:
                return False
        return True

    @property
    def weighs(self) -> bool:
        """Whether :meth:`prepare` can read ``queries`` with their attention (the llama.cpp cache)."""
        return hasattr(self.kv, "attend_all")

    def _reserve(self, n_ids: int, max_length, preparation: Preparation) -> None:
        """Grow a cache that can grow to hold ``n_ids`` and the answer (``max_length``)."""
        reserve = getattr(self.kv, "reserve", None)
        if reserve is not None:
            room = max(1, max_length) if isinstance(max_length, int) and not isinstance(max_length, bool) else 1
            reserve(min(self.context_size, n_ids + room), should_stop=lambda: preparation.aborted)

    def restore(self, input_ids, conversation: str, *, max_length: int = 0,
                request_id: str | None = None) -> dict:
        """Make the cache hold ``input_ids``, the live context of ``conversation`` being
        reopened: from the conversation's saved cache when one was made with this model
        and starts with the same token ids (checked id by id), else by a prefill
        (:meth:`prepare`'s sync).  Where the ids differ later, the cache's ``mode``
        decides: surgery (the default) reads the whole file back and syncs it to
        ``input_ids`` as any request is synced (a span the conversation pruned since is
        taken out, new ids are run); exact reads back only the shared start and runs the
        rest.  Before another conversation's cache is replaced, it is saved if it
        changed since its last save.

        A generate arriving meanwhile waits for it (:data:`RESTORE_WAIT_S`); an abort
        naming its ``request_id`` stops its prefill after the current batch (the app's,
        when the user opened another conversation meanwhile).  Raises as :meth:`prepare`.
        Returns ``restored`` (tokens of ``input_ids`` read back from the file), ``ran`` (tokens run),
        ``reused`` (tokens the cache already held), ``prompt_tokens``, ``seconds``,
        ``reason`` (why no file was used, when none was), ``stopped`` and ``kv``.
        """
        ids = self.check_ids(input_ids)
        if not isinstance(conversation, str) or not conversation:
            raise RequestError("conversation must be a non-empty string")
        if len(ids) >= self.context_size:
            raise RequestError(f"prompt of {len(ids)} tokens leaves no room in the context "
                               f"size of {self.context_size} tokens")
        if not self._lock.acquire(timeout=PREPARE_WAIT_S):
            raise EngineBusy("a generation is running; a restore does not queue behind it")
        preparation = Preparation(request_id, yields=False)
        self._running = preparation
        started = time.perf_counter()
        restored, shared, saved, reason = 0, 0, None, ""
        try:
            held = common_prefix(self.kv.ids, ids)
            if held == len(ids) == len(self.kv.ids) and conversation == self.conversation:
                reason = "already in the cache"
            else:
                self._follow(conversation)
                saved, reason = self._saved(conversation, ids, held)
                if saved is not None:
                    self._reserve(len(saved.ids), max_length, preparation)
                    # Exact mode: only the states of the ids the request shares from the
                    # start (a token after the first difference was computed with other
                    # tokens before it).  Surgery: all of them, and the sync below takes out
                    # what the conversation pruned since, as this server would have had it
                    # not stopped (the app prunes after an answer; the file holds the cache
                    # from before, and keeping only the shared start re-ran nearly all of it).
                    shared = common_prefix(saved.ids, ids)
                    whole = getattr(self.kv, "mode", EXACT) != EXACT
                    if self.kv.import_state(saved.ids, saved.blob, keep=None if whole else shared):
                        restored = len(saved.ids) if whole else shared
                    else:
                        saved, reason = None, "the saved cache does not fit this server's cache"
            self._reserve(len(ids), max_length, preparation)
            before = common_prefix(self.kv.ids, ids)
            report = self.kv.sync(ids, should_stop=lambda: preparation.aborted)
            if saved is not None and report is not None and restored > shared:
                restored = report.reused  # what the sync kept of the saved cache
            if saved is not None and self.kv.ids == saved.ids:
                self._holds_saved()
            pack(self.kv)
        finally:
            self._running = None
            self._lock.release()
            self._touched()
        return {
            "restored": restored,
            "reused": 0 if restored else before,
            "ran": report.computed if report is not None else max(0, common_prefix(self.kv.ids, ids) - before),
            "prompt_tokens": len(ids),
            "stopped": report is None,
            "seconds": round(time.perf_counter() - started, 4),
            "reason": reason,
            "kv": report.as_dict() if report is not None else {},
        }

    def _release(self, generation: Generation) -> None:
        if self._running is generation:
            self._running = None
            self._lock.release()
            self._touched()

    def abort(self, request_id: str | None = None) -> bool:
        """Stop the running generation (only if its request id matches, when given)."""
        running = self._running
        if running is None:
            return False
        if request_id and _request_id(running) != request_id:
            return False
        running.abort()
        return True

    @property
    def busy(self) -> bool:
        return self._running is not None

    def _stop_strings(self, stops) -> tuple[str, ...]:
        if isinstance(stops, str):
            stops = [stops]
        if not isinstance(stops, (list, tuple)) or not all(isinstance(s, str) for s in stops):
            raise RequestError("stop_sequence must be a list of strings")
        return tuple(s for s in stops if s and not self._single_token_stops([s]))

    def _single_token_stops(self, stops) -> set[int]:
        """A stop string that is exactly one control token stops on that id (KoboldCPP)."""
        if isinstance(stops, str):
            stops = [stops]
        found = set()
        for s in stops if isinstance(stops, (list, tuple)) else ():
            if isinstance(s, str) and s:
                with self._tokenizer_lock:
                    ids = self.encode(s, parse_special=True)
                if len(ids) == 1 and ids[0] in self.text.special_ids:
                    found.add(ids[0])
        return found


def _request_id(running) -> str | None:
    return running.request_id if isinstance(running, Preparation) else running.request.request_id
