"""The analytic estimator's figures for a traced setup, to set beside the trace. No torch."""

from __future__ import annotations

from gpuhours.estimate.flops import TrainingFlops, training_flops_per_token
from gpuhours.estimate.memory import MemoryBreakdown, training_memory
from gpuhours.setup import Training, torch_precision
from gpuhours.trace.setup import TraceSetup


def analytic_training(setup: TraceSetup) -> Training:
    """The estimator's Training for what the trace runs (one GPU, no ZeRO).

    The precision is the one actually traced: bf16-mixed is traced as bf16-amp (see
    trace/setup.py torch_precision), so the estimator is asked about bf16-amp too."""
    t = setup.training
    return t.model_copy(update={
        "precision": torch_precision(t.precision, t.method).analytic_precision})


def analytic_memory(setup: TraceSetup) -> MemoryBreakdown:
    """The estimator's memory breakdown of the traced setup (estimate/memory.py)."""
    t = analytic_training(setup)
    return training_memory(t.arch, t)


def analytic_step_flops(setup: TraceSetup) -> tuple[float, float]:
    """The estimator's hardware FLOPs of one step (recomputation included), twice:
    (causal attention counted as half of S x S, as estimate/flops.py does;
     attention counted over the full S x S, as torch's flop counter does).

    Only the attention-score term differs: per token it is 4 L H d_head x (S + 1) / 2 causal,
    4 L H d_head x S full, times 3 for forward and backward (4 with recomputation).
    """
    t = analytic_training(setup)
    arch = t.arch
    f: TrainingFlops = training_flops_per_token(arch, t.seq_len, t.method, t.lora_rank,
                                                t.lora_targets, t.checkpointing)
    tokens = t.tokens_per_micro_batch * t.grad_accum
    causal = f.hardware_flops_per_token * tokens
    if arch.encoder:
        return causal, causal  # an encoder's attention is not causal: already full S x S
    full_over_causal = t.seq_len / ((t.seq_len + 1) / 2)
    full = causal + f.attention_flops_per_token * tokens * (full_over_causal - 1.0)
    return causal, full
