"""Aggregating outcomes into the method x category table, JSON figures and the plot;
combining the outputs of several runs (``--merge``, ``--jobs``)."""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .fidelity import Fidelity
from ..locomo import CATEGORIES


@dataclass
class MethodResult:
    """Every scored question's outcome for one method, plus its wall time."""

    name: str
    recalls: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))
    tokens: list[int] = field(default_factory=list)
    replay_seconds: float = 0.0
    question_seconds: float = 0.0
    replay_shared_with: str | None = None
    missing_reasons: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    fidelity: Fidelity = field(default_factory=Fidelity)
    recalled: list[int] = field(default_factory=list)  # tokens each question brought back

    def add(self, category: int, recall: float, tokens: int, recalled: int | None = None) -> None:
        if not math.isnan(recall):
            self.recalls[category].append(recall)
        self.tokens.append(tokens)
        if recalled is not None:
            self.recalled.append(recalled)

    def recall(self, category: int | None = None) -> float:
        values = (sum(self.recalls.values(), []) if category is None
                  else self.recalls.get(category, []))
        return float(np.mean(values)) if values else float("nan")

    def figures(self) -> dict:
        out = {f"recall_{CATEGORIES[c].replace('-', '_')}": _r(self.recall(c)) for c in CATEGORIES}
        out["recall_overall"] = _r(self.recall())
        for c in CATEGORIES:
            out[f"n_{CATEGORIES[c].replace('-', '_')}"] = len(self.recalls.get(c, []))
        out["questions"] = sum(len(v) for v in self.recalls.values())
        out["mean_tokens"] = _r(float(np.mean(self.tokens)) if self.tokens else float("nan"), 1)
        out["max_tokens"] = int(max(self.tokens)) if self.tokens else 0
        out["max_tokens"] = max(out["max_tokens"], getattr(self, "max_tokens", 0))
        if self.recalled:
            out["mean_recalled_tokens"] = _r(float(np.mean(self.recalled)), 1)
        # Continuation fidelity (finite: a method without scored turns counts as none lost).
        f = self.fidelity
        out["delta_nll"] = round(f.delta_nll, 4) if f.turns and math.isfinite(f.delta_nll) else 0.0
        out["kept_attention_mass"] = (round(f.kept_attention_mass, 4)
                                      if f.turns and math.isfinite(f.kept_attention_mass) else 1.0)
        out["fidelity_turns"] = f.turns
        out["replay_seconds"] = _r(self.replay_seconds, 1)
        out["question_seconds"] = _r(self.question_seconds, 1)
        if self.replay_shared_with:
            out["replay_shared_with"] = self.replay_shared_with
        if self.missing_reasons:
            out["missing_reasons"] = dict(self.missing_reasons)
        return out


def merge(figures: list[dict]) -> list[MethodResult]:
    """Combine the ``methods`` figures of several runs (one per conversation, say).

    Recall is re-weighted by each category's question count; token means by question
    count; seconds add up.
    """
    merged: dict[str, MethodResult] = {}
    for run in figures:
        for name, f in run["methods"].items():
            r = merged.setdefault(name, MethodResult(name))
            for c, label in CATEGORIES.items():
                key = label.replace("-", "_")
                n, value = f.get(f"n_{key}", 0), f.get(f"recall_{key}")
                if n and value is not None:
                    r.recalls[c].extend([value] * n)  # same mean, same weight
            r.tokens.extend([f["mean_tokens"]] * f["questions"])
            if f.get("mean_recalled_tokens") is not None:
                r.recalled.extend([f["mean_recalled_tokens"]] * f["questions"])
            r.replay_seconds += f.get("replay_seconds", 0.0)
            r.question_seconds += f.get("question_seconds", 0.0)
            r.replay_shared_with = f.get("replay_shared_with")
            for reason, count in f.get("missing_reasons", {}).items():
                r.missing_reasons[reason] += count
            r.max_tokens = max(getattr(r, "max_tokens", 0), f["max_tokens"])
            turns = f.get("fidelity_turns", 0)
            r.fidelity.add(Fidelity(turns, f.get("delta_nll", 0.0) * turns,
                                    f.get("kept_attention_mass", 1.0) * turns))
    return list(merged.values())


def _r(x: float, digits: int = 3):
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(x, digits)


