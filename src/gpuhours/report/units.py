"""Human formatting with explicit units: GiB is 2^30 bytes, GB is 10^9; we print GiB."""

from __future__ import annotations

GIB = 2**30


def gib(n_bytes: float) -> str:
    return f"{n_bytes / GIB:,.2f} GiB"


def si(value: float, unit: str = "") -> str:
    """3 significant figures with a k/M/G/T/P suffix: 1.23e9 -> '1.23 G'."""
    for factor, suffix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {suffix}{unit}".rstrip()
    return f"{value:.3g} {unit}".rstrip()


def seconds(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.0f} us"
    if s < 1:
        return f"{s * 1e3:.1f} ms"
    if s < 120:
        return f"{s:.2f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def usd(x: float | None) -> str:
    return "-" if x is None else f"${x:,.0f}" if x >= 100 else f"${x:,.2f}"


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def hours(x: float) -> str:
    """GPU hours or wall-clock hours: one decimal from 10 up (1,234.5), else 3 significant
    figures, so that a small job is not printed as 0.0 (0.0133)."""
    return f"{x:,.1f}" if abs(x) >= 10 or x == 0 else f"{x:.3g}"


def instance_billed(instance: str, billing: str) -> str:
    """An instance name with how it is billed when more GPUs are paid for than used:
    'gpu_8x_a100 (8 GPUs billed for 1 used (one 8-GPU instance))' (gpuhours.catalog.billing)."""
    return f"{instance} [{billing}]" if billing else instance
