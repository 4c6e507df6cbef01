"""The model of the CUDA caching allocator on hand-made allocation sequences (no torch).

Expected values are worked out by hand from the rules in trace/allocator.py's docstring (those of
c10/cuda/CUDACachingAllocator.cpp with default settings).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuhours.trace.accounting import Place, StorageLog
from gpuhours.trace.allocator import (
    Allocator,
    Block,
    OutOfMemory,
    replay,
    rounded_bytes,
    segment_bytes,
)

MIB = 2**20
HERE = Place(0, "forward", "", "op")


def log_of(*events: tuple[str, int]) -> StorageLog:
    """('a', size) allocates (uids 1, 2, ... in order); ('f', uid) frees."""
    log = StorageLog()
    for kind, value in events:
        if kind == "a":
            log.allocate(value, "activations", HERE)
        else:
            log.free(value)
    return log


@pytest.mark.parametrize(("n", "rounded"), [(0, 512), (1, 512), (512, 512), (513, 1024),
                                            (1000, 1024), (MIB + 1, MIB + 512)])
def test_requests_round_up_to_512_bytes(n, rounded):
    assert rounded_bytes(n) == rounded


@pytest.mark.parametrize(("rounded", "segment"), [
    (512, 2 * MIB), (MIB, 2 * MIB),            # small pool: 2 MiB segments
    (MIB + 512, 20 * MIB), (9 * MIB, 20 * MIB),  # large requests under 10 MiB: 20 MiB segments
    (10 * MIB, 10 * MIB), (11 * MIB, 12 * MIB),  # from 10 MiB: rounded up to 2 MiB
])
def test_segment_sizes(rounded, segment):
    assert segment_bytes(rounded) == segment


def test_small_requests_share_one_2_mib_segment():
    r = replay(log_of(("a", 1000), ("a", 3000), ("a", 100)))
    assert r.peak_reserved_bytes == 2 * MIB and r.segments == 1
    assert r.peak_allocated_bytes == 1024 + 3072 + 512


def test_a_freed_block_is_reused_before_a_new_segment():
    r = replay(log_of(("a", 12 * MIB), ("f", 1), ("a", 12 * MIB)))
    assert r.peak_reserved_bytes == 12 * MIB and r.segments == 1


def test_large_block_remainder_of_one_mib_or_less_is_not_split():
    # a 20 MiB segment for 19.5 MiB: 0.5 MiB would remain, not more than 1 MiB: handed out whole
    r = replay(log_of(("a", 3 * MIB), ("f", 1), ("a", 39 * MIB // 2)))
    # the first request made a 20 MiB segment; the second (19.5 MiB) takes it whole
    assert r.segments == 1
    assert r.peak_allocated_bytes == 20 * MIB


def test_large_block_split_and_merged_back():
    # 20 MiB segment: 3 MiB + 3 MiB carved from it (remainders > 1 MiB are split off)
    log = log_of(("a", 3 * MIB), ("a", 3 * MIB), ("f", 1), ("f", 2), ("a", 18 * MIB))
    r = replay(log)
    # both freed blocks merge with the 14 MiB remainder into 20 MiB again: 18 MiB fits
    assert r.segments == 1 and r.peak_reserved_bytes == 20 * MIB


def test_fragmentation_needs_a_new_segment():
    # free the first of two 3 MiB blocks: the 3 MiB hole and the 14 MiB tail are not adjacent,
    # so 15 MiB fits in neither: a new segment of 15 MiB rounded up to 2 MiB, 16 MiB
    log = log_of(("a", 3 * MIB), ("a", 3 * MIB), ("f", 1), ("a", 15 * MIB))
    r = replay(log)
    assert r.segments == 2 and r.peak_reserved_bytes == 20 * MIB + 16 * MIB


def test_best_fit_picks_the_smallest_block_that_fits():
    # two free holes of 12 and 14 MiB in separate segments; a 12 MiB request takes the 12 MiB one
    log = log_of(("a", 12 * MIB), ("a", 14 * MIB), ("f", 1), ("f", 2), ("a", 12 * MIB),
                 ("a", 14 * MIB))
    r = replay(log)
    assert r.segments == 2 and r.peak_reserved_bytes == 26 * MIB


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 40 * MIB)), min_size=1, max_size=60))
def test_reserved_covers_allocated_which_covers_the_tensors(ops):
    """For any sequence: live tensor bytes <= allocated (rounded blocks) <= reserved."""
    log = StorageLog()
    live: list[int] = []
    for free, size in ops:
        if free and live:
            log.free(live.pop(size % len(live)))
        else:
            live.append(log.allocate(size, "activations", HERE))
    r = replay(log)
    assert log.peak_bytes <= r.peak_allocated_bytes <= r.peak_reserved_bytes
    assert r.reserved_at_tensor_peak_bytes <= r.peak_reserved_bytes


def test_a_block_made_and_freed_at_once_moves_only_the_allocated_peak():
    """Allocator.malloc_and_free, worked by hand: a 3 MiB block splits a 20 MiB segment (17 MiB
    left free). 5 MiB made and freed takes the 17 MiB block split (5 MiB handed out, peak
    3 + 5); 16.5 MiB would leave 0.5 MiB, not split, so the whole 17 MiB is handed out (peak
    3 + 17); 18 MiB fits in no cached block: a new 18 MiB segment, left cached and free."""
    al = Allocator()
    al.malloc(3 * MIB)
    before = al.free_layout()
    al.malloc_and_free(5 * MIB)
    assert al.free_layout() == before and al.peak_allocated == 8 * MIB
    al.malloc_and_free(33 * MIB // 2)
    assert al.free_layout() == before and al.peak_allocated == 20 * MIB
    al.malloc_and_free(18 * MIB)
    assert (al.reserved, al.segments, al.allocated) == (38 * MIB, 2, 3 * MIB)
    assert al.peak_allocated == 21 * MIB and al.peak_reserved == 38 * MIB


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 40 * MIB)), min_size=1,
                max_size=60), st.sampled_from([None, 60 * MIB, 150 * MIB]))
def test_made_and_freed_at_once_is_a_malloc_then_a_free(ops, capacity):
    """For any sequence, with or without a capacity: malloc_and_free leaves two allocators in
    the same state and with the same peaks as malloc followed by free."""
    short, long = Allocator(capacity), Allocator(capacity)
    live: list[tuple[Block, Block]] = []
    for kind, size in ops:
        try:
            if kind == 0 and live:
                a, b = live.pop(size % len(live))
                short.free(a)
                long.free(b)
            elif kind == 1:
                short.malloc_and_free(size)
                long.free(long.malloc(size))
            else:
                live.append((short.malloc(size), long.malloc(size)))
        except OutOfMemory:
            with pytest.raises(OutOfMemory):
                long.free(long.malloc(size)) if kind == 1 else long.malloc(size)
            break
        assert short.free_layout() == long.free_layout()
    assert (short.peak_allocated, short.peak_reserved, short.releases) == (
        long.peak_allocated, long.peak_reserved, long.releases)
