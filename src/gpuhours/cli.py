"""The `gpuhours` command: parse, build the input, call the library, render, set the exit code.

No arithmetic here. Bad input (gpuhours.errors.InputError, or a pydantic validation error of the
inputs) becomes a one-paragraph message and exit code 2, never a traceback.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console

from gpuhours.errors import InputError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Predict memory, time and cost of ML training from physics; check it; track it.",
)
catalog_app = typer.Typer(no_args_is_help=True, help="List the catalogs: gpus, models, prices.")
app.add_typer(catalog_app, name="catalog")

out = Console()
err = Console(stderr=True)

F = TypeVar("F", bound=Callable[..., Any])

#: the packages of the optional `bench` extra
_BENCH_EXTRA = {"torch", "transformers", "peft"}

# pydantic field -> the CLI option that set it, for error messages
_OPTION_OF_FIELD = {
    "micro_batch": "--batch", "seq_len": "--seq", "grad_accum": "--grad-accum",
    "lora_rank": "--lora-rank", "num_gpus": "--gpus", "gpus_per_node": "--gpus-per-node",
    "zero_stage": "--zero", "prompt_tokens": "--prompt-tokens",
    "output_tokens": "--output-tokens", "batch": "--batch",
    "inter_node_gbps_per_gpu": "--inter-node-gbps",
}


def _fail(where: str, message: str) -> None:
    from rich.markup import escape

    # escaped: paths, names and messages may hold [brackets] that Rich would read as markup
    err.print(f"[red]error[/red] {escape(where)}: {escape(message)}", highlight=False,
              soft_wrap=True)
    raise typer.Exit(code=2)


def user_errors(func: F) -> F:
    """Turn bad input into a clear message and exit code 2."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except InputError as e:
            text = e.message + (f" {e.hint}" if e.hint else "")
            _fail(e.where, text)
        except ModuleNotFoundError as e:
            if (e.name or "").split(".")[0] not in _BENCH_EXTRA:
                raise
            _fail(e.name or "torch", "this command runs real models and needs the `bench` extra "
                                     "(torch, transformers, peft), which is not installed. "
                                     "Install it with: pip install 'gpuhours[bench]' (it pins "
                                     "torch==2.13.0).")
        except ValidationError as e:
            first = e.errors()[0]
            cause = (first.get("ctx") or {}).get("error")
            if isinstance(cause, InputError):  # raised by a model validator: names its options
                _fail(cause.where, cause.message + (f" {cause.hint}" if cause.hint else ""))
            field = str(first["loc"][-1]) if first["loc"] else "input"
            option = _OPTION_OF_FIELD.get(field, f"--{field.replace('_', '-')}")
            _fail(option, f"{first['msg']} (got {first.get('input')!r}).")

    return wrapper  # type: ignore[return-value]


def _emit_json(model: Any) -> None:
    data = model.model_dump(mode="json") if hasattr(model, "model_dump") else model
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


# Options shared by estimate and fit ------------------------------------------------------------
ModelOpt = Annotated[str | None, typer.Option(
    "--model", "-m", help="Catalog name (gpuhours catalog models) or path to a config.json.")]
ParamsOpt = Annotated[float | None, typer.Option(
    help="Model known only by its size, e.g. 13e9: a standard Llama-style shape is assumed.")]
HiddenOpt = Annotated[int | None, typer.Option(help="With --params: hidden size.")]
LayersOpt = Annotated[int | None, typer.Option(help="With --params: number of layers.")]
VocabOpt = Annotated[int | None, typer.Option(help="With --params: vocabulary size.")]
GpuOpt = Annotated[str | None, typer.Option(
    "--gpu", "-g", help="Catalog name or alias (gpuhours catalog gpus).")]
GpusOpt = Annotated[int, typer.Option(help="Number of GPUs (data parallel).")]
PerNodeOpt = Annotated[int, typer.Option(help="GPUs per node.")]
NetOpt = Annotated[float, typer.Option(
    help="Network bandwidth between nodes per GPU, GB/s one way (25 = one 200 Gb/s NIC per GPU).")]
