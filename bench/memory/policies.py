"""The benchmark's methods: which replay each needs and what it does at question time.

A *replay policy* is what stays live while the conversation is read (its own
teacher-forced pass); a *method* is a replay plus a question-time rule.  Methods that
only change question-time search share their replay (and its fidelity figures).

Replays prune only (what attention keeps, against oldest-first), except the ``*-live``
ones, which also resurrect on every user message as the app does (searching only what
was said before it): those make the resurrection-brightness rule measurable, at several
times the model work (every resurrected span not in the kept cells is run).
"""

from __future__ import annotations

from typing import Callable

from .replay import Policy

#: The recall settings before the retrieval rules of the recent-* rows (their base).
SEED_RECALL = {"date_weight": 0.0, "query_split": False, "resurrect_neighbours": 0,
               "resurrection_anchors": "always", "user_similarity_boost": 1.5,
               "hybrid_common_share": 1.0, "hybrid_prefix_stems": False,
               "query_feedback": 0.0, "neighbour_matches": 0,
               "resurrection_keep_share": 1.0, "query_max_results": 20}
#: Query feedback and neighbour matches off.
_FEEDBACK_OFF = {"query_feedback": 0.0, "neighbour_matches": 0}
#: BM25's words without the word rules: every word, as written.
_TERMS_OFF = {"hybrid_common_share": 1.0, "hybrid_prefix_stems": False, **_FEEDBACK_OFF}
_ALL = {"date_weight": 0.3, "query_split": True, "resurrect_neighbours": 1, "resurrection_anchors": "if_room"}

