"""Every number that means something, in one place, with its default.

A :class:`Settings` is made of sections (:class:`Sampling`, :class:`Pruning`,
:class:`Brightness`, :class:`Search`, :class:`Recall`, :class:`Server`, :class:`Chat`),
each holding the numbers of one concern.  The core modules take a Settings (or the few
fields they need); the UI persists it with QSettings and the benchmarks override fields
on the command line, both by each setting's flat name (``max_context_tokens``), which
is unique across the sections.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from .rules import BRIGHTNESS_RULES, CHUNK_RANKS, PRUNE_ORDERS, WITHOUT_BRIGHTNESS, Choice, prune_order
#: Brightness every new token starts with ("fail bright") and the cap of the vote.
from .rules.brightness_rules import MAX_BRIGHTNESS
# tools is Qt-free and light (stdlib only until a jq call starts its worker process).
from .tools.notebook import TOOL_PROMPT

#: The default system prompt: a plain assistant.  The notebook tool's instructions are
#: added only while the tool is on (``notes_tool``): models follow them literally (a
#: Qwen2.5-Coder answered every message with their "> output").
DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."


def with_notes_tool(prompt: str, notes_tool: bool) -> str:
    """What the model reads for ``prompt``: the notebook's instructions after it while
    the tool is on."""
    if not notes_tool:
        return prompt
    return f"{prompt.rstrip()}\n\n{TOOL_PROMPT}" if prompt.strip() else TOOL_PROMPT


def without_notes_tool(prompt: str) -> str:
    """``prompt`` without the notebook's instructions at its end (the user's own words)."""
    kept = prompt.rstrip()
    tool = TOOL_PROMPT.rstrip()
    return kept[: -len(tool)].rstrip() if kept.endswith(tool) else prompt


@dataclass(frozen=True)
class Sampling:
    """How the model writes an answer: the sampler's parameters and the answer's length."""

    temperature: float = 0.7
    top_p: float = 0.9
    top_k: int = 40
    rep_pen: float = 1.1
    # scripts/measure_answer_length.py on the bundled model (32 answers to everyday
    # messages, default sampling and system prompt): median 227 tokens, p90 419; 200 cut
    # 53 % of answers mid-sentence, 512 lets 91 % end at the model's own end of turn.
    # Longer ones: Chat → Continue.
    max_new_tokens: int = 512
    sampler_seed: int = -1


@dataclass(frozen=True)
class Pruning:
    """The context budget, how text is cut into chunks, and which chunks pruning takes
    when: the order, the recent window it spares and the moment it runs."""

    max_context_tokens: int = 2000  # prune when over this after an exchange; 0 = never prune
    # ...down to this fraction of it: fewer, larger prunes (each moves the server's cache);
    # same recall at 0.75 with 4x fewer prunes (docs/history.md, the first dev-set run's
    # "Reading").
    prune_hysteresis: float = 0.75
    min_chunk_tokens: int = 64
    # What decides pruning: "brightness" (the chunk score, see Brightness) or "age" (oldest
    # first).  "age": on the LoCoMo dev set no attention rule beat oldest-first on both
    # recall and continuation, so brightness colours the heatmap and the oldest paragraphs
    # go first (docs/benchmarks.md, "The memory benchmark": fifo-halo against halo).
    prune_order: str = "age"
    # The most recent live tokens that pruning by brightness leaves alone (H2O's recent
    # window: what the model is about to go on from); older chunks are ranked by their
    # score, and the window's chunks go last, so the limit still holds.  0 = none.
    # With "mass" and "median" (H2O) it recalled more than oldest-first on three
    # conversations' first 120 turns, not yet confirmed on the whole dev set: off
    # (docs/history.md, "eviction-literature rules (TOVA, SnapKV, H2O)").
    prune_keep_recent: int = 0
    # When to prune: "after_exchange" (down to max_context_tokens after every exchange)
    # or "for_room" (keep the model's window full of recent context; prune only when it is
    # full or when resurrection needs room, never giving resurrection more room than
    # "after_exchange" would: halo_weave.memory.room).  "for_room" recalled a little more
    # but made every message slower in bench_chat, so the default stays
    # (docs/history.md, "the dev set on today's code, every kind of replay").
    prune_when: str = "after_exchange"


@dataclass(frozen=True)
class Brightness:
    """How attention becomes each token's brightness, where new tokens start, and how a
    chunk's tokens add up to the chunk's score."""

    initial_brightness: int = MAX_BRIGHTNESS
    brightness_cap: int = MAX_BRIGHTNESS
    decay_per_step: int = 1
    score_current_turn: bool = True
    # How attention becomes brightness (halo_weave.rules.brightness_rules): "vote" is magnitude
    # voting (+floor(a / fair share), -1 otherwise, capped); "decay" an attention mass with
    # a half-life of brightness_half_life generated tokens; "mass" the plain sum (H2O).
    # The mass rules have no cap.  "vote" continues conversations best; the mass rules
    # recall more but continue worse (docs/history.md, "continuation fidelity and
    # brightness rules").
    brightness_rule: str = "vote"
    brightness_half_life: int = 256
    # Where new tokens start: "cap" (initial_brightness, "fail bright") or "median"
    # (the live median: a fair chance, no head start).
    new_token_brightness: str = "cap"
    # A chunk's score for pruning and for the heatmap's colour: "peak" (its brightest
    # token), "topk" (the mean of its chunk_rank_k brightest tokens) or "mean" (its
    # attention per token).
    chunk_rank: str = "peak"
    chunk_rank_k: int = 4


@dataclass(frozen=True)
class Search:
    """How a message searches the pruned past: candidates, the cosine and BM25 blend,
    dates, query feedback, and the embedder's limits."""

    # Search candidates per message: the room resurrection_keep_share makes needs about 30
    # to fill it (docs/history.md, "room for what a message brings back").
    query_max_results: int = 30
    # Score multiplier for matches the user wrote (1.0 = none): with the recall settings
    # (Recall), no boost recalls more than 1.5 (docs/history.md, "multi-hop and temporal recall").
    user_similarity_boost: float = 1.0
    # A match scoring below this (cosine blended with BM25, as ranked) never comes back:
    # a message on another subject brings nothing back (see Recall.recall_relative_floor).
    min_similarity: float = 0.3
    # BM25 blended with the vector score: finds the names, places and numbers MiniLM
    # misses (+0.126 recall: docs/history.md, the first dev-set run's "Reading").
    hybrid_search: bool = True
    hybrid_weight: float = 0.3
    # hybrid_common_share leaves out of BM25 the words found in more than that share of the
    # entries (the speakers' names; 1.0 = off); hybrid_prefix_stems searches each word's
    # stem as a prefix ("painted" finds "painting").  Both raise recall, multi-hop most
    # (docs/history.md, "BM25 terms").
    hybrid_common_share: float = 0.05
    hybrid_prefix_stems: bool = True
    # Multi-hop and temporal recall (halo_weave.memory.query; the figures in
    # docs/history.md, "multi-hop and temporal recall"):
    # date_weight: score added to entries said on a day or month the message names (0 = off);
    # query_split: search the message's parts apart (no gain: off).
    date_weight: float = 0.3
    query_split: bool = False
    # query_feedback: that many times the mean vector of the query's query_feedback_top best
    # matches added to it, normalised, searched again (Rocchio pseudo-relevance feedback;
    # 0 = off).  It raises multi-hop recall (docs/history.md, "pseudo-relevance feedback
    # and neighbours for the best matches").
    query_feedback: float = 0.5
    query_feedback_top: int = 3
    embedding_max_tokens: int = 256
    embed_wait_seconds: float = 2.0


