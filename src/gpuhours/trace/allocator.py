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

- with a capacity (`Allocator(capacity_bytes=...)`: the memory cudaMalloc can hand out), a
  new segment that does not fit makes the allocator free every cached segment that is wholly
  free (release_cached_blocks: "Free all non-split cached blocks and retry alloc") and try
  again; if it still does not fit, the request is out of memory. With the default settings
  (no max_split_size_mb) the step before it, release_available_cached_blocks, frees nothing,
  and no garbage_collection_threshold is set. So reserved memory grows with every request no
  cached block fits, and falls back only under that pressure.

`replay` runs one traced step; `estimate/fragmentation.py` runs many steps of different
lengths through `Allocator`, the fragmentation the source's Note [Expandable Segments]
describes ("if in the future it runs at size N + 1, then it will have to make new allocations
that are slightly larger ... leaving unusable free slices of memory at the end of these
segments"). Rules read at pytorch/pytorch@001074d2, c10/cuda/CUDACachingAllocator.cpp (malloc,
get_free_block, should_split, get_allocation_size, release_cached_blocks).

Not modelled: several CUDA streams (a block freed on one stream waits for its events), the
allocator's own garbage collection threshold, memory the caching allocator never sees (the CUDA
context, cuBLAS workspaces, NCCL buffers).
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


@dataclass(slots=True)
class _Block:
    segment: int
    offset: int
    size: int
    small: bool
    free: bool = True
    prev: _Block | None = None
    next: _Block | None = None


#: the handle `Allocator.malloc` returns and `free` takes, named for callers' annotations
Block = _Block


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
        del self.keys[bisect.bisect_left(self.keys, key)]
        del self.blocks[key]

    def best_fit(self, size: int) -> _Block | None:
        i = bisect.bisect_left(self.keys, (size, -1, -1))
        return self.blocks[self.keys[i]] if i < len(self.keys) else None

    def take_best_fit(self, size: int) -> _Block | None:
        """`best_fit`, removed from the pool (one search instead of two)."""
        keys = self.keys
        i = bisect.bisect_left(keys, (size, -1, -1))
        return self.blocks.pop(keys.pop(i)) if i < len(keys) else None


@dataclass(frozen=True)
class AllocatorReplay:
    """Peaks of the model, bytes: what torch.cuda.max_memory_allocated would show (requests
    after rounding) and max_memory_reserved (segments), plus the segment count."""

    peak_allocated_bytes: int
    peak_reserved_bytes: int
    segments: int
    #: reserved at the moment the live tensors peaked
    reserved_at_tensor_peak_bytes: int


class OutOfMemory(Exception):
    """A request that no cached block fits and no new segment fits in the capacity, even after
    the cached free segments were released. `segment_bytes`: the segment it needed."""

    def __init__(self, message: str, segment_bytes: int = 0) -> None:
        super().__init__(message)
        self.segment_bytes = segment_bytes


