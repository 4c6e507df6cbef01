"""`trace_module`: a user's own nn.Module on a GPU one does not have.

For a factory (`pkg.mod:factory`, or any callable returning an nn.Module) and its inputs
(`images=float32[B,3,224,224]`), the training step (trace/module_step.py) is traced on fake
tensors at batch 1, 2, 4, ... until it no longer fits the named GPU, then bisected between the
last batch that fits and the first that does not: each answer is a trace, none interpolated.

A batch fits when what the GPU would hold, the caching allocator's reserve over the traced
allocations (trace/allocator.py) plus the CUDA context (assumptions.CUDA_CONTEXT_BYTES), is
within the GPU's memory (catalog) less the headroom (assumptions.FIT_HEADROOM_FRACTION, as
`gpuhours fit`). Not seen by a trace: cuBLAS/cuDNN workspaces beyond the context's, memory the
user's code holds outside the step (a dataloader's pinned buffers, an EMA copy of the weights).

The roofline time per top-level module: each operator takes
max(FLOPs / (dtype peak x GEMM efficiency), bytes / (bandwidth x bandwidth efficiency)), with
the efficiencies of estimate/assumptions.py named in the result. A model, not a measurement.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from gpuhours.catalog.schema import GpuSpec
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.timing import gemm_efficiency_basis, product_matmul_factor
from gpuhours.trace import accounting, allocator
from gpuhours.trace.module_result import (
    PART_OF_ROLE,
    PARTS,
    BatchMemory,
    CompileRange,
    ModuleCost,
    ModuleRoofline,
    ModuleTraceResult,
)
from gpuhours.trace.roofline import peak_flops_of_dtype

ModuleCalls = Counter[tuple[str, str, str, str, int, int, int]]

_FORWARD_PHASES = ("forward",)
_BACKWARD_PHASES = ("backward", "recompute")


def batch_memory(log: accounting.StorageLog, batch: int, limit_bytes: float) -> BatchMemory:
    """The parts at the peak, the allocator's reserve and the total of one traced step."""
    b = accounting.breakdown(log)
    parts = dict.fromkeys(PARTS, 0.0)
    for role, nbytes in b.at_peak_bytes.items():
        parts[PART_OF_ROLE.get(role, "workspace")] += nbytes
    reserved = float(allocator.replay(log).peak_reserved_bytes)
    context = A.CUDA_CONTEXT_BYTES.value
    place = log.peak_place
    if place is None:
        at = "the start of the step (weights and optimizer state)"
    elif place.phase.startswith("optimizer") or place.phase == "zero_grad":
        at = f"the optimizer step ({place.op})"
    else:
        at = f"{place.phase} in {place.module or 'the model'} ({place.op})"
    total = reserved + context
    return BatchMemory(batch=batch, parts_bytes=parts, peak_live_bytes=float(log.peak_bytes),
                       peak_at=at, reserved_bytes=reserved, cuda_context_bytes=context,
                       total_bytes=total, fits=total <= limit_bytes)


def largest_fitting(probe: Callable[[int], BatchMemory], max_batch: int) -> tuple[int, str]:
    """Double the batch from 1 while it fits, then bisect: (largest batch that fits, how it
    was found). `probe(b)` traces batch b. 0 when batch 1 does not fit."""
    b, last_fit = 1, 0
    while True:
        if not probe(b).fits:
            break
        last_fit = b
        if b >= max_batch:
            return b, f"traced up to the cap (max batch {max_batch}): every batch fits"
        b = min(2 * b, max_batch)
    if last_fit == 0:
        return 0, "traced at batch 1: it does not fit"
    lo, hi = last_fit, b
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if probe(mid).fits:
            lo = mid
        else:
            hi = mid
    return lo, f"traced at every batch shown: {lo} fits, {hi} does not"


