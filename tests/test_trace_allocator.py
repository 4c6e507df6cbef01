"""The model of the CUDA caching allocator on hand-made allocation sequences (no torch).

Expected values are worked out by hand from the rules in trace/allocator.py's docstring (those of
c10/cuda/CUDACachingAllocator.cpp with default settings).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuhours.trace.accounting import Place, StorageLog
from gpuhours.trace.allocator import replay, rounded_bytes, segment_bytes

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