@dataclass(frozen=True)
class Recall:
    """What the matches a search found bring back: their brightness, the room made for
    them, their neighbours and anchors, and the caps on what one message recalls."""

    resurrection_brightness: str = "at_prune"  # or "mean"
    resurrection_budget_cap: int = 0  # 0 = no cap beyond the universal equation
    # Room for what a message brings back (halo_weave.memory.room): the room is counted as
    # if the live context held only its newest resurrection_keep_share x max_context_tokens
    # tokens, and when the plan needs it, just enough older live context is pruned (oldest
    # first, or by the prune order; never the latest exchange, a pinned chunk or a match of
    # this search).  1.0 = off: the room is what pruning after the exchange left.  0.5 with
    # query_max_results 30 lifts recall on the dev set, multi-hop most (docs/benchmarks.md,
    # "The memory benchmark"; the choice of 0.5 in docs/history.md, "room for what a
    # message brings back").
    # With a roomy window (the model's window well above max_context_tokens) nothing is
    # pruned for it: the plan fits the room the equation leaves.
    resurrection_keep_share: float = 0.5
    # Multi-hop and temporal recall (halo_weave.memory.query; the figures in
    # docs/history.md, "multi-hop and temporal recall"):
    # resurrect_neighbours: each match's neighbouring turns of the same sitting (turns
    # less than session_gap_seconds apart) come right after it;
    # resurrection_anchors: "always" (a match comes back with the question and answer that
    # open its exchange) or "if_room" (those paid from what the matches leave).
    resurrect_neighbours: int = 1
    session_gap_seconds: float = 1800.0
    resurrection_anchors: str = "if_room"
    # neighbour_matches: only the first that many matches bring their neighbouring turns
    # (0 = every match).  It raises multi-hop recall (docs/history.md, "pseudo-relevance
    # feedback and neighbours for the best matches").
    neighbour_matches: int = 4
    # What a message brings back, beyond what fits (halo_weave.memory.resurrection_plan):
    # recall_relative_floor: only matches scoring at least this share of the best match's
    # score come back (0 = every match that fits); recall_max_chunks: at most this many
    # paragraphs come back for one message, neighbours and anchors counted (0 = no cap).
    # With min_similarity 0.3, on the six LoCoMo dev conversations at P = 1,024, C = 2,048
    # (docs/answers.md, "What a message brings back"): tokens brought back per question
    # 1,291 -> 939, evidence recall 0.812 -> 0.801; in a chat window, whose room is the
    # model's whole window, the cap is what bounds a message that matches everything.
    recall_relative_floor: float = 0.55
    recall_max_chunks: int = 24
    #: A short copy of what a message recalled goes just before it in the request
    #: (halo_weave.memory.recall_note): docs/answers.md, answer F1 with and without.
    recall_note: bool = True


