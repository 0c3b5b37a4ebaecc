"""Plots of one attention capture (see docs/capture-format.md).

    python scripts/analyze_capture.py CAPTURE [--out DIR] [--next 3]

CAPTURE is a capture folder, or ``latest`` for the newest one under
``<data dir>/captures``.  Writes into DIR (default: ``CAPTURE/plots``):

* ``heatmap.png``     attention of each generated token (rows) over the context cells
                      (columns: system prompt, then live positions), log colour scale,
                      chunk boundaries as faint lines;
* ``brightness.png``  each chunk's peak brightness after every generated token;
* ``prune_next.png``  each live chunk's peak at the end, the next groups pruning would
                      take in order (the conversation's own prune rule decides);
* ``layers.png``      (per_layer captures) the last token's attention per layer, mean
                      over heads, and each layer's share of attention on the sink.

Prints the files written and a one-line summary; ``--json`` prints it as JSON last.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from halo_weave.storage.capture import Capture, CaptureError, list_captures, load_capture, prune_forecast  # noqa: E402

ROLE_COLOURS = {"user": "#5b8def", "assistant": "#e8a33d", "system": "#888888"}
TOOL_COLOUR = "#4ecdc4"


def _label(text: str, limit: int = 14) -> str:
    text = text.replace("\n", "⏎").replace("\t", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _chunk_rows(capture: Capture) -> dict[int, dict]:
    snapshot = (capture.stats or {}).get("chunks") or capture.generation.get("chunks") or []
    return {row["id"]: row for row in snapshot}


def context_columns(capture: Capture) -> tuple[np.ndarray, int]:
    """All positions seen in any record (sorted) and the system prefix length."""
    system = max((rec.system_length for rec in capture if rec.attention is not None), default=0)
    seen = np.unique(np.concatenate([np.asarray(rec.positions) for rec in capture] or [np.zeros(0, np.int64)]))
    return seen, system


def attention_matrix(capture: Capture) -> tuple[np.ndarray, np.ndarray, int]:
    """``[tokens, system + positions]`` attention (NaN where a cell was not in context)."""
    positions, system = context_columns(capture)
    matrix = np.full((len(capture), system + positions.size), np.nan, np.float32)
    for k, rec in enumerate(capture):
        vector = rec.aggregated()
        if vector is None:
            continue
        s = rec.system_length
        matrix[k, system - s : system] = vector[:s]
        cols = system + np.searchsorted(positions, np.asarray(rec.positions))
        matrix[k, cols] = vector[s:]
    return matrix, positions, system


def plot_heatmap(capture: Capture, out: Path) -> Path:
    matrix, positions, system = attention_matrix(capture)
    tokens, cells = matrix.shape
    fig, ax = plt.subplots(figsize=(min(24, 6 + cells / 90), min(18, 3 + tokens / 9)))
    floor = 1e-5
    shown = np.where(np.isnan(matrix), np.nan, np.clip(matrix, floor, 1.0))
    cmap = matplotlib.colormaps["magma"].copy()
    cmap.set_bad("#202020")
    image = ax.imshow(shown, aspect="auto", interpolation="nearest", cmap=cmap,
                      norm=LogNorm(vmin=floor, vmax=1.0))
    fig.colorbar(image, ax=ax, label="attention (mean over layers and heads)")
    if system:
        ax.axvline(system - 0.5, color="#4ecdc4", lw=1.2)
        ax.text(system / 2, -0.8, "system", ha="center", va="bottom", fontsize=8, color="#4ecdc4")
    last = capture[-1]
    if last.chunk_ids is not None and last.chunk_ids.size:
        ids = np.asarray(last.chunk_ids)
        starts = np.flatnonzero(np.concatenate(([False], ids[1:] != ids[:-1])))
        for row in starts:
            col = system + np.searchsorted(positions, last.positions[row])
            ax.axvline(col - 0.5, color="white", lw=0.4, alpha=0.35)
    step = max(1, tokens // 60)
    ax.set_yticks(range(0, tokens, step))
    ax.set_yticklabels([_label(capture.index[k]["text"]) for k in range(0, tokens, step)], fontsize=6)
    xt = np.linspace(0, cells - 1, min(12, cells)).astype(int)
    ax.set_xticks(xt)
    ax.set_xticklabels([("s%d" % c) if c < system else str(int(positions[c - system])) for c in xt], fontsize=7)
    ax.set_xlabel("context cell (s = system prompt, else absolute position)")
    ax.set_ylabel("generated token")
    ax.set_title(f"Attention per generated token — {capture.path.name} "
                 f"({tokens} tokens, {last.format}, context {cells} cells)")
    fig.tight_layout()
    path = out / "heatmap.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def chunk_peaks(capture: Capture) -> tuple[list[int], np.ndarray]:
    """Chunk ids and ``[tokens, chunks]`` peak brightness (NaN while a chunk is absent)."""
    all_ids = sorted({int(c) for rec in capture if rec.chunk_ids is not None for c in np.unique(rec.chunk_ids)})
    column = {c: k for k, c in enumerate(all_ids)}
    peaks = np.full((len(capture), len(all_ids)), np.nan)
    for k, rec in enumerate(capture):
        if rec.chunk_ids is None or rec.chunk_ids.size == 0:
            continue
        ids = np.asarray(rec.chunk_ids)
        starts = np.flatnonzero(np.concatenate(([True], ids[1:] != ids[:-1])))
        values = np.maximum.reduceat(np.asarray(rec.brightness), starts)
        peaks[k, [column[int(c)] for c in ids[starts]]] = values
    return all_ids, peaks


def plot_brightness(capture: Capture, out: Path, highlight: set[int]) -> Path:
    ids, peaks = chunk_peaks(capture)
    rows = _chunk_rows(capture)
    fig, ax = plt.subplots(figsize=(11, 6))
    steps = np.arange(len(capture))
    for k, chunk_id in enumerate(ids):
        row = rows.get(chunk_id, {})
        if row.get("chunk_index", 0) < 0:
            continue  # framing is never scored
        colour = TOOL_COLOUR if row.get("tool_result") else ROLE_COLOURS.get(row.get("role"), "#999999")
        hot = chunk_id in highlight
        label = None
        if hot:
            label = f"#{chunk_id} {_label(row.get('preview', ''), 28)}"
        ax.plot(steps, peaks[:, k], color="#d62728" if hot else colour, lw=1.6 if hot else 0.8,
                alpha=1.0 if hot else 0.6, label=label)
    for role in ("user", "assistant"):
        ax.plot([], [], color=ROLE_COLOURS[role], label=f"{role} chunks")
    ax.plot([], [], color=TOOL_COLOUR, label="tool results")
    ax.set_xlabel("generated token")
    ax.set_ylabel("chunk peak brightness")
    ax.set_title("Chunk peak brightness through the generation (red: pruned next)")
    ax.legend(fontsize=7, loc="lower left", ncol=2)
    ax.grid(alpha=0.25)
    fig.tight_layout()
    path = out / "brightness.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_prune_next(capture: Capture, out: Path, forecast: list[list[dict]]) -> Path:
    last = capture[-1]
    rows = _chunk_rows(capture)
    ids = np.asarray(last.chunk_ids)
    positions = np.asarray(last.positions)
    brightness = np.asarray(last.brightness)
    starts = np.flatnonzero(np.concatenate(([True], ids[1:] != ids[:-1])))
    ends = np.append(starts[1:], ids.size)
    order = {row["id"]: n + 1 for n, group in enumerate(forecast) for row in group}
    fig, (ax, table) = plt.subplots(2, 1, figsize=(13, 8), gridspec_kw={"height_ratios": [3, 2]})
    content = np.zeros(ids.size, bool)
    for a, b in zip(starts, ends):
        chunk_id = int(ids[a])
        row = rows.get(chunk_id, {})
        if row.get("chunk_index", 0) < 0:
            continue  # framing: never scored, leaves with its turn
        content[a:b] = True
        peak = int(brightness[a:b].max())
        x0, x1 = positions[a], positions[b - 1] + 1
        if chunk_id in order:
            colour, width = "#d62728", 3.0
        elif row.get("pinned"):
            colour, width = "#2ca02c", 2.5
        else:
            colour = TOOL_COLOUR if row.get("tool_result") else ROLE_COLOURS.get(row.get("role"), "#999")
            width = 2.0
        ax.hlines(peak, x0, x1, color=colour, lw=width)
        label = f"#{chunk_id}" + (f" ({order[chunk_id]})" if chunk_id in order else "")
        ax.text((x0 + x1) / 2, peak, label, ha="center", va="bottom", fontsize=7,
                color="#d62728" if chunk_id in order else "#444")
    ax.scatter(positions[content], brightness[content], s=3, color="#bbbbbb", zorder=0,
               label="token brightness")
    for role, colour in (("user", ROLE_COLOURS["user"]), ("assistant", ROLE_COLOURS["assistant"])):
        ax.plot([], [], color=colour, lw=2, label=f"{role} chunk peak")
    ax.plot([], [], color="#d62728", lw=3, label="pruned next (order)")
    ax.set_xlabel("absolute position")
    ax.set_ylabel("brightness at the end of the generation")
    ax.set_title("Chunk peaks at the end: which chunks pruning takes next")
    ax.legend(fontsize=7, loc="lower left")
    ax.grid(alpha=0.25)
    table.axis("off")
    lines = ["order  chunk  turn/s  role       tokens  peak   text"]
    for n, group in enumerate(forecast, 1):
        for row in group:
            lines.append(f"{n:>5}  {row['id']:>5}  {row['turn_id']:>3}/{row['chunk_index']:<2} "
                         f"{row['role']:<10} {row['token_count']:>6}  {row['peak']:>5}  "
                         f"{_label(row.get('preview', ''), 60)}")
    if len(lines) == 1:
        lines.append("(nothing can be pruned: every chunk is pinned or protected)")
    lines.append("")
    lines.append("Anchor pairs (a user turn's first chunk and its answer's) leave together, and only")
    lines.append("once each is the last chunk of its turn; pinned chunks never leave.")
    table.text(0, 1, "\n".join(lines[:26]), family="monospace", fontsize=8, va="top")
    fig.tight_layout()
    path = out / "prune_next.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_layers(capture: Capture, out: Path) -> Path | None:
    rec = next((r for r in reversed(list(capture)) if r.format == "per_layer"), None)
    if rec is None:
        return None
    per_layer = np.asarray(rec.attention).mean(axis=1)  # [layers, ctx]
    layers, ctx = per_layer.shape
    fig, (ax, side) = plt.subplots(1, 2, figsize=(14, 6), gridspec_kw={"width_ratios": [4, 1]})
    image = ax.imshow(np.clip(per_layer, 1e-5, 1), aspect="auto", interpolation="nearest",
                      cmap="magma", norm=LogNorm(vmin=1e-5, vmax=1))
    fig.colorbar(image, ax=ax, label="attention (mean over heads)")
    ax.set_xlabel("context cell")
    ax.set_ylabel("layer")
    ax.set_title(f"Token {rec.i} {rec.text!r}: attention per layer")
    sink = per_layer.max(axis=1)
    side.barh(np.arange(layers), sink, color="#e8a33d")
    side.invert_yaxis()
    side.set_xlabel("largest cell (sink) share")
    side.set_xlim(0, 1)
    fig.tight_layout()
    path = out / "layers.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def analyze(capture_path: str | Path, out: Path | None = None, next_groups: int = 3) -> dict:
    """Write the plots of one capture; returns a summary (files, counts)."""
    capture = load_capture(capture_path)
    if len(capture) == 0:
        raise CaptureError(f"{capture.path} has no token records")
    out = Path(out) if out else capture.path / "plots"
    out.mkdir(parents=True, exist_ok=True)
    files = [plot_heatmap(capture, out)]
    forecast: list[list[dict]] = []
    if capture[-1].chunk_ids is not None:
        forecast = prune_forecast(capture, groups=next_groups)
        highlight = {row["id"] for group in forecast for row in group}
        files.append(plot_brightness(capture, out, highlight))
        files.append(plot_prune_next(capture, out, forecast))
    layers = plot_layers(capture, out)
    if layers:
        files.append(layers)
    return {
        "capture": str(capture.path),
        "tokens": len(capture),
        "format": capture[-1].format,
        "files": [str(f) for f in files],
        "prune_next": [[row["id"] for row in group] for group in forecast],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("capture", help="capture folder, or 'latest'")
    parser.add_argument("--out", type=Path, help="where to write the PNGs (default CAPTURE/plots)")
    parser.add_argument("--next", type=int, default=3, help="how many prune groups to forecast")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON last")
    args = parser.parse_args(argv)
    path = args.capture
    if path == "latest":
        found = list_captures()
        if not found:
            parser.error("no captures in the data directory")
        path = found[-1]
    try:
        summary = analyze(path, args.out, args.next)
    except CaptureError as exc:
        parser.error(str(exc))
    for f in summary["files"]:
        print(f)
    print(f"{summary['tokens']} tokens ({summary['format']}); prune next: {summary['prune_next']}")
    if args.json:
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
