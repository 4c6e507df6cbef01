"""What every `gpuhours` command shares: the consoles, the error wrapper, the JSON emitter, the
one table from setup fields to the options that set them, and the option types.

Sub-commands (bench, trace, storage, doctor) import this module, never gpuhours.cli, so that the
CLI has no import cycle. No torch here.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from types import SimpleNamespace
from typing import Annotated, Any, TypeVar

import typer
from pydantic import BaseModel, ValidationError
from rich.console import Console

from gpuhours.counts import parse_count
from gpuhours.errors import DOES_NOT_FIT_EXIT_CODE, DoesNotFit, InputError

# emoji off: a `:name:` in a user's plan or path is text, not a picture (user strings are also
# escaped for markup, gpuhours.report.text.esc)
out = Console(emoji=False)
err = Console(stderr=True, emoji=False)

F = TypeVar("F", bound=Callable[..., Any])

#: the width of the console of --wide: lines as long as the widest table needs
WIDE_COLUMNS = 1000


def console_for(wide: bool) -> Console:
    """The console of a command's tables: `out`, or with --wide one as wide as its tables need
    (Rich sizes a table to its content, so a 1000-column console adds no padding)."""
    return Console(emoji=False, width=WIDE_COLUMNS) if wide else out

#: the packages of the optional `bench` extra
BENCH_EXTRA = {"torch", "transformers", "peft"}

#: library field -> the CLI option that sets it. The library raises errors keyed by field
#: (gpuhours.errors.FieldError); this is the one place that knows the options' names. A field
#: not listed is shown as --field-name.
OPTION_OF_FIELD: dict[str, str] = {
    "model": "--model", "params": "--params", "gpu": "--gpu", "arch": "--model",
    "micro_batch": "--batch", "seq_len": "--seq", "grad_accum": "--grad-accum",
    "lora_rank": "--lora-rank", "lora_targets": "--lora-targets", "method": "--method",
    "precision": "--precision", "optimizer": "--optimizer", "optimizer_impl": "--optimizer-impl",
    "checkpointing": "--checkpointing", "flash_attention": "--flash",
    "eager_attention": "--eager-attention",
    "fused_attention": "--fused-attention", "zero_stage": "--zero", "compile": "--compile",
    "kv_repeated": "--kv-repeated",
    "optimizer_in_backward": "--optimizer-in-backward",
    "optimizer_paged": "--paged-optimizer",
    "activation_offload": "--activation-offload",
    "liger_kernels": "--liger-kernels",
    "checkpoint_offload": "--checkpoint-offload",
    "tp_comm_overlap": "--tp-comm-overlap", "moe_a2a_overlap": "--moe-a2a-overlap",
    "loss_kernel": "--loss-kernel", "kernels": "--kernels",
    "moe_dispatch": "--moe-dispatch", "moe_router_dtype": "--moe-router-dtype",
    "moe_fused_mlp": "--moe-fused-mlp", "grad_reduce_in_fp32": "--grad-reduce-fp32",
    "recompute_modules": "--recompute-modules",
    "cuda_graph_scope": "--cuda-graph-scope",
    "offload": "--offload",
    "held_logits": "--held-logits", "held_kv_cache": "--held-kv-cache",
    "padding_mask": "--padding-mask", "lora_dropout": "--lora-dropout",
    "lora_adapter_dtype": "--lora-adapter-dtype", "load_path": "--load-path",
    "lora_branch": "--lora-branch", "dora": "--dora", "dora_base_matmul": "--dora-base-matmul",
    "peft_method": "--peft-method", "peft_virtual_tokens": "--peft-virtual-tokens",
    "lokr_decompose_factor": "--lokr-decompose-factor", "ia3_targets": "--ia3-targets",
    "seq_len_mean": "--seq-mean", "seq_len_std": "--seq-std", "long_samples": "--long-samples",
    "document_tokens": "--document-tokens",
    "deepspeed_reduce_bucket": "--deepspeed-reduce-bucket",
    "deepspeed_overlap_comm": "--deepspeed-overlap-comm",
    "deepspeed_pipe_engine": "--deepspeed-pipe-engine",
    "cuda_launch_blocking": "--cuda-launch-blocking", "kbit_upcast": "--kbit-upcast",
    "offload_copies": "--offload-copies",
    "zero3_engine": "--zero3-engine", "bnb_saved_input": "--bnb-saved-input",
    "fsdp_grad_accum": "--fsdp-grad-accum", "fsdp_adapter_units": "--fsdp-adapter-units",
    "fsdp_api": "--fsdp-api", "fsdp_embedding_units": "--fsdp-embedding-units",
    "head_weight_cast": "--head-weight-cast",
    "lm_head_4bit": "--lm-head-4bit", "fp8_params": "--fp8-params",
    "num_gpus": "--gpus", "gpus_per_node": "--gpus-per-node", "node": "--node",
    "inter_node_gb_per_s_one_way": "--inter-node-gb-per-s", "config_overrides": "--set",
    "host_us_per_op": "--host-us-per-op", "pcie_lanes": "--pcie-lanes",
    "interruptions_per_gpu_hour": "--interruptions-per-gpu-hour", "usd_per_gpu_hour": "--usd-per-gpu-hour",
    "elapsed_hours": "--elapsed-hours",
    "prompt_tokens": "--prompt-tokens", "output_tokens": "--output-tokens", "batch": "--batch",
    "engine": "--engine", "device_map_gpus": "--device-map-gpus",
    "tensor_parallel": "--tensor-parallel", "peak_tflops": "--peak-tflops", "memory_gb": "--memory-gb",
    "bandwidth_gb_per_s": "--bandwidth-gb-per-s", "ledger": "--ledger", "compiled": "--compile",
    "steps": "--steps", "tokens": "--tokens", "examples": "--examples", "epochs": "--epochs",
    "device_profile": "--device-profile", "warmup_steps": "--warmup", "min_steps": "--min-steps",
    "max_steps": "--max-steps", "target_cv": "--target-cv", "max_time_s": "--max-time",
    "learning_rate": "--learning-rate",
    # bench --module / bench inference / trace --module
    "inputs": "--input", "backends": "--backend",
}


def option_of(field: str) -> str:
    """The CLI option that sets a library field."""
    return OPTION_OF_FIELD.get(field, f"--{field.replace('_', '-')}")


def where_of(e: InputError) -> str:
    """An error's `where` as the CLI user typed it: options for fields (and the value given,
    `--run 9`), as given otherwise."""
    if not e.fields:
        return e.where
    named = "/".join(option_of(f) for f in e.fields)
    return named if e.given is None else f"{named} {e.given}"


def defaults_of(model: type[BaseModel]) -> Any:
    """A setup model's field defaults as attributes (`TRAINING.seq_len`): the CLI's option
    defaults, so that one default holds in every command and in plans."""
    return SimpleNamespace(**{name: f.default for name, f in model.model_fields.items()})


def fail(where: str, message: str, code: int = 2) -> None:
    """Print a one-paragraph error and exit with `code` (2: bad input)."""
    from gpuhours.report.text import esc

    # escaped: paths, names and messages may hold [brackets] that Rich would read as markup,
    # and terminal control sequences
    err.print(f"[red]error[/red] {esc(where)}: {esc(message)}", highlight=False,
              soft_wrap=True)
    raise typer.Exit(code=code)


def user_errors(func: F) -> F:
    """Turn bad input into a clear message and exit code 2, never a traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except InputError as e:
            code = DOES_NOT_FIT_EXIT_CODE if isinstance(e, DoesNotFit) else 2
            fail(where_of(e), e.message + (f" {e.hint}" if e.hint else ""), code)
        except ModuleNotFoundError as e:
            if (e.name or "").split(".")[0] not in BENCH_EXTRA:
                raise
            fail(e.name or "torch", "this command runs real models and needs the `bench` extra "
                                    "(torch, transformers, peft), which is not installed. "
                                    "Install it with: pip install 'gpuhours[bench]' (it pins "
                                    "torch==2.13.0).")
        except ValidationError as e:
            # a model outside the setup's (whose own constructors raise FieldError already):
            # keyed by its field the same way (gpuhours.setup.field_error_of)
            from gpuhours.setup import field_error_of

            err = field_error_of(e)
            fail(where_of(err), err.message + (f" {err.hint}" if err.hint else ""))

    return wrapper  # type: ignore[return-value]


