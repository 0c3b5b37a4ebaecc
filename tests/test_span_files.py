"""A conversation's pruned spans kept on disk across a server restart (no model here).

What the user notices: after a restart, a message that brings back text pruned earlier is
answered without the wait of re-reading it — if the span file is read back.  A damaged
or foreign file must cost nothing but that wait.
"""

from __future__ import annotations

from halo_weave.server.kv_files import StateFiles
from halo_weave.server.span_files import SpanFiles
from halo_weave.server.span_store import SpanStore

IDS = tuple(range(100, 140))


def test_spans_appended_over_time_are_all_read_back_in_order(tmp_path):
    files = SpanFiles(StateFiles(tmp_path))
    assert files.append("chat", "model-a", [(IDS, 5, b"first" * 10, None)])
    assert files.append("chat", "model-a", [(IDS[:20], 60, b"second", None), (IDS[20:], 80, b"third", None)])

    spans = files.load("chat", "model-a")
    assert [(s.ids, s.pos, s.blob.read()) for s in spans] == [
        (list(IDS), 5, b"first" * 10), (list(IDS[:20]), 60, b"second"), (list(IDS[20:]), 80, b"third")]
    assert files.load("another chat", "model-a") == []


def test_spans_of_another_model_are_not_read_and_are_replaced(tmp_path):
    files = SpanFiles(StateFiles(tmp_path))
    files.append("chat", "model-a", [(IDS, 0, b"a-states", None)])
    assert files.load("chat", "model-b") == []

    files.append("chat", "model-b", [(IDS, 0, b"b-states", None)])
    assert [s.blob.read() for s in files.load("chat", "model-b")] == [b"b-states"]


def test_a_record_cut_short_by_a_crash_ends_the_file_and_the_next_append_still_counts(tmp_path):
    files = SpanFiles(StateFiles(tmp_path))
    files.append("chat", "m", [(IDS, 0, b"whole", None)])
    path = files.path("chat")
    with open(path, "ab") as out:
        out.write(b"\x28\x00\x00\x00\x00")  # the start of a record, then the crash
    assert [s.blob.read() for s in files.load("chat", "m")] == [b"whole"]

    files.append("chat", "m", [(IDS[:10], 3, b"after", None)])
    assert [s.blob.read() for s in files.load("chat", "m")] == [b"whole", b"after"]


def test_span_files_count_towards_the_bound_on_saved_caches(tmp_path):
    states = StateFiles(tmp_path, max_bytes=4000)
    files = SpanFiles(states)
    files.append("old chat", "m", [(IDS, 0, b"x" * 2500, None)])
    files.append("new chat", "m", [(IDS, 0, b"y" * 2500, None)])
    assert files.load("old chat", "m") == []  # the least recently written went first
    assert [s.blob.read() for s in files.load("new chat", "m")] == [b"y" * 2500]


def test_spans_read_back_fill_only_free_room_and_are_not_written_again():
    store = SpanStore(max_bytes=1000)
    store.owner = "chat"
    kept = store.put(IDS, 0, b"live", 600)
    assert store.add_saved(tuple(range(200, 240)), 50, b"saved", 300, "chat")
    assert not store.add_saved(tuple(range(300, 340)), 90, b"too much", 300, "chat")  # would evict
    assert not store.add_saved(IDS, 0, b"same ids", 10, "chat")
    assert store.unsaved("chat") == [kept]
    assert store.unsaved("another chat") == []


def test_a_span_keeps_the_context_it_was_kept_in_across_a_restart(tmp_path):
    """Read back, a span is put back only where the tokens before it are those it was
    kept with: elsewhere its states would be a context the model no longer reads."""
    from halo_weave.server.span_store import Context, context_digest

    before = list(range(10, 30))
    files = SpanFiles(StateFiles(tmp_path))
    files.append("chat", "m", [(IDS, len(before), b"states", context_digest(before, len(before)))])
    (span,) = files.load("chat", "m")
    store = SpanStore()
    assert store.add_saved(span.ids, span.pos, span.blob, len(span.blob), "chat", span.context)

    same = before + list(IDS)
    assert [p.entry is not None for p in store.cover(list(IDS), Context(same, len(before)))] == [True]
    other = before[:-1] + [7] + list(IDS)
    assert [p.entry for p in store.cover(list(IDS), Context(other, len(before)))] == [None]


def test_a_span_file_of_the_first_layout_is_started_anew(tmp_path):
    files = SpanFiles(StateFiles(tmp_path))
    files.append("chat", "m", [(IDS, 0, b"new", None)])
    path = files.path("chat")
    path.write_bytes(path.read_bytes().replace(b"HWSP2", b"HWSP1", 1))
    assert files.load("chat", "m") == []
    assert files.append("chat", "m", [(IDS, 0, b"again", None)])
    assert [s.blob.read() for s in files.load("chat", "m")] == [b"again"]


def test_a_span_read_back_leaves_its_states_in_the_file_until_they_are_wanted(tmp_path):
    """Reopening reads only the spans' heads (a long chat's file holds hundreds of
    megabytes of states); the states are read when a span is put back, and a file
    replaced since gives none rather than another span's."""
    files = SpanFiles(StateFiles(tmp_path))
    files.append("chat", "m", [(IDS, 0, b"a" * 1000, None), (IDS[:20], 40, b"b" * 500, None)])
    first, second = files.load("chat", "m")
    assert (len(first.blob), len(second.blob)) == (1000, 500)
    assert second.blob.read() == b"b" * 500 and first.blob.read() == b"a" * 1000

    files.path("chat").unlink()  # the disk bound took it; the same spans written again later
    files.append("chat", "m", [(IDS[:20], 40, b"c" * 500, None), (IDS, 0, b"d" * 1000, None)])
    assert first.blob.read() is None and second.blob.read() is None, "not the record it read"
    assert [s.blob.read()[:1] for s in files.load("chat", "m")] == [b"c", b"d"]