#: Methods in table order: (name, replay policy key or None, question-time options).
METHODS = [
    ("full", None, {}),
    ("fifo", "fifo", {}),
    ("rag", "fifo-halo", {}),  # between questions rag keeps the most recent P tokens
    ("brightness", "brightness", {}),
    ("halo", "halo", {}),
    ("halo-mean", "halo", {"rule": "mean"}),
    ("halo-noboost", "halo", {"user_similarity_boost": 1.0}),
    ("halo-hybrid", "halo", {"hybrid_search": True}),
    ("halo-vector", "halo", {"hybrid_search": False}),  # vector search only
    ("halo-k100", "halo", {"query_max_results": 100}),
    ("halo-hybrid-k100", "halo", {"hybrid_search": True, "query_max_results": 100}),
    ("halo-prefill", "prefill", {}),
    ("halo-hyst", "hyst", {}),
    # Is attention-based pruning better than oldest-first?  Same resurrection, pruned by age.
    ("fifo-halo", "fifo-halo", {}),
    ("halo-meanrank", "meanrank", {}),  # prune by mean chunk brightness, not peak
    # Brightness variants, each with the app's resurrection during the replay.
    ("halo-median", "median", {}),  # magnitude voting, new tokens start at the live median
    ("halo-decay", "decay", {}),  # attention mass with a half-life of 256 generated tokens
    ("halo-decay-topk", "decay-topk", {}),  # ... chunks ranked by their top-4 mean
    ("halo-mass", "mass", {}),  # accumulated attention mass (H2O), new tokens at the median
    # Eviction-literature rules: TOVA / SnapKV ~ a short half-life (the
    # attention of the last answer or so), H2O = heavy hitters + a protected recent window.
    ("halo-decay4", "decay4", {}),  # decayed mass, half-life 4 generated tokens (~TOVA)
    ("halo-decay16", "decay16", {}),  # decayed mass, half-life 16 generated tokens
    ("halo-decay64", "decay64", {}),  # ... half-life 64
    ("halo-decay16-mean", "decay16-mean", {}),  # ... chunks ranked by attention per token
    ("halo-recent", "recent", {}),  # voting, the most recent P/2 tokens never pruned
    ("halo-decay16-recent", "decay16-recent", {}),  # half-life 16 + recent window
    ("halo-mass-recent", "mass-recent", {}),  # H2O: accumulated mass + recent window
    ("halo-mass-recent75", "mass-recent75", {}),  # ... the window 3/4 of P
    # Retrieval ideas at question time, on the most recent P tokens (no replay, no model):
    # the app's search and plan (halo_weave.memory.query) with the settings named.
    # recent-halo: the app's defaults; recent-seed: the defaults before those rules; every
    # other recent-* row is recent-seed with the changes its name says, so the rows keep
    # their meaning when a default moves.
    ("recent-halo", None, {}),
    # ... and what the app then keeps of it at question time ("kept": ranked by relevance,
    # halo_weave.memory.relevance; recall_keep_share of the recalled tokens, the app's 0.5).
    ("recent-kept", None, {"kept": True}),
    ("recent-kept33", None, {"kept": True, "recall_keep_share": 1 / 3}),
    ("recent-kept67", None, {"kept": True, "recall_keep_share": 2 / 3}),
    # A wider pool to choose from: no relative floor, up to 60 paragraphs from 40 results,
    # 1,024 tokens of room beyond the prompt's (its half may overrun the budget).  For
    # scripts/bench_recall_fit.py with --dump-recall.
    ("recent-kept-wide", None, {"kept": True, "extra_room": 1024, "recall_relative_floor": 0.0,
                                "recall_max_chunks": 60, "query_max_results": 40}),
    ("recent-seed", None, SEED_RECALL),
    # recent-halo without the BM25 word rules, and with each alone (the rest: app defaults).
    ("recent-terms-off", None, _TERMS_OFF),
    ("recent-common-only", None, {**_TERMS_OFF, "hybrid_common_share": 0.05}),
    ("recent-stems-only", None, {**_TERMS_OFF, "hybrid_prefix_stems": True}),
    ("recent-split", None, {**SEED_RECALL, "query_split": True}),
    ("recent-neighbours", None, {**SEED_RECALL, "resurrect_neighbours": 1}),
    ("recent-split-neighbours", None, {**SEED_RECALL, "query_split": True, "resurrect_neighbours": 1}),
    ("recent-dates", None, {**SEED_RECALL, "date_weight": 0.3}),
    ("recent-anchors-room", None, {**SEED_RECALL, "resurrection_anchors": "if_room"}),
    ("recent-noboost", None, {**SEED_RECALL, "user_similarity_boost": 1.0}),
    ("recent-k40", None, {**SEED_RECALL, "query_max_results": 40}),
    ("recent-k40-room", None, {**SEED_RECALL, "query_max_results": 40, "resurrection_anchors": "if_room"}),
    ("recent-exchange", None, {**SEED_RECALL, "recent_turns": 2}),  # question + the last exchange
    ("recent-neighbours2", None, {**SEED_RECALL, "resurrect_neighbours": 2}),
    ("recent-neighbours-room", None, {**SEED_RECALL, "resurrect_neighbours": 1, "resurrection_anchors": "if_room"}),
    ("recent-neighbours-dates", None, {**SEED_RECALL, "resurrect_neighbours": 1, "date_weight": 0.3}),
    ("recent-neighbours-k40", None, {**SEED_RECALL, "resurrect_neighbours": 1, "query_max_results": 40}),
    ("recent-dates-room", None, {**SEED_RECALL, "date_weight": 0.3, "resurrection_anchors": "if_room"}),
    ("recent-split-dates-room", None, {**SEED_RECALL, **_ALL, "resurrect_neighbours": 0}),
    ("recent-all", None, {**SEED_RECALL, **_ALL}),  # dates, split, neighbours, anchors if room
    ("recent-all-nosplit", None, {**SEED_RECALL, **_ALL, "query_split": False}),
    ("recent-all-noboost", None, {**SEED_RECALL, **_ALL, "user_similarity_boost": 1.0}),
    ("recent-all-nosplit-noboost", None, {**SEED_RECALL, **_ALL, "query_split": False,
                                          "user_similarity_boost": 1.0}),
    ("recent-all-hw50", None, {**SEED_RECALL, **_ALL, "hybrid_weight": 0.5}),
    ("recent-all-k30", None, {**SEED_RECALL, **_ALL, "query_max_results": 30}),
    ("recent-all-k10", None, {**SEED_RECALL, **_ALL, "query_max_results": 10}),
    # Pseudo-relevance feedback and neighbours for the best matches only (recent-s23:
    # recent-halo without them; then with each alone).
    ("recent-s23", None, _FEEDBACK_OFF),
    ("recent-feedback-only", None, {"neighbour_matches": 0}),
    ("recent-nb4-only", None, {"query_feedback": 0.0}),
    # Room for what a message brings back (resurrection_keep_share 0.5, 30 candidates):
    # recent-s28 is the app without it (the room what pruning left, 20 candidates).
    ("recent-s28", None, {"resurrection_keep_share": 1.0, "query_max_results": 20}),
    # What one message may bring back: only matches scoring at least a share of the best
    # one's score (recall_relative_floor), at most N paragraphs (recall_max_chunks).
    ("recent-floor70", None, {"recall_relative_floor": 0.7}),
    ("recent-floor80", None, {"recall_relative_floor": 0.8}),
    ("recent-floor90", None, {"recall_relative_floor": 0.9}),
    ("recent-cap8", None, {"recall_max_chunks": 8}),
    ("recent-cap16", None, {"recall_max_chunks": 16}),
    ("recent-floor80-cap8", None, {"recall_relative_floor": 0.8, "recall_max_chunks": 8}),
    ("recent-floor80-cap16", None, {"recall_relative_floor": 0.8, "recall_max_chunks": 16}),
    ("recent-keep100", None, {"resurrection_keep_share": 1.0}),
    ("recent-min15", None, {"min_similarity": 0.15}),
    ("recent-min20", None, {"min_similarity": 0.2}),
    ("recent-min25", None, {"min_similarity": 0.25}),
    ("recent-min30", None, {"min_similarity": 0.3}),
    ("recent-min20-floor55", None, {"min_similarity": 0.2, "recall_relative_floor": 0.55}),
    ("recent-min25-floor55", None, {"min_similarity": 0.25, "recall_relative_floor": 0.55}),
    ("recent-min30-floor60", None, {"min_similarity": 0.3, "recall_relative_floor": 0.6}),
    ("recent-min30-floor60-cap20", None, {"min_similarity": 0.3, "recall_relative_floor": 0.6,
                                          "recall_max_chunks": 20}),
    ("recent-min30-floor55", None, {"min_similarity": 0.3, "recall_relative_floor": 0.55}),
    ("recent-min30-floor55-cap20", None, {"min_similarity": 0.3, "recall_relative_floor": 0.55,
                                          "recall_max_chunks": 20}),
    ("recent-min30-floor55-cap24", None, {"min_similarity": 0.3, "recall_relative_floor": 0.55,
                                          "recall_max_chunks": 24}),
    ("recent-floor60-cap24", None, {"recall_relative_floor": 0.6, "recall_max_chunks": 24}),
    ("recent-floor50", None, {"recall_relative_floor": 0.5}),
    ("recent-floor55", None, {"recall_relative_floor": 0.55}),
    ("recent-floor60", None, {"recall_relative_floor": 0.6}),
    ("recent-floor65", None, {"recall_relative_floor": 0.65}),
    ("recent-floor60-cap20", None, {"recall_relative_floor": 0.6, "recall_max_chunks": 20}),
    ("recent-floor55-cap20", None, {"recall_relative_floor": 0.55, "recall_max_chunks": 20}),
    ("recent-floor60-keep100", None, {"recall_relative_floor": 0.6, "resurrection_keep_share": 1.0}),
    ("recent-cap12", None, {"recall_max_chunks": 12}),
    ("recent-cap20", None, {"recall_max_chunks": 20}),
    ("recent-floor60-cap16", None, {"recall_relative_floor": 0.6, "recall_max_chunks": 16}),
    ("recent-budget512", None, {"resurrection_budget_cap": 512}),
    ("recent-budget640", None, {"resurrection_budget_cap": 640}),
    ("recent-budget768", None, {"resurrection_budget_cap": 768}),
    ("recent-always-cap12", None, {"resurrection_anchors": "always", "recall_max_chunks": 12}),
    ("recent-nb2-cap12", None, {"neighbour_matches": 2, "recall_max_chunks": 12}),
    # The app's resurrection on every user message during the replay too.
    ("halo-live", "live", {}),
    ("halo-live-mean", "live-mean", {"rule": "mean"}),
    ("fifo-halo-live", "fifo-live", {}),
    # Pruning only for room (prune_when = "for_room"): the window kept full between
    # messages, pruned just enough at each message for what it resurrects (room <= C - P).
    ("lazy-fifo-halo", "lazy-fifo", {}),  # oldest first
    ("lazy-halo", "lazy", {}),  # dimmest first (magnitude votes)
    ("halo-decay-live", "decay-live", {}),
]

