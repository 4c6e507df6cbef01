"""`gpuhours bench --module pkg.mod:factory --input ...`: real training steps of your own
nn.Module on this machine, with the time of each top-level module (issue 17).

The factory is called once (random weights, as it makes them), the inputs are made from their
`--input` shapes at `--batch` (gpuhours.bench.module_spec),
and the step is gpuhours.bench.run's: forward, the loss (the module's own, else the mean of its
outputs), backward, AdamW. torch is imported inside the function.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuhours.bench.runner import BenchResult
from gpuhours.errors import FieldError

#: our precision names -> gpuhours.bench.run's: -mixed and -amp are both autocast over fp32
#: weights for a plain module (fp16 with a GradScaler)
_RUN_PRECISION = {"fp32": "fp32", "bf16": "bf16", "bf16-amp": "bf16-amp",
                  "bf16-mixed": "bf16-amp", "fp16-amp": "fp16-amp", "fp16-mixed": "fp16-amp"}


def bench_module(spec: str, inputs: list[str], batch: int, *, precision: str = "fp32",
                 device: str = "auto", optimizer_impl: str = "foreach", compile: bool = False,
                 warmup_steps: int = 3, min_steps: int = 5, max_steps: int = 50,
                 target_cv: float = 0.02, max_time_s: float = 60.0,
                 profile_to: Path | None = None, ledger: str | Path | None = None,
                 peak_tflops: float | None = None) -> BenchResult:
    """Measure the training step of the model `spec`'s factory makes, at `batch`."""
    from gpuhours.bench.api import run
    from gpuhours.bench.module_spec import load_module, make_inputs, parse_input_spec
    from gpuhours.torchkit.loss import loss_of

    if precision not in _RUN_PRECISION:
        raise FieldError("precision", f"for --module: one of {', '.join(_RUN_PRECISION)}, got "
                                      f"{precision!r}.")
    if batch < 1:
        raise FieldError("batch", f"expected a positive number, got {batch}.")
    specs = parse_input_spec(inputs)
    model = load_module(spec)
    seeds = iter(range(1 << 30))

    def make_batch() -> Any:
        return make_inputs(specs, batch, seed=next(seeds))

    def loss_fn(m: Any, b: Any) -> Any:
        return loss_of(m(**b))

    return run(model, make_batch, "adamw", loss_fn=loss_fn, device=device,
               precision=_RUN_PRECISION[precision], compile=compile,
               optimizer_impl=optimizer_impl, warmup_steps=warmup_steps, min_steps=min_steps,
               max_steps=max_steps, target_cv=target_cv, max_time_s=max_time_s,
               profile_to=profile_to, ledger=ledger, name=spec, peak_tflops=peak_tflops)


def run_module_cli(module: str | None, model: str | None, inputs: list[str], batch: int,
                   precision: str, device: str, threads: int | None, optimizer_impl: str,
                   compile_: bool, warmup: int, min_steps: int, max_steps: int,
                   target_cv: float, max_time: float, profile: Path | None,
                   peak_tflops: float | None, ledger: str | None, store: bool, as_json: bool,
                   sweep: bool) -> None:
    """`gpuhours bench --module ... --input ...` (training): check, measure, print."""
    from gpuhours.cli_common import emit_json, out
    from gpuhours.cli_common import err as err_console

    # field-keyed, as the library's errors: the CLI names the options (cli_common.option_of)
    if module is None:
        raise FieldError("inputs", "--input is for --module (your own nn.Module).")
    if model is not None:
        raise FieldError(("model", "module"), "give --model (a transformers model) or --module "
                                              "(your own nn.Module), not both.")
    if not inputs:
        raise FieldError("inputs", "--module needs its inputs, e.g. --input "
                                   "'images=float32[B,3,224,224]'.")
    if sweep:
        raise FieldError("sweep", "sweeps are for --model; run --module once per setting.")
    if threads is not None and threads < 1:
        raise FieldError("threads", f"expected a positive number, got {threads}.")
    with err_console.status("loading torch"):
        import torch

        if threads is not None:
            torch.set_num_threads(threads)
    from gpuhours.track.ledger import ledger_path

    path = ledger_path(ledger) if store else None
    with err_console.status(f"timing {module}"):
        result = bench_module(module, inputs, batch, precision=precision, device=device,
                              optimizer_impl=optimizer_impl, compile=compile_,
                              warmup_steps=warmup, min_steps=min_steps, max_steps=max_steps,
                              target_cv=target_cv, max_time_s=max_time, profile_to=profile,
                              ledger=path, peak_tflops=peak_tflops)
    if as_json:
        emit_json(result)
        return
    from gpuhours.bench.render import render_bench

    out.print(f"[bold]{module}[/bold] batch {batch}, {precision}", highlight=False)
    render_bench(result, out)
    if path is not None:
        out.print(f"  ledger        stored in {path} (kind bench-api)", highlight=False)