@dataclass(frozen=True)
class Server:
    """The backend: which server and model, how it sends attention, the chat template,
    its saved caches, the bundled reader's proxy attention, and attention captures."""

    server_url: str = "http://127.0.0.1:5001"
    autostart_server: bool = True
    #: The built-in server's model (its ``--model``): "" for the bundled default
    #: (Qwen2.5-Coder-0.5B-Instruct), "smollm2", or a GGUF file.
    server_model: str = ""
    attention_format: str = "aggregated"  # or "per_layer"
    # "auto": the model's own template where the server publishes it (rendered in a sandbox,
    # halo_weave.backends.model_template), else a built-in one; or a name in chat_template.TEMPLATES.
    # A choice made for a conversation is saved in its file and wins over this default.
    chat_template: str = "auto"
    # Which model to use on a server that serves several ("" = one it has loaded, else the
    # first it lists). Picked
    # in the window, it is saved with the conversation and is the default for new ones.
    served_model: str = ""
    # The model's context on a server that does not say (OpenAI-compatible ones); 0 = assume 2048.
    server_context_tokens: int = 0
    #: Disk the built-in server may fill with conversations' saved KV caches (MiB; the least
    #: recently saved go first; 0 saves none, and reopening a conversation prefills it).
    saved_caches_mb: int = 2048
    # Proxy attention, for a server that sends none: the bundled model reads each finished
    # exchange and its attention lights the heatmap.  It drives pruning only when asked:
    # the memory benchmark, whose attention is this reader's, found pruning by it level with
    # oldest-first (docs/benchmarks.md, "The memory benchmark").
    proxy_attention: bool = True
    proxy_pruning: bool = False
    # Debugging
    record_attention: bool = False  # stream every token's attention to <data dir>/captures


@dataclass(frozen=True)
class Chat:
    """What new conversations start with and how the window shows them: the system
    prompt, the notebook tool, Markdown, and the heatmap's highlight."""

    highlight_fraction: float = 0.20  # brightest share of tokens highlighted in the heatmap
    render_markdown: bool = True  # messages shown rendered as Markdown (False: as typed)
    # The system prompt new conversations start with; each conversation keeps its own in
    # its file (``session.prompt.own()``).
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    #: The model's notebook (notes.json, edited with jq): off unless asked for; when on,
    #: its instructions follow the system prompt and the answers' tool calls run.
    notes_tool: bool = False


