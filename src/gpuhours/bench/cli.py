"""The `gpuhours` commands of gpuhours.bench: `bench`, `bench-data` and `ledger list|show|export`.
Registered on the main app by gpuhours.cli; this module must not import torch at import time
(imports go inside the command functions)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from gpuhours.cli_common import (
    AccumOpt,
    BatchOpt,
    CkptOpt,
    JsonOpt,
    LedgerOpt,
    OptimImplOpt,
    RankOpt,
    SeqOpt,
    TargetsOpt,
    defaults_of,
    out,
    parse_sets,
    user_errors,
)
from gpuhours.cli_common import err as err_console
from gpuhours.errors import DoesNotFit, FieldError, InputError
from gpuhours.setup import Generation, Training

TRAINING = defaults_of(Training)
GENERATION = defaults_of(Generation)


def register(app: typer.Typer) -> None:
    """Add this capability's commands to `app`."""
    ledger_app = typer.Typer(no_args_is_help=True,
                             help="The ledger of measurements: list, show, export.")
    app.add_typer(ledger_app, name="ledger")

    @app.command()
    @user_errors
    def bench(
        model: Annotated[str | None, typer.Option(
            "--model", "-m", help="Catalog name or config.json path; built with random "
                                  "weights (no download).")] = None,
        set_: Annotated[list[str] | None, typer.Option(
            "--set", help="Override a config field, e.g. --set num_hidden_layers=2 "
                          "(repeatable): shrink a catalog model to bench it quickly.")] = None,
        method: Annotated[str, typer.Option(help="full or lora (peft).")] = TRAINING.method,
        precision: Annotated[str, typer.Option(
            help="As estimate's --precision (the same default). On a CPU, fp32 runs fastest: "
                 "bf16 autocast is several times slower on CPUs without bf16 units.")
                             ] = TRAINING.precision,
        batch: BatchOpt = TRAINING.micro_batch,
        seq: SeqOpt = TRAINING.seq_len,
        grad_accum: AccumOpt = TRAINING.grad_accum,
        checkpointing: CkptOpt = TRAINING.checkpointing,
        compile_: Annotated[bool, typer.Option(
            "--compile/--no-compile", help="torch.compile the model.")] = False,
        optimizer: Annotated[str, typer.Option(help="adamw, sgd or sgd-momentum.")
                             ] = TRAINING.optimizer,
        optimizer_impl: OptimImplOpt = TRAINING.optimizer_impl,
        lora_rank: RankOpt = TRAINING.lora_rank,
        lora_targets: TargetsOpt = TRAINING.lora_targets,
        device: Annotated[str, typer.Option(help="auto (CUDA, MPS, CPU), cuda, mps or cpu.")
                          ] = "auto",
        threads: Annotated[int | None, typer.Option(
            help="CPU threads for torch (default: torch's choice).")] = None,
        warmup: Annotated[int, typer.Option(help="Untimed warm-up steps.")] = 3,
        min_steps: Annotated[int, typer.Option(help="Timed steps at least.")] = 5,
        max_steps: Annotated[int, typer.Option(help="Timed steps at most.")] = 50,
        target_cv: Annotated[float, typer.Option(
            help="Stop when the step time's coefficient of variation is below this (with "
                 "--workload inference: the CV of the median latency).")] = 0.02,
        max_time: Annotated[float, typer.Option(
            help="Stop timing after this many seconds (after --min-steps).")] = 60.0,
        sweep: Annotated[list[str] | None, typer.Option(
            help="KEY=V1,V2,... (repeatable): batch, seq, grad-accum, checkpointing, compile, "
                 "method, precision, optimizer, optimizer-impl, lora-rank, lora-targets.")] = None,
        peak_tflops: Annotated[float | None, typer.Option(
            help="Peak TFLOPS for MFU (default: catalog for a known GPU, else a matmul probe).")
        ] = None,
        reprobe: Annotated[bool, typer.Option(
            "--reprobe", help="Measure the device's peak again instead of reusing the "
                              "ledger's probe of the last 7 days.")] = False,
        profile: Annotated[Path | None, typer.Option(
            help="Write a torch.profiler Chrome trace of 3 steps to this file.")] = None,
        workload: Annotated[str, typer.Option(
            help="train (training steps), generate (HF generate: prefill and decode, with "
                 "--batch, --prompt-tokens, --output-tokens) or grpo (one GRPO step, each "
                 "part timed: --prompts x --generations responses of --output-tokens, the "
                 "update in micro-batches of --batch) or inference (forward latency and "
                 "throughput by --backend and --batches, drift against eager; --model or "
                 "--module with --input).")] = "train",
        prompts: Annotated[int, typer.Option(
            help="With --workload grpo: prompts per step.")] = 2,
        generations: Annotated[int, typer.Option(
            help="With --workload grpo: responses per prompt (the group).")] = 4,
        prompt_tokens: Annotated[int, typer.Option(
            help="With --workload generate: prompt length, tokens.")] = GENERATION.prompt_tokens,
        output_tokens: Annotated[int, typer.Option(
            help="With --workload generate: new tokens per sequence.")] = 64,
        repeats: Annotated[int, typer.Option(
            help="With --workload generate: timed runs of each length (the median).")] = 3,
        backend: Annotated[list[str] | None, typer.Option(
            help="With --workload inference: eager, compile, onnxruntime or onnxruntime-int8 "
                 "(repeatable or comma-separated; default eager,onnxruntime,"
                 "onnxruntime-int8).")] = None,
        batches: Annotated[str | None, typer.Option(
            help="With --workload inference: batch sizes, e.g. 1,8,32 (default: --batch).")
        ] = None,
        module: Annotated[str | None, typer.Option(
            help="With --workload inference: your nn.Module, pkg.mod:factory or "
                 "path/file.py:factory (called without arguments), instead of --model.")
        ] = None,
        input_: Annotated[list[str] | None, typer.Option(
            "--input", help="With --module: NAME=DTYPE[DIMS], B the batch, e.g. "
                            "'images=float32[B,3,224,224]'; integers '<HIGH' (repeatable).")
        ] = None,
        max_seconds: Annotated[float, typer.Option(
            help="With --workload inference: seconds of timed calls per backend (all batch "
                 "sizes) before it stops unconverged.")] = 60.0,
        ledger: LedgerOpt = None,
        no_ledger: Annotated[bool, typer.Option("--no-ledger", help="Do not store.")] = False,
        as_json: JsonOpt = False,
    ) -> None:
        """Run real training steps (or, with --workload generate, HF generate) on this machine
        and measure them; store them in the ledger.

        Step time (median, p10-p90, CV) split into data wait, forward, backward and optimizer;
        tokens/s; FLOPs counted by torch; MFU against the catalog peak or a measured one; peak
        tensor memory. With --sweep, every combination; those that run out of memory are
        recorded as "does not fit"."""
        from gpuhours.bench.config import BenchSetup, StopRule
        from gpuhours.bench.sweep import expand, parse_sweeps

        if workload == "inference":
            if sweep:
                raise InputError("--sweep", "sweeps are for --workload train; inference takes "
                                            "--batches and --backend.")
            _run_inference(model, parse_sets(set_ or []), module, input_ or [], seq, backend,
                           batches or str(batch), warmup, target_cv, max_seconds, device,
                           threads, ledger, not no_ledger, as_json, err_console)
            return
        if (module is not None or input_) and workload != "train":
            raise InputError("--module/--input", "a module and its inputs are for --workload "
                                                 "train or inference (gpuhours trace --module "
                                                 "for training memory on a GPU you lack).")
        if module is not None or input_:
            from gpuhours.bench.module_train import run_module_cli

            run_module_cli(module, model, input_ or [], batch, precision, device, threads,
                           optimizer_impl, compile_, warmup, min_steps, max_steps, target_cv,
                           max_time, profile, peak_tflops, ledger, not no_ledger, as_json,
                           bool(sweep))
            return
        if model is None:
            raise FieldError("model", "a model is required: a catalog name (gpuhours catalog "
                                      "models) or a config.json path.")
        if threads is not None and threads < 1:
            raise InputError("--threads", f"expected a positive number, got {threads}.")
        if workload not in ("train", "generate", "grpo", "inference"):
            raise InputError("--workload", f"expected train, generate, grpo or inference, got "
                                           f"{workload!r}.")
        if workload != "train" and sweep:
            raise InputError("--sweep", "sweeps are for --workload train.")
        if workload == "grpo":
            policy = Training.model_validate(dict(
                model=model, config_overrides=parse_sets(set_ or []), method=method,
                precision=precision, micro_batch=batch,
                seq_len=prompt_tokens + output_tokens, optimizer=optimizer,
                optimizer_impl=optimizer_impl, lora_rank=lora_rank, lora_targets=lora_targets))
            _run_grpo(policy, prompts, generations, prompt_tokens, output_tokens, device,
                      threads, ledger, not no_ledger, as_json, err_console)
            return
        if workload == "generate":
            g = Generation.model_validate(dict(
                model=model, config_overrides=parse_sets(set_ or []), batch=batch,
                prompt_tokens=prompt_tokens, output_tokens=output_tokens,
                engine="hf-generate"))
            _run_generate(g, precision, repeats, device, threads, ledger, not no_ledger,
                          as_json, err_console)
            return
        if peak_tflops is not None and not peak_tflops > 0:
            raise InputError("--peak-tflops", f"expected a positive number, got {peak_tflops}.")
        training = Training.model_validate(dict(
            model=model, config_overrides=parse_sets(set_ or []), method=method,
            precision=precision, micro_batch=batch, seq_len=seq, grad_accum=grad_accum,
            checkpointing=checkpointing, optimizer=optimizer, optimizer_impl=optimizer_impl,
            lora_rank=lora_rank, lora_targets=lora_targets))
        base = BenchSetup(training=training, compiled=compile_)
        rule = StopRule(warmup_steps=warmup, min_steps=min_steps, max_steps=max_steps,
                        target_cv=target_cv, max_time_s=max_time)
        setups = expand(base, parse_sweeps(sweep or []))
        _run_bench(setups, rule, device, threads, peak_tflops, reprobe, profile,
                   ledger, not no_ledger, as_json, bool(sweep), err_console)

    @app.command("bench-data")
    @user_errors
    def bench_data(
        loader: Annotated[str, typer.Argument(
            help="MODULE:FUNCTION; FUNCTION(num_workers) returns a DataLoader or any iterable "
                 "of batches.")],
        workers: Annotated[str, typer.Option(help="num_workers values to try.")] = "0,2,4",
        seconds_: Annotated[float, typer.Option(
            "--seconds", help="Time per num_workers value.")] = 5.0,
        bench_id: Annotated[int | None, typer.Option(
            help="Ledger measurement whose samples/s the loader must keep up with.")] = None,
        model: Annotated[str | None, typer.Option(
            "--model", "-m", help="Or: estimate the model's samples/s (with --gpu).")] = None,
        gpu: Annotated[str | None, typer.Option("--gpu", "-g", help="GPU for the estimate.")
                       ] = None,
        batch: Annotated[int, typer.Option(help="Micro-batch for the estimate.")
                         ] = TRAINING.micro_batch,
        seq: Annotated[int, typer.Option(help="Sequence length for the estimate.")
                       ] = TRAINING.seq_len,
        method: Annotated[str, typer.Option(help="full, lora or qlora for the estimate.")
                          ] = TRAINING.method,
        precision: Annotated[str, typer.Option(help="Precision for the estimate.")
                             ] = TRAINING.precision,
        ledger: LedgerOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Measure a data loader alone across num_workers values, in samples/s, and compare it
        with what the model consumes: is the run input-bound?"""
        from gpuhours.bench.data import load_function, measure_loader, verdict
        from gpuhours.bench.render import render_loader

        values = _int_list(workers, "--workers")
        if not seconds_ > 0:
            raise InputError("--seconds", f"expected a positive number, got {seconds_}.")
        if bench_id is not None and model is not None:
            raise InputError("--bench-id/--model", "give one way to know the consumption rate.")
        need, need_basis = _consumption(bench_id, ledger, model, gpu, batch, seq, method,
                                        precision)
        make_loader = load_function(loader)
        err = err_console
        rates = []
        for n in values:
            with err.status(f"num_workers={n}: drawing batches for {seconds_:g} s"):
                rates.append(measure_loader(make_loader, n, seconds=seconds_))
        lines = verdict(rates, need, need_basis)
        if as_json:
            _emit({"rates": [r.model_dump() for r in rates], "needed_samples_per_s": need,
                   "needed_basis": need_basis, "verdict": lines})
        else:
            render_loader(rates, lines, out)

    @ledger_app.command("list")
    @user_errors
    def ledger_list(
        ledger: LedgerOpt = None,
        device: Annotated[str | None, typer.Option(help="Only this device key.")] = None,
        limit: Annotated[int, typer.Option(help="At most this many rows.")] = 50,
        as_json: JsonOpt = False,
    ) -> None:
        """Measurements, newest first; a line under the table names the tracked runs the
        ledger also holds (gpuhours doctor ID reads one)."""
        from gpuhours.bench.render import render_ledger_list
        from gpuhours.track.ledger import Ledger, ledger_path
        from gpuhours.track.ledger_export import flat_row
        from gpuhours.track.runs import list_runs

        if limit < 1:
            raise InputError("--limit", f"expected a positive number, got {limit}.")
        path = ledger_path(ledger)
        with Ledger.open(path, create=False) as book:
            rows = book.measurements(device_key=device, limit=limit)
            runs = [] if as_json else list_runs(book)
        if as_json:
            _emit([flat_row(m) for m in rows])
            return
        render_ledger_list(rows, out, str(path))
        if runs:
            # tracked runs are not measurements: without this line a ledger of runs lists empty
            shown = ", ".join(str(r.id) for r in runs[:10]) + (", ..." if len(runs) > 10 else "")
            out.print(f"{len(runs)} tracked run{'s' if len(runs) > 1 else ''} in this ledger "
                      f"too (ids {shown}, newest first): `gpuhours doctor ID --ledger {path}` "
                      "reads one.", markup=False)

    @ledger_app.command("show")
    @user_errors
    def ledger_show(
        measurement_id: Annotated[str, typer.Argument(metavar="ID", help="Measurement id.")],
        ledger: LedgerOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """One measurement in full: setup, environment, results and their bases."""
        from gpuhours.bench.render import render_ledger_show
        from gpuhours.track.ledger import Ledger, ledger_path

        # taken as text so that a bad id gets the house error, not click's usage text
        if not measurement_id.strip().isdigit():
            raise InputError("ID", f"expected a measurement id, a whole number, got "
                             f"{measurement_id!r}.", "`gpuhours ledger list` shows the ids.")
        with Ledger.open(ledger_path(ledger), create=False) as book:
            m = book.measurement(int(measurement_id))
        if as_json:
            _emit(m.as_dict())
        else:
            render_ledger_show(m, out)

    @ledger_app.command("export")
    @user_errors
    def ledger_export(
        ledger: LedgerOpt = None,
        format_: Annotated[str, typer.Option("--format", help="json or csv.")] = "json",
        output: Annotated[Path | None, typer.Option(
            help="Write to this file (atomically) instead of standard output; an existing file "
                 "is replaced only if it is an earlier export.")] = None,
    ) -> None:
        """Every measurement, as JSON (full records) or CSV (one flat row each)."""
        from gpuhours.files import refuse_foreign_overwrite, require_parent_folder
        from gpuhours.track.ledger import Ledger, ledger_path
        from gpuhours.track.ledger_export import is_export, to_csv, to_json

        if format_ not in ("json", "csv"):
            raise InputError("--format", f"expected json or csv, got {format_!r}.")
        if output is not None:  # as report --html: the file, never the folders above it
            require_parent_folder(output, "--output")
            refuse_foreign_overwrite(output, "--output", is_export, "a ledger export")
        with Ledger.open(ledger_path(ledger), create=False) as book:
            rows = list(reversed(book.measurements()))
        text = to_json(rows) if format_ == "json" else to_csv(rows)
        if output is None:
            sys.stdout.write(text)
        else:
            from gpuhours.files import atomic_write_text

            atomic_write_text(output, text)
            typer.echo(f"wrote {len(rows)} measurements to {output}", err=True)


def _emit(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def _int_list(text: str, where: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InputError(where, f"expected whole numbers separated by commas, got {text!r}.") \
            from None
    if not values or any(v < 0 for v in values):
        raise InputError(where, f"expected numbers >= 0, got {text!r}.")
    return values


def _consumption(bench_id: int | None, ledger: str | None, model: str | None, gpu: str | None,
                 batch: int, seq: int, method: str, precision: str
                 ) -> tuple[float | None, str]:
    """Samples/s the model consumes: from a ledger measurement or from the analytic estimate."""
    if bench_id is not None:
        from gpuhours.track.ledger import Ledger, ledger_path

        with Ledger.open(ledger_path(ledger), create=False) as book:
            m = book.measurement(bench_id)
        samples = m.results.get("samples_per_s")
        if not samples:
            raise InputError("--bench-id", f"ledger #{bench_id} has no samples/s ({m.status}).")
        return float(samples), f"measured: ledger #{bench_id}, {m.model} on {m.device_name}"
    if model is None:
        if gpu is not None:
            raise InputError("--gpu", "an estimate also needs --model.")
        return None, ""
    if gpu is None:
        raise InputError("--model", "an estimate of the consumption also needs --gpu.")
    from gpuhours.api import estimate_training
    from gpuhours.resolve import catalog_gpu
    from gpuhours.setup import Hardware

    t = Training.model_validate(dict(model=model, method=method, precision=precision,
                                     micro_batch=batch, seq_len=seq))
    e = estimate_training(t, Hardware(gpu=catalog_gpu(gpu)))
    return (e.tokens_per_s_per_gpu.value / seq,
            f"formula: analytic estimate for {t.arch.name} on {gpu}, batch {batch} x seq {seq}, "
            "tokens/s / seq")


def _run_bench(setups: list[Any], rule: Any, device: str, threads: int | None,
               peak_tflops: float | None, reprobe: bool, profile: Path | None,
               ledger: str | None, store: bool, as_json: bool, is_sweep: bool, err: Any) -> None:
    """Measure each setup, render, set the exit code. Progress goes to stderr: a Rich bar on a
    terminal, one line per configuration started and finished when stderr is a pipe or a file
    (a long sweep in CI or under nohup). Ctrl-C prints what finished so far and exits 130."""
    from gpuhours.bench.render import render_result, render_sweep
    from gpuhours.bench.session import bench_setup
    from gpuhours.bench.sweep import run_sweep, summarize
    from gpuhours.track.ledger import Ledger, ledger_path

    with err.status("loading torch and transformers"):
        import torch

        if threads is not None:
            torch.set_num_threads(threads)
        from gpuhours.bench.device import detect
        from gpuhours.bench.environment import collect

        backend = detect(device)
        environment = collect(backend)
    path = ledger_path(ledger) if store else None
    book = Ledger.open(path) if path is not None else None

    def measure(i: int, setup: Any, progress: Any = None) -> Any:
        return bench_setup(setup, backend, rule, environment, ledger=book,
                           peak_tflops=peak_tflops, refresh_probe=reprobe and i == 0,
                           profile_to=profile if i == 0 else None, progress=progress)

    try:
        if err.is_terminal:
            run = _run_with_bar(setups, measure, err)
        else:
            run = run_sweep(setups, measure, log=lambda line: err.print(
                line, markup=False, highlight=False, soft_wrap=True))
    finally:
        if book is not None:
            book.close()
    outcomes = run.outcomes
    if run.interrupted:
        err.print(f"interrupted: {len(outcomes)} of {run.total} configuration(s) finished"
                  + ("; their table follows." if outcomes else "."), highlight=False)
    if as_json:
        _emit([{"setup": o.setup.record(), "status": o.status, "ledger_id": o.ledger_id,
                "error": o.error, "result": o.result.model_dump(mode="json") if o.result else None}
               for o in outcomes])
    elif outcomes and (is_sweep or run.interrupted):
        render_sweep(outcomes, summarize(outcomes), out)
    elif outcomes:
        render_result(outcomes[0], out, str(path) if path else None)
    if run.interrupted:
        raise typer.Exit(code=INTERRUPTED_EXIT_CODE)
    if all(o.status != "ok" for o in outcomes):
        first = outcomes[0]
        too_big = DoesNotFit("micro_batch", f"does not fit on {backend.name}: {first.error}",
                             "Try a smaller --batch or --seq, --checkpointing, or --method "
                             "lora.")
        too_big.fields = ("micro_batch",)
        raise too_big


def _run_workload(kind: str, model_of: Any, measure: Any, render: Any, activity: str,
                  hint: str, device: str, threads: int | None, ledger: str | None,
                  store: bool, as_json: bool, err: Any) -> None:
    """Run a non-training workload (`measure(backend)` -> a result with .setup and
    .ledger_results()), store it in the ledger as `kind`, and print it (`render`) or its JSON.
    Running out of memory is "does not fit" (exit 1) with `hint`."""
    from gpuhours.bench.session import is_out_of_memory
    from gpuhours.track.ledger import Ledger, ledger_path

    with err.status("loading torch and transformers"):
        import torch

        if threads is not None:
            torch.set_num_threads(threads)
        from gpuhours.bench.device import detect
        from gpuhours.bench.environment import collect

        backend = detect(device)
        environment = collect(backend)
    with err.status(f"{activity} on {backend.name}"):
        try:
            result = measure(backend)
        except Exception as e:
            if not is_out_of_memory(e):
                raise
            raise DoesNotFit("batch", f"does not fit on {backend.name}: "
                                      f"{type(e).__name__}", hint) from None
    ledger_id = None
    path = ledger_path(ledger) if store else None
    if path is not None:
        cfg, _, _ = _model_config(model_of)
        with Ledger.open(path) as book:
            ledger_id = book.add_measurement(
                kind=kind, status="ok", device_kind=backend.kind, device_key=backend.key,
                device_name=backend.name, model=model_of.arch.name, setup=result.setup,
                model_config=cfg, environment=environment, results=result.ledger_results())
    if as_json:
        _emit({"ledger_id": ledger_id, "result": result.model_dump(mode="json")})
    else:
        render(result, out, str(path) if path else None, ledger_id)


def _run_generate(g: Any, precision: str, repeats: int, device: str, threads: int | None,
                  ledger: str | None, store: bool, as_json: bool, err: Any) -> None:
    """Measure HF generate for `g`, store it (kind 'generate'), print it beside the estimate."""
    from gpuhours.bench.generate import measure_generate, with_estimate
    from gpuhours.bench.render import render_generate

    _run_workload("generate", g,
                  lambda backend: with_estimate(measure_generate(g, backend, precision,
                                                                 repeats), g),
                  render_generate, "timing generate", "Try a smaller --batch.", device,
                  threads, ledger, store, as_json, err)


def _run_grpo(t: Any, prompts: int, generations: int, prompt_tokens: int, response_tokens: int,
              device: str, threads: int | None, ledger: str | None, store: bool,
              as_json: bool, err: Any) -> None:
    """One GRPO step of `t`'s policy, each part timed; stored (kind 'grpo') and printed."""
    from gpuhours.bench.grpo import measure_grpo
    from gpuhours.bench.render import render_grpo

    _run_workload("grpo", t,
                  lambda backend: measure_grpo(t, backend, prompts, generations, prompt_tokens,
                                               response_tokens),
                  render_grpo, "one GRPO step", "Try a smaller --batch, fewer --prompts or "
                  "--generations.", device, threads, ledger, store, as_json, err)


def _run_inference(model: str | None, overrides: dict[str, Any], module: str | None,
                   inputs: list[str], seq: int, backends: list[str] | None, batches: str,
                   warmup: int, target_cv: float, max_seconds: float, device: str,
                   threads: int | None, ledger: str | None, store: bool, as_json: bool,
                   err: Any) -> None:
    """Time a model's forward under each backend (gpuhours.bench.inference); store one ledger
    row (kind 'inference') per backend and batch; print the tables or the JSON."""
    from gpuhours.bench.inference import InferenceRule, parse_backends

    if (model is None) == (module is None):
        raise InputError("--model/--module", "inference needs one model: a catalog name or "
                                             "config.json (--model), or your nn.Module "
                                             "(--module with --input).")
    if module is not None and not inputs:
        raise InputError("--input", "--module needs its inputs, e.g. --input "
                                    "'images=float32[B,3,224,224]' (B is the batch).")
    if model is not None and inputs:
        raise InputError("--input", "a catalog model takes input_ids of --seq tokens; --input "
                                    "is for --module.")
    if threads is not None and threads < 1:
        raise InputError("--threads", f"expected a positive number, got {threads}.")
    names = parse_backends(backends)
    sizes = _int_list(batches, "--batches")
    rule = InferenceRule(warmup=warmup, target_cv=target_cv, max_seconds=max_seconds)
    rule.check()
    if any(n.startswith("onnxruntime") for n in names):
        from gpuhours.bench.onnx_backend import require_onnxruntime

        require_onnxruntime()
    with err.status("loading torch"):
        import torch

        if threads is not None:
            torch.set_num_threads(threads)
        from gpuhours.bench.device import detect
        from gpuhours.bench.environment import collect
        from gpuhours.bench.inference import catalog_model, measure_inference, user_model

        target = detect(device)
        environment = collect(target)
        environment.update(_versions("onnx", "onnxruntime", "onnxscript"))
    with err.status("building the model"):
        m = (user_model(module, inputs) if module is not None
             else catalog_model(str(model), overrides, seq))
    status = err.status(f"timing {m.name} on {target.name}")
    with status:
        result = measure_inference(m, target, names, sizes, rule,
                                   progress=lambda b: status.update(f"timing {b}"))
    path = None
    if store:
        from gpuhours.track.ledger import Ledger, ledger_path

        path = ledger_path(ledger)
        ids = []
        with Ledger.open(path) as book:
            for b, _, setup, results in result.ledger_rows():
                ids.append(book.add_measurement(
                    kind="inference", status="ok", device_kind=b.device_kind,
                    device_key=b.device_key, device_name=b.device_name, model=m.name,
                    setup=setup, model_config=m.config, environment=environment,
                    results=results))
        result = result.model_copy(update={"ledger_ids": ids})
    if as_json:
        _emit(result.model_dump(mode="json"))
    else:
        from gpuhours.bench.inference_render import render_inference

        render_inference(result, out, str(path) if path else None)
    if any(b.status != "ok" for b in result.backends):
        raise typer.Exit(code=1)  # a backend asked for did not run: said above, and so here


def _versions(*packages: str) -> dict[str, str | None]:
    from importlib import metadata

    found: dict[str, str | None] = {}
    for p in packages:
        try:
            found[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            found[p] = None
    return found


def _model_config(g: Any) -> Any:
    from gpuhours.resolve import model_config

    return model_config(g.model, g.config_overrides)


#: the exit code of a run stopped by Ctrl-C: 128 + SIGINT, as a shell reports it
INTERRUPTED_EXIT_CODE = 130


def _run_with_bar(setups: list[Any], measure: Any, err: Any) -> Any:
    """run_sweep under a Rich progress bar on the terminal, each step's phase in its text."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from gpuhours.bench.sweep import run_sweep

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn(
            "{task.completed}/{task.total}"), TimeElapsedColumn(), console=err,
            transient=True) as bar:
        task = bar.add_task("benchmark", total=len(setups))

        def one(i: int, setup: Any) -> Any:
            label = setup.label()

            def progress(text: str) -> None:
                bar.update(task, description=f"{label}: {text}")

            progress("building the model")
            outcome = measure(i, setup, progress)
            bar.advance(task)
            return outcome

        return run_sweep(setups, one)
