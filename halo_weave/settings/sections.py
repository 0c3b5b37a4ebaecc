"""The settings record: :class:`Settings`, made of one frozen section per concern, each
field with its default and the measurement behind it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..rules.brightness_rules import MAX_BRIGHTNESS
# tools is Qt-free and light (stdlib only until a jq call starts its worker process).
from ..tools.notebook import TOOL_PROMPT

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
    # query_hop_terms: a second hop: that many of the best match's rarest words (its names
    # and things) not in the message are searched for, and each entry they find scores
    # query_hop_weight times its BM25 (scaled to the best) more (0 = off; 4 answered no
    # better on the test conversations: docs/answers.md, "The cue and a second hop").
    query_hop_terms: int = 0
    query_hop_weight: float = 0.15
    # speaker_weight: score added to the lines of a speaker the message names, found among
    # the search's SPEAKER_POOL x query_max_results best by the name a line opens with
    # ("Caroline: ...", halo_weave.memory.speakers; 0 = off: 0.1 found more multi-hop
    # evidence and answered no better, docs/answers.md, "The lines of the speaker a
    # question names").
    speaker_weight: float = 0.0
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
    # What a message brings back, beyond what fits (halo_weave.memory.recall_plan):
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
    # What a message keeps of its recall (halo_weave.memory.relevance): the paragraphs that
    # came back are ranked by their relevance to the message (the search's order, their own
    # text's cosine with it, the share of its words they hold, fused), and the least
    # relevant go back to the graveyard until this share of the recalled tokens is left
    # (the first always stays); 1.0 = keep all.  On every server.  On 128 LoCoMo dev
    # questions at half the tokens it keeps evidence recall 0.654 of the whole recall's
    # 0.687 (the chat model's attention kept 0.571): docs/answers.md, "Which paragraphs a
    # message keeps".
    recall_keep_share: float = 0.5


@dataclass(frozen=True)
class Server:
    """The backend: which server and model, how it sends attention, the chat template,
    its saved caches, the bundled reader's proxy attention, and attention captures."""

    server_url: str = "http://127.0.0.1:5001"
    autostart_server: bool = True
    #: The built-in server's model (its ``--model``): "" for the bundled default
    #: (Qwen2.5-Coder-0.5B-Instruct), "smollm2", or a GGUF file.
    server_model: str = ""
    #: The built-in server's llama.cpp layers on a GPU (its ``--gpu-layers``): 0 the CPU
    #: only, -1 every layer; needs a llama-cpp-python built with CUDA, Metal or Vulkan (a
    #: CPU-only build runs on the CPU and the window says so).
    server_gpu_layers: int = 0
    attention_format: str = "aggregated"  # or "per_layer"
    # "auto": the model's own template where the server publishes it (rendered in a sandbox,
    # halo_weave.backends.model_template), else a built-in one; or a name in chat_template.TEMPLATES.
    # A choice made for a conversation is saved in its file and wins over this default.
    chat_template: str = "auto"
    # Which model to use on a server that serves several ("" = one it has loaded, else the
    # first it lists). Picked
    # in the window, it is saved with the conversation and is the default for new ones.
    served_model: str = ""
    # How an OpenAI-compatible server is spoken to: "auto" (chat completions only where the
    # server has no /v1/completions), "completions" or "chat" (halo_weave.backends.probe).
    server_api: str = "auto"
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
                *(["--initial-context", str(cells)] if cells else []), "--kv-disk-mb", str(server.saved_caches_mb),
                *(["--gpu-layers", str(server.server_gpu_layers)] if server.server_gpu_layers else [])]


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
