"""What `generation --json` says when the setup does not fit: the memory figures behind the
verdict (weights, the engine's share of the device, one sequence's KV cache, the batch that
fits), each {value, unit, basis, source}, as `estimate --json` prints an estimate that does not
fit (memory.fits false) before exiting with code 1. No time figure: nothing runs."""

from __future__ import annotations

from typing import Any

from gpuhours.catalog.schema import GpuSpec
from gpuhours.errors import InputError
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.figures import assumed, catalog, formula, given
from gpuhours.estimate.generation import (
    device_map_shares,
    engine_memory_share,
    engine_profile_reserve,
    kv_bytes_per_token_per_gpu,
    kv_tokens_held,
    memory_cap,
    state_bytes_per_sequence_per_gpu,
    stored_weight_bytes,
)
from gpuhours.setup import Generation


def does_not_fit_summary(g: Generation, gpu: GpuSpec, reason: str) -> dict[str, Any]:
    """The verdict and the figures it rests on, JSON-ready (bytes per GPU of the
    tensor-parallel group; the batch that fits is generation.memory_cap's, which set it)."""
    tp = g.tensor_parallel
    arch = g.arch
    weights = stored_weight_bytes(arch, g.weight_bytes_per_param, g.released_format) / tp
    weights_basis = "parameters x weight_bytes_per_param / tensor_parallel"
    if g.device_map_gpus > 1:
        try:  # the largest GPU's share of a device_map split
            weights = max(s.weights_bytes for s in device_map_shares(arch, g, gpu))
            weights_basis = ("the largest GPU's share of accelerate's device_map split "
                             "(estimate/device_map.py)")
        except InputError:  # the split itself does not fit: an even share
            weights = weights / g.device_map_gpus
            weights_basis = ("parameters x weight_bytes_per_param / device_map_gpus (the "
                             "split does not fit)")
    share = engine_memory_share(g)
    engine_bytes = gpu.memory_bytes * share
    hf = g.engine == "hf-generate"
    context = g.prompt_tokens + g.output_tokens
    per_seq = (kv_bytes_per_token_per_gpu(arch, g.kv_bytes_per_element, tp)
               * kv_tokens_held(arch, context)
               + state_bytes_per_sequence_per_gpu(arch, g.kv_bytes_per_element, tp))
    try:
        fit, _ = memory_cap(arch, g, gpu)
    except InputError:  # not even one sequence
        fit = 0
    default = A.GENERATION_MEMORY_UTILISATION
    figures = {
        "weights_bytes_per_gpu": formula(weights, "bytes (GB = 1e9)",
                                         f"{weights_basis} (estimate/generation.py "
                                         "stored_weight_bytes)"),
        "device_bytes": catalog(gpu.memory_bytes, "bytes (GB = 1e9)",
                                "accelerator catalog memory_gb"),
        "engine_memory_bytes": (
            catalog(engine_bytes, "bytes (GB = 1e9)", "the whole device: transformers' generate "
                    "has no memory share; its peak counts the allocator reserve and CUDA "
                    "context (estimate/hf_generate_memory.py)") if hf else
            assumed(engine_bytes, "bytes (GB = 1e9)",
                    f"device x {default.name} {default.value:g} ({default.basis})")),
        "kv_cache_bytes_per_sequence": formula(
            per_seq, "bytes (GB = 1e9)", f"(prompt + output = {context} tokens) x 2 x attention "
            "layers x KV heads per GPU x head_dim x kv_bytes_per_element + SSM state "
            "(estimate/generation.py max_batch_by_memory)"),
        "max_batch_by_memory": formula(fit, "sequences", (
            "the largest batch whose peak (weights + KV cache + the prefill's or a decode "
            "step's largest transient, with the allocator reserve and CUDA context) fits "
            "(estimate/generation.py memory_cap)") if hf else (
            "floor((engine memory - weights - profile_reserve_bytes) / KV cache per "
            "sequence)") + "; 0: none fits"),
    }
    reserve = engine_profile_reserve(arch, g, gpu)
    if reserve.bytes:
        figures["profile_reserve_bytes"] = formula(
            reserve.bytes, "bytes (GB = 1e9)", f"{reserve.describe()}, kept out of the KV cache "
            "(estimate/engine_reserve.py profile_reserve)")
    if g.batch is not None:
        figures["batch"] = given(g.batch, "sequences", "input: batch")
    return {
        "kind": "generation", "model": g.model or arch.name, "model_basis": g.model_basis,
        "gpu": gpu.name, "engine": g.engine, "fits": False, "reason": reason,
        "setup": g.model_dump(mode="json", include={"prompt_tokens", "output_tokens", "batch",
                                                    "engine", "tensor_parallel",
                                                    "device_map_gpus",
                                                    "weight_bytes_per_param",
                                                    "kv_bytes_per_element"}),
        **{k: f.model_dump(mode="json") for k, f in figures.items()},
    }


def smallest_tensor_parallel(g: Generation, hw: Any, ledger: Any, does_not_fit: str
                             ) -> tuple[tuple[Generation, Any, str] | None, str]:
    """For a replica left at one GPU that does not fit (`does_not_fit`: why): ((the setup, its
    estimate, a sentence saying what was chosen and why), "") where, of the tensor
    parallelisms within a node (g.gpus_per_node) that divide the attention heads (as vLLM
    requires) and fit, the one with the fewest GPU seconds per sequence (GPUs x (prefill_s +
    decode_s) / batch, the steady rate generation_summary bills) is taken; else (None, what to
    add to the verdict: the smallest size beyond a node that would fit, its all-reduces over
    the network, or that none would). `hw` a setup.Hardware, `ledger` the calibration's."""
    from typing import get_args

    from gpuhours.api import estimate_generation
    from gpuhours.errors import DoesNotFit

    sizes = sorted(int(x) for x in get_args(Generation.model_fields["tensor_parallel"]
                                            .annotation) if int(x) > g.tensor_parallel)
    fitting: list[tuple[float, int, Generation, Any]] = []
    for tp in sizes:
        if g.arch.num_heads % tp:
            continue
        if tp > g.gpus_per_node and fitting:
            break
        trial = g.model_copy(update={"tensor_parallel": tp})
        try:
            e = estimate_generation(trial, hw, ledger)
        except DoesNotFit:
            continue
        if tp > g.gpus_per_node:
            return None, (f" Tensor parallelism {tp} would fit, across nodes of "
                          f"{g.gpus_per_node} GPUs (its all-reduces over the "
                          f"{g.inter_node_gb_per_s_one_way:g} GB/s network): give "
                          f"--tensor-parallel {tp}; none within a node fits.")
        fitting.append((e.gpus * (e.prefill_s + e.decode_s) / e.batch, tp, trial, e))
    if not fitting:
        return None, " No tensor parallelism up to 64 GPUs fits either."
    _, tp, trial, e = min(fitting, key=lambda f: f[0])
    tried = ", ".join(f"{t}: {c:.3g}" for c, t, _, _ in fitting)
    return (trial, e, (
        f"tensor parallelism {tp} chosen by gpuhours: of those within a node of "
        f"{g.gpus_per_node} GPUs that divide the {g.arch.num_heads} attention heads and fit, "
        f"the fewest GPU seconds per sequence (GPUs x (prefill + decode) / batch; {tried}). "
        f"{g.tensor_parallel} GPU does not fit: {does_not_fit} Give --tensor-parallel to "
        f"choose yourself.")), ""