def module_roofline(calls: ModuleCalls, gpu: GpuSpec, batch: int,
                    children: Sequence[tuple[str, int, int]], precision: str,
                    optimizer_row: str, outside_row: str) -> ModuleRoofline:
    """Roofline time of each top-level module's operators on `gpu` at the named efficiencies,
    and torch.compile's range over the step. The GEMM efficiency is estimate's
    (timing.gemm_efficiency's entry x the product's measured matmul factor on a GeForce card)
    before the reduction-length factor, so a trace and an estimate of one card agree."""
    gen = A.gemm_efficiency_entry(gpu.generation, gpu.compute_capability)
    gemm = gen.value * product_matmul_factor(gpu)
    half = A.GEMM_HALF_WIDTH
    bw = A.BANDWIDTH_EFFICIENCY
    attn = A.ATTENTION_EFFICIENCY_RATIO
    bandwidth = gpu.memory_bw_gb_per_s * 1e9 * bw.value
    acc: dict[str, list[float]] = defaultdict(lambda: [0.0] * 7)
    compute_total = memory_total = 0.0
    for (top, op, phase, dtype, flops, nbytes, k), n in calls.items():
        peak = peak_flops_of_dtype(gpu, dtype)
        # the trace counts attention over the full S x S (torch's convention); the
        # assumption's ratio is per causal FLOP, i.e. twice that per full-S x S FLOP
        shape = 2 * attn.value if "attention" in op else (k / (k + half.value) if k else 1.0)
        eff = gemm * shape
        t_compute = flops / (peak * eff) if flops else 0.0
        t_memory = nbytes / bandwidth
        t = max(t_compute, t_memory) * n
        row = acc[top]
        if phase in _FORWARD_PHASES:
            row[0] += flops * n
            row[3] += t
        elif phase in _BACKWARD_PHASES:
            row[1] += flops * n
            row[4] += t
        row[6] += t
        row[2] += nbytes * n
        if t_compute >= t_memory and flops:
            row[5] += t
            compute_total += t
        else:
            memory_total += t
    step = compute_total + memory_total
    sizes = {name: (p, tp) for name, p, tp in children}
    order = [name for name, _, _ in children if name in acc] + [
        r for r in (outside_row, optimizer_row) if r in acc]
    order += [r for r in acc if r not in order]
    rows = []
    for name in order:
        r = acc[name]
        p, tp = sizes.get(name, (0, 0))
        rows.append(ModuleCost(module=name, params=p, trainable_params=tp, forward_flops=r[0],
                               backward_flops=r[1], bytes=r[2], forward_s=r[3], backward_s=r[4],
                               time_s=r[6], compute_bound_s=r[5],
                               share=r[6] / step if step else 0.0))
    amp = precision != "fp32"
    speedup = A.TORCH_COMPILE_SPEEDUP_AMP if amp else A.TORCH_COMPILE_SPEEDUP_FP32
    fastest = max(compute_total, step / speedup.value)
    compile_range = CompileRange(
        fastest_s=fastest, slowest_s=step,
        basis=f"assumed range, not a prediction: no gain (graph breaks; GEMMs stay cuBLAS's) to "
              f"{speedup.name} = {speedup.value:g}x ({speedup.basis}), and never faster than "
              f"the compute-bound operators alone ({compute_total * 1e3:.3g} ms here: fusion "
              "removes memory traffic, not FLOPs)")
    used = [f"{gen.name} = {gen.value:g} ({gen.basis})",
            f"{half.name} = {half.value:g}: GEMM efficiency x K / (K + {half.value:g}), K the "
            "operator's reduction length (FLOPs / 2 / output elements)",
            f"{attn.name} = {attn.value:g} x 2 for attention counted over the full S x S",
            f"{bw.name} = {bw.value:g} ({bw.basis})"]
    if gemm != gen.value:
        used.insert(1, f"GEMM efficiency {gemm:.3g} = {gemm_efficiency_basis(gpu)}")
    note = ("a roofline model over traced FLOPs and tensor bytes: no kernel launch gaps, host "
            "overhead, fusion or overlap; data loading is not part of it")
    if amp and precision.startswith("bf16") and not gpu.dense_tflops.bf16:
        note += f"; {gpu.name} has no bf16 rate in the catalog: bf16 operators at its fp32 rate"
    return ModuleRoofline(device=gpu.name, batch=batch, rows=rows, step_time_s=step,
                          compute_bound_s=compute_total, memory_bound_s=memory_total,
                          assumptions=used, compile=compile_range, note=note)


