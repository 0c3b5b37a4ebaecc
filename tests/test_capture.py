"""Attention capture: what is recorded comes back, nothing piles up in memory, plots appear."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from halo_weave.storage.capture import (
    AttentionRecorder,
    CaptureError,
    chunk_snapshot,
    default_capture_dir,
    generation_meta,
    list_captures,
    load_capture,
    prune_forecast,
)
from halo_weave.conversation import Conversation, Framing
from halo_weave.core import pruning
from halo_weave.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
LAYERS, HEADS = 3, 2


def _framing() -> Framing:
    prefix = {r: ([900 + i, 1], [f"<|im_start|>{r}", "\n"]) for i, r in enumerate(("system", "user", "assistant"))}
    suffix = {r: ([903, 2], ["<|im_end|>", "\n"]) for r in ("system", "user", "assistant")}
    return Framing(prefix=prefix, suffix=suffix)


def _conversation() -> Conversation:
    conv = Conversation(Settings.of(min_chunk_tokens=4), _framing())
    conv.set_system_prompt("sys", [5, 6, 7], ["You", " are", " kind"])
    words = "alpha beta gamma delta\n\n epsilon zeta eta theta\n\n iota kappa lambda mu".split(" ")
    for turn in range(4):
        role = "user" if turn % 2 == 0 else "assistant"
        conv.add_turn(role, list(range(100, 100 + len(words))), [w + " " for w in words])
    conv.begin_turn("assistant")
    return conv


def _generate(conv: Conversation, recorder: AttentionRecorder, tokens: int, per_layer: bool, seed: int = 0):
    """The app's per-token path: vote, record, append.  Returns what was recorded (copies)."""
    rng = np.random.default_rng(seed)
    sent = []
    for i in range(tokens):
        ctx = conv.live_token_count()
        logits = rng.normal(size=(LAYERS, HEADS, ctx)).astype(np.float32) * 3
        raw = np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)
        raw = raw.astype(np.float32)
        aggregated = raw.reshape(-1, ctx).mean(axis=0)
        conv.apply_attention(aggregated)
        attention = raw if per_layer else aggregated
        recorder.record(200 + i, f"t{i}" + ("\n\n" if i % 7 == 6 else " "), conv.table.position, attention,
                        conv.table.brightness, chunk_ids=conv.table.chunk_id)
        sent.append((conv.table.position.copy(), attention.copy(), conv.table.brightness.copy(),
                     conv.table.chunk_id.copy()))
        conv.append_token(200 + i, f"t{i}" + ("\n\n" if i % 7 == 6 else " "))
    return sent


@pytest.mark.parametrize("per_layer", [False, True])
def test_record_and_load_round_trip(tmp_path, per_layer):
    conv = _conversation()
    recorder = AttentionRecorder(tmp_path)
    path = recorder.start(generation_meta(conv, model="test"))
    sent = _generate(conv, recorder, 20, per_layer)
    recorder.finish({"chunks": chunk_snapshot(conv), "finish_reason": "length"})

    capture = load_capture(path)
    assert len(capture) == 20
    assert capture.generation["model"] == "test" and capture.generation["system_length"] == 3
    assert capture.stats["tokens"] == 20 and capture.stats["finish_reason"] == "length"
    for k, rec in enumerate(capture):
        positions, attention, brightness, chunks = sent[k]
        assert rec.i == k and rec.token_id == 200 + k
        assert rec.text.startswith(f"t{k}")
        np.testing.assert_array_equal(rec.positions, positions)
        np.testing.assert_array_equal(rec.brightness, brightness)
        np.testing.assert_array_equal(rec.chunk_ids, chunks)
        np.testing.assert_array_equal(rec.attention, attention)
        assert rec.format == ("per_layer" if per_layer else "aggregated")
        assert rec.system_length == 3
        assert rec.aggregated().shape == (3 + positions.size,)
    assert capture.text() == "".join(f"t{i}" + ("\n\n" if i % 7 == 6 else " ") for i in range(20))


def test_token_without_attention_and_capture_read_while_recording(tmp_path):
    recorder = AttentionRecorder(tmp_path)
    path = recorder.start()
    recorder.record(1, "Hi", np.arange(4), None, np.full(4, 10000))
    recorder.record(2, "!", np.arange(4), np.full(6, 1 / 6, np.float32), np.full(4, 9999))
    live = load_capture(path)  # no stats.json yet: still readable
    assert live.stats is None and len(live) == 2
    assert live[0].attention is None and live[0].format == "none" and live[0].chunk_ids is None
    assert live[1].system_length == 2
    # A crash mid-line leaves a torn last index line: the records before it still load.
    with open(path / "index.jsonl", "a", encoding="utf-8") as f:
        f.write('{"i": 2, "tok')
    assert len(load_capture(path)) == 2
    recorder.finish()


