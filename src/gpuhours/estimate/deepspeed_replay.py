"""DeepSpeed ZeRO-3's own allocations through the caching allocator: its set-up and its step.

The step replay (estimate/step_replay.py) lays a run's state out as torch's AdamW makes it.
DeepSpeed's stage-3 optimizer makes it another way, and in another order, which decides which
cached blocks the step's large requests find. Read in deepspeed/runtime/zero/stage3.py @
v0.12.3 (6ea44d02c; the same in v0.10.0-v0.12.6), full fine-tuning with the optimizer's
state on the GPU:

set-up (DeepSpeedZeroOptimizer_Stage3.__init__), after `defragment` emptied the cache:

1. `_create_fp16_partitions_with_defragmentation`: the weights' partitions in one flat buffer
   (`defragment`: copied to the host, `empty_cache()`, copied back: one new segment);
2. `_create_fp32_partitions`: per sub group `fp16_flat.to(device).clone().float()`: a
   half-precision copy, then the fp32 master, then the copy freed;
3. `initialize_optimizer_states`: `gradient_buffer = torch.zeros(largest sub group, fp32)`,
   then per sub group the optimizer's step on the flat fp32 master (its state: exp_avg and
   exp_avg_sq, zeros_like; torch's foreach AdamW also its temporaries), then the buffer freed;
4. `_setup_for_real_optimizer`, after that: the contiguous-gradient bucket
   (`__ipg_bucket_flat_buffer`, reduce_bucket_size elements in the model's dtype) and
   `grad_partitions_flat_buffer` (every parameter's gradient partition, the model's dtype),
   each a new request on the cache that the steps before left.

each micro-batch's backward: autograd makes each parameter's gradient whole (on more than one
GPU the gathered parameter's); the hook copies it into the bucket (or reduces it alone when
larger than the bucket) and its partition into `grad_partitions_flat_buffer`
(`partition_grads`), then drops it (`param.grad = None`): a transient, freed here as soon as
it is made.

the step (`step`): `_get_norm_groups` (get_grad_norm_direct: `g.double().norm(2)` per
parameter, an 8-byte copy of each gradient partition, made and freed one at a time); then per
sub group `_prepare_fp32_grad_for_sub_group` (`flatten(...)` in the gradients' dtype, `.to`
fp32, the flat copy freed), the optimizer on that one fp32 tensor (its temporaries, for torch's
foreach AdamW), `_release_sub_group` (the fp32 gradient freed).

Not replayed: the parameters gathered on more than one GPU (their all-gathers run on the
coordinator's own stream, whose blocks the default stream does not reuse), the bucket
reductions' side stream (on one GPU nothing is allocated there: a lone parameter is reduced
in place, `reduce_scatter_coalesced`), persisted small parameters (below 10 x hidden elements
under transformers' "auto": kilobytes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuhours.estimate.adamw_temporaries import adamw_temporary_sets
from gpuhours.estimate.deepspeed_step import (
    DEEPSPEED_SUB_GROUP_ELEMENTS,
    deepspeed_zero3_sub_groups,
    hf_auto_reduce_bucket_elements,
)
from gpuhours.estimate.load_cache import layer_linears
from gpuhours.estimate.memory import MemoryBreakdown
from gpuhours.estimate.params import count_params
from gpuhours.setup import Training
from gpuhours.trace.allocator import Allocator

#: bytes per element of the fp32 masters' copies: the flat fp32 gradient, the step's
#: temporaries, and the gradient norm's per-parameter float64 copy
_FP32_BYTES = 4
_FP64_BYTES = 8


def zero3_replayed(t: Training) -> bool:
    """Full fine-tuning under DeepSpeed's ZeRO-3 engine with its state on the GPU: the setups
    whose state this module lays out (LoRA's frozen base is not in the optimizer's flat
    buffers, and CPU offload moves them to the host)."""
    return (t.zero_stage == 3 and t.zero3_engine == "deepspeed" and t.method == "full"
            and t.offload == "none")


@dataclass(frozen=True)
class Zero3Layout:
    """One GPU's share of DeepSpeed ZeRO-3's state, as its optimizer allocates it."""

    #: parameter partitions, elements, in parameter order (the embedding, each layer's
    #: parameters, the final norm, the LM head)
    root_first: tuple[int, ...]
    layers: tuple[tuple[int, ...], ...]
    root_last: tuple[int, ...]
    #: the sub groups' elements (_create_fp16_sub_groups)
    sub_groups: tuple[int, ...]
    weight_bytes_per_element: float
    grad_bytes_per_element: float
    master_bytes_per_element: float
    moment_bytes_per_element: float
    temporary_sets: int
    bucket_elements: int
    #: GPUs the parameters are partitioned over: autograd makes each gradient whole (the
    #: gathered parameter's), gpus x its partition
    gpus: int = 1

    @property
    def params(self) -> list[int]:
        return [*self.root_first, *(n for layer in self.layers for n in layer), *self.root_last]


def zero3_layout(t: Training, m: MemoryBreakdown, num_gpus: int,
                 sub_group_elements: float = DEEPSPEED_SUB_GROUP_ELEMENTS) -> Zero3Layout:
    """The layout of `t` on one of `num_gpus` GPUs; bytes per element from memory.py's own
    totals (`m`, training_memory of the same setup). Each parameter's partition is its
    elements / GPUs, rounded up (partition_parameters.py _partition_param). A layer's
    parameters are its linears as load_cache.layer_linears lists them (q, k and v apart
    where a model fuses them) after one entry for the rest (norms, biases)."""
    arch = t.arch
    c = count_params(arch)
    per_layer = c.attention_per_layer + c.mlp_per_layer + c.norms_per_layer
    linears = [a * b for _, a, b in layer_linears(arch)]
    layer = [max(per_layer - sum(linears), 0), *linears]
    rest = c.total - c.embedding - c.lm_head - per_layer * arch.num_layers
    n = max(num_gpus, 1)

    def part(x: int) -> int:
        return math.ceil(x / n)

    root_first = tuple(part(x) for x in (c.embedding,) if x > 0)
    root_last = tuple(part(x) for x in (rest, c.lm_head) if x > 0)
    layers = tuple(tuple(part(x) for x in layer if x > 0) for _ in range(arch.num_layers))
    params = [*root_first, *(x for lay in layers for x in lay), *root_last]
    total = max(sum(params), 1)
    return Zero3Layout(
        root_first=root_first, layers=layers, root_last=root_last,
        sub_groups=tuple(deepspeed_zero3_sub_groups(params, sub_group_elements)),
        weight_bytes_per_element=m.weights_bytes / total,
        grad_bytes_per_element=m.gradients_bytes / total,
        master_bytes_per_element=m.master_weights_bytes / total,
        moment_bytes_per_element=m.optimizer_bytes / 2 / total,
        temporary_sets=adamw_temporary_sets(t.optimizer, t.optimizer_impl),
        bucket_elements=hf_auto_reduce_bucket_elements(arch.hidden_size), gpus=n)


def _optimizer_temporaries(al: Allocator, z: Zero3Layout, elements: int) -> None:
    """torch's foreach AdamW over one flat fp32 tensor: its sets made together, then freed."""
    blocks = [al.malloc(_FP32_BYTES * elements) for _ in range(z.temporary_sets)]
    for b in blocks:
        al.free(b)