#: options that describe LoRA adapters: meaningless for full fine-tuning
LORA_OPTIONS = ("lora_rank", "lora_targets")


def refuse_lora_options_on_full(ctx: typer.Context, method: str) -> None:
    """--lora-rank / --lora-targets given on the command line with full fine-tuning (which has
    no adapters) is a conflict, refused as the setup refuses --lora-dropout with it; a value
    a setup file (--from) or a default carries is not the user's choice and is left alone."""
    if method != "full":
        return
    def chosen(name: str) -> bool:  # by name: typer may carry its own click's enum
        source = ctx.get_parameter_source(name)
        return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")

    given = [name for name in LORA_OPTIONS if name in ctx.params and chosen(name)]
    if given:
        from gpuhours.errors import FieldError

        raise FieldError((*given, "method"), "full fine-tuning trains every weight and has no "
                         "LoRA adapters, so a LoRA rank or target set does not apply.",
                         "Leave it out, or use --method lora (or qlora).")


def emit_json(model: Any) -> None:
    """Print a pydantic model (or plain data) as indented JSON on stdout."""
    data = model.model_dump(mode="json") if hasattr(model, "model_dump") else model
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


# Option types shared by several commands ------------------------------------------------------
ModelOpt = Annotated[str | None, typer.Option(
    "--model", "-m", help="Catalog name (gpuhours catalog models) or path to a config.json.")]
