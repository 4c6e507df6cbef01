"""Statistics of measured step times: median, percentiles, spread, and the stopping rule.

Pure Python. Percentiles interpolate linearly between order statistics (numpy's default,
"linear" / Hyndman-Fan type 7). The CV is the sample standard deviation over the mean.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from gpuhours.bench.config import StopRule


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0 <= q <= 100) with linear interpolation."""
    if not values:
        raise ValueError("percentile of no values")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def coefficient_of_variation(values: Sequence[float]) -> float:
    """Sample standard deviation / mean; 0 for fewer than two values."""
    if len(values) < 2:
        return 0.0
    mean = statistics.fmean(values)
    return statistics.stdev(values) / mean if mean > 0 else math.inf


class TimingStats(BaseModel):
    """Spread of the timed steps, seconds per optimizer step."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    n_steps: int
    median_s: float
    p10_s: float
    p90_s: float
    mean_s: float
    min_s: float
    max_s: float
    cv: float
    target_cv: float
    stable: bool
    stop_reason: str

    @property
    def spread_fraction(self) -> float:
        """(p90 - p10) / median: the relative width of the middle 80% of steps."""
        return (self.p90_s - self.p10_s) / self.median_s


def summarize(times_s: Sequence[float], rule: StopRule, stop_reason: str) -> TimingStats:
    cv = coefficient_of_variation(times_s)
    return TimingStats(
        n_steps=len(times_s), median_s=statistics.median(times_s),
        p10_s=percentile(times_s, 10), p90_s=percentile(times_s, 90),
        mean_s=statistics.fmean(times_s), min_s=min(times_s), max_s=max(times_s), cv=cv,
        target_cv=rule.target_cv, stable=len(times_s) >= 2 and cv < rule.target_cv,
        stop_reason=stop_reason,
    )


def stop_reason(times_s: Sequence[float], elapsed_s: float, rule: StopRule) -> str | None:
    """Why timing should stop now, or None to go on."""
    n = len(times_s)
    if n >= rule.min_steps and coefficient_of_variation(times_s) < rule.target_cv:
        return f"stable: CV below {rule.target_cv:.0%} after {n} steps"
    if n >= rule.max_steps:
        return f"step cap: {n} steps"
    if n >= rule.min_steps and elapsed_s >= rule.max_time_s:
        return f"time cap: {elapsed_s:.0f} s of timed steps"
    return None
