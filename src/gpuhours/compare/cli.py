"""The `gpuhours compare` command: parse, call gpuhours.compare.rank, print. Registered lazily
on the main app by gpuhours.cli (LAZY_COMMANDS); no torch, and nothing heavy at import."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from gpuhours.cli_common import (
    AccumOpt,
    BatchOpt,
    CkptOpt,
    EpochsOpt,
    ExamplesOpt,
    FlashOpt,
    JsonOpt,
    LossKernelOpt,
    MethodOpt,
    ModelOpt,
    NetOpt,
    OptimImplOpt,
    OptimOpt,
    PackedOpt,
    ParamsOpt,
    PerExampleOpt,
    PerNodeOpt,
    PrecOpt,
    RankOpt,
    SeqOpt,
    TargetsOpt,
    TokensOpt,
    ZeroOpt,
    count_option,
    defaults_of,
)
from gpuhours.setup import Hardware, Training

if TYPE_CHECKING:
    from gpuhours.catalog.schema import GpuSpec

TRAINING = defaults_of(Training)
HARDWARE = defaults_of(Hardware)

GpuListOpt = Annotated[str | None, typer.Option(
    "--gpu", "-g", help="GPUs to compare, comma-separated catalog names (default: every "
                        "catalog GPU).")]
CountsOpt = Annotated[str, typer.Option(
    "--gpus", help="GPU counts to compare, comma-separated (data parallel).")]
ProviderOpt = Annotated[str | None, typer.Option(
    help="Only these providers, comma-separated (aws, gcp, lambda...; 'given' for "
         "--usd-per-gpu-hour).")]
PriceOpt = Annotated[float | None, typer.Option(
    help="Your own price in USD per GPU-hour, billed per GPU used: added as provider 'given'.")]
ByOpt = Annotated[str, typer.Option(help="Rank by usd (dollars) or wall (wall clock).")]
TopOpt = Annotated[int, typer.Option(help="Rows to show.")]
CompareStepsOpt = Annotated[float | None, typer.Option(
    parser=count_option, metavar="COUNT",
    help="Optimizer steps to run (with a single --gpus count), e.g. 5000 or 5k.")]


def register(app: typer.Typer) -> None:
    """Add the `compare` command to `app`."""
    from gpuhours.cli_common import user_errors
    from gpuhours.compare.rank import DEFAULT_COUNTS

    default_counts = ",".join(str(n) for n in DEFAULT_COUNTS)

    @app.command()
    @user_errors
    def compare(
        ctx: typer.Context,
        model: ModelOpt = None,
        gpu: GpuListOpt = None,
        gpus: CountsOpt = default_counts,
        provider: ProviderOpt = None,
        usd_per_gpu_hour: PriceOpt = None,
        by: ByOpt = "usd",
        top: TopOpt = 15,
        tokens: TokensOpt = None,
        steps: CompareStepsOpt = None,
        examples: ExamplesOpt = None,
        epochs: EpochsOpt = None,
        tokens_per_example: PerExampleOpt = None,
        packed: PackedOpt = False,
        method: MethodOpt = TRAINING.method,
        batch: BatchOpt = TRAINING.micro_batch,
        seq: SeqOpt = TRAINING.seq_len,
        grad_accum: AccumOpt = TRAINING.grad_accum,
        checkpointing: CkptOpt = TRAINING.checkpointing,
        precision: PrecOpt = TRAINING.precision,
        optimizer: OptimOpt = TRAINING.optimizer,
        optimizer_impl: OptimImplOpt = TRAINING.optimizer_impl,
        lora_rank: RankOpt = TRAINING.lora_rank,
        lora_targets: TargetsOpt = TRAINING.lora_targets,
        zero: ZeroOpt = TRAINING.zero_stage,
        flash: FlashOpt = TRAINING.flash_attention,
        loss_kernel: LossKernelOpt = TRAINING.loss_kernel,
        params: ParamsOpt = None,
        gpus_per_node: PerNodeOpt = HARDWARE.gpus_per_node,
        inter_node_gb_per_s_one_way: NetOpt = HARDWARE.inter_node_gb_per_s_one_way,
        as_json: JsonOpt = False,
    ) -> None:
        """One job's cost across GPUs, GPU counts, providers and on-demand/spot, ranked.

        You pay whole instances: one GPU where only 8-GPU instances are sold pays for 8.

        Setups that do not fit in memory are left out, and counted.

        Doubtful price rows are flagged: spot = on-demand, read over a year ago.

        Exit code 1 when nothing fits; 2 is bad input."""
        from gpuhours.cli_common import emit_json, out
        from gpuhours.compare.rank import (
            Amount,
            candidate_prices,
            compare_training,
            parse_counts,
            parse_names,
        )
        from gpuhours.errors import DOES_NOT_FIT_EXIT_CODE

        training = Training.model_validate(dict(
            model=model, params=params, method=method, precision=precision,
            optimizer=optimizer, optimizer_impl=optimizer_impl, micro_batch=batch,
            seq_len=seq, grad_accum=grad_accum, checkpointing=checkpointing,
            flash_attention=flash, lora_rank=lora_rank, lora_targets=lora_targets,
            zero_stage=zero, loss_kernel=loss_kernel))
        from gpuhours.cli_common import refuse_lora_options_on_full

        refuse_lora_options_on_full(ctx, training.method)
        specs = _gpus(parse_names(gpu) if gpu is not None else None)
        counts = parse_counts(gpus)
        rows = candidate_prices(specs, counts,
                                parse_names(provider, "provider") if provider else None,
                                usd_per_gpu_hour)
        amount = Amount(tokens=tokens, steps=steps, examples=examples, epochs=epochs,
                        tokens_per_example=tokens_per_example, packed=packed)
        # the setup left open (as `gpuhours estimate` reads it): chosen on each GPU and count
        def chosen_by_user(option: str) -> bool:
            source = ctx.get_parameter_source(option)
            return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")

        given = {f: chosen_by_user(p) for f, p in (
            ("micro_batch", "batch"), ("checkpointing", "checkpointing"),
            ("zero_stage", "zero"), ("grad_accum", "grad_accum"))}
        keep = ([f for f in ("micro_batch", "checkpointing", "zero_stage") if given[f]]
                if not given["grad_accum"] and not all(
                    given[f] for f in ("micro_batch", "checkpointing", "zero_stage"))
                else None)
        result = compare_training(training, specs, counts, rows, amount, by=by, top=top,
                                  gpus_per_node=gpus_per_node,
                                  inter_node_gb_per_s_one_way=inter_node_gb_per_s_one_way,
                                  keep=keep)
        if as_json:
            emit_json(result)
        else:
            from gpuhours.compare.render import render_comparison

            render_comparison(result, out)
        if not result.estimates and any(x.reason == "does not fit" for x in result.excluded):
            raise typer.Exit(code=DOES_NOT_FIT_EXIT_CODE)


def _gpus(names: list[str] | None) -> list[GpuSpec]:
    """Catalog GPUs by name (unknown names are errors keyed by --gpu), or all of them."""
    from gpuhours import catalog
    from gpuhours.resolve import GPU_HINT_PRICED, catalog_gpu

    if names is None:
        return catalog.gpus()
    specs: list[GpuSpec] = []
    for name in names:
        spec = catalog_gpu(name, field="gpu", hint=GPU_HINT_PRICED)
        if spec not in specs:
            specs.append(spec)
    return specs
