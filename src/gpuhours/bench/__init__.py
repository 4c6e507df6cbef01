"""Real training steps on this machine, measured (torch).

The public entry point is `gpuhours.bench.run(model, make_batch, optimizer=..., ...)` (see
gpuhours.bench.api); the CLI is `gpuhours bench`, `gpuhours bench-data` and `gpuhours ledger`.
Importing this package does not import torch: `run` loads it when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuhours.bench.runner import BenchResult

__all__ = ["run"]


def run(model: Any, make_batch: Any, optimizer: Any = "adamw", **options: Any) -> BenchResult:
    """Measure real training steps of `model`; see gpuhours.bench.api.run for the options."""
    from gpuhours.bench.api import run as _run

    return _run(model, make_batch, optimizer, **options)