GpuOpt = Annotated[str | None, typer.Option(
    "--gpu", "-g", help="Catalog name or alias (gpuhours catalog gpus).")]
MethodOpt = Annotated[str, typer.Option(help="full, lora or qlora.")]
RankOpt = Annotated[int, typer.Option(help="LoRA rank.")]
TargetsOpt = Annotated[str, typer.Option(
    help="LoRA targets: all-linear, attention, qkv (q, k and v, no o), qv (peft's default "
         "for llama), or mlp (gate, up and down projections).")]
PrecOpt = Annotated[str, typer.Option(
    help="bf16-mixed (bf16 weights, fp32 master + moments: DeepSpeed/FSDP), bf16-amp "
         "(torch.autocast over fp32 weights: HF Trainer bf16=True), bf16 (all bf16), "
         "fp16-mixed, fp16-amp, fp16, fp32; fp8-mixed (bf16-mixed with fp8 GEMMs in the "
         "layers: Transformer Engine, torchao float8; Hopper, Ada, Blackwell).")]
OptimOpt = Annotated[str, typer.Option(help="adamw, adamw-8bit, sgd, sgd-momentum.")]
OptimImplOpt = Annotated[str, typer.Option(
    help="foreach (torch's default), foreach-2.0 (torch 2.0's: two sets of temporaries), "
         "fused (fused=True, bitsandbytes), per-parameter.")]
BatchOpt = Annotated[int, typer.Option(help="Micro-batch per GPU, in sequences.")]
SeqOpt = Annotated[int, typer.Option(help="Sequence length in tokens.")]
AccumOpt = Annotated[int, typer.Option(help="Gradient accumulation steps.")]
CkptOpt = Annotated[bool, typer.Option(
    "--checkpointing/--no-checkpointing", help="Gradient (activation) checkpointing.")]
FlashOpt = Annotated[bool, typer.Option(
    "--flash/--no-flash", help="Flash attention (no S x S score matrix kept).")]
FusedOpt = Annotated[bool, typer.Option(
    "--fused-attention/--sdpa-attention",
    help="cuDNN fused attention or FlashAttention-3 (Megatron-LM, NeMo), faster on Hopper; "
         "default: PyTorch SDPA's FlashAttention-2 kernels (transformers).")]
CompileOpt = Annotated[bool, typer.Option(
    "--compile/--eager",
    help="torch.compile of the decoder layers and the loss (torchtune compile=True, HF "
         "torch_compile): fewer activations saved (cheap elementwise operators recomputed), "
         "a compiled cross-entropy on the half-precision logits, fused elementwise kernels. "
         "Default: eager.")]
CheckpointOffloadOpt = Annotated[bool, typer.Option(
    "--checkpoint-offload/--no-checkpoint-offload",
    help="Under --checkpointing, each block's input moved to host memory and back in backward "
         "(Unsloth's use_gradient_checkpointing=\"unsloth\"): the GPU keeps one.")]
KvRepeatedOpt = Annotated[bool, typer.Option(
    "--kv-repeated/--kv-grouped",
    help="k and v repeated to the query heads before the attention kernel (torchtune; "
         "transformers' repeat_kv without enable_gqa): saved at the query width. Default: "
         "grouped (transformers 5, flash-attn).")]
OptimInBackwardOpt = Annotated[bool, typer.Option(
    "--optimizer-in-backward/--optimizer-after-backward",
    help="Each parameter's optimizer step run in backward as soon as its gradient is made, "
         "then the gradient freed (torchtune optimizer_in_bwd): no whole-model gradient. "
         "Needs --grad-accum 1. Default: after backward.")]