PeakOpt = Annotated[float | None, typer.Option(
    help="Dense bf16/fp16 peak TFLOPS, to override the catalog or describe your own GPU.")]
MemGbOpt = Annotated[float | None, typer.Option(help="Device memory in GB (10^9 bytes).")]
BwOpt = Annotated[float | None, typer.Option(help="Memory bandwidth in GB/s.")]
MethodOpt = Annotated[str, typer.Option(help="full, lora or qlora.")]
RankOpt = Annotated[int, typer.Option(help="LoRA rank.")]
TargetsOpt = Annotated[str, typer.Option(
    help="LoRA targets: all-linear, attention, or qv (peft's default for llama).")]
PrecOpt = Annotated[str, typer.Option(
    help="bf16-mixed (bf16 weights, fp32 master + moments: DeepSpeed/FSDP), bf16-amp "
         "(torch.autocast over fp32 weights: HF Trainer bf16=True), bf16 (all bf16), "
         "fp16-mixed, fp16-amp, fp16, fp32.")]
OptimOpt = Annotated[str, typer.Option(help="adamw, adamw-8bit, sgd, sgd-momentum.")]
OptimImplOpt = Annotated[str, typer.Option(
    help="foreach (torch's default), fused (fused=True, bitsandbytes), per-parameter.")]
SeqOpt = Annotated[int, typer.Option(help="Sequence length in tokens.")]
CkptOpt = Annotated[bool, typer.Option(
    "--checkpointing/--no-checkpointing", help="Gradient (activation) checkpointing.")]
FlashOpt = Annotated[bool, typer.Option(
    "--flash/--no-flash", help="Flash attention (no S x S score matrix kept).")]
