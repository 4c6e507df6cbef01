"""The `gpuhours` command: parse, build the input, call the library, render, set the exit code.

No arithmetic here. Bad input (gpuhours.errors.InputError, or a pydantic validation error of the
inputs) becomes a one-paragraph message and exit code 2, never a traceback.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
import typer.main
from typer.core import TyperGroup

from gpuhours.cli_common import (
    AccumOpt,
    ActivationOffloadOpt,
    AdapterDtypeOpt,
    BaseQuantOpt,
    BatchOpt,
    BnbSavedInputOpt,
    CheckpointOffloadOpt,
    CkptOpt,
    CompileOpt,
    CudaGraphScopeOpt,
    DocumentTokensOpt,
    DoraBaseOpt,
    DoraOpt,
    DsBucketOpt,
    DsOverlapOpt,
    DsPipeEngineOpt,
    EagerAttentionOpt,
    EpochsOpt,
    ExamplesOpt,
    FlashOpt,
    Fp8ParamsOpt,
    FsdpAdapterUnitsOpt,
    FsdpApiOpt,
    FsdpEmbeddingUnitsOpt,
    FsdpGradAccumOpt,
    FusedOpt,
    GpuOpt,
    GradReduceFp32Opt,
    HeadWeightCastOpt,
    HeldKvCacheOpt,
    HeldLogitsOpt,
    Ia3TargetsOpt,
    JsonOpt,
    KbitUpcastOpt,
    KernelsOpt,
    KvRepeatedOpt,
    LaunchBlockingOpt,
    LedgerOpt,
    LigerKernelsOpt,
    LmHead4bitOpt,
    LmHeadOpt,
    LoadPathOpt,
    LokrFactorOpt,
    LongSamplesOpt,
    LoraBranchOpt,
    LoraDropoutOpt,
    LossKernelOpt,
    MethodOpt,
    ModelOpt,
    MoeDispatchOpt,
    MoeFusedMlpOpt,
    MoeRouterDtypeOpt,
    NetOpt,
    NodeOpt,
    OffloadCopiesOpt,
    OffloadOpt,
    OptimImplOpt,
    OptimInBackwardOpt,
    OptimizerPagedOpt,
    OptimOpt,
    PackedOpt,
    PaddingMaskOpt,
    ParamsOpt,
    PeftMethodOpt,
    PerExampleOpt,
    PerNodeOpt,
    PrecOpt,
    RankOpt,
    RecomputeModulesOpt,
    SeqMeanOpt,
    SeqOpt,
    SeqStdOpt,
    StepsOpt,
    TargetsOpt,
    TokensOpt,
    TrainEmbOpt,
    VirtualTokensOpt,
    WideOpt,
    Zero3EngineOpt,
    ZeroOpt,
    console_for,
    count_option,
    defaults_of,
    emit_json,
    refuse_lora_options_on_full,
    user_errors,
)
from gpuhours.errors import DOES_NOT_FIT_EXIT_CODE, DoesNotFit, FieldError, InputError
from gpuhours.setup import Generation, Hardware, Training

#: commands that live beside their libraries (trace, bench, storage, doctor): their modules are
#: imported only when the command runs or help lists them, so `gpuhours estimate` loads none
LAZY_COMMANDS: dict[str, str] = {
    "trace": "gpuhours.trace.cli", "bench": "gpuhours.bench.cli",
    "bench-data": "gpuhours.bench.cli", "ledger": "gpuhours.bench.cli",
    "storage": "gpuhours.storage.cli", "doctor": "gpuhours.doctor.cli",
    "compare": "gpuhours.compare.cli", "export": "gpuhours.track.export_cli",
    "report": "gpuhours.report.cli",
}


class _LazyGroup(TyperGroup):
    """The top-level group: built-in commands as usual, LAZY_COMMANDS loaded on first use."""

    def list_commands(self, ctx: Any) -> list[str]:
        return [*super().list_commands(ctx), *(n for n in LAZY_COMMANDS
                                                if n not in self.commands)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name in LAZY_COMMANDS and cmd_name not in self.commands:
            import importlib

            module = importlib.import_module(LAZY_COMMANDS[cmd_name])
            holder = typer.Typer(rich_markup_mode=None)
            module.register(holder)
            for name, command in typer.main.get_group(holder).commands.items():
                self.add_command(command, name)
        return super().get_command(ctx, cmd_name)


_APP_SETTINGS: dict[str, Any] = dict(
    cls=_LazyGroup,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # click's plain help: Rich's option tables cut long option names (--images-per-exa…) at
    # 80 columns, the width when piped; click's wraps the help text and keeps every name whole
    rich_markup_mode=None,
    help="Predict memory, time and cost of ML training from physics; check it; track it.",
)
app = typer.Typer(**_APP_SETTINGS)
catalog_app = typer.Typer(no_args_is_help=True, help="List the catalogs: gpus, nodes, models, prices.")
app.add_typer(catalog_app, name="catalog")


def _print_version(value: bool) -> None:
    """--version: the installed package's version, from its metadata (nothing heavy imported)."""
    if value:
        from importlib.metadata import version

        typer.echo(f"gpuhours {version('gpuhours')}")
        raise typer.Exit()


@app.callback()
def _top(version: Annotated[bool, typer.Option(
        "--version", is_eager=True, callback=_print_version,
        help="Print the version and exit.")] = False) -> None:
    # no docstring: the group's help stays the one given to typer.Typer above
    pass


TRAINING = defaults_of(Training)
HARDWARE = defaults_of(Hardware)
GENERATION = defaults_of(Generation)


# Options shared by estimate and fit ------------------------------------------------------------
HiddenOpt = Annotated[int | None, typer.Option(help="With --params: hidden size.")]
LayersOpt = Annotated[int | None, typer.Option(help="With --params: number of layers.")]
VocabOpt = Annotated[int | None, typer.Option(help="With --params: vocabulary size.")]
GpusOpt = Annotated[int, typer.Option(help="Number of GPUs in all: tp x pp x cp x data-parallel "
                                         "ranks (expert parallelism within them).")]
PeakOpt = Annotated[float | None, typer.Option(
    help="Dense bf16/fp16 peak TFLOPS, to override the catalog or describe your own GPU (at "
         "most 10x the catalog's largest).")]
MemGbOpt = Annotated[float | None, typer.Option(
    help="Device memory in GB (10^9 bytes; at most 10x the catalog's largest).")]
BwOpt = Annotated[float | None, typer.Option(
    help="Memory bandwidth in GB/s (at most 10x the catalog's largest).")]
UsdOpt = Annotated[float | None, typer.Option(
    "--usd-per-gpu-hour", help="Your own price, USD per GPU-hour: costed first (provider "
    "'given') beside the catalog's prices.")]
HostOpt = Annotated[float | None, typer.Option(
    "--host-us-per-op", help="Host (CPU) microseconds per eager device operator (default: "
    "32, measured on one H100 VM host; a faster host is faster). Small micro-batches are "
    "bound by it.")]
InterruptOpt = Annotated[float | None, typer.Option(
    "--interruptions-per-gpu-hour", help="Job interruptions per GPU-hour (0 to 1), for "
    "the expected downtime of the run (restarts, lost work, checkpoint writes); default "
    "1.97e-5, the Llama 3 paper's 16K-H100 run; 0 leaves downtime out.")]
PcieLanesOpt = Annotated[int | None, typer.Option(
    "--pcie-lanes", help="PCIe lanes per GPU where fewer than 16 (1, 2, 4 or 8: a consumer "
    "board splitting 16 CPU lanes x8/x8 between two cards): GPU-to-GPU and host links at "
    "lanes/16 of the catalog's x16 figures.")]
TpOpt = Annotated[int, typer.Option(
    "--tp", help="Tensor parallelism (with sequence parallelism, Megatron-LM): GPUs each layer "
    "is split over, within a node; it must divide the heads, KV heads and MLP width. Left out "
    "(with --pp/--cp/--ep): chosen when the setup is.")]
PpOpt = Annotated[int, typer.Option(
    "--pp", help="Pipeline stages (1F1B; --grad-accum is the micro-batches per step).")]
CpOpt = Annotated[int, typer.Option(
    "--cp", help="Context parallelism: GPUs the sequence is split over (ring attention).")]
EpOpt = Annotated[int, typer.Option(
    "--ep", help="Expert parallelism (MoE): GPUs the experts are split over (all-to-all).")]
VirtualOpt = Annotated[int, typer.Option(
    "--virtual-stages", help="Model chunks per pipeline stage (interleaved schedule).")]
TpOverlapOpt = Annotated[bool, typer.Option(
    "--tp-comm-overlap/--no-tp-comm-overlap", help="Tensor-parallel collectives pipelined "
    "with their GEMMs (Megatron-Core --tp-comm-overlap, Transformer Engine; Hopper or later). "
    "Left out with the layout: chosen when the setup is.")]