@dataclass
class Settings:
    """User-tunable behaviour, in sections.  The defaults are the measured ones: today's
    figures are in docs/benchmarks.md, the runs that chose each default in docs/history.md.

    Every setting has a name of its own across the sections (checked at import), and that
    flat name is the public one: the settings file's key, the dialog's, a benchmark's
    ``--set NAME=VALUE``.  Read one as ``settings.pruning.max_context_tokens``, or by name
    with :meth:`value`; make changed copies with :meth:`of` and :meth:`replace`::

        Settings.of(max_context_tokens=700).replace(prune_order="brightness")
    """

    sampling: Sampling = dataclasses.field(default_factory=Sampling)
    pruning: Pruning = dataclasses.field(default_factory=Pruning)
    brightness: Brightness = dataclasses.field(default_factory=Brightness)
    search: Search = dataclasses.field(default_factory=Search)
    recall: Recall = dataclasses.field(default_factory=Recall)
    server: Server = dataclasses.field(default_factory=Server)
    chat: Chat = dataclasses.field(default_factory=Chat)

    @classmethod
    def of(cls, **values) -> "Settings":
        """The defaults with ``values`` (flat names, e.g. ``max_context_tokens=700``)."""
        return cls().replace(**values)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """Every setting's flat name, section by section in declaration order."""
        return tuple(_SECTION_OF)

    def replace(self, **changes) -> "Settings":
        """A copy with ``changes`` (flat names) applied, each in its section; a name that
        is no setting raises TypeError naming it."""
        by_section: dict[str, dict] = {}
        for name, value in changes.items():
            if name not in _SECTION_OF:
                raise TypeError(f"{name!r} is not a setting")
            by_section.setdefault(_SECTION_OF[name], {})[name] = value
        return dataclasses.replace(self, **{section: dataclasses.replace(getattr(self, section), **values)
                                            for section, values in by_section.items()})

    def value(self, name: str):
        """The setting called ``name`` (its flat name); AttributeError if there is none."""
        if name not in _SECTION_OF:
            raise AttributeError(f"{name!r} is not a setting")
        return getattr(getattr(self, _SECTION_OF[name]), name)

    def server_context_cells(self) -> int:
        """KV cells the bundled server starts with (``--initial-context``; 0: the model's
        whole window): the budget and an answer, padded.  Fewer cells make each prune
        cheaper there; resurrection fills a prompt past the budget (bench_chat's reached
        2.2x it), and such a request grows the server's cache, copying its states (no
        re-run)."""
        budget = self.pruning.max_context_tokens
        if budget <= 0:
            return 0
        cells = budget + self.sampling.max_new_tokens
        return -(-cells // 256) * 256

    @property
    def effective_system_prompt(self) -> str:
        """The default system prompt as the model reads it: the user's, with the notebook
        tool's instructions after it while the tool is on."""
        return with_notes_tool(self.chat.system_prompt, self.chat.notes_tool)

    def server_args(self) -> list[str]:
        """Command-line options for the bundled server that follow from these settings."""
        cells = self.server_context_cells()
        server = self.server
        return [*(["--model", server.server_model] if server.server_model.strip() else []),
                *(["--initial-context", str(cells)] if cells else []), "--kv-disk-mb", str(server.saved_caches_mb)]


def _section_of() -> dict[str, str]:
    """Flat setting name -> the name of the :class:`Settings` section that holds it.
    Raises TypeError at import if two sections declare the same name, or one clashes
    with a section's or a method's name (the flat names must stay unambiguous)."""
    sections = dataclasses.fields(Settings)
    taken = {section.name for section in sections}
    owners: dict[str, str] = {}
    for section in sections:
        for item in dataclasses.fields(section.default_factory):
            if item.name in owners or item.name in taken or hasattr(Settings, item.name):
                raise TypeError(f"the setting name {item.name!r} in {section.name} is not unique")
            owners[item.name] = section.name
    return owners


_SECTION_OF = _section_of()


#: The multiple-choice settings and their allowed values, in the order the dialog lists
#: them.  The single source: loading, validation and the dialog's combo boxes all read
#: these, so a new rule added here appears everywhere without a UI edit.
CHOICES: dict[str, tuple[Choice, ...]] = {
    "brightness_rule": tuple(rule.choice for rule in BRIGHTNESS_RULES.values()),
    "new_token_brightness": (
        Choice("cap", "At the starting brightness (fail bright)",
               "New text starts as bright as possible, so it is never pruned before the model "
               "had a chance to read it.",
               "new text starts bright"),
        Choice("median", "At the live median",
               "New text starts at the median brightness of what is live: a fair chance, "
               "no head start.",
               "new text starts at the median"),
    ),
    "chunk_rank": tuple(rank.choice for rank in CHUNK_RANKS.values()),
    "prune_order": tuple(order.choice for order in PRUNE_ORDERS.values()),
    "prune_when": (
        Choice("after_exchange", "After every exchange (down to the context budget)",
               "After every answer the context is pruned back under the context target, which "
               "leaves the rest of the model's window free for what your next message brings back.",
               ""),
        Choice("for_room", "Only when room is needed",
               "The context keeps as much recent conversation as the model's window holds; it is "
               "pruned only when the window is full, or just enough to make room for what your "
               "message brings back (never more room than pruning after every exchange gives).",
               "only for room"),
    ),
    "resurrection_brightness": (
        Choice("at_prune", "Brightness when pruned (no gifts)",
               "A paragraph that comes back keeps the brightness it had when it was pruned."),
        Choice("mean", "Mean live brightness",
               "A paragraph that comes back starts at the mean brightness of what is live."),
    ),
    "resurrection_anchors": (
        Choice("if_room", "Only with room left (matches first)",
               "Paragraphs found for your message come back first; the openings of their "
               "question and answer come back too only while the budget has room for them."),
        Choice("always", "Always with the match (the seed's rule)",
               "Every paragraph found comes back together with the opening of its question "
               "and of its answer, even when that leaves no room for the next one found."),
    ),
    "attention_format": (
        Choice("aggregated", "Aggregated (one value per token; less traffic)",
               "The server averages its layers and heads and sends one value per token."),
        Choice("per_layer", "Per layer (layers × heads × tokens)",
               "The server sends every layer's and head's attention; the app averages them."),
    ),
}

#: The settings that decide what is pruned, in the order the dialog's "What decides
#: pruning" group shows them: (field, label, tooltip for a numeric field).
PRUNING_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("brightness_rule", "Brightness rule", ""),
    ("brightness_half_life", "Half-life (generated tokens)",
     "After this many generated tokens, the attention a word collected counts half."),
    ("new_token_brightness", "New text starts", ""),
    ("chunk_rank", "A paragraph's score", ""),
    ("chunk_rank_k", "k (brightest words averaged)",
     "How many of a paragraph's brightest words its score averages."),
    ("prune_order", "Pruning order", ""),
    ("prune_keep_recent", "Recent window (tokens)",
     "The newest live tokens that pruning by brightness leaves alone (what the model is about to "
     "go on from); 0 = none. Never more than the prune target, so the limit still holds."),
    ("prune_when", "When to prune", ""),
)