def trace_module(factory: Callable[[], Any], inputs: Sequence[str], gpu: GpuSpec | str,
                 precision: str = "fp32", *, optimizer_impl: str = "foreach",
                 headroom_fraction: float | None = None, batch: int | None = None,
                 max_batch: int = 4096, name: str | None = None) -> ModuleTraceResult:
    """Memory by part as the batch grows, the largest batch that fits `gpu`, and the roofline
    time per top-level module, for the training step of the model `factory()` makes.

    `inputs`: one `NAME=DTYPE[DIMS]` per input of the model's forward, by keyword, `B` for the
    batch (gpuhours.bench.module_spec).
    `precision`: fp32, bf16-mixed / fp16-mixed (autocast over fp32 weights; fp16 with a
    GradScaler), bf16 / fp16 (the model cast). `batch`: the batch of the per-module table
    (default: the largest that fits, or 1). `gpu`: a catalog GpuSpec or name."""
    from gpuhours.bench.module_spec import parse_input_spec
    from gpuhours.errors import FieldError
    from gpuhours.resolve import catalog_gpu
    from gpuhours.trace.module_step import build_fake_module, check_precision, trace_batch
    from gpuhours.trace.tracker import OPTIMIZER_ROW, OUTSIDE_MODULES

    start = time.perf_counter()
    check_precision(precision)
    spec_name = name or getattr(factory, "__qualname__", None) or repr(factory)
    specs = parse_input_spec(list(inputs))
    device = catalog_gpu(gpu, "gpu") if isinstance(gpu, str) else gpu
    headroom = A.FIT_HEADROOM_FRACTION.value if headroom_fraction is None else headroom_fraction
    if not 0 <= headroom < 1:
        raise FieldError("headroom", f"expected a fraction in [0, 1), got {headroom!r}.")
    if max_batch < 1:
        raise FieldError("max_batch", f"expected a positive number, got {max_batch}.")
    if batch is not None and batch < 1:
        raise FieldError("batch", f"expected a positive number, got {batch}.")
    limit = device.memory_bytes * (1 - headroom)
    fm = build_fake_module(factory, spec_name, precision)
    memory: dict[int, BatchMemory] = {}
    calls: dict[int, ModuleCalls] = {}

    def probe(b: int) -> BatchMemory:
        if b not in memory:
            traced = trace_batch(fm, specs, b, precision, optimizer_impl, spec_name)
            memory[b] = batch_memory(traced.log, b, limit)
            calls[b] = traced.module_calls
        return memory[b]

    largest, how = largest_fitting(probe, max_batch)
    table_batch = batch or max(largest, 1)
    probe(table_batch)
    at = memory.get(largest)
    notes = []
    if fm.built_on == "cpu":
        notes.append("the factory could not run on the meta device and was built on the CPU "
                     "(its weights were made, then swapped for fake tensors)")
    notes.append("loss: the model's own (.loss, ['loss'] or a scalar output), else the mean of "
                 "its outputs: a real loss's own small tensors are not traced")
    if precision.startswith("fp16") and precision != "fp16":
        notes.append("fp16 with a GradScaler: the loss is scaled and the gradients unscaled and "
                     "checked for inf before the optimizer step, as torch.amp.GradScaler does")
    frozen = [n for n, p, tp in fm.children if p and not tp]
    if frozen and precision != "fp32" and param_half(precision) is False:
        notes.append(f"frozen modules ({', '.join(frozen)}) keep fp32 weights under autocast: "
                     "each forward makes half-precision copies of them (counted as workspace); "
                     "cast them to half in the factory if the real run does")
    sources = {
        "parts": "trace: live tensor storage at the step's peak on fake tensors "
                 "(trace/tracker.py); activations include the batch, workspace is autocast "
                 "weight copies and backward and optimizer temporaries",
        "reserved": "model of the allocator: PyTorch's CUDA caching allocator rules over the "
                    "traced allocations (trace/allocator.py)",
        "cuda_context": f"assumed: {A.CUDA_CONTEXT_BYTES.name} ({A.CUDA_CONTEXT_BYTES.basis})",
        "limit": f"catalog: {device.name} memory {device.memory_bytes / 2**30:.2f} GiB x (1 - "
                 f"{headroom:g} headroom; {A.FIT_HEADROOM_FRACTION.name} by default)",
        "flops": "trace: torch's flop counter formulas (+ gpuhours.torchkit.flops) per operator",
        "time": f"roofline model on {device.name}: datasheet {device.memory_bw_gb_per_s:g} GB/s "
                f"and each dtype's dense peak ({device.source}), at the efficiencies listed",
    }
    return ModuleTraceResult(
        module=spec_name, inputs=[s.text() for s in specs], precision=precision,
        optimizer=f"AdamW ({optimizer_impl})", gpu=device.name,
        gpu_memory_bytes=float(device.memory_bytes), headroom_fraction=headroom,
        limit_bytes=limit, total_params=sum(p.numel() for p in fm.params),
        trainable_params=sum(p.numel() for p in fm.trainable),
        by_batch=[memory[b] for b in sorted(memory)], largest_batch=largest,
        headroom_bytes=(device.memory_bytes - at.total_bytes) if at is not None else 0.0,
        largest_basis=how,
        roofline=module_roofline(calls[table_batch], device, table_batch, fm.children,
                                 precision, OPTIMIZER_ROW, OUTSIDE_MODULES),
        sources=sources, notes=notes, traces=len(memory),
        trace_wall_s=time.perf_counter() - start)


def param_half(precision: str) -> bool:
    """Whether the model's weights themselves are half precision (pure bf16 / fp16)."""
    return precision in ("bf16", "fp16")