A2aOverlapOpt = Annotated[bool, typer.Option(
    "--moe-a2a-overlap/--no-moe-a2a-overlap", help="MoE: the expert all-to-all hidden behind "
    "another micro-batch's compute (Megatron-Core --overlap-moe-expert-parallel-comm; "
    "DeepSeek's DualPipe). Left out with the layout: chosen when the setup is.")]
CalibrateOpt = Annotated[bool, typer.Option(
    "--calibrate/--no-calibrate",
    help="Use the measured efficiency of a matching benchmark in the ledger, when there is one.")]
PlanCalibrateOpt = Annotated[bool, typer.Option(
    "--calibrate/--no-calibrate",
    help="Use the ledger: the measured efficiency of a matching benchmark, and the tracked "
         "runs' actuals (--no-calibrate leaves both out: the document shows no actuals that "
         "run, and records no version for their absence).")]


def _training(model: str | None, params: float | None, hidden_size: int | None = None,
              layers: int | None = None, vocab: int | None = None, **choices: object
              ) -> Training:
    """The Training of the options: the model read from --model or --params, the choices."""
    from gpuhours.resolve import resolve_model

    arch, basis = resolve_model(model, params, hidden_size, layers, vocab)
    return Training.model_validate(dict(arch=arch, model=model, model_basis=basis, **choices))


def _not_given(ctx: typer.Context, option: str) -> bool:
    """The option took its default: the user did not choose it (typer's own click enum)."""
    source = ctx.get_parameter_source(option)
    return source is None or source.name in ("DEFAULT", "DEFAULT_MAP")


#: estimate's parameter of each field a setup file (--from) may fill
_PARAM_OF_FIELD = {
    "model": "model", "method": "method", "precision": "precision", "optimizer": "optimizer",
    "optimizer_impl": "optimizer_impl", "micro_batch": "batch", "seq_len": "seq",
    "grad_accum": "grad_accum", "checkpointing": "checkpointing", "flash_attention": "flash",
    "eager_attention": "eager_attention",
    "fused_attention": "fused", "compile": "torch_compile", "kernels": "kernels",
    "moe_dispatch": "moe_dispatch", "moe_router_dtype": "moe_router_dtype",
    "moe_fused_mlp": "moe_fused_mlp", "grad_reduce_in_fp32": "grad_reduce_in_fp32",
    "recompute_modules": "recompute_modules",
    "cuda_graph_scope": "cuda_graph_scope",
    "kv_repeated": "kv_repeated",
    "optimizer_in_backward": "optimizer_in_backward",
    "optimizer_paged": "optimizer_paged",
    "activation_offload": "activation_offload",
    "liger_kernels": "liger_kernels",
    "checkpoint_offload": "checkpoint_offload",
    "held_logits": "held_logits", "held_kv_cache": "held_kv_cache",
    "padding_mask": "padding_mask",
    "lora_dropout": "lora_dropout", "lora_adapter_dtype": "lora_adapter_dtype",
    "load_path": "load_path",
    "deepspeed_reduce_bucket": "deepspeed_reduce_bucket", "lora_branch": "lora_branch",
    "dora": "dora", "dora_base_matmul": "dora_base_matmul",
    "peft_method": "peft_method", "peft_virtual_tokens": "peft_virtual_tokens",
    "lokr_decompose_factor": "lokr_decompose_factor", "ia3_targets": "ia3_targets",
    "seq_len_mean": "seq_mean", "seq_len_std": "seq_std", "long_samples": "long_samples",
    "document_tokens": "document_tokens",
    "deepspeed_overlap_comm": "deepspeed_overlap_comm", "kbit_upcast": "kbit_upcast",
    "deepspeed_pipe_engine": "deepspeed_pipe_engine",
    "cuda_launch_blocking": "cuda_launch_blocking",
    "offload_copies": "offload_copies",
    "zero3_engine": "zero3_engine", "bnb_saved_input": "bnb_saved_input",
    "fsdp_grad_accum": "fsdp_grad_accum", "fsdp_adapter_units": "fsdp_adapter_units",
    "fsdp_api": "fsdp_api", "fsdp_embedding_units": "fsdp_embedding_units",
    "head_weight_cast": "head_weight_cast",
    "lm_head_4bit": "lm_head_4bit", "fp8_params": "fp8_params",
    "loss_kernel": "loss_kernel", "lora_rank": "lora_rank", "lora_targets": "lora_targets",
    "zero_stage": "zero", "offload": "offload", "num_gpus": "gpus", "steps": "steps", "epochs": "epochs",
    "examples": "examples", "packed": "packed", "base_quant": "base_quant",
    "lora_trainable_embeddings": "lora_trainable_embeddings", "lora_lm_head": "lora_lm_head"}


def _network(ctx: typer.Context, node: str | None, spec: Any, gpus_per_node: int,
             inter_node_gb_per_s: float) -> tuple[int, float, list[str]]:
    """(GPUs per node, network GB/s per GPU one way, the node's line for the assumptions): the
    catalog node type's when --node is given (then neither figure may be given beside it), the
    options' otherwise (no line)."""
    if node is None:
        return gpus_per_node, inter_node_gb_per_s, []
    from gpuhours.catalog import node_for_gpu

    both = [name for name in ("gpus_per_node", "inter_node_gb_per_s_one_way")
            if not _not_given(ctx, name)]
    if both:
        raise FieldError(("node", both[0]), f"--node {node} sets it; give one or the other.")
    n = node_for_gpu(node, spec.name)
    line = (f"network: {n.name}, {n.gpus_per_node} GPUs per node, {n.within_node}; "
            f"{n.network} = {n.inter_node_gb_per_s_one_way:g} GB/s per GPU one way between "
            f"nodes ({n.source})")
    return n.gpus_per_node, n.inter_node_gb_per_s_one_way, [line]


def _given(ctx: typer.Context, fill: dict[str, Any]) -> dict[str, Any]:
    """Field -> value of each _PARAM_OF_FIELD field the command has an option for: the setup
    file's (`fill`, by field) where it gives one, else the option's. A field a command has no
    option for (fit's grad_accum, steps) is left out: the command reads it from `fill`."""
    return {f: fill.get(f, ctx.params[p]) for f, p in _PARAM_OF_FIELD.items() if p in ctx.params}


def _given_overlaps(ctx: typer.Context) -> tuple[str, ...]:
    """The overlap options the user gave (either way): a layout search keeps them as given."""
    return tuple(name for name in ("tp_comm_overlap", "moe_a2a_overlap")
                 if not _not_given(ctx, name))


def _training_fields(given: dict[str, Any]) -> dict[str, Any]:
    """The fields of `given` that are Training's (model, method, micro_batch, ...)."""
    return {f: v for f, v in given.items() if f in Training.model_fields}


