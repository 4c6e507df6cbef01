"""What can make room for an RL phase's rollout engine whose weights leave no room for a KV
cache: the smallest engine (tensor parallelism) that holds them, a smaller weight format, a
larger share of the GPU. Each remedy is tried on the generation estimator's own memory cap
(estimate/generation.max_batch_by_memory), so a remedy named is one that fits by the same
arithmetic that refused the phase (walk finding F1: the plan used to say "raise
rollout_memory_utilisation" for a 1,342 GB model, which no share of an 80 GB GPU holds)."""

from __future__ import annotations

from typing import get_args

from gpuhours.catalog.schema import GpuSpec
from gpuhours.errors import InputError
from gpuhours.estimate.generation import max_batch_by_memory, stored_weight_bytes
from gpuhours.setup import Generation

#: shares of the GPU tried when asking whether a larger one would hold a sequence: vLLM's
#: gpu_memory_utilization runs up to 1.0
_SHARES = tuple(round(0.05 * i, 2) for i in range(1, 21))


def _fits(g: Generation, gpu: GpuSpec, share: float) -> bool:
    try:
        max_batch_by_memory(g.arch, g, gpu, share)
    except InputError:
        return False
    return True


def _smallest_tp(g: Generation, gpu: GpuSpec, share: float) -> int | None:
    """The smallest tensor parallelism (of those an engine may have, dividing the attention
    heads as vLLM requires) at or above g's that holds one sequence in `share`; None if none."""
    sizes = get_args(Generation.model_fields["tensor_parallel"].annotation)
    for tp in sorted(sizes):
        if tp >= g.tensor_parallel and g.arch.num_heads % tp == 0 and _fits(
                g.model_copy(update={"tensor_parallel": tp}), gpu, share):
            return int(tp)
    return None


def _needed_share(g: Generation, gpu: GpuSpec) -> float | None:
    """The smallest share (in steps of 0.05) of the GPU that holds one sequence; None if even
    the whole GPU does not."""
    return next((s for s in _SHARES if _fits(g, gpu, s)), None)


def rollout_room_hint(g: Generation, gpu: GpuSpec, share: float, rollout_gpus: int,
                      dedicated: bool, fp8_possible: bool) -> tuple[str, str]:
    """(the plan field to name, the remedies that would fit) for a rollout engine `g` whose
    weights leave no room for a sequence in `share` of `gpu`. Remedies, tried on
    max_batch_by_memory: more tensor parallelism at this share; fp8 weights (rollout_precision,
    1 byte a weight) if the GPU runs fp8 matmuls; a larger share, only when one of at most the
    whole GPU holds a sequence; failing all, a GPU with more memory."""
    remedies: list[str] = []
    field = "rollout_tensor_parallel"
    tp = _smallest_tp(g, gpu, share)
    weights = stored_weight_bytes(g.arch, g.weight_bytes_per_param, g.released_format)
    if tp is not None and tp > g.tensor_parallel:
        more = (f" (the phase's {rollout_gpus} rollout GPUs must then be a multiple of {tp})"
                if rollout_gpus % tp else "")
        remedies.append(f"rollout_tensor_parallel: {tp} splits the weights to "
                        f"{weights / tp / 1e9:.1f} GB a GPU{more}")
    if fp8_possible and g.weight_bytes_per_param > 1.0:
        g8 = g.model_copy(update={"weight_bytes_per_param": 1.0, "matmul_precision": "fp8"})
        tp8 = _smallest_tp(g8, gpu, share)
        if tp8 is not None:
            remedies.append("rollout_precision: fp8 (1 byte a weight)"
                            + (f" with rollout_tensor_parallel: {tp8}"
                               if tp8 > g.tensor_parallel else ""))
    needed = _needed_share(g, gpu)
    if needed is not None and needed > share:
        if not remedies:
            field = "rollout_memory_utilisation"
        remedies.append(f"rollout_memory_utilisation of at least {needed:g}"
                        + ("" if dedicated or needed > 0.9 else
                           ", or dedicated rollout GPUs (0.9 of each by default)"))
    if not remedies:
        biggest = max(sorted(get_args(Generation.model_fields["tensor_parallel"].annotation)))
        return field, (f"No rollout engine of up to {biggest} {gpu.name} GPUs holds the weights "
                       f"({weights / biggest / 1e9:.1f} GB a GPU at tensor parallelism "
                       f"{biggest}"
                       + (", half that in fp8" if fp8_possible and g.weight_bytes_per_param > 1
                          else "")
                       + "): use a GPU with more memory (the plan's hardware.gpu).")
    return field, "What fits: " + "; or ".join(remedies) + "."
