"""Latency statistics of repeated inference calls, and when to stop repeating them.

Pure Python. The figure that converges is the *median* latency, so the stopping rule asks how
well the median is known, not how spread the calls are: on a noisy machine the calls' own CV can
stay at 10-40% (TORCH_NOTES.md) while their median is pinned to 1% after enough calls.

The standard error of the median is the distribution-free estimate of McKean & Schrader (1984,
"A comparison of methods for studentizing the sample median", Commun. Stat. Simul. Comput.
13(6)): the order statistics that bound the median's 95% confidence interval,
c = round((n + 1)/2 - z * sqrt(n/4)), SE = (x_(n-c+1) - x_(c)) / (2 z), z = 1.96 (0.975 quantile
of the normal). It needs no assumption of normality, which timing tails break.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from gpuhours.bench.stats import percentile

#: the normal distribution's 0.975 quantile: a 95% two-sided interval
Z_975 = 1.959964
#: fewest calls before the median's standard error is trusted (c >= 2 from n = 9 on)
MIN_RUNS = 10


def median_standard_error(values: Sequence[float]) -> float:
    """McKean-Schrader standard error of the sample median (same unit as `values`); inf for
    fewer than 3 values."""
    n = len(values)
    if n < 3:
        return math.inf
    xs = sorted(values)
    c = max(1, round((n + 1) / 2 - Z_975 * math.sqrt(n / 4)))
    return (xs[n - c] - xs[c - 1]) / (2 * Z_975)


def median_cv(values: Sequence[float]) -> float:
    """The median's standard error over the median: the CV of the median estimate."""
    med = statistics.median(values) if values else 0.0
    return median_standard_error(values) / med if med > 0 else math.inf


def stop_reason(times_s: Sequence[float], elapsed_s: float, target_cv: float,
                limit_s: float, min_runs: int = MIN_RUNS) -> str | None:
    """Why to stop timing now ('converged: ...' or 'time limit: ...'), or None to go on."""
    n = len(times_s)
    if n >= min_runs:
        cv = median_cv(times_s)
        if cv < target_cv:
            return f"converged: CV of the median {cv:.2%} < {target_cv:.0%} after {n} calls"
    if elapsed_s >= limit_s and n >= 1:
        cv = median_cv(times_s) if n >= 3 else math.inf
        shown = f"{cv:.2%}" if math.isfinite(cv) else "unknown (too few calls)"
        return (f"time limit: {limit_s:g} s passed after {n} calls; CV of the median "
                f"{shown}, not under {target_cv:.0%}")
    return None


def next_check(n: int, min_runs: int = MIN_RUNS) -> int:
    """The call count at which to test the stopping rule next: every call up to `min_runs`,
    then every tenth more, so that sorting the calls costs O(n log n) in all, not per call."""
    return n + 1 if n < min_runs else n + max(1, n // 10)


def p50_p95(values: Sequence[float]) -> tuple[float, float]:
    """Median and 95th percentile (linear interpolation, gpuhours.bench.stats.percentile)."""
    return percentile(values, 50), percentile(values, 95)