def zero3_setup(al: Allocator, z: Zero3Layout) -> None:
    """The optimizer's set-up, steps 1-4 of the module docstring."""
    total = sum(z.params)
    al.malloc(round(z.weight_bytes_per_element * total))
    for s in z.sub_groups:
        copy = al.malloc(round(z.weight_bytes_per_element * s))
        al.malloc(round(z.master_bytes_per_element * s))
        al.free(copy)
    buffer = al.malloc(_FP32_BYTES * max(z.sub_groups, default=0))
    for s in z.sub_groups:
        al.malloc(round(z.moment_bytes_per_element * s))
        al.malloc(round(z.moment_bytes_per_element * s))
        _optimizer_temporaries(al, z, s)
    al.free(buffer)
    al.malloc(round(z.weight_bytes_per_element * z.bucket_elements))
    al.malloc(round(z.grad_bytes_per_element * total))


def zero3_gradients(al: Allocator, z: Zero3Layout, i: int) -> None:
    """Where autograd makes gradients (fragmentation.replay_micro_batch's
    after_layer_backward: i = layers for the LM head and final norm, a layer's index, -1 for
    the embedding): each made whole, its partition copied into the flat buffer, dropped."""
    layers = len(z.layers)
    sizes = z.root_last if i == layers else z.layers[i] if i >= 0 else z.root_first
    for n in sizes:
        al.malloc_and_free(round(z.grad_bytes_per_element * n * z.gpus))


def zero3_step(al: Allocator, z: Zero3Layout) -> None:
    """The optimizer step of the module docstring: the norm's copies, then sub group after
    sub group."""
    for n in z.params:
        al.malloc_and_free(_FP64_BYTES * n)
    for s in z.sub_groups:
        flat = al.malloc(round(z.grad_bytes_per_element * s))
        fp32 = al.malloc(_FP32_BYTES * s)
        al.free(flat)
        _optimizer_temporaries(al, z, s)
        al.free(fp32)
