"""A loss program (fragmentation's ReplaySizes.loss_program: +bytes an allocation, -i the
free of the i-th block made) run through the caching allocator's rules step after step, the
last block (the LM head's incoming gradient) freed at the end of each step. A test helper."""

from __future__ import annotations

from gpuhours.trace.allocator import Allocator


def replay_loss_program(program: tuple[int, ...], steps: int = 3) -> Allocator:
    """The allocator after `steps` runs of `program`."""
    al = Allocator(None)
    for _ in range(steps):
        blocks = []
        for op in program:
            if op > 0:
                blocks.append(al.malloc(op))
            else:
                al.free(blocks[-op - 1])
        al.free(blocks[-1])
    return al
