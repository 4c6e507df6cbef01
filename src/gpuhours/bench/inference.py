"""`gpuhours bench --workload inference`: latency and throughput of a model's forward pass under
several backends, and how far each backend's outputs drift from eager PyTorch.

The model is a catalog model or config.json built with random weights (a causal LM, or a masked
LM for an encoder, returning its logits; input `input_ids=int64[B,seq]`), or the user's own
`nn.Module` (`--module`, inputs from `--input`: gpuhours.bench.module_spec). Backends:

- `eager`: the module in eval mode under torch.inference_mode, on the bench device;
- `compile`: the same through torch.compile (default mode); its first call per batch size, the
  compilation, is reported apart and never timed with the rest;
- `onnxruntime`: exported to ONNX in a temporary directory (gpuhours.bench.onnx_backend), run by
  ONNX Runtime with as many intra-op threads as torch has (CUDA provider when the bench device is
  CUDA and onnxruntime has it, else the CPU);
- `onnxruntime-int8`: that export quantised dynamically to int8 weights, on the CPU provider.

Timing, per backend and batch size: `warmup` untimed calls after the first, then timed calls
(time.perf_counter around one call; CUDA synchronised before and after) until the median's CV
(gpuhours.bench.latency, McKean-Schrader) is under `target_cv` or the backend's time budget
(`max_seconds`, shared by its batch sizes: each gets the budget left over the sizes left) is
spent; the result says which happened. Per-sample latency is the batch's latency over the batch
size (amortised, what a batched server sees per request), throughput the batch size over the
median batch latency.

Drift: every backend runs the largest batch's inputs (the same tensors) and is compared with
eager: the largest absolute difference of any output, and for a classifier (a first output of
shape [batch, classes], or an LM's logits) the share of rows whose argmax agrees. Random weights
give near-uniform logits, so top-1 agreement here is a lower bound of what a trained model sees.
"""

from __future__ import annotations

import math
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from gpuhours.bench.device import DeviceBackend
from gpuhours.bench.latency import median_cv, next_check, p50_p95, stop_reason
from gpuhours.bench.module_spec import InputSpec
from gpuhours.bench.stats import coefficient_of_variation
from gpuhours.errors import DoesNotFit, FieldError, InputError

BACKENDS = ("eager", "compile", "onnxruntime", "onnxruntime-int8")
DEFAULT_BACKENDS = ("eager", "onnxruntime", "onnxruntime-int8")


class BatchTiming(BaseModel):
    """One backend at one batch size; seconds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    batch: int
    calls: int
    first_call_s: float
    batch_latency_p50_s: float
    batch_latency_p95_s: float
    sample_latency_p50_s: float
    sample_latency_p95_s: float
    samples_per_s: float
    #: the calls' own spread (sample standard deviation over the mean); None below 2 calls
    calls_cv: float | None
    #: the CV of the median estimate (the stopping rule's figure); None below 3 calls
    median_cv: float | None
    converged: bool
    stop_reason: str
    timed_s: float


class Drift(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    batch: int
    max_abs_diff: float
    #: the largest |output| of eager, for scale
    max_abs_eager: float
    top1_agreement: float | None
    top1_rows: int | None


class BackendResult(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: str
    status: Literal["ok", "failed"]
    error: str | None = None
    device_kind: str
    device_key: str
    device_name: str
    #: where it ran: the torch device, or the ONNX Runtime execution provider
    runs_on: str
    #: preparation, seconds: export, quantisation, session creation (not in the latencies)
    prepare_s: dict[str, float] = {}
    prepare_basis: str | None = None
    timings: list[BatchTiming] = []
    drift: Drift | None = None


class InferenceResult(BaseModel):
    """What `bench --workload inference` measured."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str
    model_basis: str
    inputs: list[str]
    params: int
    #: tokens per sample (an LM's sequence length), for tokens/s; None for other inputs
    tokens_per_sample: int | None
    batches: list[int]
    target_cv: float
    max_seconds: float
    threads: int
    backends: list[BackendResult]
    timing_basis: str
    drift_basis: str
    ledger_ids: list[int] = []

    def ledger_rows(self) -> list[tuple[BackendResult, BatchTiming, dict[str, Any],
                                        dict[str, Any]]]:
        """(backend, timing, setup, results) of each measured backend and batch: one ledger row
        each (kind 'inference')."""
        rows = []
        for b in self.backends:
            for t in b.timings:
                int8 = b.backend.endswith("int8")
                # `method` carries the backend so that ledger lists that show training rows'
                # method column name it (the calibration reads only kind 'bench' rows)
                setup = {"workload": "inference", "backend": b.backend, "method": b.backend,
                         "micro_batch": t.batch, "precision": "int8" if int8 else "fp32",
                         "quantization": "dynamic int8 weights (onnxruntime quantize_dynamic)"
                         if int8 else None, "compiled": b.backend == "compile",
                         "inputs": self.inputs, "runs_on": b.runs_on,
                         "seq_len": self.tokens_per_sample}
                results = {
                    **t.model_dump(mode="json"), "measured": True,
                    "steps_timed": t.calls, "step_time_median_s": t.batch_latency_p50_s,
                    "step_time_cv": t.calls_cv,
                    "tokens_per_s": (t.samples_per_s * self.tokens_per_sample
                                     if self.tokens_per_sample else None),
                    "prepare_s": b.prepare_s, "timing_basis": self.timing_basis,
                    "drift": b.drift.model_dump(mode="json") if b.drift else None}
                rows.append((b, t, setup, results))
        return rows


