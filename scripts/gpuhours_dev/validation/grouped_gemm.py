"""The expert-GEMM shape model (estimate/moe_gemm.py) against DeepGEMM's published H800 GEMM
tables (data/grouped_gemm_microbench.csv, deepseek-ai/DeepGEMM@55ab91f README "Performance").

`fit_k_half_depth` is the fit that set assumptions.GROUPED_GEMM_K_HALF_DEPTH and
moe_gemm.GROUPED_GEMM_BASE_EFFICIENCY: the six normal GEMMs of M = 4096 (`tuning_rows`), the least
squares of the log error on a 0.01 x 25-element grid. Every other row is held out: the ten
grouped GEMMs (contiguous and masked layouts, the MoE kernels) and the twelve normal GEMMs of
M = 64 and 128 (decode shapes, where DeepGEMM picks narrower tiles and the model's 128-column
tiles leave SMs idle: not a training shape, shown for what the model cannot do).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from gpuhours.estimate import assumptions as A
from gpuhours.estimate import moe_gemm as M
from gpuhours_dev.validation import patched_estimate

DATA = Path(__file__).parent / "data" / "grouped_gemm_microbench.csv"
#: H800 SXM5: the H100 SXM5's compute (1,979 dense fp8 TFLOPS, 132 SMs) and HBM3 (3.35 TB/s)
#: (NVIDIA H100 datasheet; the H800 differs in NVLink only)
H800_FP8_PEAK_FLOPS = 1979e12
H800_SMS = 132
H800_BW_BYTES_PER_S = 3.35e12


def rows() -> list[dict[str, str]]:
    with DATA.open(newline="") as f:
        return list(csv.DictReader(f))


def tuning_rows(all_rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """The rows the constants were fitted on: normal GEMMs of M = 4096."""
    return [r for r in all_rows if r["kernel"] == "normal" and r["m_per_group"] == "4096"]


def predicted_tflops(r: dict[str, str], base_efficiency: float = M.GROUPED_GEMM_BASE_EFFICIENCY
                     ) -> float:
    """TFLOP/s the shape model gives the row's GEMM (fp8, 1-byte operands) on an H800."""
    g, m, n, k = (int(r[x]) for x in ("groups", "m_per_group", "n", "k"))
    bw = H800_BW_BYTES_PER_S * A.BANDWIDTH_EFFICIENCY.value
    seconds = M.gemm_time_s(m, n, k, g, H800_FP8_PEAK_FLOPS, base_efficiency, bw, 1.0, H800_SMS)
    return g * 2.0 * m * n * k / seconds / 1e12


@contextmanager
def k_half_depth(value: float) -> Iterator[None]:
    saved = A.GROUPED_GEMM_K_HALF_DEPTH
    A.GROUPED_GEMM_K_HALF_DEPTH = replace(saved, value=value)
    try:
        with patched_estimate():  # nothing kept from or for the unpatched estimate
            yield
    finally:
        A.GROUPED_GEMM_K_HALF_DEPTH = saved


def fit_k_half_depth(all_rows: list[dict[str, str]]) -> tuple[float, float, float]:
    """(base efficiency, K half depth, rms log error) fitted to the tuning rows."""
    tune = tuning_rows(all_rows)
    best: tuple[float, float, float] = (math.inf, 0.0, 0.0)
    for k0 in range(0, 2001, 25):
        with k_half_depth(float(k0)):
            for e100 in range(50, 100):
                e = e100 / 100
                err = sum(math.log(predicted_tflops(r, e) / float(r["tflops"])) ** 2 for r in tune)
                best = min(best, (err, e, float(k0)))
    err, e, k_half = best
    return e, k_half, math.sqrt(err / len(tune))


if __name__ == "__main__":
    data = rows()
    print("fit (base efficiency, K half depth, rms log error):", fit_k_half_depth(data))
    for r in data:
        p = predicted_tflops(r)
        half = "tune" if r in tuning_rows(data) else "held-out"
        print(f"{r['kernel']:10s} {r['groups']:>2s} x {r['m_per_group']:>5s} x {r['n']:>5s} x "
              f"{r['k']:>5s} {half:8s} {r['tflops']:>5s} {p:6.0f} {p / float(r['tflops']) - 1:+.0%}")
