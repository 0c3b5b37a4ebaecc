"""Every number that means something, in one place, with the seeds' defaults.

The core modules take a :class:`Settings` (or the few fields they need); the UI
persists it with QSettings and the benchmarks override fields on the command line.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

# tools is Qt-free and light (stdlib only until a jq call starts its worker process).
from .tools.notebook import TOOL_PROMPT

#: Brightness every new token starts with ("fail bright") and the cap of the vote.
MAX_BRIGHTNESS = 10000

#: The default system prompt: a plain assistant that knows its notebook tool.
DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant.\n\n" + TOOL_PROMPT


@dataclass
class Settings:
    """User-tunable behaviour. Defaults follow seed 001 ("Configuration Management")."""

    # Generation
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

    # Context budget and chunking
    max_context_tokens: int = 2000  # prune when over this after an exchange; 0 = never prune
    # ...down to this fraction of it: fewer, larger prunes (each costs a re-prefill after
    # the cut); docs/memory-benchmark.md: same recall at 0.75 with 4x fewer prunes.
    prune_hysteresis: float = 0.75
    min_chunk_tokens: int = 64

    # Brightness
    initial_brightness: int = MAX_BRIGHTNESS
    brightness_cap: int = MAX_BRIGHTNESS
    decay_per_step: int = 1
    score_current_turn: bool = True
    highlight_fraction: float = 0.20  # brightest share of tokens highlighted in the heatmap
    # How attention becomes brightness (halo_weave.brightness.RULES): "vote" is seed 001's
    # magnitude voting (+floor(a / fair share), -1 otherwise, capped); "decay" an
    # attention mass with a half-life of brightness_half_life generated tokens; "mass"
    # the plain sum (H2O).  The mass rules have no cap.
    # docs/memory-benchmark.md (issue 16, conv-30 + conv-26, first 120 turns): "vote"
    # beats oldest-first on continuation (ΔNLL 0.056 vs 0.069) and recall (0.827 vs 0.821);
    # "decay" / "mass" recall more (0.912) but continue worse (0.079): defaults unchanged.
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
    # What decides pruning: "brightness" (the chunk score above) or "age" (oldest first).
    prune_order: str = "brightness"
    # The most recent live tokens that pruning by brightness leaves alone (H2O's recent
    # window: what the model is about to go on from); older chunks are ranked by their
    # score.  0 = none; never more than the prune target, so the limit still holds.
    prune_keep_recent: int = 0

    # Semantic resurrection
    resurrection_brightness: str = "at_prune"  # or "mean"
    resurrection_budget_cap: int = 0  # 0 = no cap beyond the universal equation
    query_max_results: int = 20
    user_similarity_boost: float = 1.5
    min_similarity: float = 0.0
    # BM25 blended with the vector score: +0.12 evidence recall on LoCoMo conv-30
    # (names, places and numbers MiniLM misses), docs/memory-benchmark.md.
    hybrid_search: bool = True
    hybrid_weight: float = 0.3
    embedding_max_tokens: int = 256
    embed_wait_seconds: float = 2.0

    # Backend
    server_url: str = "http://127.0.0.1:5001"
    autostart_server: bool = True
    attention_format: str = "aggregated"  # or "per_layer"
    # "auto": the server's own template, else ChatML; or a name in chat_template.TEMPLATES.
    # A choice made for a conversation is saved in its file and wins over this default.
    chat_template: str = "auto"
    # The model's context on a server that does not say (OpenAI-compatible ones); 0 = assume 2048.
    server_context_tokens: int = 0
    system_prompt: str = DEFAULT_SYSTEM_PROMPT

    # Proxy attention, for a server that sends none: the bundled model reads each finished
    # exchange and its attention lights the heatmap.  It drives pruning only when asked:
    # docs/memory-benchmark.md (whose attention is this reader's: the bundled model,
    # teacher-forced) found it level with oldest-first (halo 0.564 vs fifo-halo 0.575 and
    # 0.706 vs 0.702 evidence recall on the LoCoMo dev set).
    proxy_attention: bool = True
    proxy_pruning: bool = False

    # Debugging
    record_attention: bool = False  # stream every token's attention to <data dir>/captures

    def replace(self, **changes) -> "Settings":
        """A copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]


def data_dir() -> Path:
    """Where conversations live: ``$HALO_WEAVE_HOME`` or the platform's user data dir."""
    return _user_dir("HALO_WEAVE_HOME", "user_data_dir")


def cache_dir() -> Path:
    """Where derived, re-creatable files live (e.g. the dequantized model cache)."""
    return _user_dir("HALO_WEAVE_CACHE", "user_cache_dir")


def _user_dir(env_var: str, platform_kind: str) -> Path:
    env = os.environ.get(env_var)
    if env:
        path = Path(env).expanduser()
    else:
        import platformdirs  # only when no override is set: tests and CI never need it

        path = Path(getattr(platformdirs, platform_kind)("halo-weave", appauthor=False))
    path.mkdir(parents=True, exist_ok=True)
    return path