ZeroOpt = Annotated[int, typer.Option(help="ZeRO stage 0-3 (3 = FSDP full shard).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
LedgerOpt = Annotated[str | None, typer.Option(
    help="Ledger of measurements (default: $GPUHOURS_LEDGER or ./.gpuhours/ledger.sqlite).")]
CalibrateOpt = Annotated[bool, typer.Option(
    "--calibrate/--no-calibrate",
    help="Use the measured efficiency of a matching benchmark in the ledger, when there is one.")]


def _training(arch: Any, method: str, precision: str, optimizer: str, optimizer_impl: str,
              batch: int, seq: int, grad_accum: int, checkpointing: bool, flash: bool,
              lora_rank: int, lora_targets: str, zero: int) -> Any:
    from gpuhours.estimate.workload import Training

    return Training.model_validate(dict(
        arch=arch, method=method, precision=precision, optimizer=optimizer,
        optimizer_impl=optimizer_impl, micro_batch=batch,
        seq_len=seq, grad_accum=grad_accum, checkpointing=checkpointing, flash_attention=flash,
        lora_rank=lora_rank, lora_targets=lora_targets, zero_stage=zero))


@app.command()
@user_errors
def estimate(
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    gpus: GpusOpt = 1,
    method: MethodOpt = "full",
    batch: Annotated[int, typer.Option(help="Micro-batch per GPU, in sequences.")] = 1,
    seq: SeqOpt = 2048,
    grad_accum: Annotated[int, typer.Option(help="Gradient accumulation steps.")] = 1,
    checkpointing: CkptOpt = False,
    precision: PrecOpt = "bf16-mixed",
    optimizer: OptimOpt = "adamw",
    optimizer_impl: OptimImplOpt = "foreach",
    lora_rank: RankOpt = 16,
    lora_targets: TargetsOpt = "all-linear",
    zero: ZeroOpt = 0,
    flash: FlashOpt = True,
    tokens: Annotated[float | None, typer.Option(help="Tokens to train on, e.g. 2e12.")] = None,
    steps: Annotated[float | None, typer.Option(help="Optimizer steps to run.")] = None,
    examples: Annotated[float | None, typer.Option(help="Dataset size in examples.")] = None,
    epochs: Annotated[float | None, typer.Option(help="Epochs over --examples.")] = None,
    gpus_per_node: PerNodeOpt = 8,
    inter_node_gbps: NetOpt = 25.0,
    params: ParamsOpt = None,
    hidden_size: HiddenOpt = None,
    layers: LayersOpt = None,
    vocab: VocabOpt = None,
    peak_tflops: PeakOpt = None,
    memory_gb: MemGbOpt = None,
    bandwidth_gbps: BwOpt = None,
    ignore_memory: Annotated[bool, typer.Option(
        "--ignore-memory", help="Report the estimate even when it does not fit in memory.")
    ] = False,
    ledger: LedgerOpt = None,
    calibrate: CalibrateOpt = True,
    as_json: JsonOpt = False,
) -> None:
    """Memory, step time, throughput, GPU hours and cost of one training setup.

    With a ledger of measurements (gpuhours bench), the assumed efficiency is replaced by the
    measured one of the nearest matching benchmark, and the output says which.

    Exits with code 2 when the setup does not fit in the GPU's memory (see `gpuhours fit`),
    unless --ignore-memory is given."""
    from gpuhours import catalog
    from gpuhours.estimate.estimator import estimate_training
    from gpuhours.estimate.workload import Hardware
    from gpuhours.report.units import gib
    from gpuhours.resolve import (
        calibration_for,
        gpu_or_measured,
        open_ledger,
        resolve_gpu,
        resolve_model,
    )

    arch, basis = resolve_model(model, params, hidden_size, layers, vocab)
    book = open_ledger(ledger) if calibrate else None
    if gpu is not None and peak_tflops is None and memory_gb is None and bandwidth_gbps is None:
        spec = gpu_or_measured(gpu, book)
    else:
        spec = resolve_gpu(gpu, peak_tflops, memory_gb, bandwidth_gbps)
    t = _training(arch, method, precision, optimizer, optimizer_impl, batch, seq, grad_accum,
                  checkpointing, flash, lora_rank, lora_targets, zero)
    hw = Hardware(gpu=spec, num_gpus=gpus, gpus_per_node=gpus_per_node,
                  inter_node_gbps_per_gpu=inter_node_gbps)
    prices = catalog.prices(spec.name) if spec.name in {g.name for g in catalog.gpus()} else []
    cal = calibration_for(book, hw, t)
    e = estimate_training(t, hw, basis, tokens=tokens, steps=steps, examples=examples,
                          epochs=epochs, price_rows=prices,
                          **(cal.estimator_kwargs() if cal else {}))
    if not e.memory.fits and not ignore_memory:
        raise InputError(
            "--batch", f"micro-batch {batch} x seq {seq} needs {gib(e.memory.total_bytes.value)} "
                       f"per GPU ({e.memory.peak_phase}); {spec.name} has "
                       f"{gib(e.memory.device_bytes.value)}.",
            "Run `gpuhours fit` with the same options for what fits, or pass --ignore-memory "
            "to see this estimate anyway.")
    if as_json:
        _emit_json(e)
    else:
        from gpuhours.report.terminal import render_training

        render_training(e, out)


@app.command()
@user_errors
def fit(
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    gpus: GpusOpt = 1,
    method: MethodOpt = "full",
    seq: SeqOpt = 2048,
    batch: Annotated[int, typer.Option(help="Micro-batch to check first.")] = 1,
    effective_batch: Annotated[int | None, typer.Option(
        help="Target effective batch (sequences per optimizer step, all GPUs).")] = None,
    headroom: Annotated[float | None, typer.Option(
        help="Fraction of device memory to leave free (default 0.10).")] = None,
    checkpointing: CkptOpt = False,
    precision: PrecOpt = "bf16-mixed",
    optimizer: OptimOpt = "adamw",
    optimizer_impl: OptimImplOpt = "foreach",
    lora_rank: RankOpt = 16,
    lora_targets: TargetsOpt = "all-linear",
    zero: ZeroOpt = 0,
    flash: FlashOpt = True,
    gpus_per_node: PerNodeOpt = 8,
    inter_node_gbps: NetOpt = 25.0,
    params: ParamsOpt = None,
    peak_tflops: PeakOpt = None,
    memory_gb: MemGbOpt = None,
    bandwidth_gbps: BwOpt = None,
    trace: Annotated[bool, typer.Option(
        "--trace", help="Confirm the answer with a trace of the real model on fake tensors "
                        "(gpuhours trace; needs the bench extra).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Does it fit? The largest micro-batch, the accumulation for an effective batch, the fastest
    configuration that fits, and what would fit when nothing does."""
    from gpuhours import catalog
    from gpuhours.estimate.fit import fit as fit_search
    from gpuhours.estimate.workload import Hardware
    from gpuhours.resolve import resolve_gpu, resolve_model

    if headroom is not None and not 0 <= headroom < 1:
        raise InputError("--headroom", f"expected a fraction in [0, 1), got {headroom!r}.")
    if effective_batch is not None and effective_batch < 1:
        raise InputError("--effective-batch", f"expected a positive integer, got "
                                              f"{effective_batch!r}.")
    arch, _ = resolve_model(model, params)
    spec = resolve_gpu(gpu, peak_tflops, memory_gb, bandwidth_gbps)
    t = _training(arch, method, precision, optimizer, optimizer_impl, batch, seq, 1,
                  checkpointing, flash, lora_rank, lora_targets, zero)
    hw = Hardware(gpu=spec, num_gpus=gpus, gpus_per_node=gpus_per_node,
                  inter_node_gbps_per_gpu=inter_node_gbps)
    result = fit_search(t, hw, effective_batch=effective_batch, headroom=headroom,
                        bigger_gpus=catalog.gpus())
    confirmation = None
    if trace:
        if model is None:
            raise InputError("--trace", "a trace needs --model (a catalog name or a config.json),"
                                        " not --params.")
        from gpuhours.trace import confirm_fit

        chosen = t.model_copy(update={"micro_batch": result.largest_micro_batch or batch})
        confirmation = confirm_fit(model, chosen, spec, result.headroom_fraction)
    if as_json:
        _emit_json(result if confirmation is None else
                   {"fit": result.model_dump(mode="json"),
                    "trace": confirmation.model_dump(mode="json")})
    else:
        from gpuhours.report.terminal import render_fit

        render_fit(result, out)
        if confirmation is not None:
            from gpuhours.trace.render import render_confirmation

            render_confirmation(confirmation, out)
    if result.largest_micro_batch is None:
        raise typer.Exit(code=1)


@app.command()
@user_errors
def generation(
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    prompt_tokens: Annotated[int, typer.Option(help="Prompt length, tokens.")] = 512,
    output_tokens: Annotated[int, typer.Option(help="Generated tokens per sequence.")] = 512,
    batch: Annotated[int | None, typer.Option(
        help="Concurrent sequences (default: as many as fit).")] = None,
    sequences: Annotated[float | None, typer.Option(
        help="Sequences to generate in all, for GPU hours and cost.")] = None,
    engine: Annotated[str, typer.Option(help="vllm or hf-generate.")] = "vllm",
    params: ParamsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Prefill and decode time, KV cache, batch limited by memory: RL rollouts, evaluation."""
    from gpuhours.estimate.generation import estimate_generation
    from gpuhours.estimate.workload import Generation
    from gpuhours.report.units import gib, seconds
    from gpuhours.resolve import resolve_gpu, resolve_model

    arch, basis = resolve_model(model, params)
    spec = resolve_gpu(gpu)
    if sequences is not None and not sequences > 0:
        raise InputError("--sequences", f"expected a positive number, got {sequences!r}.")
    g = Generation.model_validate(dict(arch=arch, prompt_tokens=prompt_tokens,
                                       output_tokens=output_tokens, batch=batch, engine=engine))
    e = estimate_generation(g, spec)
    gpu_hours = None if sequences is None else sequences / e.sequences_per_s / 3600
    data = {**e.__dict__, "batch_time_s": e.batch_time_s, "model": arch.name,
            "model_basis": basis, "gpu": spec.name, "gpu_hours": gpu_hours,
            "basis": "formula: roofline per decode step (estimate/generation.py) with assumed "
                     f"engine efficiency for {engine}"}
    if as_json:
        _emit_json(data)
        return
    out.print(f"[bold]{arch.name}[/bold] generating on one [bold]{spec.name}[/bold] ({engine})")
    out.print(f"  batch {e.batch} sequences (at most {e.max_batch_by_memory} fit); weights "
              f"{gib(e.weights_bytes)}, KV cache {gib(e.kv_cache_bytes)}")
    decode = "no decode (--output-tokens 0)" if output_tokens == 0 else (
        f"decode {seconds(e.decode_s)} ({e.decode_bound}-bound, "
        f"{seconds(e.decode_step_s_first)} to {seconds(e.decode_step_s_last)} per step)")
    out.print(f"  prefill {seconds(e.prefill_s)} (compute-bound), {decode}")
    out.print(f"  {e.output_tokens_per_s:,.0f} output tokens/s, {e.sequences_per_s:,.2f} "
              f"sequences/s")
    if gpu_hours is not None:
        out.print(f"  [bold]{gpu_hours:,.1f} GPU hours[/bold] for {sequences:,.0f} sequences")
    out.print(f"[dim]{data['basis']}[/dim]")


@app.command()
@user_errors
def plan(
    plan_file: Annotated[str | None, typer.Argument(
        metavar="PLAN.yaml", help="The project's plan file.")] = None,
    out_path: Annotated[str | None, typer.Option(
        "--out", help="Where to write the living document (default: COMPUTE_BUDGET.md next to "
                      "the plan).")] = None,
    no_doc: Annotated[bool, typer.Option("--no-doc", help="Do not write the document.")] = False,
    schema: Annotated[bool, typer.Option("--schema", help="Print the plan's JSON Schema.")
                      ] = False,
    ledger: LedgerOpt = None,
    calibrate: CalibrateOpt = True,
    as_json: JsonOpt = False,
) -> None:
    """A project's compute budget, phase by phase, and its living document COMPUTE_BUDGET.md.

    Training phases use the measured efficiency of a matching benchmark in the ledger when
    there is one (their basis then says "measured" and names the ledger row)."""
    from pathlib import Path

    from gpuhours.plan.budget import evaluate
    from gpuhours.plan.load import load_plan
    from gpuhours.plan.schema import Plan

    if schema:
        _emit_json(Plan.model_json_schema())
        return
    if plan_file is None:
        raise InputError("PLAN.yaml", "a plan file is required (or --schema).",
                         "See examples/pixelis.yaml.")
    from gpuhours.resolve import open_ledger

    budget = evaluate(load_plan(plan_file), ledger=open_ledger(ledger) if calibrate else None)
    doc = None
    if not no_doc:
        from gpuhours.report.living_doc import update_living_document

        target = Path(out_path) if out_path else Path(plan_file).parent / "COMPUTE_BUDGET.md"
        doc = update_living_document(budget, target, plan_file)
    if as_json:
        data = budget.model_dump(mode="json")
        if doc is not None:
            data["document"] = {"path": str(doc.path), "version": doc.version,
                                "changes": doc.changes, "written": doc.written}
        _emit_json(data)
        return
    from gpuhours.report.budget_terminal import render_budget

    render_budget(budget, out)
    if doc is not None:
        if doc.written:
            what = "; ".join(doc.changes)
            out.print(f"Wrote {doc.path} (version {doc.version}: {what}).")
        else:
            out.print(f"{doc.path} is current (version {doc.version}); nothing changed.")


@catalog_app.command("gpus")
@user_errors
def catalog_gpus(as_json: JsonOpt = False) -> None:
    """Accelerators: memory, bandwidth, dense TFLOPS, TDP, interconnect, source."""
    from rich.table import Table

    from gpuhours import catalog

    rows = catalog.gpus()
    if as_json:
        _emit_json([r.model_dump(mode="json") for r in rows])
        return
    t = Table(title="Accelerators (dense TFLOPS, no sparsity; GB = 10^9 bytes)")
    for col in ("name", "aliases", "memory GB", "GB/s", "bf16", "fp16", "fp32", "TDP W",
                "link", "as of"):
        t.add_column(col)
    for g in rows:
        tf = g.dense_tflops
        t.add_row(g.name, ", ".join(g.aliases[:3]), f"{g.memory_gb:g}", f"{g.memory_bw_gbps:g}",
                  *(f"{v:g}" if v else "-" for v in (tf.bf16, tf.fp16, tf.fp32)),
                  f"{g.tdp_w:g}" if g.tdp_w else "-",
                  f"{g.interconnect} {g.interconnect_gbps or '-'}", g.as_of.isoformat())
    out.print(t)


@catalog_app.command("models")
@user_errors
def catalog_models(as_json: JsonOpt = False) -> None:
    """Model architectures: parameter counts computed from the config and as published."""
    from rich.table import Table

    from gpuhours import catalog
    from gpuhours.estimate.params import count_params
    from gpuhours.resolve import resolve_model

    rows = []
    for entry in catalog.models():
        arch, _ = resolve_model(entry.name)
        rows.append((entry, arch, count_params(arch).total))
    if as_json:
        _emit_json([{**e.model_dump(mode="json"), "computed_params": n,
                     "hidden_size": a.hidden_size, "num_layers": a.num_layers,
                     "vocab_size": a.vocab_size} for e, a, n in rows])
        return
    t = Table(title="Model architectures")
    for col in ("name", "hf id", "params (computed)", "published", "layers", "d", "heads/kv",
                "vocab", "experts"):
        t.add_column(col)
    for e, a, n in rows:
        t.add_row(e.name, e.hf_id, f"{n / 1e9:.3f} B", f"{e.published_params / 1e9:.3f} B",
                  str(a.num_layers), str(a.hidden_size), f"{a.num_heads}/{a.num_kv_heads}",
                  str(a.vocab_size),
                  f"{a.experts_per_token}/{a.num_experts}" if a.is_moe else "-")
    out.print(t)


@catalog_app.command("prices")
@user_errors
def catalog_prices(
    gpu: Annotated[str | None, typer.Option("--gpu", "-g", help="Only this GPU.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Prices per GPU-hour, on-demand and spot, with the date each was read."""
    from rich.table import Table

    from gpuhours import catalog
    from gpuhours.report.units import usd

    name = catalog.gpu(gpu).name if gpu else None
    rows = catalog.prices(name)
    if as_json:
        _emit_json([r.model_dump(mode="json") for r in rows])
        return
    t = Table(title="Prices per GPU-hour (instance price / GPUs; refresh before you rely on "
                    "them)")
    for col in ("gpu", "provider", "kind", "instance", "on-demand", "spot", "as of"):
        t.add_column(col)
    for r in rows:
        t.add_row(r.gpu, r.provider, r.provider_kind, r.instance,
                  usd(r.on_demand_usd_per_gpu_hour), usd(r.spot_usd_per_gpu_hour),
                  r.as_of.isoformat())
    out.print(t)


def _register_capabilities() -> None:
    """Commands of trace, bench, storage and doctor live beside their libraries."""
    from gpuhours.bench.cli import register as register_bench
    from gpuhours.doctor.cli import register as register_doctor
    from gpuhours.storage.cli import register as register_storage
    from gpuhours.trace.cli import register as register_trace

    for register in (register_trace, register_bench, register_storage, register_doctor):
        register(app)


_register_capabilities()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