def table(results: list[MethodResult]) -> str:
    """A fixed-width table: recall per category, overall, tokens, wall time."""
    heads = ["method"] + [f"{c} {CATEGORIES[c]}" for c in CATEGORIES] + [
        "overall", "ΔNLL", "kept mass", "n", "mean tok", "max tok", "replay s", "question s"]
    rows = []
    for r in results:
        f = r.figures()
        cells = [r.name] + [_fmt(r.recall(c)) for c in CATEGORIES] + [
            _fmt(r.recall()), *((f"{f['delta_nll']:.3f}", f"{f['kept_attention_mass']:.3f}")
                                if f["fidelity_turns"] else ("—", "—")), str(f["questions"]), f"{f['mean_tokens']:.0f}", str(f["max_tokens"]),
            f"{r.replay_seconds:.0f}" + ("*" if r.replay_shared_with else ""),
            f"{r.question_seconds:.1f}"]
        rows.append(cells)
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(heads)]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(heads), sep] + [line(r) for r in rows])


def _fmt(x: float) -> str:
    return "—" if math.isnan(x) else f"{x:.3f}"


def plot_brightness(traces, evidence_turns, path: str, title: str) -> None:
    """Two panels from the halo replay's traces (one per dialogue).

    Left: peak brightness of a sample of evidence turns over the replay (a line ends where
    the turn was pruned).  Right: survival: fraction of turns still live vs. their age
    in voting steps, evidence turns against all other turns.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    ages_ev, ages_other, alive_ev, alive_other = [], [], [], []
    shown = 0
    for sample_id, trace in traces.items():
        evidence = evidence_turns[sample_id]
        born: dict[int, int] = {}
        last_seen: dict[int, int] = {}
        series: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for step, peaks in zip(trace.steps, trace.peaks):
            for turn_id, peak in peaks.items():
                born.setdefault(turn_id, step)
                last_seen[turn_id] = step
                if turn_id in evidence:
                    series[turn_id].append((step, peak))
        end = trace.steps[-1] if trace.steps else 0
        for turn_id, b in born.items():
            lifetime = last_seen[turn_id] - b
            still = last_seen[turn_id] == end
            (ages_ev if turn_id in evidence else ages_other).append((lifetime, still, end - b))
        for turn_id in sorted(series)[:: max(1, len(series) // 12)]:
            if shown >= 24:
                break
            xs, ys = zip(*series[turn_id])
            left.plot(xs, ys, lw=1, alpha=0.8)
            left.plot(xs[-1], ys[-1], "x" if xs[-1] != end else "o", ms=4, color="k")
            shown += 1
    left.set_xlabel("voting steps (teacher-forced tokens so far)")
    left.set_ylabel("peak brightness of the turn")
    left.set_title("evidence turns while live (x = pruned next)")
    horizon = max([a[2] for a in ages_ev + ages_other] or [1])
    grid = np.linspace(0, horizon, 60)
    for label, ages, style in (("evidence turns", ages_ev, "-"), ("other turns", ages_other, "--")):
        if not ages:
            continue
        frac = []
        for g in grid:
            at_risk = [a for a in ages if a[2] >= g]  # observed at least this long
            frac.append(np.mean([a[0] >= g for a in at_risk]) if at_risk else np.nan)
        right.plot(grid, frac, style, label=f"{label} (n={len(ages)})")
    right.set_xlabel("age (voting steps since the turn was added)")
    right.set_ylabel("fraction still live")
    right.set_ylim(0, 1.05)
    right.set_title("survival under pruning")
    right.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def label_offsets(xs: list[float], ys: list[float]) -> list[int]:
    """Vertical offsets (points) of the points' labels: a label near an earlier one (within
    15 % of the x range and 4 % of the y range) goes one line lower, so the names of
    methods that nearly coincide are stacked instead of printed over each other."""
    span_x, span_y = (max(xs) - min(xs)) or 1.0, (max(ys) - min(ys)) or 1.0
    placed: list[tuple[float, float]] = []
    offsets = []
    for x, y in zip(xs, ys):
        here = ((x - min(xs)) / span_x, (y - min(ys)) / span_y)
        crowd = sum(abs(here[0] - px) < 0.15 and abs(here[1] - py) < 0.04 for px, py in placed)
        placed.append(here)
        offsets.append(3 - 9 * crowd)
    return offsets


def plot_fidelity(figures: dict[str, dict], path: str, title: str) -> None:
    """Each method as a point: ΔNLL (left, lower is better) and kept attention mass
    (right) against evidence recall."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n, f in figures.items() if f.get("fidelity_turns") and f.get("recall_overall") is not None]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    for ax, key, label in ((axes[0], "delta_nll", "ΔNLL vs the 8k-window reference (nats/token)"),
                           (axes[1], "kept_attention_mass", "share of the reference's attention kept")):
        xs = [figures[n][key] for n in names]
        ys = [figures[n]["recall_overall"] for n in names]
        for name, x, y, dy in zip(names, xs, ys, label_offsets(xs, ys)):
            ax.plot(x, y, "o", color="C1" if "fifo" in name or name == "rag" else "C0")
            ax.annotate(name, (x, y), fontsize=7, xytext=(3, dy), textcoords="offset points")
        ax.set_xlabel(label)
        ax.set_ylabel("evidence recall (overall)")
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def diagnose(dialogue, per_question, room: int) -> list[str]:
    """Lines for questions where halo recalls less than rag or brightness."""
    if room <= 0 or "halo" not in per_question:
        return []
    lines = []
    rivals = [n for n in ("rag", "brightness") if n in per_question]
    for qi, question in enumerate(dialogue.questions):
        halo = per_question["halo"][qi]
        best = max((per_question[n][qi].recall for n in rivals), default=float("nan"))
        if math.isnan(halo.recall) or not (halo.recall < best):
            continue
        reasons = ", ".join(f"{d} {why}" for d, why in halo.missing.items())
        lines.append(f"  {dialogue.sample_id} q{question.index} [cat {question.category}] "
                     f"{question.question[:60]!r}: halo {halo.recall:.2f} vs "
                     f"{'/'.join(f'{n} {per_question[n][qi].recall:.2f}' for n in rivals)}; {reasons}")
        if len(lines) >= room:
            break
    return lines