OptimizerPagedOpt = Annotated[bool, typer.Option(
    "--paged-optimizer/--no-paged-optimizer",
    help="bitsandbytes' paged AdamW (32-bit or 8-bit): the moments of tensors of 1e5 "
         "elements or more in CUDA managed memory, outside torch's allocator, paged to the "
         "host when the GPU is full (full fine-tuning). Default: not paged.")]
ActivationOffloadOpt = Annotated[bool, typer.Option(
    "--activation-offload/--no-activation-offload",
    help="The checkpointed layer inputs copied to pinned host memory on a side stream and "
         "back in backward (torchtune enable_activation_offloading). Needs checkpointing. "
         "Default: off.")]
LigerKernelsOpt = Annotated[str, typer.Option(
    help="Liger-Kernel's fused RMSNorm, RoPE and SwiGLU patched into the layers: classes "
         "(apply_liger_kernel_to_* before the model is built: LLaMA-Factory, axolotl; every "
         "norm), instance (on a built model: HF Trainer/TRL use_liger_kernel, verl; per-head "
         "q/k norms stay eager), none. Its loss is --loss-kernel fused-linear.")]
ZeroOpt = Annotated[int, typer.Option(help="ZeRO stage 0-3 (3 = FSDP full shard).")]
OffloadOpt = Annotated[str, typer.Option(
    help="CPU offload: none, optimizer (DeepSpeed offload_optimizer: master weights and Adam "
         "on the host; ZeRO 1-3), optimizer+params (the weights too: ZeRO-3 offload_param, "
         "FSDP CPUOffload).")]
LossKernelOpt = Annotated[str | None, typer.Option(
    help="hf (transformers: fp32 logits), chunked (torchtune chunked CE), fused-linear "
         "(Liger fused linear CE), cut-ce (Cut Cross-Entropy), half (the model's own loss "
         "on half-precision logits, no autocast: Qwen-1 under DeepSpeed), chunked-half (head "
         "and loss by 128 positions on half-precision logits), chunked-fabric (litgpt's loss "
         "as its scripts run it: Lightning Fabric casts the head's output to fp32), "
         "verl-logprobs (verl's actor: flash-attn's cross-entropy with in-place backward on "
         "half-precision logits), "
         "megatron (Megatron-Core's vocab-parallel CE: one fp32 copy, softmax and gradient in "
         "place), te (Transformer Engine's Triton CE: gradient written into the logits), "
         "half-amp (the model's own loss on half-precision logits under the Trainer's "
         "autocast: Qwen-1; half log-softmax, fp32 nll input, accelerate's fp32 logits copy). "
         "Default: megatron on --kernels megatron, unsloth-ce on --kernels unsloth, else hf.")]
KernelsOpt = Annotated[str, typer.Option(
    help="The code path, for the host's operators per micro-batch: eager (transformers' "
         "modelling, eager PyTorch), flash-attn (code calling flash-attn with its fused "
         "rotary and RMSNorm: Qwen-1's with flash-attn installed) or megatron (Megatron-Core "
         "with Transformer Engine's fused layers: Megatron-LM, Megatron-Bridge, NeMo; its "
         "vocab-parallel cross-entropy unless --loss-kernel says), unsloth (Unsloth's "
         "LoRA/QLoRA layer: its fused LoRA Functions, Triton norms and cross-entropy) or "
         "megatron-2021 (Megatron-LM's 2021 layer: fused LayerNorm, bias-GeLU and "
         "bias-dropout-add, unfused attention; with --no-flash).")]
MoeDispatchOpt = Annotated[str, typer.Option(
    help="On --kernels megatron, how a MoE layer routes its tokens: fused (the all-to-all "
         "dispatcher with Transformer Engine's fused permute: Megatron-Bridge), "
         "alltoall-unfused (the all-to-all dispatcher, unfused permute: NeMo-RL v0.6) or "
         "allgather-unfused (NeMo-RL v0.5: allgather dispatcher, unfused permute, its "
         "combine's fp64 traffic). Each counts its router's and dispatcher's operators and "
         "the host's wait for the token counts in every MoE layer's forward.")]
MoeRouterDtypeOpt = Annotated[str | None, typer.Option(
    help="On --kernels megatron, the MoE router's dtype (Megatron-Core moe_router_dtype): "
         "bf16, fp32 or fp64. Default: fp64 with the unfused dispatches (NeMo-RL's), else "
         "bf16 (Megatron-Core's default, the input's dtype).")]
