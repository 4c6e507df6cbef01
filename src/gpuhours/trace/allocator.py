"""A model of PyTorch's CUDA caching allocator, replayed over a trace's allocations and frees.

What `torch.cuda.max_memory_reserved()` would show for the same sequence of tensor allocations,
as a model (no GPU ran). The rules are those of c10/cuda/CUDACachingAllocator.cpp with its
default settings (no `expandable_segments`, no `max_split_size_mb`, no `roundup_power2_divisions`),
as its source and the CUDA semantics notes of the PyTorch documentation describe them:

- every request is rounded up to a multiple of 512 bytes (kMinBlockSize);
- requests of at most 1 MiB (kSmallSize) come from the small pool, whose segments are 2 MiB
  (kSmallBuffer); larger ones from the large pool, whose new segments are 20 MiB (kLargeBuffer)
  for requests under 10 MiB (kMinLargeAlloc) and the request rounded up to 2 MiB (kRoundLarge)
  otherwise;
- a request takes the smallest cached free block of its pool that fits (best fit, ties by
  address); the rest of the block is split off as a free block when it is at least 512 bytes
  (small pool) or more than 1 MiB (large pool), otherwise the whole block is handed out;
- a freed block merges with free neighbours of its segment; segments are never returned to
  the driver during a step (no `empty_cache`), so reserved memory only grows.

Not modelled: several CUDA streams (a block freed on one stream waits for its events), the
allocator's own garbage collection threshold, memory the caching allocator never sees (the CUDA
context, cuBLAS workspaces, NCCL buffers) and fragmentation from earlier steps' different shapes.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from gpuhours.trace.accounting import StorageLog

MIN_BLOCK_BYTES = 512
SMALL_REQUEST_BYTES = 1 << 20
SMALL_SEGMENT_BYTES = 2 << 20
LARGE_SEGMENT_BYTES = 20 << 20
MIN_LARGE_ALLOC_BYTES = 10 << 20
ROUND_LARGE_BYTES = 2 << 20


def rounded_bytes(nbytes: int) -> int:
    """A request's size after the 512-byte rounding (zero-byte requests take one block)."""
    if nbytes < MIN_BLOCK_BYTES:
        return MIN_BLOCK_BYTES
    return MIN_BLOCK_BYTES * ((nbytes + MIN_BLOCK_BYTES - 1) // MIN_BLOCK_BYTES)


def segment_bytes(rounded: int) -> int:
    """Size of the segment cudaMalloc'd when no cached block fits a rounded request."""
    if rounded <= SMALL_REQUEST_BYTES:
        return SMALL_SEGMENT_BYTES
    if rounded < MIN_LARGE_ALLOC_BYTES:
        return LARGE_SEGMENT_BYTES
    return ROUND_LARGE_BYTES * ((rounded + ROUND_LARGE_BYTES - 1) // ROUND_LARGE_BYTES)


@dataclass
class _Block:
    segment: int
    offset: int
    size: int
    small: bool
    free: bool = True
    prev: _Block | None = None
    next: _Block | None = None


@dataclass
class _Pool:
    """Free blocks ordered by (size, segment, offset) for best fit."""

    small: bool
    keys: list[tuple[int, int, int]] = field(default_factory=list)
    blocks: dict[tuple[int, int, int], _Block] = field(default_factory=dict)

    def add(self, b: _Block) -> None:
        key = (b.size, b.segment, b.offset)
        bisect.insort(self.keys, key)
        self.blocks[key] = b

    def remove(self, b: _Block) -> None:
        key = (b.size, b.segment, b.offset)
        i = bisect.bisect_left(self.keys, key)
        del self.keys[i]
        del self.blocks[key]

    def best_fit(self, size: int) -> _Block | None:
        i = bisect.bisect_left(self.keys, (size, -1, -1))
        return self.blocks[self.keys[i]] if i < len(self.keys) else None


@dataclass(frozen=True)
class AllocatorReplay:
    """Peaks of the model, bytes: what torch.cuda.max_memory_allocated would show (requests
    after rounding) and max_memory_reserved (segments), plus the segment count."""

    peak_allocated_bytes: int
    peak_reserved_bytes: int
    segments: int
    #: reserved at the moment the live tensors peaked
    reserved_at_tensor_peak_bytes: int


def replay(log: StorageLog) -> AllocatorReplay:
    """Run the allocator model over every allocation and free of `log`, in order."""
    pools = {True: _Pool(small=True), False: _Pool(small=False)}
    by_uid: dict[int, _Block] = {}
    reserved = allocated = peak_allocated = 0
    segments = 0
    reserved_at_peak = 0
    for i, ev in enumerate(log.events):
        uid = abs(ev)
        if ev > 0:
            size = rounded_bytes(log.sizes[uid])
            pool = pools[size <= SMALL_REQUEST_BYTES]
            block = pool.best_fit(size)
            if block is None:
                seg = segment_bytes(size)
                block = _Block(segment=segments, offset=0, size=seg, small=pool.small)
                segments += 1
                reserved += seg
            else:
                pool.remove(block)
            remaining = block.size - size
            split = remaining >= MIN_BLOCK_BYTES if pool.small else remaining > SMALL_REQUEST_BYTES
            if split:
                rest = _Block(segment=block.segment, offset=block.offset + size, size=remaining,
                              small=block.small, prev=block, next=block.next)
                if block.next is not None:
                    block.next.prev = rest
                block.next = rest
                block.size = size
                pool.add(rest)
            block.free = False
            by_uid[uid] = block
            allocated += block.size
            peak_allocated = max(peak_allocated, allocated)
        else:
            block = by_uid.pop(uid)
            allocated -= block.size
            _release(pools[block.small], block)
        if i + 1 == log.peak_event:
            reserved_at_peak = reserved
    return AllocatorReplay(peak_allocated_bytes=peak_allocated, peak_reserved_bytes=reserved,
                           segments=segments, reserved_at_tensor_peak_bytes=reserved_at_peak)


def _release(pool: _Pool, block: _Block) -> None:
    """Return a block to its pool, merged with free neighbours of its segment."""
    block.free = True
    prev = block.prev
    if prev is not None and prev.free:
        pool.remove(prev)
        prev.size += block.size
        prev.next = block.next
        if block.next is not None:
            block.next.prev = prev
        block = prev
    nxt = block.next
    if nxt is not None and nxt.free:
        pool.remove(nxt)
        block.size += nxt.size
        block.next = nxt.next
        if nxt.next is not None:
            nxt.next.prev = block
    pool.add(block)