def merge_outputs(paths: list[str], as_json: bool, plot: str = "", elapsed: float | None = None) -> int:
    """Print the table of several runs combined (each file: a run's stdout with --json);
    ``elapsed``: the wall time of the one command that ran them (``--jobs``)."""
    runs = [json.loads(Path(p).read_text().strip().splitlines()[-1]) for p in paths]
    results = merge(runs)
    convs = [c for r in runs for c in r["conversations"]]
    print(f"# bench_memory merged: {', '.join(convs)}; "
          f"{sum(r['questions'] for r in runs)} questions; "
          f"wall {sum(r['wall_seconds'] for r in runs):.0f} s in {len(runs)} runs"
          + (f", {elapsed:.0f} s elapsed" if elapsed is not None else ""))
    print(table(results))
    by_conversation = per_conversation(runs)
    if len(runs) > 1:
        print(conversation_table(by_conversation))
    if plot:
        plot_fidelity({r.name: r.figures() for r in results}, plot,
                      f"continuation fidelity and recall: {', '.join(convs)}")
        print(f"plot saved to {plot}")
    if as_json:
        figures = {"conversations": convs, "runs": len(runs),
                   "wall_seconds": sum(r["wall_seconds"] for r in runs),
                   "methods": {r.name: r.figures() for r in results},
                   "per_conversation": by_conversation}
        if elapsed is not None:
            figures["elapsed_seconds"] = round(elapsed, 1)
            figures["load_average"] = list(os.getloadavg())
        print(json.dumps(figures, allow_nan=False, default=str))
    return 0


#: Figures kept per conversation in a merged run (the whole table is per method only).
CONVERSATION_FIGURES = ("recall_overall", "recall_multi_hop", "delta_nll")


def per_conversation(runs: list[dict]) -> dict:
    """``{conversation: {method: {figure: value}}}`` for runs of one conversation each
    (a run over several conversations is keyed by their names joined with "+"), so that
    a merged result still says whether every conversation agrees."""
    out = {}
    for run in runs:
        key = "+".join(run["conversations"])
        out[key] = {name: {f: m[f] for f in CONVERSATION_FIGURES if f in m}
                    for name, m in run["methods"].items()}
    return out


def conversation_table(by_conversation: dict) -> str:
    """Overall / multi-hop recall per method (rows) and conversation (columns)."""
    convs = list(by_conversation)
    methods = list(dict.fromkeys(m for c in convs for m in by_conversation[c]))
    lines = ["| method | " + " | ".join(convs) + " |", "|---" * (len(convs) + 1) + "|"]
    for name in methods:
        cells = []
        for c in convs:
            m = by_conversation[c].get(name, {})
            cells.append(" / ".join("–" if m.get(f) is None else f"{m[f]:.3f}"
                                    for f in ("recall_overall", "recall_multi_hop")))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "per conversation (overall / multi-hop recall):\n" + "\n".join(lines)