def test_recorder_memory_does_not_grow_with_tokens(tmp_path):
    """Each token's arrays reach the file before record() returns; none are kept."""
    recorder = AttentionRecorder(tmp_path)
    path = recorder.start()
    ctx = 2000
    positions = np.arange(ctx, dtype=np.int64)
    brightness = np.full(ctx, 10000, np.int32)
    attention = np.full((30, 9, ctx), 1 / ctx, np.float32)  # 2.16 MB, the bundled model's shape
    per_token = attention.nbytes
    tracemalloc.start()
    try:
        for k in range(40):
            recorder.record(k, "x", positions, attention, brightness)
            assert (path / "attention.f32").stat().st_size == (k + 1) * per_token
            assert (path / "positions.i64").stat().st_size == (k + 1) * positions.nbytes
            if k == 4:
                base, _ = tracemalloc.get_traced_memory()
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    recorder.finish()
    assert held - base < 64 * 1024  # 35 more tokens (75 MB written) added almost nothing
    assert peak - base < per_token  # no per-token copy of the attention either


def test_recorder_refuses_misuse(tmp_path):
    recorder = AttentionRecorder(tmp_path)
    with pytest.raises(CaptureError):
        recorder.record(1, "x", np.arange(2), None, np.zeros(2))
    recorder.start()
    with pytest.raises(CaptureError):
        recorder.start()
    with pytest.raises(CaptureError, match="3 brightness values for 2 positions"):
        recorder.record(1, "x", np.arange(2), None, np.zeros(3))
    recorder.finish()
    with pytest.raises(CaptureError):
        recorder.finish()
    with pytest.raises(CaptureError):
        load_capture(tmp_path / "nope")


def test_captures_go_to_the_data_dir_by_default(tmp_path, monkeypatch):
    monkeypatch.setenv("HALO_WEAVE_HOME", str(tmp_path))
    recorder = AttentionRecorder()
    first = recorder.start()
    recorder.finish()
    second = recorder.start()
    recorder.finish()
    assert default_capture_dir() == tmp_path / "captures"
    assert first.parent == tmp_path / "captures" and first != second
    assert list_captures() == [first, second]


def test_prune_forecast_follows_the_conversations_own_rule(tmp_path):
    conv = _conversation()
    recorder = AttentionRecorder(tmp_path)
    path = recorder.start(generation_meta(conv))
    _generate(conv, recorder, 30, per_layer=False, seed=3)
    # State of the last record: the conversation before its final token was appended.
    last = load_capture(recorder.path)[-1]
    recorder.finish({"chunks": chunk_snapshot(conv)})

    forecast = prune_forecast(load_capture(path), groups=4)
    assert forecast, "something must be prunable"
    twin = copy.deepcopy(conv)
    twin.end_turn()
    # Drop the token appended after the last record so both see the same rows.
    live_ids = set(np.unique(last.chunk_ids).tolist())
    for chunk in list(twin.chunks.values()):
        if chunk.live and chunk.id not in live_ids:
            pruning.take_out(twin, [chunk])
    expected = []
    for _ in range(len(forecast)):
        pruned = [c.id for c in twin.prune_to_fit(twin.live_token_count() - 1) if not c.framing]
        expected.append(pruned)
    assert [[row["id"] for row in group] for group in forecast][:2] == expected[:2]
    peaks = [group[0]["peak"] for group in forecast]
    assert all(isinstance(p, int) for p in peaks)

    # A capture written before the chunk index had its name (``sentence_id``) reads the same.
    for name in ("meta.json", "stats.json"):
        file = path / name
        file.write_text(file.read_text("utf-8").replace('"chunk_index"', '"sentence_id"'), "utf-8")
    assert '"sentence_id"' in (path / "stats.json").read_text("utf-8")
    assert prune_forecast(load_capture(path), groups=4) == forecast


def test_analyze_script_writes_the_pngs(tmp_path):
    conv = _conversation()
    recorder = AttentionRecorder(tmp_path / "caps")
    recorder.start(generation_meta(conv))
    _generate(conv, recorder, 25, per_layer=True)
    path = recorder.finish({"chunks": chunk_snapshot(conv)})
    out = tmp_path / "plots"
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "analyze_capture.py"), str(path), "--out", str(out), "--json"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    names = sorted(Path(f).name for f in summary["files"])
    assert names == ["brightness.png", "heatmap.png", "layers.png", "prune_next.png"]
    for name in names:
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    assert summary["tokens"] == 25 and summary["prune_next"]


def test_capture_tools_and_sandbox_import_no_qt():
    code = ("import sys, halo_weave.storage.capture, halo_weave.tools.notebook, halo_weave.tools.jq_sandbox\n"
            "sys.exit(1 if [m for m in sys.modules if m.startswith(('PySide6', 'shiboken6'))] else 0)")
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0