MoeFusedMlpOpt = Annotated[bool, typer.Option(
    "--moe-fused-mlp/--no-moe-fused-mlp",
    help="On --kernels megatron, a MoE's routed experts run through Transformer Engine's op "
         "fuser (Megatron-Core use_transformer_engine_op_fuser). Default: the unfused grouped "
         "MLP, whose eager clamp (gpt-oss) and per-expert output bias cost passes.")]
GradReduceFp32Opt = Annotated[bool, typer.Option(
    "--grad-reduce-fp32/--no-grad-reduce-fp32",
    help="On --kernels megatron, Megatron-Core's gradient buffer in fp32, accumulated and "
         "reduced in fp32: Megatron-LM's own default for bf16 (unless --grad-reduce-in-bf16). "
         "Default: in the weights' dtype, as Megatron-Bridge's performance recipes run.")]
RecomputeModulesOpt = Annotated[str | None, typer.Option(
    help="On --kernels megatron, the modules recomputed in backward under selective "
         "recomputation, comma-separated as Megatron-Core names them: layernorm (a MoE "
         "layer's pre-MLP norm), moe_act (the experts' activation). Default: none; full "
         "recomputation is --checkpointing.")]
CudaGraphScopeOpt = Annotated[str | None, typer.Option(
    help="On --kernels megatron, the regions of the step replayed as CUDA graphs, comma-"
         "separated as Megatron-Core names them: full_iteration (the whole forward-backward), "
         "full (each whole layer), or attn, mlp, moe, moe_router, moe_preprocess (Megatron-"
         "Bridge's cuda_graph_scope). Each graphed region costs the host one launch instead "
         "of one dispatch a kernel. Default: no graphs.")]
EagerAttentionOpt = Annotated[str, typer.Option(
    help="With --no-flash, what attention keeps per score: fp32-softmax (transformers' eager "
         "attention: fp32 softmax and its half copy) or sdpa-mask (torch 2.0-2.1's SDPA "
         "given an additive mask, as Qwen-1's own code without flash-attn: one copy in the "
         "activation dtype).")]
HeldLogitsOpt = Annotated[str, typer.Option(
    help="Logits the training loop keeps alive through backward: none (HF Trainer), fp32 (a "
         "loop that holds the model's output when the model upcasts its logits: transformers "
         "before 4.45), half.")]
HeldKvCacheOpt = Annotated[bool, typer.Option(
    "--held-kv-cache/--no-held-kv-cache",
    help="The held model output carries a KV cache of every layer (transformers' "
         "use_cache=True in a training forward without checkpointing), kept through backward "
         "beside k and v repeated to the query heads. Default: none held.")]
PaddingMaskOpt = Annotated[bool, typer.Option(
    "--padding-mask/--no-padding-mask",
    help="Batches padded to their longest with an attention mask: each layer's SDPA keeps an "
         "additive copy of it (transformers 5 on CUDA then repeats k and v: add "
         "--kv-repeated). Default: no mask.")]
SeqMeanOpt = Annotated[float | None, typer.Option(
    "--seq-mean", help="Samples of variable length: the dataset's mean tokens per sample "
    "(--seq is then the cap). The reserved memory comes from a replay of the caching "
    "allocator over sampled lengths.")]
SeqStdOpt = Annotated[float, typer.Option(
    "--seq-std", help="With --seq-mean: the standard deviation of the sample lengths, tokens "
    "(log-normal shape; 0: every sample the mean).")]
LongSamplesOpt = Annotated[str, typer.Option(
    "--long-samples", help="With --seq-mean: a sample longer than --seq is dropped (drop: "
    "ms-swift's truncation_strategy delete; --examples then counts only the kept share) or "
    "cut to it (truncate).")]
DocumentTokensOpt = Annotated[int | None, typer.Option(
    "--document-tokens", help="Packed sequences whose documents attend only within themselves "
    "(flash-attn varlen: TRL padding_free, DataCollatorWithFlattening, axolotl sample_packing; "
    "torchtune's document mask): their mean length in tokens. The attention's work is counted "
    "per document, all taken as this long. Left out: attention over the whole --seq.",
    min=1)]
LoraDropoutOpt = Annotated[float, typer.Option(
    help="LoRA dropout (peft's lora_dropout): above 0, a 1-byte mask per adapter input is "
         "kept for backward.")]