@dataclass
class InferenceModel:
    """A model ready for inference: `module(*tensors)` returns a tuple of output tensors."""

    module: Any
    name: str
    basis: str
    specs: list[InputSpec]
    params: int
    #: the HF config it was built from (the ledger keeps it); {} for a user's module
    config: dict[str, Any]
    tokens_per_sample: int | None
    #: an LM: its logits are a next-token classifier (top-1 agreement applies)
    logits: bool


def _flatten(out: Any) -> list[Any]:
    """The tensors of a module's output, in order: a tensor, a tuple/list, a dict (an HF
    ModelOutput is one), nested; None entries dropped."""
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        return [t for v in out.values() for t in _flatten(v)]
    if isinstance(out, list | tuple):
        return [t for v in out for t in _flatten(v)]
    return []


def _flat_module(module: Any, names: Sequence[str]) -> Any:
    """`module` as one ONNX and torch.compile can take: positional tensors in, in `names`'
    order (passed on by keyword), a tuple of tensors out."""
    from torch import nn

    class Flat(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = module

        def forward(self, *tensors: Any) -> tuple[Any, ...]:
            return tuple(_flatten(self.inner(**dict(zip(names, tensors, strict=True)))))

    return Flat().eval()


def module_model(module: Any, input_specs: str | Sequence[str], name: str,
                 basis: str = "your module: its own weights") -> InferenceModel:
    """An nn.Module object (the Python API) with its input specs (gpuhours.bench.module_spec),
    ready for `measure_inference`."""
    from gpuhours.bench.module_spec import parse_input_spec

    specs = parse_input_spec(input_specs)
    module = module.eval()
    params = sum(p.numel() for p in {id(p): p for p in module.parameters()}.values())
    return InferenceModel(module=_flat_module(module, [s.name for s in specs]), name=name,
                          basis=basis, specs=specs, params=params, config={},
                          tokens_per_sample=None, logits=False)


def user_model(module_spec: str, input_specs: Sequence[str]) -> InferenceModel:
    """A user's nn.Module (`--module`) with its `--input` specs."""
    from gpuhours.bench.module_spec import load_module, parse_input_spec

    parse_input_spec(input_specs)  # bad specs are reported before the user's code runs
    return module_model(load_module(module_spec), input_specs, module_spec,
                        f"your module {module_spec}: its own weights (as the factory builds "
                        "them)")


def catalog_model(model: str, overrides: dict[str, Any], seq_len: int) -> InferenceModel:
    """A catalog model or config.json with random weights, fp32, eval: input_ids -> logits."""
    import torch
    import transformers

    from gpuhours.bench.model import hf_config_of
    from gpuhours.estimate.arch import from_hf_config
    from gpuhours.resolve import model_config

    cfg, name, basis = model_config(model, overrides)
    arch = from_hf_config(cfg, name=name, where=model)
    hf = hf_config_of(cfg, arch.vocab_size)
    hf.use_cache = False
    auto = transformers.AutoModelForMaskedLM if arch.encoder else transformers.AutoModelForCausalLM
    torch.manual_seed(0)
    lm = auto.from_config(hf, attn_implementation="sdpa", dtype=torch.float32).eval()
    params = sum(p.numel() for p in {id(p): p for p in lm.parameters()}.values())

    from torch import nn

    class Logits(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lm = lm

        def forward(self, input_ids: Any) -> tuple[Any]:
            return (self.lm(input_ids=input_ids).logits,)

    spec = InputSpec(name="input_ids", dtype="int64", shape=(None, seq_len), high=arch.vocab_size)
    return InferenceModel(module=Logits().eval(), name=name, basis=basis + "; random weights",
                          specs=[spec], params=params, config=cfg, tokens_per_sample=seq_len,
                          logits=True)


def parse_backends(values: Sequence[str] | None) -> list[str]:
    """--backend values (repeatable, or comma-separated) -> backend names, in the given order."""
    names = [v.strip() for text in (values or DEFAULT_BACKENDS) for v in text.split(",")
             if v.strip()]
    for n in names:
        if n not in BACKENDS:
            raise FieldError("backends", f"expected one of {', '.join(BACKENDS)}, got {n!r}.")
    if not names:
        raise FieldError("backends", f"expected one of {', '.join(BACKENDS)}.")
    return list(dict.fromkeys(names))


@dataclass(frozen=True)
class InferenceRule:
    warmup: int = 3
    target_cv: float = 0.02
    max_seconds: float = 60.0

    def check(self) -> None:
        if self.warmup < 0:
            raise FieldError("warmup", f"expected a whole number >= 0, got {self.warmup}.")
        if not 0 < self.target_cv < 1:
            raise FieldError("target_cv", f"expected a fraction between 0 and 1, got "
                                          f"{self.target_cv}.")
        if not self.max_seconds > 0:
            raise FieldError("max_seconds", f"expected a positive number of seconds, got "
                                            f"{self.max_seconds}.")


def time_calls(call: Callable[[], Any], batch: int, rule: InferenceRule, budget_s: float,
               sync: Callable[[], None]) -> BatchTiming:
    """Time `call` (one forward at `batch`) until the median converges or `budget_s` passes."""
    t0 = time.perf_counter()
    call()
    sync()
    first = time.perf_counter() - t0
    for _ in range(rule.warmup):
        call()
    sync()
    times: list[float] = []
    start = time.perf_counter()
    check_at = 1
    reason = None
    while reason is None:
        t = time.perf_counter()
        call()
        sync()
        end = time.perf_counter()
        times.append(end - t)
        elapsed = end - start
        if len(times) >= check_at or elapsed >= budget_s:
            reason = stop_reason(times, elapsed, rule.target_cv, budget_s)
            check_at = next_check(len(times))
    p50, p95 = p50_p95(times)
    mcv = median_cv(times)
    return BatchTiming(batch=batch, calls=len(times), first_call_s=first,
                       batch_latency_p50_s=p50, batch_latency_p95_s=p95,
                       sample_latency_p50_s=p50 / batch, sample_latency_p95_s=p95 / batch,
                       samples_per_s=batch / p50 if p50 > 0 else math.inf,
                       calls_cv=coefficient_of_variation(times) if len(times) >= 2 else None,
                       median_cv=mcv if math.isfinite(mcv) else None,
                       converged=reason.startswith("converged"), stop_reason=reason,
                       timed_s=time.perf_counter() - start)


def _numpy(outputs: Sequence[Any]) -> list[Any]:
    import numpy as np
    import torch

    return [o.detach().float().cpu().numpy() if isinstance(o, torch.Tensor) else np.asarray(o)
            for o in outputs]


def drift_of(reference: Sequence[Any], got: Sequence[Any], batch: int, classifier: bool
             ) -> Drift:
    """Outputs of a backend against eager's (numpy arrays, same order and shapes)."""
    import numpy as np

    if len(reference) != len(got):
        raise ValueError(f"{len(got)} outputs, eager gave {len(reference)}")
    diff = 0.0
    scale = 0.0
    for r, g in zip(reference, got, strict=True):
        r64, g64 = np.asarray(r, dtype=np.float64), np.asarray(g, dtype=np.float64)
        if r64.shape != g64.shape:
            raise ValueError(f"output of shape {g64.shape}, eager gave {r64.shape}")
        if r64.size:
            diff = max(diff, float(np.max(np.abs(r64 - g64))))
            scale = max(scale, float(np.max(np.abs(r64))))
    agree = rows = None
    if classifier:
        r, g = np.asarray(reference[0]), np.asarray(got[0])
        same = np.argmax(r, axis=-1) == np.argmax(g, axis=-1)
        agree, rows = float(np.mean(same)), int(same.size)
    return Drift(batch=batch, max_abs_diff=diff, max_abs_eager=scale, top1_agreement=agree,
                 top1_rows=rows)


def _is_classifier(m: InferenceModel, reference: Sequence[Any]) -> bool:
    first = reference[0] if reference else None
    if first is None or first.ndim < 2 or first.shape[-1] < 2:
        return False
    return m.logits or first.ndim == 2


def measure_inference(m: InferenceModel, backend: DeviceBackend, backends: Sequence[str],
                      batches: Sequence[int], rule: InferenceRule,
                      progress: Callable[[str], None] = lambda _: None) -> InferenceResult:
    """Time each backend at each batch size and compare its outputs with eager's."""
    import torch

    from gpuhours.bench.module_spec import make_inputs

    rule.check()
    if not batches or any(b < 1 for b in batches):
        raise FieldError("batches", f"expected batch sizes >= 1, got {list(batches)}.")
    device = backend.torch_device
    cuda = backend.kind == "cuda"
    threads = torch.get_num_threads()
    module = m.module.to(device)
    inputs = {b: make_inputs(m.specs, b, seed=0, device=device) for b in batches}
    drift_batch = max(batches)
    sync = (lambda: torch.cuda.synchronize()) if cuda else (lambda: None)
    with torch.inference_mode():
        try:
            reference = _numpy(module(*inputs[drift_batch].values()))
        except Exception as e:
            _raise_user_error(e, m, backend, drift_batch)
    if not reference:
        raise FieldError("module", f"{m.name} returned no tensor; expected a tensor, a tuple or "
                                   "a dict of tensors.")
    classifier = _is_classifier(m, reference)
    results = []
    with tempfile.TemporaryDirectory(prefix="gpuhours-onnx-") as tmp:
        exported = None
        for name in backends:
            progress(name)
            try:
                r, exported = _run_backend(name, m, module, backend, inputs, batches, rule,
                                           sync, tmp, exported, threads, reference, classifier,
                                           drift_batch)
            except (InputError, KeyboardInterrupt):
                raise
            except Exception as e:
                from gpuhours.bench.session import is_out_of_memory

                if is_out_of_memory(e):
                    raise DoesNotFit("batch", f"{name} at batch {max(batches)} does not fit on "
                                              f"{backend.name}: {type(e).__name__}",
                                     "Try smaller --batches.") from None
                r = BackendResult(backend=name, status="failed",
                                  error=f"{type(e).__name__}: {str(e).strip()[:400]}",
                                  device_kind=backend.kind, device_key=backend.key,
                                  device_name=backend.name, runs_on=device)
            results.append(r)
    return InferenceResult(
        model=m.name, model_basis=m.basis, inputs=[s.text() for s in m.specs], params=m.params,
        tokens_per_sample=m.tokens_per_sample, batches=list(batches), target_cv=rule.target_cv,
        max_seconds=rule.max_seconds, threads=threads, backends=results,
        timing_basis=("measured: time.perf_counter around each call"
                      + (" (CUDA synchronised)" if cuda else "") + ", "
                      f"after 1 first call and {rule.warmup} warm-up calls; repeated until the "
                      f"median's CV (McKean-Schrader standard error / median) < "
                      f"{rule.target_cv:.0%} or {rule.max_seconds:g} s per backend; "
                      f"{threads} thread(s), torch's and ONNX Runtime's intra-op"),
        drift_basis=(f"measured: outputs on the same random inputs (batch {drift_batch}, seed 0) "
                     "against eager fp32; top-1 = argmax of the last dimension"
                     + (" (next-token logits)" if m.logits else "") + "; random weights"))


def _raise_user_error(e: Exception, m: InferenceModel, backend: DeviceBackend, batch: int) -> None:
    from gpuhours.bench.session import is_out_of_memory

    if is_out_of_memory(e):
        raise DoesNotFit("batch", f"batch {batch} does not fit on {backend.name}: "
                                  f"{type(e).__name__}", "Try smaller --batches.") from None
    field = "module" if not m.logits else "model"
    raise FieldError(field, f"calling {m.name} on {', '.join(s.text() for s in m.specs)} at "
                            f"batch {batch} failed: {type(e).__name__}: {str(e).strip()[:300]}",
                     "The --input names must be the forward's parameters." if not m.logits
                     else None) from None


def _run_backend(name: str, m: InferenceModel, module: Any, backend: DeviceBackend,
                 inputs: dict[int, dict[str, Any]], batches: Sequence[int], rule: InferenceRule,
                 sync: Callable[[], None], tmp: str, exported: Any, threads: int,
                 reference: Sequence[Any], classifier: bool, drift_batch: int
                 ) -> tuple[BackendResult, Any]:
    """One backend: prepare it, time it at each batch size, measure its drift."""
    import torch

    from gpuhours.bench.module_spec import make_inputs

    prepare: dict[str, float] = {}
    basis = None
    device = dict(device_kind=backend.kind, device_key=backend.key, device_name=backend.name)
    runs_on = backend.torch_device
    make_call: Callable[[int], Callable[[], Any]]
    if name in ("eager", "compile"):
        fn = module if name == "eager" else torch.compile(module)
        if name == "compile":
            basis = "torch.compile, default mode; compilation is each batch's first call"

        def make_call(b: int) -> Callable[[], Any]:
            args = tuple(inputs[b].values())

            def call() -> Any:
                with torch.inference_mode():
                    return fn(*args)
            return call
    else:
        from gpuhours.bench import onnx_backend as ob

        ob.require_onnxruntime()
        if exported is None:
            t = time.perf_counter()
            # exported at batch 2: torch.export specialises a dimension of size 1 to a
            # constant, and the file must serve every batch size
            cpu_inputs = make_inputs(m.specs, 2, seed=0)
            outputs = [f"output{i}" for i in range(len(reference))] if len(reference) > 1 \
                else ["output"]
            exported = ob.export_onnx(module.cpu(), cpu_inputs, outputs, tmp)
            module.to(backend.torch_device)
            prepare["export_s"] = time.perf_counter() - t
        path = exported.path
        basis = exported.exporter
        if name == "onnxruntime-int8":
            t = time.perf_counter()
            path = ob.quantize_int8(exported, tmp)
            prepare["quantize_s"] = time.perf_counter() - t
            basis += "; onnxruntime.quantization.quantize_dynamic, int8 weights (QInt8)"
        t = time.perf_counter()
        session, runs_on = ob.session(path, threads, cuda=backend.kind == "cuda"
                                      and name == "onnxruntime")
        prepare["session_s"] = time.perf_counter() - t
        if runs_on == "CPUExecutionProvider" and backend.kind != "cpu":
            from gpuhours.bench.device import cpu_backend

            cpu = cpu_backend(threads)
            device = dict(device_kind=cpu.kind, device_key=cpu.key, device_name=cpu.name)
        feeds = {b: {k: v.cpu().numpy() for k, v in inputs[b].items()} for b in batches}
        sync = lambda: None  # noqa: E731  session.run returns host arrays: it has waited

        def make_call(b: int) -> Callable[[], Any]:
            feed = feeds[b]
            return lambda: session.run(None, feed)

    timings = []
    spent = 0.0
    for i, b in enumerate(batches):
        share = (rule.max_seconds - spent) / (len(batches) - i)
        timing = time_calls(make_call(b), b, rule, max(share, 0.0), sync)
        spent += timing.timed_s
        timings.append(timing)
    drift = drift_of(reference, _numpy(make_call(drift_batch)()), drift_batch, classifier)
    return BackendResult(backend=name, status="ok", runs_on=runs_on, prepare_s=prepare,
                         prepare_basis=basis, timings=timings, drift=drift, **device), exported


def summary_lines(r: InferenceResult) -> list[str]:
    """Plain-language comparisons: each backend's throughput at each batch against eager's."""
    eager = next((b for b in r.backends if b.backend == "eager" and b.status == "ok"), None)
    lines = []
    for b in r.backends:
        if b.status != "ok" or b is eager or eager is None:
            continue
        ratios = [t.samples_per_s / e.samples_per_s for t in b.timings for e in eager.timings
                  if e.batch == t.batch and e.samples_per_s > 0]
        if ratios:
            lines.append(f"{b.backend}: {statistics.median(ratios):.2f}x eager's throughput "
                         f"(median over {len(ratios)} batch size(s); measured)")
    return lines
