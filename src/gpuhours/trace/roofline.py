"""A step time for a catalog device from the traced operators: a roofline per operator.

Each operator call takes max(FLOPs / peak FLOP/s of its dtype, bytes / bandwidth), where bytes
are the sizes of its input and output tensors (each read or written once) and the peak is the
datasheet's dense rate (bf16, fp16, or fp32 without TF32, torch's default for fp32 matmuls).
Views move nothing and are skipped. Summed over the step, at datasheet peaks this is a lower
bound; at the analytic model's assumed efficiencies (estimate/assumptions.py) it is comparable
with `gpuhours estimate`. Not modelled: kernel launch gaps, fusion (a fused kernel moves fewer
bytes), caches, overlap between operators, communication. A model, not a measurement.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from gpuhours.catalog.schema import GpuSpec
from gpuhours.errors import FieldError
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.timing import gemm_efficiency
from gpuhours.trace.result import OpTime, RooflineOut, TraceFigure

_PEAK_OF_DTYPE = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def peak_flops_of_dtype(gpu: GpuSpec, dtype: str) -> float:
    """Dense FLOP/s of `gpu` for matmuls in `dtype` (datasheet); fp32 for other dtypes."""
    key = _PEAK_OF_DTYPE.get(dtype, "fp32")
    tflops = getattr(gpu.dense_tflops, key) or gpu.dense_tflops.fp32
    if not tflops:
        raise FieldError("device_profile", f"{gpu.name} has no {key} or fp32 FLOP rate in "
                                             "the catalog.")
    return float(tflops) * 1e12


def roofline(op_calls: Counter[tuple[str, str, str, int, int]], gpu: GpuSpec,
             hidden_size: int, top: int = 8) -> RooflineOut:
    """Roofline time of the operators in `op_calls` ((op, phase, dtype, flops, bytes) -> calls)
    on `gpu`; `hidden_size` sets the GEMM efficiency of the assumed-efficiency figure."""
    bandwidth = gpu.memory_bw_gb_per_s * 1e9
    gemm_eff = gemm_efficiency(gpu, hidden_size)
    bw_eff = A.BANDWIDTH_EFFICIENCY.value
    total = assumed = compute = memory = 0.0
    per_op: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0, 0.0])
    calls_total = 0
    for (op, _phase, dtype, flops, nbytes), calls in op_calls.items():
        peak = peak_flops_of_dtype(gpu, dtype)
        t_compute = flops / peak
        t_memory = nbytes / bandwidth
        t = max(t_compute, t_memory) * calls
        total += t
        assumed += max(t_compute / gemm_eff, t_memory / bw_eff) * calls
        if t_compute >= t_memory and flops:
            compute += t
        else:
            memory += t
        row = per_op[op]
        row[0] += calls
        row[1] += flops * calls
        row[2] += nbytes * calls
        row[3] += t
        row[4] += t_compute * calls
        calls_total += calls
    ranked = sorted(per_op.items(), key=lambda kv: -kv[1][3])[:top]
    top_ops = [OpTime(op=op, calls=int(r[0]), flops=r[1], bytes=r[2], time_s=r[3],
                      bound="compute" if r[4] >= r[3] / 2 else "memory") for op, r in ranked]
    src = (f"roofline per operator on {gpu.name}: datasheet {gpu.memory_bw_gb_per_s:g} GB/s and "
           f"dense peak of each operator's dtype ({gpu.source})")
    return RooflineOut(
        device=gpu.name,
        peak_time_s=TraceFigure(value=total, unit="s", basis="roofline model", source=src),
        assumed_efficiency_time_s=TraceFigure(
            value=assumed, unit="s", basis="roofline model",
            source=f"{src}; at GEMM efficiency {gemm_eff:.2f} (assumptions.py by generation x "
                   f"width) and bandwidth efficiency {bw_eff:g}"),
        compute_bound_s=compute, memory_bound_s=memory, operators=calls_total, top_ops=top_ops,
        note="a model from traced FLOPs and tensor bytes; no launch gaps, fusion or overlap")