#: Methods left out of the default list (still runnable with ``--methods``): superseded
#: experiments, each with the run that retired it (docs/memory-benchmark.md).  A new
#: method joins the default list by being added to METHODS above.
RETIRED = {
    "brightness": "no resurrection: 0.111 on conv-30 vs fifo 0.062, recall comes from resurrection",
    "halo-noboost": "user boost a wash (±0.015) on the dev run",
    "halo-hybrid": "hybrid search is the app's default since 540aa0a: same as halo",
    "halo-vector": "vector-only search lost 0.126 to hybrid on the dev run (540aa0a)",
    "halo-k100": "100 candidates: +0.002 / -0.014 on the dev run (misses move to over budget)",
    "halo-hybrid-k100": "as halo-k100, with hybrid search now the default",
    "halo-prefill": "user-turn prefill scoring changed no prune decision on conv-30",
    "halo-hyst": "hysteresis is the app's rule since 540aa0a (prune_hysteresis)",
    "halo-meanrank": "reproduced fifo-halo to the last question on conv-30 (mean = age)",
    "halo-decay-live": "a fourth live replay; halo-live / fifo-halo-live answer the live question",
    # Recall variants that lost on the six dev conversations (recent-seed 0.692).
    "recent-exchange": "the last exchange in the query: 0.418",
    "recent-neighbours2": "two neighbours per side: 0.690, misses turn into over budget",
    "recent-k40": "40 candidates: 0.689", "recent-k40-room": "40 candidates, anchors if room: 0.680",
    "recent-neighbours-k40": "0.702, below neighbours with anchors if room",
    "recent-split-neighbours": "sub-queries add nothing (0.703 vs 0.699)",
    "recent-split-dates-room": "sub-queries add nothing (0.718 vs 0.718)",
    "recent-all": "with sub-queries: 0.747 vs 0.748 without", "recent-all-noboost": "0.760 vs 0.763 without sub-queries",
    "recent-all-hw50": "hybrid weight 0.5: 0.758, loses on conv-41 and conv-44",
    "recent-all-k30": "30 candidates: 0.747", "recent-all-k10": "10 candidates: 0.742",
    "recent-kept-wide": "a pool for bench_recall_fit: half of it overruns the prompt budget (1,968 of 1,848)",
}