class Allocator:
    """The caching allocator's state: cached free blocks by pool, reserved segments, and the
    peaks (bytes). `malloc` returns a handle for `free`."""

    def __init__(self, capacity_bytes: float | None = None) -> None:
        self.capacity_bytes = capacity_bytes
        self.pools = {True: _Pool(small=True), False: _Pool(small=False)}
        self.reserved = self.allocated = 0
        self.peak_reserved = self.peak_allocated = 0
        self.segments = 0  # segments ever made (cudaMalloc calls)
        self.released_bytes = 0  # given back to the driver under pressure
        self.releases = 0  # times the cache was emptied under pressure
        #: every segment that is now reserved: id -> (its first block, size)
        self._live: dict[int, tuple[_Block, int]] = {}

    def malloc(self, nbytes: int) -> _Block:
        # the replays of `fit` make hundreds of thousands of requests: rounded_bytes and the
        # pool's search are written out here (same rules), and the peak kept without max()
        size = (MIN_BLOCK_BYTES if nbytes < MIN_BLOCK_BYTES else
                MIN_BLOCK_BYTES * ((nbytes + MIN_BLOCK_BYTES - 1) // MIN_BLOCK_BYTES))
        small = size <= SMALL_REQUEST_BYTES
        pool = self.pools[small]
        block = pool.take_best_fit(size)
        if block is None:
            block = self._new_segment(size, pool)
        remaining = block.size - size
        if remaining >= MIN_BLOCK_BYTES if small else remaining > SMALL_REQUEST_BYTES:
            nxt = block.next
            rest = _Block(block.segment, block.offset + size, remaining, block.small, True,
                          block, nxt)
            if nxt is not None:
                nxt.prev = rest
            block.next = rest
            block.size = size
            key = (remaining, rest.segment, rest.offset)  # pool.add(rest)
            bisect.insort(pool.keys, key)
            pool.blocks[key] = rest
        block.free = False
        allocated = self.allocated + block.size
        self.allocated = allocated
        if allocated > self.peak_allocated:
            self.peak_allocated = allocated
        return block

    def free(self, block: _Block) -> None:
        """Return a block to its pool, merged with free neighbours of its segment (the pool's
        add and remove written out: the replays make hundreds of thousands of frees)."""
        self.allocated -= block.size
        pool = self.pools[block.small]
        keys, blocks = pool.keys, pool.blocks
        block.free = True
        prev = block.prev
        if prev is not None and prev.free:
            key = (prev.size, prev.segment, prev.offset)
            del keys[bisect.bisect_left(keys, key)]
            del blocks[key]
            prev.size += block.size
            nxt = prev.next = block.next
            if nxt is not None:
                nxt.prev = prev
            block = prev
        nxt = block.next
        if nxt is not None and nxt.free:
            key = (nxt.size, nxt.segment, nxt.offset)
            del keys[bisect.bisect_left(keys, key)]
            del blocks[key]
            block.size += nxt.size
            after = block.next = nxt.next
            if after is not None:
                after.prev = block
        key = (block.size, block.segment, block.offset)
        bisect.insort(keys, key)
        blocks[key] = block

    def malloc_and_free(self, nbytes: int) -> None:
        """`free(malloc(nbytes))` (a tensor freed as soon as it is made: torch.no_grad frees an
        operator's output once the next has used it), with the same outcome by a shorter way.
        Where a cached block fits, malloc takes the best fit and free gives it back merged with
        the part split off (the block's neighbours are not free: free blocks are always
        merged), so the pools end as they began and only the allocated peak can move, by the
        bytes malloc would hand out. Where none fits, the new segment (and any release under
        pressure) is made by malloc itself."""
        size = (MIN_BLOCK_BYTES if nbytes < MIN_BLOCK_BYTES else
                MIN_BLOCK_BYTES * ((nbytes + MIN_BLOCK_BYTES - 1) // MIN_BLOCK_BYTES))
        small = size <= SMALL_REQUEST_BYTES
        block = self.pools[small].best_fit(size)
        if block is None:
            self.free(self.malloc(nbytes))
            return
        remaining = block.size - size
        split = remaining >= MIN_BLOCK_BYTES if small else remaining > SMALL_REQUEST_BYTES
        allocated = self.allocated + (size if split else block.size)
        if allocated > self.peak_allocated:
            self.peak_allocated = allocated

    def free_layout(self) -> tuple[object, ...]:
        """What the outcome of later requests depends on, when every block now allocated
        stays allocated through them: the capacity, the segments ever made (new segments'
        ids), the live segments and their sizes, reserved and allocated bytes, and each pool's
        free blocks (size, segment, offset). Two allocators with equal layouts answer the same
        sequence of such requests alike (malloc and free are deterministic): the best fit is
        chosen among the free blocks, a freed block merges only with free neighbours (a free
        block ends where its free neighbour begins), and release_cached frees the live
        segments that are one free block. The peaks are left out."""
        return (self.capacity_bytes, self.segments, self.reserved, self.allocated,
                tuple((sid, seg) for sid, (_, seg) in self._live.items()),
                tuple(self.pools[True].keys), tuple(self.pools[False].keys))

    def _new_segment(self, size: int, pool: _Pool) -> _Block:
        seg = segment_bytes(size)
        if self.capacity_bytes is not None and self.reserved + seg > self.capacity_bytes:
            self.release_cached()
            if self.reserved + seg > self.capacity_bytes:
                raise OutOfMemory(f"{seg} bytes more than the {self.capacity_bytes:.0f} "
                                  f"available, {self.reserved} reserved", seg)
        block = _Block(segment=self.segments, offset=0, size=seg, small=pool.small)
        self._live[self.segments] = (block, seg)
        self.segments += 1
        self.reserved += seg
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        return block

    def release_cached(self) -> None:
        """Free every segment that is one free block (release_cached_blocks)."""
        self.releases += 1
        for sid, (first, seg) in list(self._live.items()):
            if first.free and first.next is None and first.prev is None and first.size == seg:
                self.pools[first.small].remove(first)
                del self._live[sid]
                self.reserved -= seg
                self.released_bytes += seg


def replay(log: StorageLog) -> AllocatorReplay:
    """Run the allocator model over every allocation and free of `log`, in order."""
    alloc = Allocator()
    by_uid: dict[int, _Block] = {}
    reserved_at_peak = 0
    for i, ev in enumerate(log.events):
        uid = abs(ev)
        if ev > 0:
            by_uid[uid] = alloc.malloc(log.sizes[uid])
        else:
            alloc.free(by_uid.pop(uid))
        if i + 1 == log.peak_event:
            reserved_at_peak = alloc.reserved
    return AllocatorReplay(peak_allocated_bytes=alloc.peak_allocated,
                           peak_reserved_bytes=alloc.peak_reserved, segments=alloc.segments,
                           reserved_at_tensor_peak_bytes=reserved_at_peak)

