"""The analytic estimator's figures for a traced setup, to set beside the trace. No torch."""

from __future__ import annotations

from gpuhours.estimate.arch import ModelArch
from gpuhours.estimate.flops import TrainingFlops, training_flops_per_token
from gpuhours.estimate.memory import MemoryBreakdown, training_memory
from gpuhours.estimate.workload import Training
from gpuhours.trace.setup import TraceSetup, torch_precision


def analytic_training(arch: ModelArch, setup: TraceSetup) -> Training:
    """The estimator's Training for what the trace runs (one GPU, no ZeRO).

    The precision is the one actually traced: bf16-mixed is traced as bf16-amp (see
    trace/setup.py torch_precision), so the estimator is asked about bf16-amp too."""
    return Training.model_validate(dict(
        arch=arch, method=setup.method,
        precision=torch_precision(setup.precision, setup.method).analytic_precision,
        optimizer=setup.optimizer, optimizer_impl=setup.optimizer_impl,
        micro_batch=setup.micro_batch, seq_len=setup.seq_len, grad_accum=setup.grad_accum,
        checkpointing=setup.checkpointing, flash_attention=setup.flash_attention,
        lora_rank=setup.lora_rank, lora_targets=setup.lora_targets, zero_stage=0))


def analytic_memory(arch: ModelArch, setup: TraceSetup) -> MemoryBreakdown:
    """The estimator's memory breakdown of the traced setup (estimate/memory.py)."""
    return training_memory(arch, analytic_training(arch, setup))


def analytic_step_flops(arch: ModelArch, setup: TraceSetup) -> tuple[float, float]:
    """The estimator's hardware FLOPs of one step (recomputation included), twice:
    (causal attention counted as half of S x S, as estimate/flops.py does;
     attention counted over the full S x S, as torch's flop counter does).

    Only the attention-score term differs: per token it is 4 L H d_head x (S + 1) / 2 causal,
    4 L H d_head x S full, times 3 for forward and backward (4 with recomputation).
    """
    t = analytic_training(arch, setup)
    f: TrainingFlops = training_flops_per_token(arch, t.seq_len, t.method, t.lora_rank,
                                                t.lora_targets, t.checkpointing)
    tokens = t.tokens_per_micro_batch * t.grad_accum
    causal = f.hardware_flops_per_token * tokens
    if arch.encoder:
        return causal, causal  # an encoder's attention is not causal: already full S x S
    full_over_causal = t.seq_len / ((t.seq_len + 1) / 2)
    full = causal + f.attention_flops_per_token * tokens * (full_over_causal - 1.0)
    return causal, full