AdapterDtypeOpt = Annotated[str, typer.Option(
    "--lora-adapter-dtype", help="LoRA/QLoRA adapters' storage dtype: fp32 (peft from 0.12) "
    "or half (the bf16/fp16 base's dtype: peft up to 0.11, autocast_adapter_dtype=False, "
    "torchtune's and litgpt's own LoRA): half-precision adapter weights, gradients and AdamW "
    "moments; half adapters also compute in half (--lora-branch peft-half). For QLoRA, half "
    "only where the 4-bit weights are stored in a float dtype (bnb_4bit_quant_storage bf16, "
    "Answer.AI's FSDP recipe): peft keeps fp32 adapters on a uint8-stored base.")]
LoadPathOpt = Annotated[str, typer.Option(
    "--load-path", help="How the weights reach the GPU, which sets what the caching allocator "
    "holds cached when training starts: from-pretrained (loaded to the device directly; "
    "nothing cached before the first step) or fsdp-flatten (Answer.AI's fsdp_qlora: rank 0 loads to "
    "the CPU, FSDP copies, broadcasts, flattens and shards each unit, and the freed copies "
    "stay cached: a replay of the allocator, estimate/load_cache.py). LoRA/QLoRA, --zero 3 "
    "or 0, no offload, dense models.")]
LoraBranchOpt = Annotated[str | None, typer.Option(
    "--lora-branch", help="How the LoRA branch runs: peft-fp32 (peft's eager operators, fp32 "
    "adapters: each casts its input), peft-half (the same in the model's half precision: "
    "peft 0.7-0.11, DeepSpeed, FSDP), fused (Triton LoRA kernels, torch.compile, Megatron). "
    "Default: fused on --kernels megatron, peft-half for half adapters or under DeepSpeed "
    "or --zero 3, else peft-fp32. Only peft-fp32 in a pure bf16/fp16 step keeps an fp32 copy "
    "of each adapter's "
    "input.")]
DoraOpt = Annotated[bool, typer.Option(
    "--dora/--no-dora", help="DoRA, weight-decomposed LoRA (peft's use_dora=True): a trained "
    "magnitude per output feature of each adapted linear; each forward forms B A and the norm "
    "of W + B A over the whole weight, and backward keeps the rescaled base and LoRA outputs "
    "(estimate/dora.py).")]
DoraBaseOpt = Annotated[str | None, typer.Option(
    "--dora-base-matmul", help="How DoRA gets the base output it rescales: reuse (peft 0.14+ "
    "without dropout) or recompute (peft 0.9-0.13, or any peft with --lora-dropout above 0: "
    "a second matmul, whose weight copy backward keeps). Default: reuse without dropout, "
    "else recompute.")]
PeftMethodOpt = Annotated[str, typer.Option(
    "--peft-method", help="The PEFT method as peft 0.21 runs it: lora (with --dora), ia3 "
    "(vectors scaling k, v and down_proj's input), prompt_tuning (--peft-virtual-tokens "
    "trained embeddings before each sequence), prefix_tuning (trained keys and values of "
    "--peft-virtual-tokens positions per layer), loha, lokr (dense delta weight each "
    "forward, rank --lora-rank on --lora-targets), vera (shared frozen A and B, trained "
    "vectors) (estimate/peft_methods.py).")]
VirtualTokensOpt = Annotated[int | None, typer.Option(
    "--peft-virtual-tokens", help="prompt_tuning and prefix_tuning: peft's "
    "num_virtual_tokens.")]
LokrFactorOpt = Annotated[int, typer.Option(
    "--lokr-decompose-factor", help="lokr: peft's decompose_factor (-1: factors near the "
    "square root).")]
Ia3TargetsOpt = Annotated[str, typer.Option(
    "--ia3-targets", help="ia3: k-v-down (peft's llama default: k_proj, v_proj, down_proj's "
    "input) or all-linear (all seven, the MLP's inputs scaled).")]
DsBucketOpt = Annotated[int, typer.Option(
    "--deepspeed-reduce-bucket", help="DeepSpeed ZeRO-1/2 reduce_bucket_size in elements: "
    "gradient buffers allocated at each backward (0: not DeepSpeed).")]
DsOverlapOpt = Annotated[bool | None, typer.Option(
    "--deepspeed-overlap-comm/--no-deepspeed-overlap-comm",
    help="DeepSpeed overlap_comm: a second bucket buffer; with --offload below ZeRO-3 the "
    "gradients' copies to the host run beside backward (off, they add to the step). "
    "Default: DeepSpeed's, on for ZeRO-3 only.", show_default=False)]
DsPipeEngineOpt = Annotated[bool, typer.Option(
    "--deepspeed-pipe-engine/--no-deepspeed-pipe-engine",
    help="DeepSpeed's PipelineEngine runs the step (GPT-NeoX, Megatron-DeepSpeed): gradients "
    "all-reduced after the last backward, none beside compute; ZeRO 0 or 1 only.")]
