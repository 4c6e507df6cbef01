"""Generation (RL rollouts, evaluation, serving): prefill, decode, KV cache, batch by memory.

Prefill is compute-bound: 2N FLOPs per prompt token plus attention, at GEMM efficiency.
Decode is memory-bound at small batch: each step reads every weight once and each sequence's
KV cache, and becomes compute-bound only when batch x 2N FLOPs outgrow that traffic
(the roofline of Williams et al. 2009 applied per decode step, as in Pope et al. 2022).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuhours.catalog.schema import GpuSpec
from gpuhours.errors import InputError
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.arch import ModelArch
from gpuhours.estimate.flops import generation_flops_per_token
from gpuhours.estimate.params import count_params
from gpuhours.estimate.timing import gemm_efficiency, peak_flops
from gpuhours.estimate.workload import Generation


def kv_cache_bytes_per_token(arch: ModelArch, bytes_per_element: float = 2.0) -> float:
    """K and V of one token over all layers: 2 x layers x kv_heads x head_dim x bytes."""
    return 2.0 * arch.num_layers * arch.kv_dim * bytes_per_element


@dataclass(frozen=True)
class GenerationEstimate:
    """One batch of sequences generated on one GPU replica. Times in s, sizes in bytes."""

    batch: int
    max_batch_by_memory: int
    weights_bytes: float
    kv_cache_bytes: float
    prefill_s: float
    decode_s: float
    decode_step_s_first: float
    decode_step_s_last: float
    decode_bound: str
    sequences_per_s: float
    output_tokens_per_s: float

    @property
    def batch_time_s(self) -> float:
        return self.prefill_s + self.decode_s


def max_batch_by_memory(arch: ModelArch, g: Generation, gpu: GpuSpec) -> int:
    """Sequences whose full KV cache (prompt + output) fits beside the weights."""
    weights = count_params(arch).total * g.weight_bytes_per_param
    usable = gpu.memory_bytes * A.GENERATION_MEMORY_UTILISATION.value - weights
    per_seq = kv_cache_bytes_per_token(arch, g.kv_bytes_per_element) * (
        g.prompt_tokens + g.output_tokens)
    if usable <= per_seq:
        raise InputError(
            "--gpu",
            f"{arch.name} weights ({weights / 1e9:.1f} GB) leave no room for one sequence's KV "
            f"cache on {gpu.name} ({gpu.memory_gb:g} GB).",
            "Use a larger GPU, a quantised model, or shard the model.",
        )
    return int(usable // per_seq)


def estimate_generation(g: Generation, gpu: GpuSpec, precision: str = "bf16") -> GenerationEstimate:
    """Time to prefill `batch` prompts and decode `output_tokens` for each, on one GPU."""
    arch = g.arch
    if arch.encoder:
        raise InputError("--model", f"{arch.name} is an encoder: it does not generate tokens.")
    cap = max_batch_by_memory(arch, g, gpu)
    batch = g.batch if g.batch is not None else cap
    if batch > cap:
        raise InputError("--batch", f"a batch of {batch} sequences needs more KV cache than "
                                    f"fits on {gpu.name}; at most {cap} fit.")
    engine = A.GENERATION_ENGINE_EFFICIENCY[g.engine].value
    peak = peak_flops(gpu, precision)
    e_mm = gemm_efficiency(gpu, arch.hidden_size)
    bw = gpu.memory_bw_gbps * 1e9 * engine
    weights = count_params(arch).total * g.weight_bytes_per_param
    kv_token = kv_cache_bytes_per_token(arch, g.kv_bytes_per_element)

    prefill_flops = batch * g.prompt_tokens * generation_flops_per_token(
        arch, (g.prompt_tokens + 1) / 2)
    prefill_s = prefill_flops / (peak * e_mm)

    def step_s(context: float) -> tuple[float, str]:
        traffic = weights + batch * context * kv_token
        flops = batch * generation_flops_per_token(arch, context)
        t_mem, t_cmp = traffic / bw, flops / (peak * e_mm * engine)
        return (t_mem, "memory bandwidth") if t_mem >= t_cmp else (t_cmp, "compute")

    first, bound = step_s(g.prompt_tokens)
    last, _ = step_s(g.prompt_tokens + g.output_tokens)
    # step time is linear in context, so the mean over steps is the mean of the ends
    decode_s = g.output_tokens * (first + last) / 2
    total = prefill_s + decode_s
    return GenerationEstimate(
        batch=batch,
        max_batch_by_memory=cap,
        weights_bytes=weights,
        kv_cache_bytes=batch * kv_token * (g.prompt_tokens + g.output_tokens),
        prefill_s=prefill_s,
        decode_s=decode_s,
        decode_step_s_first=first,
        decode_step_s_last=last,
        decode_bound=bound,
        sequences_per_s=batch / total,
        output_tokens_per_s=batch * g.output_tokens / total,
    )


def scoring_time_s(arch: ModelArch, sequences: float, tokens_per_sequence: float, gpu: GpuSpec,
                   precision: str = "bf16") -> float:
    """One forward pass over whole sequences (a reference or reward model scoring rollouts), on
    one GPU: compute-bound like a prefill, 2N + causal attention FLOPs per token at GEMM
    efficiency."""
    if arch.encoder:
        raise InputError("model", f"{arch.name} is an encoder; a scoring model must be a "
                                  f"decoder here.")
    flops = sequences * tokens_per_sequence * generation_flops_per_token(
        arch, (tokens_per_sequence + 1) / 2)
    return flops / (peak_flops(gpu, precision) * gemm_efficiency(gpu, arch.hidden_size))