#: The brightness rule every replay starts from (methods name what they change from it):
#: the seed's magnitude voting, new text at the cap, chunks by their peak, pruning dimmest
#: first.  Pinned here so that the app's defaults (settings.py) can move by these figures
#: without moving them.
BASE_RULE = dict(brightness_rule="vote", new_token_brightness="cap", chunk_rank="peak",
                 prune_order="brightness", prune_keep_recent=0, prune_when="after_exchange")

QUICK_METHODS = ["full", "fifo", "rag", "halo", "halo-mean", "fifo-halo",
                 "halo-decay", "halo-decay-topk", "halo-median", "halo-mass",
                 "halo-live", "halo-live-mean", "fifo-halo-live"]


def policies(prune_to: int, budget: int, hysteresis: float, half_life: int = 256) -> dict[str, Policy]:
    """Every replay policy by key (``budget``: C - max_new_tokens)."""
    age = (("prune_order", "age"),)
    decay = (("brightness_rule", "decay"), ("brightness_half_life", half_life))

    def short(h: int) -> tuple:
        return (("brightness_rule", "decay"), ("brightness_half_life", h))

    recent = (("prune_keep_recent", prune_to // 2),)
    lazy = (("prune_when", "for_room"),)  # prune_to is then the floor of the room (P)
    return {
        "fifo": Policy("fifo", budget, settings=age),
        "brightness": Policy("brightness", budget),
        "halo": Policy("halo", prune_to),
        "prefill": Policy("prefill", prune_to, score_user=True),
        "hyst": Policy("hyst", prune_to, hysteresis=hysteresis),
        "meanrank": Policy("meanrank", prune_to, rank="mean"),
        "fifo-halo": Policy("fifo-halo", prune_to, settings=age),
        "median": Policy("median", prune_to, settings=(("new_token_brightness", "median"),)),
        "decay": Policy("decay", prune_to, settings=decay),
        "decay-topk": Policy("decay-topk", prune_to, settings=decay + (("chunk_rank", "topk"),)),
        "mass": Policy("mass", prune_to, settings=(("brightness_rule", "mass"), ("new_token_brightness", "median"))),
        "decay4": Policy("decay4", prune_to, settings=short(4)),
        "decay16": Policy("decay16", prune_to, settings=short(16)),
        "decay64": Policy("decay64", prune_to, settings=short(64)),
        "decay16-mean": Policy("decay16-mean", prune_to, settings=short(16) + (("chunk_rank", "mean"),)),
        "recent": Policy("recent", prune_to, settings=recent),
        "decay16-recent": Policy("decay16-recent", prune_to, settings=short(16) + recent),
        "mass-recent": Policy("mass-recent", prune_to, settings=(
            ("brightness_rule", "mass"), ("new_token_brightness", "median")) + recent),
        "mass-recent75": Policy("mass-recent75", prune_to, settings=(
            ("brightness_rule", "mass"), ("new_token_brightness", "median"),
            ("prune_keep_recent", prune_to * 3 // 4))),
        "live": Policy("live", prune_to, resurrect="at_prune"),
        "live-mean": Policy("live-mean", prune_to, resurrect="mean"),
        "fifo-live": Policy("fifo-live", prune_to, settings=age, resurrect="at_prune"),
        "decay-live": Policy("decay-live", prune_to, settings=decay, resurrect="at_prune"),
        "lazy-fifo": Policy("lazy-fifo", prune_to, settings=age + lazy, resurrect="at_prune"),
        "lazy": Policy("lazy", prune_to, settings=lazy, resurrect="at_prune"),
    }


def past_search(index, limit: int) -> Callable[[str, int], list]:
    """``search(text, before_turn)``: the index's best ``limit`` matches among turns said
    before ``before_turn``.  The whole index is ranked and the future dropped, so the
    order among past entries is the full index's (BM25's term statistics and its
    normalisation still count later entries: a small leak, no future entry is returned).
    """

    def search(text: str, before_turn: int) -> list:
        found = index.search(text, max(index.entry_count, limit))
        return [m for m in found if m.turn_id < before_turn][:limit]

    # The app plans with its index's settings (neighbours, anchors if room): the replay's
    # resurrection uses the same plan as SemanticIndex.recall_for.
    search.plan = index.plan
    return search