LaunchBlockingOpt = Annotated[bool, typer.Option(
    "--cuda-launch-blocking/--no-cuda-launch-blocking",
    help="CUDA_LAUNCH_BLOCKING=1 in the run's environment: each operator's host and GPU time "
    "add up; no collective beside compute.")]
OffloadCopiesOpt = Annotated[str, typer.Option(
    "--offload-copies", help="With --offload: pinned host memory; pageable-step (DeepSpeed "
    "before 0.14.1: the step's weights go up through a CPU cast in pageable memory); pageable "
    "(DeepSpeed's pin_memory off, its old default: every offload copy staged, not "
    "overlapped).")]
Zero3EngineOpt = Annotated[str, typer.Option(
    "--zero3-engine", help="Who runs --zero 3: fsdp, or deepspeed (its engine hooks every submodule: a host "
         "cost per module fetched and released).")]
FsdpGradAccumOpt = Annotated[str, typer.Option(
    "--fsdp-grad-accum", help="How FSDP (--zero 3) accumulates gradients over --grad-accum "
    "micro-batches: reduce-scatter (each micro-batch's into the 1/N shards) or no-sync "
    "(FSDP.no_sync(), as Lightning Fabric and litgpt run it: every unit's whole gradient "
    "held unsharded until the last micro-batch, a LoRA unit's over its frozen base too; "
    "estimate/fsdp_no_sync.py). Not with qlora or --offload.")]
FsdpAdapterUnitsOpt = Annotated[bool, typer.Option(
    "--fsdp-adapter-units", help="FSDP (--zero 3) with each LoRA adapter a unit of its own "
    "inside its layer's (Answer.AI's fsdp_qlora train.py): FSDP's rate limiter then hides "
    "none of the layers' gathers (estimate/parallel.py).")]
FsdpApiOpt = Annotated[str, typer.Option(
    "--fsdp-api", help="Which PyTorch FSDP runs --zero 3: fsdp1 (FullyShardedDataParallel: "
    "Accelerate, Lightning) or fsdp2 (fully_shard: torchtune, torchtitan). With --offload "
    "optimizer+params, fsdp1's shard copies to the GPU are replayed on their own stream.")]
FsdpEmbeddingUnitsOpt = Annotated[bool, typer.Option(
    "--fsdp-embedding-units", help="FSDP (--zero 3) with the token embedding and the LM head "
    "units of their own (torchtune's custom_sharded_layers): neither stays gathered with the "
    "root from forward into backward.")]
KbitUpcastOpt = Annotated[bool | None, typer.Option(
    "--kbit-upcast/--no-kbit-upcast", help="qlora: peft's prepare_model_for_kbit_training "
    "casts the weights that are not 4-bit to fp32 (default: yes, unless ZeRO-3/FSDP, a "
    "GPTQ base or nf4-torchao, torchtune's recipe, which runs no peft preparation).")]
BnbSavedInputOpt = Annotated[str, typer.Option(
    "--bnb-saved-input", help="qlora on bitsandbytes (nf4, nf4-nodq): what MatMul4Bit keeps of "
    "each 4-bit linear's input: step (bitsandbytes before 0.43.2, freed with the graph after "
    "backward: HF Trainer), held (the same, under a loop that keeps the last loss into the "
    "next micro-batch: lit-gpt 2023; the previous micro-batch's inputs are alive at the next "
    "loss), held-output (a loop that keeps only its output: litgpt 2024; they are alive "
    "through the next forward) or none (bitsandbytes 0.43.2 and later).")]
Fp8ParamsOpt = Annotated[bool, typer.Option(
    "--fp8-params", help="fp8-mixed: the layers' weights are Transformer Engine fp8 tensors, no "
    "half-precision copy (Megatron-Core --fp8-param-gather; NeMo's and Megatron-Bridge's fp8 "
    "recipes).")]
HeadWeightCastOpt = Annotated[bool, typer.Option(
    "--head-weight-cast", help="The LM head's half-precision weight is in the other half dtype "
    "than autocast computes in (fp16 weights under bf16 autocast: transformers' bitsandbytes "
    "loading with no torch_dtype): autocast's copy of it kept from the head's forward to its "
    "backward.")]
LmHead4bitOpt = Annotated[bool, typer.Option(
    "--lm-head-4bit", help="qlora on bitsandbytes: the LM head is 4-bit too (Lightning's "
    "BitsandbytesPrecision, litgpt): 4-bit head weights, and a dequantised copy of the head "
    "(fp16, cast to the compute dtype) at its matmuls.")]
