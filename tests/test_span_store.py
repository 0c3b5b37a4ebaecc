"""The store of pruned spans: found again by their tokens, bounded, oldest forgotten first."""

from __future__ import annotations

from halo_weave.server.span_store import MIN_RUN, SpanStore, to_run

A = list(range(1000, 1040))
B = list(range(2000, 2030))


def test_a_span_made_of_two_stored_chunks_and_a_new_token_runs_only_that_token():
    store = SpanStore(max_bytes=10_000)
    store.put(A, 100, "a", 40)
    store.put(B, 400, "b", 30)
    pieces = store.cover([7] + A + B)
    assert [(p.start, p.end, p.entry.payload if p.entry else None) for p in pieces] == [
        (0, 1, None), (1, 41, "a"), (41, 71, "b")]
    assert to_run(pieces) == 1


def test_part_of_a_stored_span_is_found_at_its_offset():
    store = SpanStore(max_bytes=10_000)
    store.put(A, 100, "a", 40)
    (piece,) = store.cover(A[10:30])
    assert piece.entry.payload == "a" and piece.offset == 10 and len(piece) == 20


def test_short_runs_are_run_not_looked_up():
    store = SpanStore(max_bytes=10_000)
    store.put(A, 100, "a", 40)
    assert to_run(store.cover(A[:MIN_RUN - 1])) == MIN_RUN - 1


def test_the_least_recently_used_span_is_forgotten_when_full():
    store = SpanStore(max_bytes=100)
    first = store.put(A, 0, "a", 60)
    store.put(B, 0, "b", 30)
    store.touch(first)  # A used again: B is now the oldest
    store.put(list(range(3000, 3020)), 0, "c", 30)
    assert store.nbytes == 90 and len(store) == 2
    assert to_run(store.cover(B)) == len(B) and to_run(store.cover(A)) == 0
    assert store.put(list(range(5000, 5020)), 0, "too big", 101) is None

