"""gpuhours: predict, check and track the compute budget of ML training projects.

    from gpuhours import Training, Hardware, estimate_training
    e = estimate_training(Training(model="qwen2.5-7b", method="lora", micro_batch=4),
                          Hardware(gpu="a100-80gb"), tokens=1e9)

The analytic path (estimate_training, fit_training, choose_setup, estimate_generation,
plan_budget) never imports torch; trace_training and trace_module (your own nn.Module on a GPU
you lack) need the `bench` extra. See gpuhours.api for each function.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "FieldError",
    "Generation",
    "Hardware",
    "InputError",
    "Training",
    "choose_setup",
    "estimate_generation",
    "estimate_training",
    "fit_training",
    "gpu_spec",
    "open_ledger",
    "plan_budget",
    "trace_module",
    "trace_training",
]

if TYPE_CHECKING:
    from gpuhours.api import (
        choose_setup,
        estimate_generation,
        estimate_training,
        fit_training,
        gpu_spec,
        open_ledger,
        plan_budget,
        trace_module,
        trace_training,
    )
    from gpuhours.errors import FieldError, InputError
    from gpuhours.setup import Generation, Hardware, Training

_HOME = {"Generation": "gpuhours.setup", "Hardware": "gpuhours.setup",
         "Training": "gpuhours.setup", "FieldError": "gpuhours.errors",
         "InputError": "gpuhours.errors"}


def __getattr__(name: str) -> Any:
    # loaded on first use (PEP 562): `import gpuhours` stays cheap for the tracking callback
    if name not in __all__:
        raise AttributeError(f"module 'gpuhours' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_HOME.get(name, "gpuhours.api")), name)