BaseQuantOpt = Annotated[str, typer.Option(
    help="qlora's 4-bit base: nf4 (bitsandbytes, double quantisation), nf4-nodq (without it: "
         "litgpt's bnb.nf4), nf4-torchao (torchao's NF4, torchtune), gptq-int4 or awq-int4 (a "
         "GPTQ or AWQ checkpoint, groups of 128), int8-bnb (an 8-bit base: bitsandbytes "
         "LLM.int8, load_in_8bit).")]
TrainEmbOpt = Annotated[bool, typer.Option(
    "--lora-trainable-embeddings", help="LoRA/QLoRA: train the embeddings and LM head too "
    "(peft modules_to_save: a copy with its gradient and optimizer state).")]
LmHeadOpt = Annotated[bool, typer.Option(
    "--lora-lm-head", help="LoRA/QLoRA: an adapter on the LM head too (peft target_modules "
    "with lm_head; litgpt's lora_head): r x (d + vocab) parameters.")]
SetOpt = Annotated[list[str] | None, typer.Option(
    "--set", help="Override a config field, e.g. --set num_hidden_layers=2 (repeatable).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
# the amount of work and the hardware, as estimate and compare take them
def count_option(text: str) -> float:
    """A CLI count (--tokens 1.4T, --steps 5k): gpuhours.counts.parse_count's rule. A plain
    number passes as it is, so each command's own range check names it (got nan, got 0.0)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return parse_count(text)
    except ValueError as err:
        raise typer.BadParameter(f"{err}, got {text!r}") from None


TokensOpt = Annotated[float | None, typer.Option(
    parser=count_option, metavar="COUNT", help="Tokens to train on, e.g. 2e12 or 1.4T (at "
    "most 1e15).")]
StepsOpt = Annotated[float | None, typer.Option(
    parser=count_option, metavar="COUNT", help="Optimizer steps to run, a whole number, e.g. "
    "5000 or 5k (at most 1e12).")]
ExamplesOpt = Annotated[float | None, typer.Option(
    parser=count_option, metavar="COUNT", help="Dataset size in examples, e.g. 52000 or 52k "
    "(at most 1e15).")]
EpochsOpt = Annotated[float | None, typer.Option(help="Epochs over --examples (at most 1e6).")]
PerExampleOpt = Annotated[float | None, typer.Option(
    help="Mean tokens per example (with --examples): the padding it leaves, or with --packed "
         "the tokens trained on (at most 1e7). Unpacked, examples longer than --seq are cut to "
         "it (a warning says how many tokens are dropped).")]
PackedOpt = Annotated[bool, typer.Option(
    "--packed", help="Examples packed into full sequences (default: each padded to --seq); "
    "without --tokens-per-example each example counts as a full sequence (assumed, warned).")]
ParamsOpt = Annotated[float | None, typer.Option(
    help="Model known only by its size, e.g. 13e9: a standard Llama-style shape is assumed.")]
PerNodeOpt = Annotated[int, typer.Option(help="GPUs per node.")]
NodeOpt = Annotated[str | None, typer.Option(
    "--node", help="Node type from the catalog (gpuhours catalog nodes), e.g. dgx-h100, "
                   "aws-p4d: sets --gpus-per-node and --inter-node-gb-per-s.")]
NetOpt = Annotated[float, typer.Option(
    "--inter-node-gb-per-s",
    help="Network bandwidth between nodes per GPU, GB/s one way (25 = one 200 Gb/s NIC per GPU).")]
WideOpt = Annotated[bool, typer.Option(
    "--wide", help="Full tables, every basis in its row, however long the lines (default: "
                   "tables too wide for the terminal put long texts in numbered notes).")]
LedgerOpt = Annotated[str | None, typer.Option(
    "--ledger",
    help="Ledger of measurements (default: $GPUHOURS_LEDGER or ./.gpuhours/ledger.sqlite).")]


def parse_sets(items: list[str]) -> dict[str, int | float | str | bool]:
    """--set KEY=VALUE -> {KEY: typed VALUE}: JSON scalars (3, 0.5, true, "x") or bare text."""
    parsed: dict[str, int | float | str | bool] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--set {item}", "expected KEY=VALUE, such as num_hidden_layers=2.")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text
        if not isinstance(value, int | float | str | bool):
            raise InputError(f"--set {item}", "expected a number, true/false or text.")
        parsed[key.strip()] = value
    return parsed
