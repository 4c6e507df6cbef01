"""`gpuhours bench-data MODULE:FUNCTION`: how fast a user's data loader delivers, alone.

FUNCTION(num_workers) returns an iterable of batches (a torch DataLoader, usually). For each
num_workers value it is built, its first batches are drawn untimed (worker start-up), then
batches are drawn for a while and samples/s measured. The answer is compared with what the
model consumes (samples/s from a benchmark in the ledger, or from the analytic estimate), so
that an input-bound run is seen before it is launched.
"""

from __future__ import annotations

import importlib
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from gpuhours.errors import InputError


class LoaderRate(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    num_workers: int
    samples: int
    batches: int
    seconds: float
    samples_per_s: float
    #: per-batch wait, seconds: median and p90 (a long tail means stalls)
    batch_wait_median_s: float
    batch_wait_p90_s: float
    startup_s: float


def load_function(spec: str) -> Callable[..., Any]:
    """Import 'package.module:function' (the current directory is on the path)."""
    module_name, sep, func_name = spec.partition(":")
    if not sep or not module_name or not func_name:
        raise InputError("MODULE:FUNCTION", f"expected module:function, got {spec!r}.",
                         "For example: my_project.data:make_loader")
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise InputError("MODULE:FUNCTION", f"cannot import {module_name!r}: {e}.",
                         "Run from your project's folder, or install it.") from None
    except Exception as e:  # the user's module raised while importing
        raise InputError("MODULE:FUNCTION", f"importing {module_name!r} failed: "
                                            f"{type(e).__name__}: {e}.") from None
    func = getattr(module, func_name, None)
    if not callable(func):
        raise InputError("MODULE:FUNCTION", f"{module_name} has no function {func_name!r}.")
    return func


def samples_in(batch: Any) -> int:
    """Samples in a batch: the first dimension of its first tensor (or array), or len()."""
    shape = getattr(batch, "shape", None)
    if shape is not None:
        return int(shape[0]) if len(shape) else 1
    if isinstance(batch, dict):
        for v in batch.values():
            return samples_in(v)
    if isinstance(batch, list | tuple) and batch:
        first = batch[0]
        return samples_in(first) if hasattr(first, "shape") or isinstance(first, dict) else len(batch)
    raise InputError("MODULE:FUNCTION", f"cannot tell how many samples a batch of type "
                                        f"{type(batch).__name__} holds.",
                     "Return tensors, arrays, or dicts/tuples of them.")


def measure_loader(make_loader: Callable[[int], Iterable[Any]], num_workers: int,
                   seconds: float = 5.0, warmup_batches: int = 2,
                   max_batches: int = 10_000) -> LoaderRate:
    """Draw batches from make_loader(num_workers) for about `seconds`; samples/s."""
    t0 = time.perf_counter()
    try:
        it = iter(make_loader(num_workers))
    except TypeError as e:
        raise InputError("MODULE:FUNCTION", f"calling it with num_workers={num_workers} failed: "
                                            f"{e}.", "It must accept num_workers.") from None
    exhausted = False
    for _ in range(warmup_batches):
        if next(it, None) is None:
            exhausted = True
            break
    startup = time.perf_counter() - t0
    waits: list[float] = []
    samples = 0
    start = time.perf_counter()
    while not exhausted and len(waits) < max_batches and time.perf_counter() - start < seconds:
        t = time.perf_counter()
        batch = next(it, None)
        if batch is None:
            break
        waits.append(time.perf_counter() - t)
        samples += samples_in(batch)
    elapsed = time.perf_counter() - start
    del it
    if not waits:
        raise InputError("MODULE:FUNCTION", f"the loader gave fewer than {warmup_batches + 1} "
                                            "batches: too few to measure.",
                         "Give it a dataset of at least a few dozen batches.")
    return LoaderRate(num_workers=num_workers, samples=samples, batches=len(waits),
                      seconds=elapsed, samples_per_s=samples / elapsed,
                      batch_wait_median_s=statistics.median(waits),
                      batch_wait_p90_s=sorted(waits)[int(0.9 * (len(waits) - 1))],
                      startup_s=startup)


def verdict(rates: list[LoaderRate], needed_samples_per_s: float | None, need_basis: str) -> list[str]:
    """Lines comparing each loader rate with what the model consumes."""
    if needed_samples_per_s is None:
        return ["no consumption rate given: pass --bench-id N (a ledger measurement) or "
                "--model/--gpu (the estimate) to compare."]
    lines = [f"the model consumes {needed_samples_per_s:,.1f} samples/s ({need_basis})"]
    for r in rates:
        ratio = r.samples_per_s / needed_samples_per_s
        state = ("input-bound: the GPU would wait for data" if ratio < 1.0 else
                 "tight: under 1.5x headroom, stalls likely" if ratio < 1.5 else "keeps up")
        lines.append(f"num_workers={r.num_workers}: {r.samples_per_s:,.1f} samples/s = "
                     f"{ratio:.2f}x what the model consumes: {state}")
    ok = [r for r in rates if r.samples_per_s >= 1.5 * needed_samples_per_s]
    if ok:
        fewest = min(r.num_workers for r in ok)
        lines.append(f"fewest workers that keep up with 1.5x headroom: num_workers={fewest}")
    return lines