def choice_values(field: str) -> tuple[str, ...]:
    """The allowed values of a multiple-choice field (see :data:`CHOICES`)."""
    return tuple(choice.value for choice in CHOICES[field])


def choice(field: str, value: str) -> Choice | None:
    """The :class:`Choice` of ``field`` whose value is ``value``, or None."""
    return next((c for c in CHOICES.get(field, ()) if c.value == value), None)


def choice_words(settings: Settings, field: str) -> str:
    """The short words of the chosen value of ``field``, with the fields it names filled in."""
    chosen = choice(field, settings.value(field))
    if chosen is None:
        return str(settings.value(field))
    text = chosen.short or chosen.label
    return text.format(**{name: f"{settings.value(name):,}" for name in chosen.uses})


@dataclass(frozen=True)
class Scoring:
    """What colours the chunks and what decides pruning, in words (see :func:`scoring_words`).

    ``short`` for the stats line, ``sentence`` for tooltips and the legend, ``rule`` the
    rule's own explanation, ``colour`` what a paragraph's colour means (the legend's row),
    ``order`` the prune order in force (a name in :data:`~halo_weave.rules.PRUNE_ORDERS`).
    """

    short: str
    sentence: str
    rule: str
    colour: str
    order: str


def scoring_words(settings: Settings, source: str = "server") -> Scoring:
    """The words for what colours the chunks and decides pruning under ``settings``.

    ``source`` is who measures brightness: ``"server"`` (the model's attention, by
    ``brightness_rule``), ``"reader"``/``"waiting"`` (the bundled reader's attention by
    the same rule; pruning by it only with ``proxy_pruning``) or ``"none"`` (nothing:
    :data:`~halo_weave.rules.WITHOUT_BRIGHTNESS` order).
    """
    rank = choice_words(settings, "chunk_rank")
    scale = "on today's scale, olive (read least lately) → yellow → gold (read most)"
    chosen = choice("brightness_rule", settings.brightness.brightness_rule)
    explanation = chosen.explanation if chosen else ""
    if source == "none":
        fallback = prune_order(WITHOUT_BRIGHTNESS)
        words = fallback.words(settings)
        return Scoring(f"pruning {words}",
                       "This server sends no attention: brightness is not measured (every word keeps its "
                       f"start value). Pruning: {words}.",
                       "", f"Paragraph colour: its {rank} brightness {scale}; not measured while the server "
                       f"sends no attention. The {fallback.first} paragraphs are pruned first.",
                       WITHOUT_BRIGHTNESS)
    name = settings.pruning.prune_order
    if source in ("reader", "waiting"):
        rule = "the reader's " + choice_words(settings, "brightness_rule")
        explanation += " (The bundled reader model's attention over each finished exchange, not your model's.)"
        if not settings.server.proxy_pruning:
            name = WITHOUT_BRIGHTNESS
    else:
        rule = choice_words(settings, "brightness_rule")
    order = prune_order(name)
    words = order.words(settings)
    if settings.pruning.prune_when == "for_room":
        words += ", " + choice_words(settings, "prune_when")
    sentence = f"Brightness: {rule}; a paragraph's colour is its {rank} brightness. " + order.sentence(words, rank)
    if settings.pruning.prune_when == "for_room":
        sentence += " The context keeps the model's window full; pruning makes only the room needed."
    share, budget = settings.recall.resurrection_keep_share, settings.pruning.max_context_tokens
    if share < 1 and budget > 0:
        sentence += (f" When the model's window is too small for what your message brings back, older context "
                     f"beyond the newest {int(budget * max(share, 0.0)):,} tokens is pruned "
                     f"({order.first} first) to make room for it.")
    colour = f"Paragraph colour: its {rank} brightness {scale}. " + order.colour
    return Scoring(f"☀ {rule} · {rank} · pruning {words}", sentence, explanation, colour, name)


