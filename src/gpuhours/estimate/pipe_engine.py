"""DeepSpeed's PipelineEngine: its data-parallel gradient traffic, none of it beside compute.

GPT-NeoX runs every model through DeepSpeed's PipelineEngine when its pipe-parallel-size is 1
or more (EleutherAI/gpt-neox@71df4d50, v1.0, the commit the Pythia README links:
megatron/neox_arguments/arguments.py sets is_pipe_parallel = pipe_parallel_size >= 1, and
megatron/training.py get_model keeps the PipelineModule unless is_pipe_parallel is false; the
Pythia configs, EleutherAI/pythia@a19eecb8 models/, give "pipe-parallel-size": 1). The engine
(EleutherAI/DeeperSpeed@eb7f5cff, the fork GPT-NeoX v1.0 pins in requirements.txt,
deepspeed/runtime/pipe/engine.py):

- turns the backward's gradient reduction off (`self.enable_backward_allreduce = False`: "We
  schedule the all-reduces, so disable it in super().backward()"), so no bucket is reduced
  while the backward runs, whatever the ZeRO config's overlap_comm says;
- reduces the gradients in its ReduceGrads instruction, scheduled after the last
  micro-batch's backward (pipe/schedule.py TrainSchedule), by `buffered_allreduce_fallback`: an
  all-reduce of every gradient in the engine's half precision (2 (n - 1)/n of the buffer per
  GPU on a ring), even with the ZeRO config's reduce_scatter on;
- refuses ZeRO-2 and 3 ("ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism");
  under ZeRO-1 (deepspeed/runtime/zero/stage1.py FP16_DeepSpeedZeroOptimizer_Stage1.step) each
  rank updates its partition and all-gathers the updated half-precision weights in the
  optimizer step, (n - 1)/n of them per GPU, after the all-reduce, with no compute beside it.

With bf16 the engine reduces the fp32 gradients of DeepSpeed's BF16_Optimizer, its ZeRO-1
equivalent (the one bf16 runs under pipelining: microsoft/DeepSpeed@5fe9d610, v0.7.0,
deepspeed/runtime/pipe/engine.py _exec_reduce_grads -> _bf16_reduce_grads, "Make our own list
of gradients from the optimizer's FP32 grads": bf16_optimizer.py get_grads_for_reduction
returns fp32_groups_gradients_flat; its step's update_lp_params all-gathers the updated bf16
partitions, all_gather_dp_groups): 4-byte gradients, 2-byte weights gathered.

So the step pays all of this traffic in series with its compute. Pure functions; no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuhours.setup import Training


def pipe_engine_grad_sync_bytes(params: float, grad_bytes: float, weight_bytes: float,
                                ranks: int, zero_stage: int) -> float:
    """Bytes one GPU sends per optimizer step for DeepSpeed's PipelineEngine's data-parallel
    synchronisation over `ranks` ranks: the all-reduce of its `params` gradients of
    `grad_bytes` each, 2 (n - 1)/n of them on a ring, and with ZeRO-1 (`zero_stage` 1) the
    all-gather of the updated weights of `weight_bytes` each, (n - 1)/n. 0 on one rank.
    Source: the module docstring (DeeperSpeed@eb7f5cff pipe/engine.py _exec_reduce_grads,
    zero/stage1.py step)."""
    if zero_stage > 1:
        raise ValueError("DeepSpeed's PipelineEngine runs ZeRO stage 0 or 1 only")
    if ranks <= 1:
        return 0.0
    ring = (ranks - 1) / ranks
    gather = ring * params * weight_bytes if zero_stage == 1 else 0.0
    return 2 * ring * params * grad_bytes + gather


def runnable_zero_stages(t: Training, replicas: int) -> list[int]:
    """ZeRO stages a setup can run on `replicas` data-parallel replicas: any with more than
    one, stage 0 alone with one. DeepSpeed's PipelineEngine: stage 0 or 1 only, and with
    bf16-mixed stage 1 alone (it runs BF16_Optimizer, ZeRO-1's sharding, whatever the config;
    setup.py refuses stage 0 with it). Unsloth's kernel path: stage 0 alone (it patches a
    model on one GPU; setup.check_kernel_path)."""
    if t.kernels == "unsloth":
        return [0]
    if t.deepspeed_pipe_engine:
        if t.precision == "bf16-mixed":
            return [1]
        return [0, 1] if replicas > 1 else [0]
    return [0, 1, 2, 3] if replicas > 1 else [0]
