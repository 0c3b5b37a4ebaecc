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



def test_a_paragraph_pruned_again_with_new_neighbours_is_stored_once():
    # A resurrected paragraph is pruned again, now with the text around it: only the
    # text the store does not hold is copied out, and the whole span is still found.
    store = SpanStore(max_bytes=10_000)
    copied = []

    def copy_out(a, b):
        copied.append((a, b))
        return f"{a}-{b}", b - a

    assert store.save(A, 100, copy_out) == len(A)
    span = B[:20] + A + B[20:]
    assert store.save(span, 500, copy_out) == len(span)
    assert copied == [(100, 140), (500, 520), (560, 570)]
    assert store.tokens == len(A) + len(B)
    assert to_run(store.cover(span)) == 0


def test_a_gap_too_short_to_look_up_is_stored_with_its_neighbours():
    store = SpanStore(max_bytes=10_000)
    store.put(A[:20], 0, "a", 20)
    store.put(A[23:], 23, "b", 17)
    copied = []
    assert store.save(A, 0, lambda a, b: copied.append((a, b)) or ("gap", b - a)) == len(A)
    (a, b), = copied
    assert b - a == MIN_RUN and a <= 20 and b >= 23
    assert to_run(store.cover(A)) == 0


def test_a_long_span_is_stored_in_even_pieces_none_too_short_to_keep():
    from halo_weave.server.span_store import MAX_ENTRY_TOKENS, entry_bounds

    bounds = entry_bounds(0, MAX_ENTRY_TOKENS + 3)
    assert len(bounds) == 2 and bounds[0][0] == 0 and bounds[-1][1] == MAX_ENTRY_TOKENS + 3
    assert min(b - a for a, b in bounds) >= MIN_RUN
    assert all(b - a <= MAX_ENTRY_TOKENS for a, b in bounds)


def test_a_short_gap_at_the_end_of_a_span_is_found_again():
    store = SpanStore(max_bytes=10_000)
    store.put(A[:35], 0, "a", 35)
    copied = []
    assert store.save(A, 0, lambda a, b: copied.append((a, b)) or ("end", b - a)) == len(A)
    assert copied == [(32, 40)]
    assert to_run(store.cover(A)) == 0


def test_pieces_of_one_entry_are_restored_together_unless_they_take_the_same_tokens():
    """The llama.cpp engine writes a stored entry into the cache once for several of its
    pieces; two pieces taking the same tokens (framing repeats) would then share cells,
    and a cell has one position: those go to separate writes."""
    from halo_weave.server.llamacpp.cache import _by_entry
    from halo_weave.server.span_store import Entry, Piece

    a, b = Entry(tuple(range(40)), 0, b""), Entry(tuple(range(40)), 100, b"")
    pieces = [Piece(0, 10, a, 0), Piece(10, 20, a, 20), Piece(20, 25, None), Piece(25, 35, a, 25),
              Piece(35, 45, a, 30), Piece(45, 50, b, 0), Piece(50, 55, b, 5)]
    runs = [[(p.start, p.end) for p in run] for run in _by_entry(pieces, width=6)]
    # a's 25..35 and 30..40 overlap; b is another entry; the piece to run stands alone.
    assert runs == [[(0, 10), (10, 20)], [(20, 25)], [(25, 35)], [(35, 45)], [(45, 50), (50, 55)]]
    assert [len(run) for run in _by_entry([Piece(i, i + 1, a, i) for i in range(8)], width=3)] == [3, 3, 2]


def test_kept_states_go_back_only_where_the_text_before_them_is_what_they_were_kept_with():
    """States kept at a prune hold what the span saw before it then; put back after the
    chat before it changed, the model would read a context that is gone (it cost LoCoMo
    answers), so there the span is run instead."""
    from halo_weave.server.span_store import ANY_CONTEXT, Context

    head, other = list(range(3000, 3030)), list(range(4000, 4012))
    store = SpanStore(max_bytes=10_000)
    assert store.save(A, 100, lambda a, b: (f"{a}-{b}", b - a), before=head) == len(A)

    undone = store.cover(A, Context(head + A, len(head)))  # the prune undone: same text before
    assert [p.entry is not None for p in undone] == [True]
    moved = store.cover(A, Context(other + head + A, len(other + head)))  # text added before it
    assert to_run(moved) == len(A)
    changed = head[:10] + head[11:]  # a paragraph before it pruned since
    assert to_run(store.cover(A, Context(changed + A, len(changed)))) == len(A)
    part = store.cover(A[10:], Context(head + A, len(head) + 10))  # a later part, same text before
    assert to_run(part) == 0 and part[0].offset == 10

    store.restore = ANY_CONTEXT
    assert to_run(store.cover(A, Context(changed + A, len(changed)))) == 0


def test_a_paragraph_pruned_in_another_context_is_kept_again_for_that_one():
    from halo_weave.server.span_store import Context

    store = SpanStore(max_bytes=10_000)
    copied = []

    def copy_out(a, b):
        copied.append((a, b))
        return f"{a}-{b}", b - a

    first, second = list(range(3000, 3020)), list(range(3500, 3520))
    store.save(A, 100, copy_out, before=first)
    store.save(A, 60, copy_out, before=second)
    assert copied == [(100, 140), (60, 100)]
    assert to_run(store.cover(A, Context(second + A, len(second)))) == 0
