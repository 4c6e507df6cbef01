"""Turn what a user typed (a model name or config path, a GPU name or its numbers) into the
architecture and accelerator the estimator needs, with the basis of each."""

from __future__ import annotations

import math
from datetime import date
from typing import Any

from gpuhours import catalog
from gpuhours.catalog.schema import DenseTflops, GpuSpec
from gpuhours.errors import InputError, UnknownNameError
from gpuhours.estimate.arch import ModelArch, from_hf_config, standard_shape
from gpuhours.estimate.workload import Hardware, Training


def resolve_model(model: str | None, params: float | None = None,
                  hidden_size: int | None = None, num_layers: int | None = None,
                  vocab_size: int | None = None) -> tuple[ModelArch, str]:
    """(architecture, basis) from a catalog name, a config.json path, or a parameter count."""
    if model is not None and params is not None:
        raise InputError("--model/--params", "give a model or a parameter count, not both.")
    if model is None:
        if params is None:
            raise InputError("--model", "a model is required: a catalog name "
                                        "(see `gpuhours catalog models`), a path to a "
                                        "config.json, or --params 7e9.")
        if not math.isfinite(params) or params <= 0:
            raise InputError("--params", f"expected a positive parameter count, got {params!r}.")
        arch = standard_shape(params, name=f"standard-{params:.3g}", hidden_size=hidden_size,
                              num_layers=num_layers, vocab_size=vocab_size)
        return arch, (f"standard Llama-style shape for {params:.3g} parameters "
                      f"(d={arch.hidden_size}, layers={arch.num_layers}, "
                      f"vocab={arch.vocab_size}): assumed, estimate/arch.py standard_shape")
    if not model.strip():
        raise InputError("--model", "expected a catalog name or a path to a config.json, got ''.")
    try:
        entry, cfg = catalog.model(model)
    except UnknownNameError as e:
        e.where = "--model"
        raise
    if entry is None:
        arch = from_hf_config(cfg, name=model, where=model)
        return arch, f"config.json {model}"
    arch = from_hf_config(cfg, name=entry.name, where=f"catalog model {entry.name}")
    return arch, f"catalog config of {entry.hf_id} ({entry.config_file})"


def catalog_gpu(name: str, option: str = "--gpu") -> GpuSpec:
    """A catalog GPU; an unknown name is an error naming the option that gave it."""
    try:
        return catalog.gpu(name)
    except UnknownNameError as e:
        e.where = option
        raise


def resolve_gpu(name: str | None, peak_tflops: float | None = None,
                memory_gb: float | None = None,
                bandwidth_gbps: float | None = None) -> GpuSpec:
    """A catalog GPU, optionally with figures overridden, or a custom one from its figures."""
    overrides = {"peak_tflops": peak_tflops, "memory_gb": memory_gb,
                 "bandwidth_gbps": bandwidth_gbps}
    for key, value in overrides.items():
        if value is not None and (not math.isfinite(value) or value <= 0):
            raise InputError(f"--{key.replace('_', '-')}",
                             f"expected a positive number, got {value!r}.")
    if name is None and peak_tflops is None:
        raise InputError("--gpu", "a GPU is required: a catalog name (see `gpuhours catalog "
                                  "gpus`) or --peak-tflops, --memory-gb and --bandwidth-gbps.")
    if name is not None:
        spec = catalog_gpu(name)
        if not any(v is not None for v in overrides.values()):
            return spec
        update: dict[str, object] = {"source": spec.source + " (figures overridden by the user)"}
        if memory_gb is not None:
            update["memory_gb"] = memory_gb
        if bandwidth_gbps is not None:
            update["memory_bw_gbps"] = bandwidth_gbps
        if peak_tflops is not None:
            update["dense_tflops"] = DenseTflops(fp32=spec.dense_tflops.fp32, tf32=None,
                                                 fp16=peak_tflops, bf16=peak_tflops)
        return spec.model_copy(update=update)
    if memory_gb is None or bandwidth_gbps is None:
        raise InputError("--peak-tflops", "a custom GPU also needs --memory-gb and "
                                          "--bandwidth-gbps.")
    assert peak_tflops is not None
    return GpuSpec(
        name="custom", full_name="custom accelerator (figures given by the user)",
        vendor="NVIDIA", generation="ampere", memory_gb=memory_gb,
        memory_bw_gbps=bandwidth_gbps,
        dense_tflops=DenseTflops(fp32=peak_tflops / 16, fp16=peak_tflops, bf16=peak_tflops),
        interconnect="none", source="given on the command line", as_of=date.today(),
        notes="efficiency defaults of the Ampere generation are applied",
    )


def open_ledger(given: str | None) -> Any:
    """The ledger to calibrate from: `given` (--ledger), $GPUHOURS_LEDGER, or
    ./.gpuhours/ledger.sqlite, when that file exists; None otherwise (estimates stay analytic)."""
    from gpuhours.track.ledger import Ledger, ledger_path

    path = ledger_path(given)
    if not path.exists():
        if given:
            raise InputError("--ledger", f"no ledger at {path}.",
                             "Run `gpuhours bench` first, or leave --ledger out.")
        return None
    return Ledger.open(path, create=False)


def calibration_for(book: Any, hw: Hardware, t: Training) -> Any:
    """The nearest matching measurement's calibration from `book`, or None."""
    if book is None:
        return None
    from gpuhours.track.calibration import find_calibration

    return find_calibration(book, hw, t)


def gpu_or_measured(name: str, book: Any) -> GpuSpec:
    """A catalog GPU, or a device measured by `gpuhours bench` probes in the ledger."""
    try:
        return catalog.gpu(name)
    except UnknownNameError as e:
        if book is None:
            e.where = "--gpu"
            raise
        from gpuhours.track.calibration import measured_device

        try:
            return measured_device(book, name)
        except InputError:
            raise UnknownNameError("--gpu", name, [], "Use a catalog name (gpuhours catalog "
                                   "gpus) or a device key from `gpuhours ledger list`.") from None