def _global_batch_within_work(global_batch: int, t: Training, amount: dict[str, Any]) -> None:
    """Refuse a --global-batch whose one optimizer step holds more than the whole work asked
    (--tokens, or --examples x --epochs, packed or padded): the run would be a single step of
    more work than asked (issue 16: 10,000,000 sequences of 4,096 tokens for 1e9 tokens made
    one step of 41 G tokens, 41x the work, unsaid). A number of --steps is the work in steps:
    nothing to compare."""
    seq = t.llm_seq_len  # the tokens one sequence of the step holds (estimator's tokens/step)
    epochs = amount["epochs"] if amount["epochs"] is not None else 1.0
    if amount["tokens"] is not None:
        work, what = amount["tokens"], f"{amount['tokens']:.4g} tokens (--tokens)"
    elif amount["examples"] is not None and amount["packed"]:
        per = amount["tokens_per_example"] or t.seq_len
        work = amount["examples"] * epochs * per
        what = (f"{work:.4g} tokens ({amount['examples']:g} packed examples x {epochs:g} "
                f"epochs x {per:g} tokens)")
    elif amount["examples"] is not None:
        work = amount["examples"] * epochs * seq
        what = (f"{amount['examples'] * epochs:.4g} sequences of {seq:,} tokens (--examples "
                f"{amount['examples']:g} x {epochs:g} epochs)")
    else:
        return
    step = global_batch * seq
    if step <= work:
        return
    most = int(work // seq)
    raise FieldError("global_batch", f"{global_batch:,} sequences of {seq:,} tokens are "
                     f"{step:.4g} tokens a step, more than the whole run's {what}: it would be "
                     f"one step of {step / work:,.3g}x the work asked.",
                     (f"Give at most {most:,} sequences" if most >= 1 else
                      "The work is less than one sequence: give more of it")
                     + ", or leave --global-batch out for the default by model size.")


@app.command()
@user_errors
def estimate(
    ctx: typer.Context,
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    gpus: GpusOpt = HARDWARE.num_gpus,
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
    offload: OffloadOpt = TRAINING.offload,
    tp: TpOpt = TRAINING.tp,
    pp: PpOpt = TRAINING.pp,
    cp: CpOpt = TRAINING.cp,
    ep: EpOpt = TRAINING.ep,
    virtual_stages: VirtualOpt = TRAINING.virtual_stages,
    tp_comm_overlap: TpOverlapOpt = TRAINING.tp_comm_overlap,
    moe_a2a_overlap: A2aOverlapOpt = TRAINING.moe_a2a_overlap,
    flash: FlashOpt = TRAINING.flash_attention,
    fused: FusedOpt = TRAINING.fused_attention,
    torch_compile: CompileOpt = TRAINING.compile,
    kv_repeated: KvRepeatedOpt = TRAINING.kv_repeated,
    optimizer_in_backward: OptimInBackwardOpt = TRAINING.optimizer_in_backward,
    optimizer_paged: OptimizerPagedOpt = TRAINING.optimizer_paged,
    activation_offload: ActivationOffloadOpt = TRAINING.activation_offload,
    liger_kernels: LigerKernelsOpt = TRAINING.liger_kernels,
    checkpoint_offload: CheckpointOffloadOpt = TRAINING.checkpoint_offload,
    loss_kernel: LossKernelOpt = TRAINING.loss_kernel,
    kernels: KernelsOpt = TRAINING.kernels,
    moe_dispatch: MoeDispatchOpt = TRAINING.moe_dispatch,
    moe_router_dtype: MoeRouterDtypeOpt = TRAINING.moe_router_dtype,
    moe_fused_mlp: MoeFusedMlpOpt = TRAINING.moe_fused_mlp,
    grad_reduce_in_fp32: GradReduceFp32Opt = TRAINING.grad_reduce_in_fp32,
    recompute_modules: RecomputeModulesOpt = None,
    cuda_graph_scope: CudaGraphScopeOpt = TRAINING.cuda_graph_scope,
    held_logits: HeldLogitsOpt = TRAINING.held_logits,
    eager_attention: EagerAttentionOpt = TRAINING.eager_attention,
    held_kv_cache: HeldKvCacheOpt = TRAINING.held_kv_cache,
    padding_mask: PaddingMaskOpt = TRAINING.padding_mask,
    lora_dropout: LoraDropoutOpt = TRAINING.lora_dropout,
    lora_adapter_dtype: AdapterDtypeOpt = TRAINING.lora_adapter_dtype,
    load_path: LoadPathOpt = TRAINING.load_path,
    lora_branch: LoraBranchOpt = TRAINING.lora_branch,
    dora: DoraOpt = TRAINING.dora,
    dora_base_matmul: DoraBaseOpt = TRAINING.dora_base_matmul,
    peft_method: PeftMethodOpt = TRAINING.peft_method,
    peft_virtual_tokens: VirtualTokensOpt = TRAINING.peft_virtual_tokens,
    lokr_decompose_factor: LokrFactorOpt = TRAINING.lokr_decompose_factor,
    ia3_targets: Ia3TargetsOpt = TRAINING.ia3_targets,
    seq_mean: SeqMeanOpt = TRAINING.seq_len_mean,
    seq_std: SeqStdOpt = TRAINING.seq_len_std,
    long_samples: LongSamplesOpt = TRAINING.long_samples,
    document_tokens: DocumentTokensOpt = TRAINING.document_tokens,
    deepspeed_reduce_bucket: DsBucketOpt = TRAINING.deepspeed_reduce_bucket,
    deepspeed_overlap_comm: DsOverlapOpt = TRAINING.deepspeed_overlap_comm,
    deepspeed_pipe_engine: DsPipeEngineOpt = TRAINING.deepspeed_pipe_engine,
    cuda_launch_blocking: LaunchBlockingOpt = TRAINING.cuda_launch_blocking,
    offload_copies: OffloadCopiesOpt = TRAINING.offload_copies,
    zero3_engine: Zero3EngineOpt = TRAINING.zero3_engine,
    fsdp_grad_accum: FsdpGradAccumOpt = TRAINING.fsdp_grad_accum,
    fsdp_adapter_units: FsdpAdapterUnitsOpt = TRAINING.fsdp_adapter_units,
    fsdp_api: FsdpApiOpt = TRAINING.fsdp_api,
    fsdp_embedding_units: FsdpEmbeddingUnitsOpt = TRAINING.fsdp_embedding_units,
    kbit_upcast: KbitUpcastOpt = TRAINING.kbit_upcast,
    base_quant: BaseQuantOpt = TRAINING.base_quant,
    bnb_saved_input: BnbSavedInputOpt = TRAINING.bnb_saved_input,
    lm_head_4bit: LmHead4bitOpt = TRAINING.lm_head_4bit,
    head_weight_cast: HeadWeightCastOpt = TRAINING.head_weight_cast,
    fp8_params: Fp8ParamsOpt = TRAINING.fp8_params,
    lora_trainable_embeddings: TrainEmbOpt = TRAINING.lora_trainable_embeddings,
    lora_lm_head: LmHeadOpt = TRAINING.lora_lm_head,
    images_per_example: Annotated[int, typer.Option(
        "--images-per-example", min=0, help="Vision-language models: images per example; "
        "their tokens add to --seq's text tokens, their vision-tower forward to the step.")
    ] = TRAINING.images_per_example,
    image_pixels: Annotated[int | None, typer.Option(
        "--image-pixels", min=1, help="Pixels of each image (e.g. 480000; assumed square), "
        "resized as the Qwen2.5-VL processor does: one token per 28 x 28 pixels (LLaVA, "
        "Gemma 3: a fixed 576 or 256).")] = None,
    image_tokens: Annotated[int | None, typer.Option(
        "--image-tokens", min=1, help="Tokens per image, instead of --image-pixels.")] = None,
    image_max_pixels: Annotated[int | None, typer.Option(
        "--image-max-pixels", min=784, help="The processor's max_pixels (default 1,003,520): "
        "larger images are shrunk to it.")] = None,
    train_vision: Annotated[bool, typer.Option(
        "--train-vision", help="Train the vision tower too (full fine-tuning only); by "
        "default it is frozen.")] = TRAINING.train_vision,
    tokens: TokensOpt = None,
    steps: StepsOpt = None,
    examples: ExamplesOpt = None,
    epochs: EpochsOpt = None,
    tokens_per_example: PerExampleOpt = None,
    packed: PackedOpt = False,
    node: NodeOpt = None,
    gpus_per_node: PerNodeOpt = HARDWARE.gpus_per_node,
    inter_node_gb_per_s_one_way: NetOpt = HARDWARE.inter_node_gb_per_s_one_way,
    params: ParamsOpt = None,
    hidden_size: HiddenOpt = None,
    layers: LayersOpt = None,
    vocab: VocabOpt = None,
    peak_tflops: PeakOpt = None,
    memory_gb: MemGbOpt = None,
    bandwidth_gb_per_s: BwOpt = None,
    host_us_per_op: HostOpt = None,
    pcie_lanes: PcieLanesOpt = None,
    interruptions_per_gpu_hour: InterruptOpt = None,
    usd_per_gpu_hour: UsdOpt = None,
    ignore_memory: Annotated[bool, typer.Option(
        "--ignore-memory", help="Report the estimate even when it does not fit in memory.")
    ] = False,
    ledger: LedgerOpt = None,
    calibrate: CalibrateOpt = True,
    global_batch: Annotated[int | None, typer.Option(
        "--global-batch", min=1, help="Sequences per optimizer step (all GPUs) for the setup "
        "gpuhours chooses when --batch, --checkpointing and --zero are left out; default: by "
        "model size, from published pretraining recipes.")] = None,
    transfer_from: Annotated[int | None, typer.Option(
        "--transfer-from", metavar="ID", help="A training step of this model measured on "
        "another device (a ledger id, `gpuhours ledger list`): carried to this GPU through "
        "the roofline, with a range (docs/bench.md).")] = None,
    as_json: JsonOpt = False,
    wide: WideOpt = False,
    from_file: Annotated[str | None, typer.Option(
        "--from", help="Read the setup from another tool's config: an axolotl or LLaMA-Factory "
                       "YAML, a torchtune recipe config, a Hugging Face TrainingArguments JSON "
                       "or trainer_state.json, a TRL SFTConfig/GRPOConfig, a verl trainer "
                       "config (its policy update). Options given here "
                       "win; the warnings say what was used (docs/importers.md).")] = None,
) -> None:
    """Memory, step time, throughput, GPU hours and cost of one training setup.

    With a ledger of measurements (gpuhours bench), the assumed efficiency is replaced by the
    measured one of the nearest matching benchmark, and the output says which.

    Exits with code 1 when the setup does not fit in the GPU's memory (see `gpuhours fit`),
    unless --ignore-memory is given; with --json the estimate is printed all the same, its
    memory.fits false. Code 1 means "does not fit" in every command; 2 is bad input. A setup
    that fits with less free than fit's 10% headroom is estimated, with a warning."""
    from gpuhours.api import estimate_training, gpu_spec, open_ledger
    from gpuhours.resolve import resolve_gpu

    fill: dict[str, Any] = {}
    notes: list[str] = []
    if from_file is not None:
        from gpuhours.importers import read_setup, settings_to_use

        explicit = {f for f, p in _PARAM_OF_FIELD.items() if not _not_given(ctx, p)}
        if params is not None:  # --params names the model too
            explicit.add("model")
        cli_amount = next((p for p in ("tokens", "steps", "examples")
                           if not _not_given(ctx, p)), None)
        fill, notes = settings_to_use(read_setup(from_file), explicit, cli_amount, from_file)
    given = _given(ctx, fill)
    accum_open = _not_given(ctx, "grad_accum") and "grad_accum" not in fill
    if accum_open:
        del given["grad_accum"]  # Training's default for the layout (setup.default_grad_accum)
    batch, seq, gpus = given["micro_batch"], given["seq_len"], given["num_gpus"]
    steps, epochs = given["steps"], given["epochs"]
    examples, packed = given["examples"], given["packed"]
    t = _training(params=params, hidden_size=hidden_size, layers=layers, vocab=vocab,
                  **_training_fields(given), tp=tp, pp=pp, cp=cp, ep=ep,
                  virtual_stages=virtual_stages, tp_comm_overlap=tp_comm_overlap,
                  moe_a2a_overlap=moe_a2a_overlap, images_per_example=images_per_example,
                  image_pixels=image_pixels, image_tokens=image_tokens,
                  image_max_pixels=image_max_pixels, train_vision=train_vision)
    refuse_lora_options_on_full(ctx, t.method)
    from gpuhours.estimate.fit import layout_on_megatron

    t, on_megatron = layout_on_megatron(t, _not_given(ctx, "kernels") and "kernels" not in fill)
    if on_megatron:
        notes.append(on_megatron)
    book = open_ledger(ledger) if calibrate else None
    own_figures = (peak_tflops, memory_gb, bandwidth_gb_per_s)
    if gpu is not None and all(v is None for v in own_figures):
        spec = gpu_spec(gpu, book)
    else:
        spec = resolve_gpu(gpu, peak_tflops, memory_gb, bandwidth_gb_per_s)
    gpus_per_node, inter_node_gb_per_s_one_way, network = _network(
        ctx, node, spec, gpus_per_node, inter_node_gb_per_s_one_way)
    hw = Hardware(gpu=spec, num_gpus=gpus, gpus_per_node=gpus_per_node,
                  inter_node_gb_per_s_one_way=inter_node_gb_per_s_one_way,
                  host_us_per_op=host_us_per_op, pcie_lanes=pcie_lanes,
                  interruptions_per_gpu_hour=interruptions_per_gpu_hour)
    amount: dict[str, Any] = dict(tokens=tokens, steps=steps, examples=examples, epochs=epochs,
                                  tokens_per_example=tokens_per_example, packed=packed,
                                  usd_per_gpu_hour=usd_per_gpu_hour)
    e = estimate_training(t, hw, **amount, ledger=book)
    left_open = all(_not_given(ctx, name) for name in ("batch", "checkpointing", "zero"))
    left_open = left_open and not {"micro_batch", "checkpointing", "zero_stage"} & fill.keys()
    if global_batch is not None and not left_open:
        raise FieldError("global_batch", "it is the target of the setup gpuhours chooses; with "
                         "--batch, --checkpointing or --zero given, the global batch is "
                         "micro-batch x accumulation x data-parallel GPUs.",
                         "Leave those out, or set the batch with --batch and --grad-accum.")
    # the setup fields the user gave (kept) and those left for gpuhours to choose
    kept = [f for f, p in (("micro_batch", "batch"), ("checkpointing", "checkpointing"),
                           ("zero_stage", "zero")) if not _not_given(ctx, p) or f in fill]
    layouts_open = all(_not_given(ctx, name) for name in ("tp", "pp", "cp", "ep"))
    partly_open = len(kept) < 3
    if global_batch is not None:
        _global_batch_within_work(global_batch, t, amount)
    # a full-training question that gives nothing of the batch ("a 1B model, 1T tokens, 64
    # GPUs") is answered with the chosen setup even where the defaults fit: micro-batch 1 with
    # no accumulation is a global batch of one sequence a GPU, which nobody chose
    # (a pretraining question: tokens on several GPUs; a fine-tuning one on examples, or on
    # one GPU, keeps the trainers' defaults, micro-batch 1 without accumulation)
    from gpuhours.estimate.fit import batch_left_open

    batch_open = batch_left_open(t, gpus, left_open and accum_open, examples is None)
    # a layout left open is searched when the setup as given does not fit, even with micro-
    # batch, checkpointing and ZeRO all given (kept)
    if ((not e.memory.fits or global_batch is not None or batch_open) and not ignore_memory
            and (partly_open or (layouts_open and not e.memory.fits and gpus > 1
                                 and examples is None))):
        # the question left the setup open ("a 65B model on 2,048 GPUs"), or part of it:
        # answer it with the fastest setup that fits, keeping what was given, rather than
        # refuse the defaults
        from gpuhours.estimate.fit import chosen_setup

        found = chosen_setup(t, hw, search_layouts=layouts_open, global_batch=global_batch,
                             fixed_overlaps=_given_overlaps(ctx), keep=kept,
                             kernels_open=_not_given(ctx, "kernels") and "kernels" not in fill)
        if found is not None:
            t, why = found
            why += (" Give --batch, --grad-accum, --checkpointing or --zero"
                    f"{' or --tp/--pp/--cp/--ep' if layouts_open else ''}"
                    f"{' (and --kernels)' if t.kernels == 'megatron' else ''} to choose "
                    f"yourself.")
            e = estimate_training(t, hw, **amount, ledger=book)
            e = e.model_copy(update={"warnings": [why, *e.warnings]})
            batch = t.micro_batch
            accum_open = False  # chosen, and said in `why`
    if accum_open and t.virtual_stages > 1:
        notes.append(f"accumulation {t.grad_accum} (--grad-accum not given): the fewest "
                     f"micro-batches a step the interleaved schedule runs, one group of pp "
                     f"{t.pp} (Megatron-LM requires a multiple of pp).")
    if notes:
        e = e.model_copy(update={"warnings": [*notes, *e.warnings]})
    if network:
        e = e.model_copy(update={"assumptions": [*e.assumptions, *network]})
    moved = None
    if transfer_from is not None:
        from gpuhours.track.transfer import transfer_measurement

        source = book if book is not None else open_ledger(ledger)
        if source is None:
            raise InputError("--transfer-from", "there is no ledger to read the measurement "
                             "from.", "Pass --ledger, or run `gpuhours bench` first.")
        moved = transfer_measurement(source, transfer_from, t, hw)
    if as_json:
        # a setup that does not fit is a result too: memory.fits says so
        emit_json(e if moved is None else {**e.model_dump(mode="json"),
                                           "transferred": moved.as_json()})
    if not e.memory.fits and not ignore_memory:
        from gpuhours.estimate.estimator import beyond_positions_warning
        from gpuhours.estimate.fit import setting_at_fault
        from gpuhours.report.units import gib

        # name what to change (the micro-batch, the sequence, or the method when the model's
        # state does not fit whatever the batch), and say when the sequence is beyond the
        # model's positions (the estimate's warning, else shown only with --ignore-memory)
        field = setting_at_fault(t, hw)
        option = {"micro_batch": "--batch", "seq_len": "--seq", "method": "--method",
                  "zero_stage": "--zero", "checkpointing": "--checkpointing"}[field]
        beyond = beyond_positions_warning(t)
        too_big = DoesNotFit(
            option, f"micro-batch {batch} x seq {seq} needs "
                    f"{gib(e.memory.total_bytes.value)} per GPU ({e.memory.peak_phase}); "
                    f"{spec.name} has {gib(e.memory.device_bytes.value)}."
                    + (f" {beyond}" if beyond else ""),
            "Run `gpuhours fit` with the same options for what fits, or pass --ignore-memory "
            "to see this estimate anyway.")
        too_big.fields = (field,)
        raise too_big
    if as_json:
        return
    else:
        from gpuhours.report.terminal import render_training, render_transfer

        console = console_for(wide)
        render_training(e, console, wide)
        if moved is not None:
            render_transfer(moved, e, console)


@app.command()
@user_errors
def fit(
    ctx: typer.Context,
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    gpus: GpusOpt = HARDWARE.num_gpus,
    method: MethodOpt = TRAINING.method,
    seq: SeqOpt = TRAINING.seq_len,
    batch: Annotated[int, typer.Option(help="Micro-batch to check first.")] = TRAINING.micro_batch,
    effective_batch: Annotated[int | None, typer.Option(
        help="Target effective batch (sequences per optimizer step, all GPUs).")] = None,
    headroom: Annotated[float | None, typer.Option(
        help="Fraction of device memory the micro-batch, setups and remedies fit chooses "
             "leave free (default 0.10); the verdict on the setup as given, as estimate's, "
             "is the device's memory.")] = None,
    checkpointing: CkptOpt = TRAINING.checkpointing,
    precision: PrecOpt = TRAINING.precision,
    optimizer: OptimOpt = TRAINING.optimizer,
    optimizer_impl: OptimImplOpt = TRAINING.optimizer_impl,
    lora_rank: RankOpt = TRAINING.lora_rank,
    lora_targets: TargetsOpt = TRAINING.lora_targets,
    zero: ZeroOpt = TRAINING.zero_stage,
    offload: OffloadOpt = TRAINING.offload,
    tp: TpOpt = TRAINING.tp,
    pp: PpOpt = TRAINING.pp,
    cp: CpOpt = TRAINING.cp,
    ep: EpOpt = TRAINING.ep,
    virtual_stages: VirtualOpt = TRAINING.virtual_stages,
    tp_comm_overlap: TpOverlapOpt = TRAINING.tp_comm_overlap,
    moe_a2a_overlap: A2aOverlapOpt = TRAINING.moe_a2a_overlap,
    flash: FlashOpt = TRAINING.flash_attention,
    fused: FusedOpt = TRAINING.fused_attention,
    torch_compile: CompileOpt = TRAINING.compile,
    kv_repeated: KvRepeatedOpt = TRAINING.kv_repeated,
    optimizer_in_backward: OptimInBackwardOpt = TRAINING.optimizer_in_backward,
    optimizer_paged: OptimizerPagedOpt = TRAINING.optimizer_paged,
    activation_offload: ActivationOffloadOpt = TRAINING.activation_offload,
    liger_kernels: LigerKernelsOpt = TRAINING.liger_kernels,
    checkpoint_offload: CheckpointOffloadOpt = TRAINING.checkpoint_offload,
    loss_kernel: LossKernelOpt = TRAINING.loss_kernel,
    kernels: KernelsOpt = TRAINING.kernels,
    moe_dispatch: MoeDispatchOpt = TRAINING.moe_dispatch,
    moe_router_dtype: MoeRouterDtypeOpt = TRAINING.moe_router_dtype,
    moe_fused_mlp: MoeFusedMlpOpt = TRAINING.moe_fused_mlp,
    grad_reduce_in_fp32: GradReduceFp32Opt = TRAINING.grad_reduce_in_fp32,
    recompute_modules: RecomputeModulesOpt = None,
    cuda_graph_scope: CudaGraphScopeOpt = TRAINING.cuda_graph_scope,
    held_logits: HeldLogitsOpt = TRAINING.held_logits,
    eager_attention: EagerAttentionOpt = TRAINING.eager_attention,
    held_kv_cache: HeldKvCacheOpt = TRAINING.held_kv_cache,
    padding_mask: PaddingMaskOpt = TRAINING.padding_mask,
    lora_dropout: LoraDropoutOpt = TRAINING.lora_dropout,
    lora_adapter_dtype: AdapterDtypeOpt = TRAINING.lora_adapter_dtype,
    load_path: LoadPathOpt = TRAINING.load_path,
    lora_branch: LoraBranchOpt = TRAINING.lora_branch,
    dora: DoraOpt = TRAINING.dora,
    dora_base_matmul: DoraBaseOpt = TRAINING.dora_base_matmul,
    peft_method: PeftMethodOpt = TRAINING.peft_method,
    peft_virtual_tokens: VirtualTokensOpt = TRAINING.peft_virtual_tokens,
    lokr_decompose_factor: LokrFactorOpt = TRAINING.lokr_decompose_factor,
    ia3_targets: Ia3TargetsOpt = TRAINING.ia3_targets,
    seq_mean: SeqMeanOpt = TRAINING.seq_len_mean,
    seq_std: SeqStdOpt = TRAINING.seq_len_std,
    long_samples: LongSamplesOpt = TRAINING.long_samples,
    document_tokens: DocumentTokensOpt = TRAINING.document_tokens,
    deepspeed_reduce_bucket: DsBucketOpt = TRAINING.deepspeed_reduce_bucket,
    deepspeed_overlap_comm: DsOverlapOpt = TRAINING.deepspeed_overlap_comm,
    deepspeed_pipe_engine: DsPipeEngineOpt = TRAINING.deepspeed_pipe_engine,
    cuda_launch_blocking: LaunchBlockingOpt = TRAINING.cuda_launch_blocking,
    offload_copies: OffloadCopiesOpt = TRAINING.offload_copies,
    zero3_engine: Zero3EngineOpt = TRAINING.zero3_engine,
    fsdp_grad_accum: FsdpGradAccumOpt = TRAINING.fsdp_grad_accum,
    fsdp_adapter_units: FsdpAdapterUnitsOpt = TRAINING.fsdp_adapter_units,
    fsdp_api: FsdpApiOpt = TRAINING.fsdp_api,
    fsdp_embedding_units: FsdpEmbeddingUnitsOpt = TRAINING.fsdp_embedding_units,
    kbit_upcast: KbitUpcastOpt = TRAINING.kbit_upcast,
    base_quant: BaseQuantOpt = TRAINING.base_quant,
    bnb_saved_input: BnbSavedInputOpt = TRAINING.bnb_saved_input,
    lm_head_4bit: LmHead4bitOpt = TRAINING.lm_head_4bit,
    head_weight_cast: HeadWeightCastOpt = TRAINING.head_weight_cast,
    fp8_params: Fp8ParamsOpt = TRAINING.fp8_params,
    lora_trainable_embeddings: TrainEmbOpt = TRAINING.lora_trainable_embeddings,
    lora_lm_head: LmHeadOpt = TRAINING.lora_lm_head,
    node: NodeOpt = None,
    gpus_per_node: PerNodeOpt = HARDWARE.gpus_per_node,
    inter_node_gb_per_s_one_way: NetOpt = HARDWARE.inter_node_gb_per_s_one_way,
    params: ParamsOpt = None,
    peak_tflops: PeakOpt = None,
    memory_gb: MemGbOpt = None,
    bandwidth_gb_per_s: BwOpt = None,
    pcie_lanes: PcieLanesOpt = None,
    interruptions_per_gpu_hour: InterruptOpt = None,
    trace: Annotated[bool, typer.Option(
        "--trace", help="Confirm the answer with a trace of the real model on fake tensors "
                        "(gpuhours trace; needs the bench extra).")] = False,
    as_json: JsonOpt = False,
    wide: WideOpt = False,
    from_file: Annotated[str | None, typer.Option(
        "--from", help="Read the setup from another tool's config (as `estimate --from`; "
                       "docs/importers.md): options given here win; the file's micro-batch x "
                       "accumulation x GPUs is the effective batch unless --effective-batch "
                       "is given. The warnings say what was used.")] = None,
) -> None:
    """Does it fit? The largest micro-batch, the accumulation for an effective batch, the fastest
    configuration that fits, and what would fit when nothing does.

    The largest micro-batch, the fastest setup and the remedies keep --headroom free; the
    verdict on the setup as given is estimate's (its peak within the device's memory). Exits
    with code 1 when neither the setup as given fits nor any setup of the same model and
    method on the same GPUs does (other micro-batch, checkpointing, ZeRO stage, layout): a
    remedy that changes the method or the hardware does not count. 2 is bad input."""
    from gpuhours.api import fit_training
    from gpuhours.resolve import resolve_gpu

    notes: list[str] = []
    given = _given(ctx, {})
    if from_file is not None:
        from gpuhours.importers import AMOUNT_FIELDS, read_setup, settings_to_use

        imported = read_setup(from_file)
        # fit counts no amount of work: the file's steps, epochs, examples are said unused
        amounts = {k: v for k, v in imported.fields.items() if k in AMOUNT_FIELDS}
        imported = imported.model_copy(update={"fields": {
            k: v for k, v in imported.fields.items() if k not in AMOUNT_FIELDS}})
        explicit = {f for f, p in _PARAM_OF_FIELD.items()
                    if f not in AMOUNT_FIELDS and f != "grad_accum" and not _not_given(ctx, p)}
        if params is not None:  # --params names the model too
            explicit.add("model")
        fill, notes = settings_to_use(imported, explicit, None, from_file)
        given = _given(ctx, fill)
        batch, gpus = given["micro_batch"], given["num_gpus"]
        accum = fill.get("grad_accum")
        if accum is not None and effective_batch is None:
            per_gpu = imported.fields.get("micro_batch", batch)  # the file's, not --batch
            effective_batch = per_gpu * accum * gpus
            notes.append(f"{from_file}: effective batch {effective_batch} = the file's "
                         f"micro-batch {per_gpu} x accumulation {accum} x {gpus} GPU(s); fit "
                         "finds the largest micro-batch and the accumulation that keep it.")
        elif accum is not None:
            notes.append(f"{from_file}: not used: accumulation {accum}: --effective-batch "
                         "sets the batch per optimizer step.")
        if amounts:
            notes.append(f"{from_file}: not used by fit: "
                         + ", ".join(f"{k}={v}" for k, v in amounts.items())
                         + " (the amount of work; `gpuhours estimate --from` counts it).")
    t = _training(params=params, **_training_fields(given), tp=tp, pp=pp, cp=cp, ep=ep,
                  virtual_stages=virtual_stages, tp_comm_overlap=tp_comm_overlap,
                  moe_a2a_overlap=moe_a2a_overlap)
    refuse_lora_options_on_full(ctx, t.method)
    if t.seq_len_mean is not None:
        notes.append(f"variable-length samples: fit judges each micro-batch by its longest "
                     f"sequence (--seq {t.seq_len}) with the flat allocator reserve; the "
                     "reserved memory such a run shows (cached blocks of past lengths, given "
                     "back under pressure) is `gpuhours estimate`'s allocator replay.")
    spec = resolve_gpu(gpu, peak_tflops, memory_gb, bandwidth_gb_per_s)
    gpus_per_node, inter_node_gb_per_s_one_way, _ = _network(
        ctx, node, spec, gpus_per_node, inter_node_gb_per_s_one_way)
    hw = Hardware(gpu=spec, num_gpus=gpus, gpus_per_node=gpus_per_node,
                  inter_node_gb_per_s_one_way=inter_node_gb_per_s_one_way,
                  pcie_lanes=pcie_lanes,
                  interruptions_per_gpu_hour=interruptions_per_gpu_hour)
    # a layout left open is searched: tensor, pipeline, context and expert parallelism
    layouts_open = all(_not_given(ctx, name) for name in ("tp", "pp", "cp", "ep"))
    from gpuhours.estimate.fit import megatron_path_open

    # a searched layout on the kernels that run it, as estimate's chooser costs it
    kernels_from_file = from_file is not None and "kernels" in imported.fields
    megatron = layouts_open and megatron_path_open(
        t, _not_given(ctx, "kernels") and not kernels_from_file)
    batch_near = None
    if effective_batch is None and t.method == "full" and gpus > 1 and layouts_open:
        # the layouts compared at one global batch, estimate's default for the model's size,
        # not at one sequence a GPU scaled by each layout's split (2,048 sequences of 8,192
        # for a 70B on 1,024 GPUs at tp 8 x pp 2, four times the recipes' batch)
        from gpuhours.estimate.fit import default_global_batch

        batch_near, basis = default_global_batch(t)
        notes.append(f"the fastest row aims at a global batch of {batch_near} sequences of "
                     f"{t.seq_len} ({batch_near * t.seq_len / 1e6:.2f}M tokens: {basis}), "
                     f"the nearest each layout makes, as `gpuhours estimate` chooses; give "
                     f"--effective-batch for another.")
    result = fit_training(t, hw, effective_batch=effective_batch, headroom=headroom,
                          search_layouts=layouts_open, fixed_overlaps=_given_overlaps(ctx),
                          megatron_layouts=megatron, batch_near=batch_near)
    confirmation = None
    if trace:
        from gpuhours.trace import confirm_fit

        chosen = t.model_copy(update={"micro_batch": result.largest_micro_batch or batch})
        confirmation = confirm_fit(chosen, spec, result.headroom_fraction)
    if as_json:
        data = (result.model_dump(mode="json") if confirmation is None else
                {"fit": result.model_dump(mode="json"),
                 "trace": confirmation.model_dump(mode="json")})
        emit_json({**data, "warnings": notes} if from_file is not None or notes else data)
    else:
        from gpuhours.report.terminal import render_fit
        from gpuhours.report.text import esc

        render_fit(result, console_for(wide), wide)
        for note in notes:
            console_for(wide).print(f"[yellow]warning:[/yellow] {esc(note)}")
        if confirmation is not None:
            from gpuhours.trace.render import render_confirmation

            render_confirmation(confirmation, console_for(wide))
    if not result.fits:
        raise typer.Exit(code=DOES_NOT_FIT_EXIT_CODE)


@app.command()
@user_errors
def generation(
    ctx: typer.Context,
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    prompt_tokens: Annotated[int, typer.Option(help="Prompt length, tokens.")
                             ] = GENERATION.prompt_tokens,
    output_tokens: Annotated[int, typer.Option(help="Generated tokens per sequence.")
                             ] = GENERATION.output_tokens,
    max_output_tokens: Annotated[int | None, typer.Option(
        help="The longest output, when lengths spread (output-tokens is then the mean): "
             "the run waits for it.")] = None,
    batch: Annotated[int | None, typer.Option(
        help="Concurrent sequences (default: as many as fit).")] = None,
    sequences: Annotated[float | None, typer.Option(
        parser=count_option, metavar="COUNT",
        help="Sequences to generate in all, for GPU hours and cost (1e5 or 100k).")] = None,
    engine: Annotated[str, typer.Option(
        help="vllm (V1), vllm-v0 (0.5-0.7), sglang, hf-generate, tensorrt-llm "
             "(0.5-0.6's static batch), or lmdeploy (0.1's TurboMind).")
                      ] = GENERATION.engine,
    max_num_seqs: Annotated[int | None, typer.Option(
        help="Sequences the engine runs at once (vLLM's max_num_seqs; default: the "
             "engine's on the GPU, vLLM V1 1024 on a GPU of 70 GiB or more not named A100, "
             "else 256).")] = None,
    cache_max_entry_count: Annotated[float | None, typer.Option(
        help="lmdeploy only: TurboMind's KV cache, a share of GPU memory below 1, else "
             "128-token blocks (default 0.5).")] = None,
    hf_transformers_version: Annotated[str, typer.Option(
        help="hf-generate only: the transformers release (4.36+; 4.38 rebuilds a causal mask "
             "every step, 4.48+ and 5.x read a grouped cache without repeating it; default: "
             "the release the constants were fitted on).")
                                       ] = GENERATION.hf_transformers_version,
    hf_quant_linear: Annotated[str | None, typer.Option(
        help="hf-generate only: the library a GPTQ/AWQ checkpoint's linears load into: "
             "gptqmodel-2.2.0 (8-bit GPTQ, its Marlin kernel; give --weight-bytes-per-param 1) "
             "or autoawq-0.2.9 (4-bit AWQ, WQLinear_GEMM with awq_ext; give 0.5-0.625). "
             "Default: none, the 8/4-bit weights take their bytes' time alone.")] = None,
    tensor_parallel: Annotated[int, typer.Option(
        help="GPUs one replica is split over: 1, 2, 4, 8, 16, 32 or 64 (beyond a node, "
             "--gpus-per-node or --node, 8 by default, the all-reduces cross the network at "
             "--inter-node-gb-per-s, 25 GB/s a GPU by default, through NCCL). Default: 1, or "
             "when the model does not fit one GPU the smallest within a node that fits.")
    ] = GENERATION.tensor_parallel,
    device_map_gpus: Annotated[int, typer.Option(
        help="hf-generate only: GPUs the model is split over by device_map=\"auto\" (its "
             "layers in sequence, one GPU busy at a time; GPU hours count them all). Not "
             "with --tensor-parallel.")] = GENERATION.device_map_gpus,
    cuda_graphs: Annotated[str, typer.Option(
        help="Decode steps as CUDA graphs: auto (the engine's capture limits by batch and "
             "length), on, or off (vLLM enforce_eager=True, SGLang --disable-cuda-graph: every "
             "kernel launched by the host).")] = GENERATION.cuda_graphs,
    weight_bytes_per_param: Annotated[float | None, typer.Option(
        help=f"Bytes per weight: the model's released format by default (gpt-oss: MXFP4 "
             f"experts, 4.25 bits, the rest bf16; catalog released_weights), else "
             f"{GENERATION.weight_bytes_per_param:g} bf16; 1 "
             f"fp8/int8 (the default with --matmul-precision fp8; 1-1.125 with scales), "
             f"0.5-0.625 4-bit with its scales (~0.56), 4 fp32; other values are refused. "
             f"8/4-bit weights are costed as GPTQ/AWQ on Marlin's kernel under vLLM and "
             f"SGLang; under hf-generate see --hf-quant-linear.")] = None,
    kv_bytes_per_element: Annotated[float, typer.Option(
        help="Bytes per KV-cache element: 2 bf16, 1 fp8 (1-1.125 with scales), 0.5-0.625 "
        "4-bit with scales, 4 fp32; other values are refused.")
    ] = GENERATION.kv_bytes_per_element,
    matmul_precision: Annotated[str, typer.Option(
        help="bf16, or fp8 (W8A8: GEMMs at the fp8 rate, 1-byte weights).")
                                ] = GENERATION.matmul_precision,
    params: ParamsOpt = None,
    bandwidth_gb_per_s: Annotated[float | None, typer.Option(
        help="Memory bandwidth decode runs at, GB/s: replaces the catalog's datasheet figure "
             "and any achieved decode figure it holds (e.g. the h20's 1.9 TB/s, fitted on "
             "SGLang 0.4.6).")] = None,
    usd_per_gpu_hour: UsdOpt = None,
    node: NodeOpt = None,
    gpus_per_node: PerNodeOpt = GENERATION.gpus_per_node,
    inter_node_gb_per_s_one_way: NetOpt = GENERATION.inter_node_gb_per_s_one_way,
    ledger: LedgerOpt = None,
    calibrate: CalibrateOpt = True,
    as_json: JsonOpt = False,
    wide: WideOpt = False,
) -> None:
    """Prefill and decode time, KV cache, batch limited by memory and by the engine's sequence
    cap, GPU hours and cost: RL rollouts, evaluation, serving. vLLM's KV cache is what its
    startup profile (a forward of max_num_batched_tokens, a dummy sampler run) leaves. Exits
    with code 1 when the weights leave no room for a KV cache or the batch does not fit (with
    --json: fits false and the memory figures); 2 is bad input."""
    from gpuhours.api import estimate_generation
    from gpuhours.resolve import resolve_gpu, resolve_model

    arch, basis = resolve_model(model, params)
    from gpuhours.resolve import GPU_HINT_GENERATION, catalog_gpu

    if gpu is not None:  # an unknown name: the options generation has, not estimate's
        catalog_gpu(gpu, "gpu", GPU_HINT_GENERATION)
    hw = Hardware(gpu=resolve_gpu(gpu, bandwidth_gb_per_s=bandwidth_gb_per_s))  # checks it
    # a tensor-parallel group wider than a node's NVLink all-reduces over the network
    gpus_per_node, inter_node_gb_per_s_one_way, _ = _network(
        ctx, node, hw.gpu, gpus_per_node, inter_node_gb_per_s_one_way)
    if sequences is not None and not sequences > 0:
        raise FieldError("sequences", f"expected a positive number, got {sequences!r}.")
    if sequences is not None and sequences != int(sequences):
        raise FieldError("sequences", f"expected a whole number of sequences, got {sequences:g}.")
    if output_tokens < 1:  # (the library's Generation takes 0: a prefill alone, in the tests)
        raise FieldError("output_tokens", f"expected at least 1 generated token, got "
                                          f"{output_tokens}.", "A prefill alone is a scoring "
                                          "pass, not a generation.")
    if engine != "hf-generate" and not _not_given(ctx, "hf_transformers_version"):
        # the option's default is always set: only one the user gave is refused
        raise FieldError(("hf_transformers_version", "engine"), "the transformers release "
                         f"sets hf-generate's per-step costs; {engine} does not run "
                         "transformers' generate.", "Leave it out, or use --engine hf-generate.")
    g = Generation.model_validate(dict(arch=arch, model=model, model_basis=basis,
                                       prompt_tokens=prompt_tokens, output_tokens=output_tokens,
                                       max_output_tokens=max_output_tokens,
                                       batch=batch, engine=engine,
                                       max_num_seqs=max_num_seqs,
                                       cache_max_entry_count=cache_max_entry_count,
                                       hf_transformers_version=hf_transformers_version,
                                       hf_quant_linear=hf_quant_linear,
                                       tensor_parallel=tensor_parallel,
                                       # only as given (--node or the options): the
                                       # estimate says which figures are its defaults
                                       **{k: v for k, v in (
                                           ("gpus_per_node", gpus_per_node),
                                           ("inter_node_gb_per_s_one_way",
                                            inter_node_gb_per_s_one_way))
                                          if node is not None or not _not_given(ctx, k)},
                                       device_map_gpus=device_map_gpus,
                                       cuda_graphs=cuda_graphs,
                                       kv_bytes_per_element=kv_bytes_per_element,
                                       **_weights_of(model, weight_bytes_per_param,
                                                     matmul_precision, hw.gpu)))
    from gpuhours.estimate.lengths import check_generation_context

    # the longest output the run waits for, against the model's configured context (an
    # encoder has none to generate in: estimate_generation says that)
    check_generation_context(arch.name, None if arch.encoder else arch.max_positions,
                             prompt_tokens,
                             max(output_tokens, max_output_tokens or 0),
                             ("prompt_tokens", "max_output_tokens") if max_output_tokens
                             else ("prompt_tokens", "output_tokens"))
    from gpuhours.api import open_ledger

    book = open_ledger(ledger) if calibrate else None
    chosen = ""
    try:
        e = estimate_generation(g, hw, book)
    except DoesNotFit as too_big:
        # the replica's size left open: the smallest tensor parallelism within a node that
        # fits, as estimate chooses a training setup; else the verdict names the size needed
        tp_open = (_not_given(ctx, "tensor_parallel") and _not_given(ctx, "device_map_gpus")
                   and g.engine != "hf-generate")
        if tp_open and g.batch is not None:
            # a batch given: a replica is chosen only when the model leaves no room for one
            # sequence on a GPU (else the batch is what to change: the verdict says so)
            try:
                estimate_generation(g.model_copy(update={"batch": None}), hw, book)
                tp_open = False
            except DoesNotFit:
                pass
        found = None
        if tp_open:
            from gpuhours.estimate.generation_fit import smallest_tensor_parallel

            found, more = smallest_tensor_parallel(g, hw, book, too_big.message)
            too_big.message += more
        if found is None:
            # a verdict, as estimate's: with --json the figures behind it, then exit code 1
            if as_json:
                from gpuhours.estimate.generation_fit import does_not_fit_summary

                emit_json(does_not_fit_summary(g, hw.gpu, too_big.message))
            raise
        g, e, chosen = found
    from gpuhours.estimate.generation import generation_summary

    prices = None
    if usd_per_gpu_hour is not None:
        from gpuhours.api import price_rows_for

        prices = price_rows_for(hw.model_copy(update={"num_gpus": e.gpus}), usd_per_gpu_hour)
    data = {"kind": "generation", **generation_summary(e, g, hw.gpu, sequences, prices),
            "fits": True, **({"setup_chosen": chosen} if chosen else {})}
    if as_json:
        emit_json(data)
        return
    from gpuhours.report.terminal import render_generation

    render_generation(data, console_for(wide), wide)


def _weights_of(model: str | None, weight_bytes_per_param: float | None,
                matmul_precision: str, gpu: Any) -> dict[str, Any]:
    """generation's weights and matmul precision: the ones given, else as the model is released
    (the catalog's released_weights: gpt-oss's MXFP4 experts under bf16 matmuls; DeepSeek-V3's
    block-FP8 linears as W8A8 where the GPU has fp8 tensor cores, as vLLM and SGLang serve
    them, else dequantised), else Generation's default (bf16, or fp8 under W8A8)."""
    given = {"matmul_precision": matmul_precision}
    if weight_bytes_per_param is not None:
        return {**given, "weight_bytes_per_param": weight_bytes_per_param}
    from gpuhours.estimate.weight_formats import released_weights

    released = released_weights(model) if matmul_precision == "bf16" else None
    if released is None:
        return given
    fp8 = released.format == "fp8" and bool(gpu.dense_tflops.fp8)
    return {"weight_bytes_per_param": released.bits_per_weight / 8,
            "released_format": released.format,
            "matmul_precision": "fp8" if fp8 else matmul_precision}


@app.command()
@user_errors
def plan(
    plan_file: Annotated[str | None, typer.Argument(
        metavar="PLAN.yaml", help="The project's plan file.")] = None,
    out_path: Annotated[str | None, typer.Option(
        "--out", help="Where to write the living document (default: COMPUTE_BUDGET.md next to "
                      "the plan, or <plan>.budget.md when that one belongs to another plan); "
                      "its folder must exist.")
    ] = None,
    no_doc: Annotated[bool, typer.Option("--no-doc", help="Do not write the document.")] = False,
    schema: Annotated[bool, typer.Option("--schema", help="Print the plan's JSON Schema.")
                      ] = False,
    ledger: LedgerOpt = None,
    calibrate: PlanCalibrateOpt = True,
    as_json: JsonOpt = False,
    wide: WideOpt = False,
) -> None:
    """A project's compute budget, phase by phase, and its living document COMPUTE_BUDGET.md.

    Training phases use the measured efficiency of a matching benchmark in the ledger when
    there is one (their basis then says "measured" and names the ledger row)."""
    from pathlib import Path

    from gpuhours.plan.budget import evaluate
    from gpuhours.plan.load import load_plan
    from gpuhours.plan.schema import Plan

    if schema:
        emit_json(Plan.model_json_schema())
        return
    if plan_file is None:
        raise InputError("PLAN.yaml", "a plan file is required (or --schema).",
                         "See examples/pixelis.yaml.")
    from gpuhours.api import open_ledger

    if out_path and not no_doc:
        from gpuhours.files import require_parent_folder

        require_parent_folder(out_path, "--out")
    plan_obj = load_plan(plan_file)
    try:
        budget = evaluate(plan_obj, ledger=open_ledger(ledger), calibrate=calibrate)
    except DoesNotFit as too_big:
        # a verdict, as estimate's and generation's: with --json the verdict as JSON all the
        # same (no budget: a phase that does not fit has no GPU hours), then exit code 1
        if as_json:
            emit_json({"kind": "plan", "project": plan_obj.plan.project, "fits": False,
                       "where": too_big.where, "reason": too_big.message,
                       "hint": too_big.hint})
        raise
    doc = None
    if not no_doc:
        from gpuhours.report.living_doc import default_document_path, update_living_document

        target = (Path(out_path) if out_path
                  else default_document_path(Path(plan_file), budget.project))
        doc = update_living_document(budget, target, plan_file)
    if as_json:
        data = budget.model_dump(mode="json")
        if doc is not None:
            data["document"] = {"path": str(doc.path), "version": doc.version,
                                "changes": doc.changes, "written": doc.written,
                                "small_moves": doc.small_moves}
        emit_json(data)
        return
    from gpuhours.report.budget_terminal import render_budget
    from gpuhours.report.text import esc

    console = console_for(wide)
    render_budget(budget, console, wide)
    if doc is not None:
        if doc.written and not doc.changes and doc.small_moves:
            console.print(f"Rewrote {esc(doc.path)} at version {doc.version}: its numbers moved "
                          f"a little ({esc(doc.small_moves)}).")
        elif doc.written and not doc.changes:
            console.print(f"Rewrote {esc(doc.path)} at version {doc.version}: its numbers are "
                          "the same; the text around them is rendered otherwise (this "
                          "release's layout, or the plan's wording).")
        elif doc.written:
            what = "; ".join(doc.changes)
            console.print(f"Wrote {esc(doc.path)} (version {doc.version}: {esc(what)}).")
        else:
            console.print(f"{esc(doc.path)} is current (version {doc.version}); nothing "
                          "changed.")


@catalog_app.command("gpus")
@user_errors
def catalog_gpus(as_json: JsonOpt = False, wide: WideOpt = False) -> None:
    """Accelerators: memory, bandwidth, dense TFLOPS, TDP, interconnect, source."""
    from gpuhours import catalog
    from gpuhours.report.tables import Col, print_split
    from gpuhours.report.text import esc

    rows = catalog.gpus()
    if as_json:
        emit_json([r.model_dump(mode="json") for r in rows])
        return
    cols = (Col("name", "name"), Col("aliases"), Col("memory GB", "number", "right"),
            Col("GB/s", "number", "right"), Col("bf16", "number", "right"),
            Col("fp16", "number", "right"), Col("fp32", "number", "right"),
            Col("TDP W", "number", "right"), Col("link"), Col("as of", "number"))
    table = []
    for g in rows:
        tf = g.dense_tflops
        table.append([esc(g.name), esc(", ".join(g.aliases[:3])), f"{g.memory_gb:g}",
                      f"{g.memory_bw_gb_per_s:g}" + ("*" if g.decode_bw_gb_per_s else ""),
                      *(f"{v:g}" if v else "-" for v in (tf.bf16, tf.fp16, tf.fp32)),
                      f"{g.tdp_w:g}" if g.tdp_w else "-",
                      esc(f"{g.interconnect} {g.interconnect_gb_per_s_two_way or '-'}"),
                      g.as_of.isoformat()])
    print_split(console_for(wide), cols, table, details=(1, 8), wide=wide,
                title="Accelerators (dense TFLOPS, no sparsity; GB = 10^9 bytes)")
    for g in rows:
        if g.decode_bw_gb_per_s:  # the datasheet figure is not what generation decodes at
            console_for(wide).print(
                f"* {esc(g.name)}: generation decodes at {g.decode_bw_gb_per_s:g} GB/s "
                f"(decode_bw_gb_per_s, assumed: {esc(g.decode_bw_source)})")


@catalog_app.command("nodes")
@user_errors
def catalog_nodes(as_json: JsonOpt = False, wide: WideOpt = False) -> None:
    """Node types: the GPUs they carry, GPUs per node, the network per GPU, source (--node)."""
    from gpuhours import catalog
    from gpuhours.report.tables import Col, print_split
    from gpuhours.report.text import esc

    rows = catalog.nodes()
    if as_json:
        emit_json([r.model_dump(mode="json") for r in rows])
        return
    cols = (Col("name", "name"), Col("GPUs", "name"), Col("per node", "number", "right"),
            Col("GB/s per GPU", "number", "right"), Col("network"), Col("source"))
    table = [[esc(n.name), esc(", ".join(n.gpus)), str(n.gpus_per_node),
              f"{n.inter_node_gb_per_s_one_way:g}", esc(n.network), esc(n.source)]
             for n in rows]
    print_split(console_for(wide), cols, table, details=(4, 5), wide=wide,
                title="Node types (network between nodes: GB/s per GPU, one way)")


@catalog_app.command("models")
@user_errors
def catalog_models(as_json: JsonOpt = False, wide: WideOpt = False) -> None:
    """Model architectures: parameter counts computed from the config and as published."""
    from gpuhours import catalog
    from gpuhours.estimate.params import count_params
    from gpuhours.report.tables import Col, print_split
    from gpuhours.report.text import esc
    from gpuhours.resolve import resolve_model

    rows = []
    for entry in catalog.models():
        arch, _ = resolve_model(entry.name)
        rows.append((entry, arch, count_params(arch).total))
    if as_json:
        from gpuhours.estimate.candidate import figure_json

        # the table's columns, the two counts as figures with their sources
        emit_json([{**e.model_dump(mode="json"),
                    "computed_params": figure_json(
                        n, "parameters", "formula", f"estimate/params.py count_params of "
                        f"the catalog's config file ({e.config_file})"),
                    "published_params": figure_json(e.published_params, "parameters",
                                                    "catalog", e.published_params_source),
                    "hidden_size": a.hidden_size, "num_layers": a.num_layers,
                    "num_heads": a.num_heads, "num_kv_heads": a.num_kv_heads,
                    "vocab_size": a.vocab_size,
                    "experts_per_token": a.experts_per_token if a.is_moe else None,
                    "num_experts": a.num_experts if a.is_moe else None}
                   for e, a, n in rows])
        return
    cols = (Col("name", "name"), Col("hf id"), Col("params computed", "number", "right"),
            Col("published", "number", "right"), Col("layers", "number", "right"),
            Col("d", "number", "right"), Col("heads kv", "number", "right"),
            Col("vocab", "number", "right"), Col("MoE k/n", "number", "right"))
    # a source that sizes the language model alone (a vision-language card) is marked *
    table = [[esc(e.name), esc(e.hf_id), f"{n / 1e9:.3f} B",
              f"{e.published_params / 1e9:.3f} B"
              + ("*" if e.published_params_scope == "language_model" else ""),
              str(a.num_layers), str(a.hidden_size), f"{a.num_heads}/{a.num_kv_heads}",
              str(a.vocab_size), f"{a.experts_per_token}/{a.num_experts}" if a.is_moe else "-"]
             for e, a, n in rows]
    print_split(console_for(wide), cols, table, details=(1,), wide=wide,
                title="Model architectures (B = 10^9 parameters; *: published for the "
                      "language model alone; MoE: experts per token/all)")


@catalog_app.command("prices")
@user_errors
def catalog_prices(
    gpu: Annotated[str | None, typer.Option("--gpu", "-g", help="Only this GPU.")] = None,
    as_json: JsonOpt = False,
    wide: WideOpt = False,
) -> None:
    """Prices per GPU-hour, on-demand and spot, with the date each was read."""
    from gpuhours import catalog
    from gpuhours.report.tables import Col, Notes, print_table
    from gpuhours.report.text import esc
    from gpuhours.report.units import usd
    from gpuhours.resolve import GPU_HINT_PRICED, catalog_gpu

    name = catalog_gpu(gpu, "gpu", GPU_HINT_PRICED).name if gpu else None
    rows = catalog.prices(name)
    if as_json:
        emit_json([r.model_dump(mode="json") for r in rows])
        return
    cols = (Col("gpu", "name"), Col("provider", "name"), Col("kind", stack=True),
            Col("instance"),
            Col("on-demand", "number", "right"), Col("spot", "number", "right"),
            Col("as of", "number"))
    table = [[esc(r.gpu), esc(r.provider), esc(r.provider_kind), esc(r.instance),
              usd(r.on_demand_usd_per_gpu_hour), usd(r.spot_usd_per_gpu_hour),
              r.as_of.isoformat()] for r in rows]
    print_table(console_for(wide), cols, table, notes=Notes(), wide=wide,
                title="Prices per GPU-hour (instance price / GPUs; refresh before you rely on "
                      "them)")


def _app_for(argv: list[str]) -> typer.Typer:
    """The app to run for `argv`: when it names one of the commands defined here, an app of that
    command alone. Typer turns every registered command's signature into click parameters
    before it parses anything (tens of ms for this module's seven); one is enough to run one.
    Help, --version and a mistyped name get the whole app."""
    asked = argv[1] if len(argv) > 1 else None
    commands = [info for info in app.registered_commands
                if (info.name or getattr(info.callback, "__name__", "").replace("_", "-"))
                == asked]
    groups = [info for info in app.registered_groups if info.name == asked]
    if not commands and not groups:
        return app
    narrow = typer.Typer(**_APP_SETTINGS)
    narrow.registered_commands, narrow.registered_groups = commands, groups
    narrow.registered_callback = app.registered_callback
    return narrow


def main() -> None:
    import sys

    _app_for(sys.argv)()


if __name__ == "__main__":
    main()