def data_dir() -> Path:
    """Where conversations live: ``$HALO_WEAVE_HOME`` or the platform's user data dir."""
    return _user_dir("HALO_WEAVE_HOME", "user_data_dir")


#: The settings file's name in the config directory (QSettings' INI format).
SETTINGS_FILE = "settings.ini"


def config_dir(create: bool = True) -> Path:
    """Where the settings file lives: ``$HALO_WEAVE_CONFIG``; else ``$HALO_WEAVE_HOME`` when
    that is set (a private data directory keeps its own settings, as the tests' does); else
    the platform's user config directory (``~/.config/halo-weave`` on Linux).  ``create``:
    make it if missing (``--help`` only names it)."""
    if not os.environ.get("HALO_WEAVE_CONFIG") and os.environ.get("HALO_WEAVE_HOME"):
        return _user_dir("HALO_WEAVE_HOME", "user_data_dir", create)
    return _user_dir("HALO_WEAVE_CONFIG", "user_config_dir", create)


def settings_file() -> Path:
    """The settings file in :func:`config_dir`.  One kept in the data directory, where
    earlier versions wrote it, is moved here first, once (never over an existing one)."""
    target = config_dir() / SETTINGS_FILE
    old = data_dir() / SETTINGS_FILE
    if not target.exists() and old.is_file() and old.resolve() != target.resolve():
        import shutil

        shutil.move(old, target)
        logging.getLogger("halo_weave.settings").info("Moved the settings from %s to %s", old, target)
    return target


def cache_dir() -> Path:
    """Where derived, re-creatable files live (e.g. the dequantized model cache)."""
    return _user_dir("HALO_WEAVE_CACHE", "user_cache_dir")


def log_dir() -> Path:
    """Where the app's and the built-in server's log files go: ``$HALO_WEAVE_LOGS`` or the
    platform's user log directory (``~/.local/state/halo-weave/log`` on Linux)."""
    return _user_dir("HALO_WEAVE_LOGS", "user_log_dir")


def _user_dir(env_var: str, platform_kind: str, create: bool = True) -> Path:
    env = os.environ.get(env_var)
    if env:
        path = Path(env).expanduser()
    else:
        import platformdirs  # only when no override is set: tests and CI never need it

        path = Path(getattr(platformdirs, platform_kind)("halo-weave", appauthor=False))
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path
