"""The one setup model: what trains (Training), where (Hardware), and what generates (Generation).

Every command composes these: `estimate` and `fit` take them as they are, `trace` wraps a
Training in a TraceSetup (with the number of steps), `bench` in a BenchSetup (with compile and
the learning rate), and a plan phase's settings become one. The choices are `Literal`s here and
the defaults are the fields' defaults here, so one default holds everywhere: the CLI options take
theirs from these models (gpuhours.cli_common.default_of).

Errors are keyed by field (gpuhours.errors.FieldError): the CLI says which option set the field,
a plan which key and line. No torch here.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gpuhours.catalog.schema import GpuSpec
from gpuhours.errors import FieldError, InputError
from gpuhours.estimate.arch import ModelArch
from gpuhours.estimate.parallel import tp_sizes_that_split, tp_split_problem
from gpuhours.estimate.quant import BaseQuant

#: full: every weight trains; lora: low-rank adapters on a frozen base (peft); qlora: adapters
#: on a 4-bit NF4 base (bitsandbytes)
Method = Literal["full", "lora", "qlora"]
#: bf16-mixed: half-precision weights and grads, fp32 master weights and moments (the
#: 16 bytes/param of the ZeRO paper; DeepSpeed, Megatron, FSDP mixed precision);
#: bf16-amp: torch.autocast over fp32 weights (Hugging Face Trainer's bf16=True on a model
#: loaded in fp32): fp32 weights, grads and moments plus autocast's half-precision weight
#: copies during the step; bf16: everything in bf16, moments included (`model.to(bfloat16)`
#: + torch AdamW); fp32: everything in fp32. The fp16 names are the same with fp16.
#: fp8-mixed: bf16-mixed whose decoder-layer linears run fp8 GEMMs (Transformer Engine,
#: torchao float8: Megatron, NeMo, torchtitan); attention, norms, LM head and optimizer as
#: bf16-mixed. Needs fp8 tensor cores (Hopper, Ada, Blackwell, MI300).
Precision = Literal["fp32", "bf16", "fp16", "bf16-mixed", "fp16-mixed", "bf16-amp", "fp16-amp",
                    "fp8-mixed"]
#: the precisions that compute in a half dtype (autocast or a half-precision model)
AUTOCAST_PRECISIONS = frozenset({"bf16", "fp16", "bf16-mixed", "fp16-mixed", "bf16-amp",
                                 "fp16-amp"})
Optimizer = Literal["adamw", "adamw-8bit", "sgd", "sgd-momentum"]
#: foreach: torch's default on GPU (one state-sized set of temporaries per step); fused:
#: torch's fused=True or bitsandbytes' kernels; per-parameter: a Python loop over parameters
#: (transformers' own AdamW, the Trainer's default before 2023): temporaries of one tensor only;
#: foreach-2.0: torch 2.0's foreach AdamW, two state-sized sets of temporaries at once (torch
#: 2.1 cut them to one: pytorch#104898; estimate/adamw_temporaries.py)
OptimizerImpl = Literal["foreach", "foreach-2.0", "fused", "per-parameter"]
#: all-linear: every linear layer but the LM head (peft's "all-linear"); attention: q, k, v, o;
#: qkv: q, k and v without o (ms-swift's defaults: Qwen-1's fused c_attn, LoRATM.llama2's
#: q_proj, k_proj, v_proj); qv: q and v only (peft's default for llama); mlp: the dense MLP's
#: gate, up and down projections only (peft target_modules gate_proj, up_proj, down_proj;
#: estimate/lora_mlp.py)
LoraTargets = Literal["all-linear", "attention", "qkv", "qv", "mlp"]
#: ZeRO stage over the data-parallel GPUs: 0 = plain DDP; 3 = ZeRO-3 / FSDP full shard
ZeroStage = Literal[0, 1, 2, 3]
#: how the loss is computed from the last hidden states (estimate/memory.py logits_bytes):
#: hf: transformers' causal-LM loss (loss_utils.ForCausalLMLoss): the whole logits tensor,
#: upcast to fp32 (every decoder family in the catalog uses it: llama, mistral, qwen2/3,
#: mixtral, qwen2/3-moe, gemma, gpt2, mpt: their *ForCausalLM call self.loss_function, checked
#: in transformers 5.23; no family needs another default); chunked: torchtune's
#: CEWithChunkedOutputLoss (logits in chunks, one chunk upcast at a time); fused-linear: Liger's
#: fused linear cross-entropy (LM head + loss by chunks of tokens, gradients in the forward);
#: cut-ce: Apple's Cut Cross-Entropy (axolotl's CutCrossEntropyPlugin: logits never written
#: to memory, recomputed blockwise in backward); half: a model's own cross-entropy on its
#: half-precision logits without autocast (no .float(): Qwen-1's modeling_qwen.py under
#: DeepSpeed's fp16/bf16 engine, which casts the model and runs no torch.autocast): the
#: logits and log-softmax stay in the activation dtype; chunked-half: the LM head and
#: cross-entropy run by chunks of 128 positions on the half-precision logits, no upcast, and the
#: loop keeps the logits through backward (litgpt's finetune scripts: `model(input_ids,
#: lm_head_chunk_size=128)` and utils.chunked_cross_entropy); chunked-fabric: litgpt's loss as
#: its scripts run it, under Lightning Fabric, whose precision plugins cast every floating
#: output of the wrapped model to the default dtype, fp32 (lightning/fabric/wrappers.py
#: _FabricModule.forward -> precision.convert_output, the same in HalfPrecision, FSDPPrecision
#: and BitsandbytesPrecision, Lightning @ 71aed751 and 2.4.0): the half-precision head
#: output becomes fp32 logits, which litgpt's chunked cross-entropy takes (the LoRA scripts'
#: head by chunks of 128 positions; full.py's whole head, its logits split by 128 rows);
#: verl-logprobs: verl's actor takes
#: its log-probs itself, not through transformers' loss (volcengine/verl@df340d70
#: dp_actor.py _forward_micro_batch: `logits.div_(temperature)` in place, then
#: torch_functional.logprobs_from_logits: flash-attn's Triton cross_entropy_loss with
#: inplace_backward, flash-attn being in verl's GPU requirements): the half-precision logits
#: stay, saved by the kernel, its gradient is written into them, and the temperature's
#: backward makes one new gradient beside them; megatron: Megatron-Core's vocab-parallel
#: cross-entropy, unfused or its native fused variant (megatron/core/tensor_parallel/
#: cross_entropy.py, megatron/core/fusions/fused_cross_entropy.py at NVIDIA/Megatron-LM@b997545c
#: and @d98e8a64): the half-precision logits are cast to fp32 once, exp and the softmax run in
#: place on that copy, which is saved and turned into the gradient in place, then cast back to
#: the logits' dtype; te: Transformer Engine's Triton parallel_cross_entropy (Megatron-Core's
#: cross_entropy_fusion_impl "te"; transformer_engine/pytorch/cross_entropy.py and
#: triton/cross_entropy.py at NVIDIA/TransformerEngine@1bd45b97): the gradient is written into
#: the half-precision logits in the forward, no fp32 copy; unsloth-ce: Unsloth's Triton
#: fast_cross_entropy_loss on the half-precision logits, its gradient written into them in
#: backward (estimate/unsloth.py); half-amp: a model whose own loss takes its half-precision
#: logits (no `.float()`: Qwen-1's modeling_qwen.py) inside accelerate's autocast-wrapped
#: forward (transformers' Trainer under bf16/fp16): log-softmax stays in half precision, nll_loss
#: casts it to fp32, and accelerate's convert_outputs_to_fp32 copies the returned logits to fp32
#: (estimate/memory.py, `logits_bytes`)
LossKernel = Literal["hf", "chunked", "fused-linear", "cut-ce", "half", "chunked-half",
                     "chunked-fabric", "verl-logprobs", "megatron", "te", "unsloth-ce", "half-amp"]
#: CPU offload of training state (estimate/offload.py): none; optimizer: each rank's fp32
#: master weights, moments and gradient partition on the host, stepped there by CPU Adam
#: (DeepSpeed offload_optimizer, OpenRLHF --adam_offload; ZeRO 1-3); optimizer+params: the
#: half-precision weights on the host too, fetched for every forward and backward (DeepSpeed
#: ZeRO-3 offload_param, FSDP CPUOffload(offload_params=True); ZeRO 3)
Offload = Literal["none", "optimizer", "optimizer+params"]
#: where CPU offload's copies meet host memory (estimate/offload.py): pinned, pageable-step
#: (only the step's half-precision copy up through pageable memory) or pageable (all of them)
OffloadCopies = Literal["pinned", "pageable-step", "pageable"]
#: the code path a training step runs (estimate/host.py): eager = transformers' modelling in eager
#: PyTorch with SDPA attention; flash-attn = modelling that calls flash-attn with its fused rotary
#: and RMSNorm kernels (Qwen-1's remote code with flash-attn installed); megatron = Megatron-Core's
#: TransformerLayer with Transformer Engine's fused modules (Megatron-LM, Megatron-Bridge, NeMo);
#: unsloth = Unsloth's patched Llama-family layer: its LoRA autograd Functions on fully adapted
#: q/k/v and gate/up/down groups, Triton RMSNorm, RoPE and cross-entropy (estimate/unsloth.py);
#: megatron-2021 = Megatron-LM's own layer before Megatron-Core (NVIDIA/Megatron-LM@50a4b5fa, the
#: PTD-P paper's code): fused LayerNorm, jit-fused bias-GeLU and bias-dropout-add, attention by
#: baddbmm, the fused scaled masked softmax, dropout and bmm (no flash kernel: needs
#: flash_attention False), GPT-shaped layers only (estimate/megatron_2021.py).
#: Sets the operators the host issues per micro-batch (unsloth: counted as eager's)
Kernels = Literal["eager", "flash-attn", "megatron", "unsloth", "megatron-2021"]
#: how a Megatron-Core MoE layer routes its tokens on the megatron path (estimate/host.py
#: megatron_moe_ops_per_layer, estimate/parallel.py expert_allgather_bytes_per_layer,
#: estimate/timing.py host_gpu_combined_s): fused = the all-to-all dispatcher
#: (MoEAlltoAllTokenDispatcher) with Transformer Engine's fused permute (moe_permute_fusion
#: True: Megatron-Bridge's MoE providers, NeMo-RL's DeepSeek-V3 and Qwen3-235B recipes);
#: alltoall-unfused = the all-to-all dispatcher with the unfused permute (moe_permute_fusion
#: false: NeMo-RL v0.6's grpo_math_1B.yaml and the Qwen3-30B-A3B recipes that inherit it);
#: allgather-unfused = NeMo-RL v0.5's grpo_math_1B.yaml: moe_token_dispatcher_type allgather,
#: moe_permute_fusion false (MoEAllGatherTokenDispatcher). Each counts its router's and
#: dispatcher's operators (the router's dtype: Training.moe_router_dtype) and the host's wait
#: for the token counts every MoE layer's forward makes
MoeDispatch = Literal["fused", "alltoall-unfused", "allgather-unfused"]
#: the dtype of a Megatron-Core MoE router's logits and probs (TransformerConfig
#: moe_router_dtype, NVIDIA/Megatron-LM@d98e8a64 router.py Router.gating): bf16 = Megatron-Core's
#: default (None: the input's dtype), fp32 (Megatron-Bridge's DeepSeek providers), fp64
#: (NeMo-RL's grpo_math_1B.yaml; its gating GEMM then runs in torch.mm, not Transformer Engine's)
MoeRouterDtype = Literal["bf16", "fp32", "fp64"]
#: a region of the megatron path's training step replayed as a CUDA graph, as Megatron-Core
#: names it (NVIDIA/Megatron-LM@d98e8a64 megatron/core/transformer/transformer_config.py
#: cuda_graph_impl and cuda_graph_scope / cuda_graph_modules; estimate/host.py
#: megatron_graphed_ops_per_layer): full_iteration = one graph of the whole forward-backward of
#: a step (cuda_graph_impl "full_iteration", or "local" with scope ["full_iteration"]); full =
#: each decoder layer whole (Megatron's deprecated "full", now an empty module list with
#: cuda_graph_impl local or transformer_engine); attn = TransformerLayer._forward_attention;
#: mlp = _forward_mlp of a dense layer; moe = _forward_mlp of a MoE layer; moe_router = a MoE
#: layer's _forward_mlp up to its router; moe_preprocess = MoELayer.preprocess (with moe_router)
CudaGraphScope = Literal["full_iteration", "full", "attn", "mlp", "moe", "moe_router",
                         "moe_preprocess"]
#: a module Megatron-Core recomputes in backward under selective recomputation
#: (recompute_granularity "selective", recompute_modules; NVIDIA/Megatron-LM@2a75ac12
#: transformer_layer.py and moe/experts.py): layernorm = the norms that are modules of their
#: own (a MoE layer's pre-MLP norm; the attention's input norm is fused into linear_qkv),
#: moe_act = the routed experts' activation (TEGroupedMLP's bias_act_func). The other modules
#: Megatron names are not modelled
RecomputeModule = Literal["layernorm", "moe_act"]
#: a serving engine with paged KV cache and continuous batching (vLLM V1, SGLang), or HF
#: `generate`; vllm-v0: vLLM 0.5-0.7's V0 engine, whose host work grows with the running batch;
#: tensorrt-llm: TensorRT-LLM 0.5-0.6's C++ GptSession, a static batch with a KV cache sized to
#: it (estimate/trtllm.py); lmdeploy: LMDeploy 0.1's TurboMind, a C++ persistent batch over a
#: paged cache without CUDA graphs (estimate/lmdeploy.py)
Engine = Literal["vllm", "vllm-v0", "hf-generate", "sglang", "tensorrt-llm", "lmdeploy"]
#: a config field set on top of a model's config.json (bench and trace `--set`)
ConfigValue = int | float | str | bool


class _Strict(BaseModel):
    # defer_build: the CLI reads the defaults at import; the schema is built on first use
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True,
                              defer_build=True)

    def __init__(self, /, **data: Any) -> None:
        # the library's promise (README): bad input raises gpuhours.InputError, a FieldError
        # naming the field, whether a validator of ours or a pydantic constraint found it
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise field_error_of(exc) from None


def field_error_of(exc: ValidationError) -> InputError:
    """The first error of a setup's validation as a FieldError keyed by the setup's own field:
    the outermost named part of its location (an item of a list field is its field's, a part
    of a nested model, `gpu.memory_gb`, its field's: `gpu`); an InputError on the setup when
    the location names none."""
    first = exc.errors()[0]
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, InputError):
        return cause
    names = [str(part) for part in first["loc"] if not isinstance(part, int)]
    if names == ["arch"] and first["type"] == "missing":  # neither model nor params given
        return FieldError("model", "a model is required: a catalog name or a config.json path "
                                   "(model=...), or a parameter count (params=...).")
    # our own validators' messages (value_error) say what they got
    got = ("" if first["type"] in ("missing", "value_error")
           else f" (got {first.get('input')!r})")
    more = (f" ({exc.error_count() - 1} more error(s) after fixing this one)"
            if exc.error_count() > 1 else "")
    message = f"{first['msg'].removeprefix('Value error, ')}{got}.{more}"
    if not names:
        return InputError("setup", message)
    inner = ".".join(names[1:])
    return FieldError(names[0], f"{inner}: {message}" if inner else message)


def _resolve_model_fields(data: Any) -> Any:
    """Fill `arch` and `model_basis` from `model` (a catalog name or config.json path) or
    `params` when `arch` is not given: `Training(model="qwen2.5-7b")` is a whole setup."""
    if not isinstance(data, dict) or data.get("arch") is not None:
        return data
    model, params = data.get("model"), data.pop("params", None)
    if model is None and params is None:
        return data  # pydantic then reports the missing `model`
    from gpuhours.resolve import resolve_model

    arch, basis = resolve_model(model, params, overrides=data.get("config_overrides") or {})
    return {**data, "arch": arch, "model_basis": basis}


class _ReadsModel(_Strict):
    """A setup whose shape (`arch`) may be given by a model reference (`model`, `params`)."""

    @model_validator(mode="before")
    @classmethod
    def _fill_arch(cls, data: Any) -> Any:
        return _resolve_model_fields(data)


def default_grad_accum(pp: int, virtual_stages: int) -> int:
    """The accumulation of a setup that gives none: 1, or pp on the interleaved schedule, which
    runs the micro-batches in groups of pp (Megatron-LM requires a multiple of pp; the check
    in _check_layout is for an accumulation given)."""
    return pp if virtual_stages > 1 else 1


class Training(_ReadsModel):
    """One training setup, per GPU: the model, the method, the precision and the batch.

    Build it from a model reference, `Training(model="qwen2.5-7b", method="lora")` (a catalog
    name or a config.json path; `params=13e9` for a standard shape of that size), or from a
    shape, `Training(arch=ModelArch(...))`."""

    @model_validator(mode="before")
    @classmethod
    def _accumulation_left_out(cls, data: Any) -> Any:
        """No accumulation given: default_grad_accum of the layout (issue 16: with virtual
        stages and none given, accumulation 1 was refused before anything chose one)."""
        if not isinstance(data, dict) or data.get("grad_accum") is not None:
            return data
        try:
            pp, vs = int(data.get("pp") or 1), int(data.get("virtual_stages") or 1)
        except (TypeError, ValueError):
            return data  # the fields' own validation names the bad value
        if pp > 1 and vs > 1:
            return {**data, "grad_accum": default_grad_accum(pp, vs)}
        return data

    #: the shape the physics uses; read from `model` when not given
    arch: ModelArch
    #: where the shape came from: a catalog name or a config.json path; trace and bench build
    #: the real model from it. None for a shape given directly or a standard shape (--params)
    model: str | None = None
    #: how the shape was obtained (catalog row, config file, assumed standard shape)
    model_basis: str = "architecture given by the caller"
    #: Hugging Face config fields set on top of the model's config (`--set num_hidden_layers=2`)
    config_overrides: dict[str, ConfigValue] = Field(default_factory=dict)
    method: Method = "full"
    precision: Precision = "bf16-mixed"
    optimizer: Optimizer = "adamw"
    optimizer_impl: OptimizerImpl = "foreach"
    #: sequences per micro-batch per GPU
    micro_batch: int = Field(default=1, ge=1, le=1_000_000)
    #: tokens per sequence
    seq_len: int = Field(default=2048, ge=1, le=10_000_000)
    #: micro-batches per optimizer step; when not given, 1, or on the interleaved schedule
    #: (virtual_stages above 1) pp, the fewest it runs (default_grad_accum)
    grad_accum: int = Field(default=1, ge=1, le=1_000_000)
    #: activation (gradient) checkpointing: only each block's input is kept; one extra forward
    checkpointing: bool = False
    #: attention by a flash kernel (no S x S scores kept); False: eager attention keeps them
    flash_attention: bool = True
    #: what attention without a flash kernel keeps per score (one head, one key position, per
    #: token), when flash_attention is False. fp32-softmax: transformers' eager attention
    #: (softmax in fp32, kept, and its cast to the activation dtype, kept by the AV matmul: 4 +
    #: the activation bytes). sdpa-mask: torch 2.0-2.1's scaled_dot_product_attention given an
    #: additive attention mask (Qwen-1's modeling_qwen.py without flash-attn): no flash kernel
    #: takes a mask, so either the math fallback (_scaled_dot_product_attention_math: softmax in
    #: the input's dtype, whose output softmax's and AV's backward both keep) or the
    #: memory-efficient kernel, which keeps the mask expanded to every head and padded to 16
    #: columns (attention.cpp preprocess_mask / pad_bias): the activation bytes per score
    eager_attention: Literal["fp32-softmax", "sdpa-mask"] = "fp32-softmax"
    #: the flash kernel is a fused one that overlaps softmax with the matmuls: cuDNN's fused
    #: attention (Transformer Engine: Megatron-LM, NeMo) or FlashAttention-3; False: PyTorch
    #: SDPA's FlashAttention-2 kernels (transformers' default). Its rate differs on Hopper only;
    #: on data-centre Blackwell both are cuDNN's (assumptions.ATTENTION_EFFICIENCY_BY_GENERATION)
    fused_attention: bool = False
    #: torch.compile of the decoder layers and the loss (torchtune's compile=True, HF Trainer's
    #: torch_compile): AOTAutograd's min-cut partitioner recomputes the cheap elementwise
    #: operators in backward instead of saving their outputs, Inductor fuses them, and a
    #: compiled cross-entropy keeps the half-precision logits, not an fp32 log-softmax
    #: (estimate/compiled.py, measured on CPU: tests/test_compiled.py). False: eager PyTorch
    compile: bool = False
    #: k and v repeated to the query heads before the attention kernel (torchtune's
    #: MultiHeadAttention; transformers' repeat_kv where SDPA is not given enable_gqa): the
    #: kernel saves them at the query width (estimate/kv_repeat.py). False: grouped k and v
    #: reach the kernel as they are (transformers 5, flash-attn)
    kv_repeated: bool = False
    #: the optimizer step run inside backward (torchtune's optimizer_in_bwd: one optimizer per
    #: parameter, stepped by a post-accumulate-grad hook that then frees the gradient;
    #: estimate/optim_in_backward.py): no whole-model gradient buffer and no separate step
    #: phase. Needs grad_accum 1 (torchtune refuses accumulation with it)
    optimizer_in_backward: bool = False
    #: bitsandbytes' paged optimizer (PagedAdamW, PagedAdamW8bit): the moments of every
    #: parameter of 1e5 elements or more in CUDA managed memory (cudaMallocManaged), outside
    #: torch's caching allocator, which the driver pages to host memory when the GPU is full
    #: (estimate/paged_optimizer.py). Counted apart from the allocator's figures; never a
    #: reason not to fit. Modelled for full fine-tuning (adapters: counted on the GPU)
    optimizer_paged: bool = False
    #: the tensors autograd saves in the model's forward copied to pinned host memory on a side
    #: stream and brought back in backward (torchtune's enable_activation_offloading,
    #: OffloadActivations; estimate/activation_offload.py): under checkpointing each layer's
    #: input leaves the GPU. Needs checkpointing (torchtune refuses it without)
    activation_offload: bool = False
    #: the loss kernel (LossKernel above); "hf" upcasts the whole logits tensor to fp32. None:
    #: the kernel path's own (loss_kernel_of): megatron on the megatron path, whose models
    #: compute Megatron-Core's vocab-parallel cross-entropy, never transformers' loss; else hf
    loss_kernel: LossKernel | None = None
    #: the kernel path (Kernels above): the host's operators per micro-batch
    kernels: Kernels = "eager"
    #: Liger-Kernel's fused RMSNorm, RoPE and SwiGLU/GeGLU patched into transformers' decoder
    #: layers (estimate/liger.py): what the layer saves for backward, its elementwise traffic
    #: and its host operators. "classes": apply_liger_kernel_to_<model>() before the model is
    #: built, replacing the classes, so every RMSNorm, Qwen3's per-head q/k norms too
    #: (LLaMA-Factory's enable_liger_kernel, axolotl's LigerPlugin, scripts); "instance":
    #: applied to a built model (_apply_liger_kernel_to_instance: HF Trainer's and TRL's
    #: use_liger_kernel, verl's use_liger), which patches the block norms, the MLP and the
    #: rotary function but leaves per-head q/k norms eager; "none": not patched. Its fused
    #: linear cross-entropy is loss_kernel "fused-linear", apart. The eager kernel path only,
    #: not compiled
    liger_kernels: Literal["none", "classes", "instance"] = "none"
    #: a MoE model's token routing on the megatron path (MoeDispatch above): its router's and
    #: dispatcher's host operators and the expert-parallel traffic
    moe_dispatch: MoeDispatch = "fused"
    #: a MoE model's router dtype on the megatron path (MoeRouterDtype above); None: fp64 with
    #: the unfused dispatches (NeMo-RL's grpo_math_1B.yaml sets it), else Megatron-Core's
    #: default, the input's (bf16)
    moe_router_dtype: MoeRouterDtype | None = None
    #: a MoE model's routed experts on the megatron path run through Transformer Engine's op
    #: fuser (Megatron-Core use_transformer_engine_op_fuser: grouped fc1, the scaled, clamped
    #: activation and grouped fc2 with its bias as fused ops; Megatron-Bridge's gpt-oss GB200/
    #: GB300 MXFP8 full-iteration recipes). False: TEGroupedMLP's unfused path, whose eager
    #: clamp and per-expert fc2 bias cost passes (estimate/moe_gemm.py
    #: unfused_expert_bytes_per_token_layer)
    moe_fused_mlp: bool = False
    #: the megatron path's gradient buffer (Megatron-Core DistributedDataParallel's main_grad)
    #: in fp32, accumulated and reduced in fp32: Megatron-LM's own default for bf16
    #: (megatron/training/arguments.py: "bfloat16 requires gradient accumulation and
    #: all-reduce to be done in fp32", accumulate_allreduce_grads_in_fp32 unless
    #: --grad-reduce-in-bf16; NVIDIA/Megatron-LM@d98e8a64). False: in the weights' dtype, as
    #: Megatron-Bridge's performance recipes set grad_reduce_in_fp32 (the tables' runs)
    grad_reduce_in_fp32: bool = False
    #: the megatron path's selective recomputation (RecomputeModule above; Megatron-Bridge's
    #: recipes' recompute_modules with recompute_granularity "selective"): each module's
    #: forward runs again in backward (estimate/moe_gemm.py recompute_bytes_per_token_layer).
    #: None: none. A comma-separated string is read as the list. Full recomputation is
    #: `checkpointing`
    recompute_modules: tuple[RecomputeModule, ...] | None = None
    #: the regions of the megatron path's step replayed as CUDA graphs (CudaGraphScope above;
    #: Megatron-Bridge's recipes' cuda_graph_scope): each graphed region's kernels cost the
    #: host one graph launch instead of one dispatch each (estimate/host.py). None: no graphs
    #: (cuda_graph_impl "none"). A comma-separated string is read as the list
    cuda_graph_scope: tuple[CudaGraphScope, ...] | None = None
    #: under checkpointing, each block's input moved to host memory in forward and back in
    #: backward (Unsloth's use_gradient_checkpointing="unsloth": estimate/unsloth.py); the GPU
    #: keeps one block's input. False: every block's input stays on the GPU
    checkpoint_offload: bool = False
    #: logits the training loop keeps alive through backward by holding the model's output
    #: (`output = model(...); output.loss.backward()`, where HF Trainer's compute_loss returns
    #: the loss only): "fp32" where the model returns upcast logits (transformers before 4.45:
    #: `logits = logits.float()` in the model's forward), "half" where it returns the LM head's
    #: output; "none": freed before backward. With the hf and half loss kernels
    held_logits: Literal["none", "fp32", "half"] = "none"
    #: the model's output, held by the loop through backward, carries a KV cache of every
    #: layer's k and v (transformers' use_cache=True in a training forward without
    #: checkpointing: DynamicCache.update stores torch.cat copies). Where k and v are repeated
    #: before the kernel (kv_repeated) the kernel saves the repeated copies and the cache's
    #: are kept beside them; else the cache holds the tensors the kernel saves
    #: (estimate/kv_repeat.py). False: no cache, or none held
    held_kv_cache: bool = False
    #: batches padded to their longest sample, with an attention mask that transformers passes
    #: to SDPA as a 4D boolean mask: torch makes it an additive bias in the query's dtype in
    #: every call, which each layer's kernel saves (estimate/kv_repeat.py). On CUDA
    #: transformers 5 then repeats k and v (set kv_repeated too). False: no mask (packed, or
    #: padded to a fixed length with no pad tokens)
    padding_mask: bool = False
    #: samples of variable length (estimate/fragmentation.py): the dataset's mean tokens per
    #: sample before the cap; seq_len is then the cap (the longest micro-batch). None: every
    #: sample is seq_len tokens (packed or padded to it). Sets the reserved memory: the caching
    #: allocator replayed over micro-batches of sampled lengths
    seq_len_mean: float | None = Field(default=None, ge=1, le=10_000_000)  # a sample: 1+ tokens
    #: the standard deviation of those lengths, tokens (log-normal shape); 0: all the mean
    seq_len_std: float = Field(default=0.0, ge=0, le=10_000_000)
    #: a sample longer than seq_len: "drop" (ms-swift's truncation_strategy 'delete') or
    #: "truncate" (cut to seq_len, transformers' tokenizers with truncation=True)
    long_samples: Literal["drop", "truncate"] = "drop"
    #: packed sequences whose documents attend only within themselves: the mean tokens of a
    #: document (flash-attn's varlen kernels over cu_seqlens, as TRL's padding_free, transformers'
    #: DataCollatorWithFlattening and axolotl's sample_packing run them; torchtune's packed
    #: datasets with their document mask). None: attention spans the whole sequence. Only the
    #: attention's work changes (each token attends to the earlier tokens of its own document);
    #: documents are taken as all of this length, so with varied lengths (mean of L^2 / mean of
    #: L above the mean) the attention is under-counted
    document_tokens: int | None = Field(default=None, ge=1, le=10_000_000)
    lora_rank: int = Field(default=16, ge=1, le=65536)
    lora_targets: LoraTargets = "all-linear"
    #: LoRA's dropout on each adapter's input (peft's lora_dropout; its default 0): above 0,
    #: torch's dropout keeps a 1-byte mask per input element of every adapter for backward
    lora_dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    #: The adapters' storage (lora_adapter_dtype: their weights, gradients and optimizer state)
    #: and their compute (lora_branch: the operators that run and the copies they make) are two
    #: facts: under DeepSpeed the engine casts fp32 adapters to half for compute and keeps fp32
    #: master copies in its optimizer; peft 0.7-0.11 keeps them half in both.
    #: the dtype LoRA/QLoRA's adapter weights are kept in: "fp32" (peft from 0.12, whose
    #: get_peft_model(autocast_adapter_dtype=True) upcasts bf16/fp16 adapters: PR #1706) or
    #: "half", the half-precision base's dtype (peft 0.7-0.11 moved each adapter to its base
    #: layer's dtype when that is a float, tuners/lora/layer.py update_layer `self.to(
    #: weight.device, dtype=weight.dtype)`: not for a bitsandbytes 4-bit layer stored as uint8,
    #: whose adapters stayed fp32; peft's autocast_adapter_dtype=False; torchtune's and litgpt's
    #: own LoRA layers, built in the model's dtype). Half adapters have half-precision gradients
    #: and torch AdamW moments, and compute in half (lora_branch's default: peft-half)
    lora_adapter_dtype: Literal["fp32", "half"] = "fp32"
    #: how the LoRA branch runs (its memory traffic: estimate/lora_traffic.py): "peft-fp32"
    #: (peft's eager operators with fp32 adapters, peft 0.5-0.6 and 0.12+: each adapter casts its
    #: half-precision input to fp32), "peft-half" (the same operators in the model's half
    #: precision: peft 0.7-0.11, which cast the adapters to the base weight's dtype, a model
    #: cast by DeepSpeed or FSDP, torchtune's eager LoRALinear), "fused" (the branch's
    #: elementwise work fused away: Triton LoRA kernels, torch.compile, Megatron's adapters).
    #: None: fused on the megatron kernel path, else peft-half for half adapters or where
    #: DeepSpeed (a ZeRO-1/2 bucket, its ZeRO-3 engine) or FSDP (zero_stage 3) casts the model,
    #: else peft-fp32 (estimate/lora_traffic.lora_branch_of). Memory follows it too: only the
    #: peft-fp32 branch keeps an fp32 copy of each adapter's input for backward
    lora_branch: Literal["peft-fp32", "peft-half", "fused"] | None = None
    #: DoRA, weight-decomposed LoRA (Liu et al. 2024, arXiv:2402.09353; peft's use_dora=True):
    #: every adapted linear also trains a magnitude vector (one per output feature) and, each
    #: forward, forms the dense B A product and the norm of W + scaling B A over the whole
    #: weight (detached, the paper's sec. 4.3), then rescales the base and LoRA outputs, which
    #: autograd keeps for backward (estimate/dora.py). peft's eager operators; LoRA/QLoRA only
    dora: bool = False
    #: how DoRA gets the base output it rescales: "reuse" (peft 0.14+, PR #2122: the base
    #: layer's own result, when lora_dropout is 0 or in eval), "recompute" (peft 0.9-0.13
    #: always, and every peft with lora_dropout above 0: F.linear(dropout(x), W) again, the
    #: weight cast to the adapters' input dtype). None: reuse without dropout, else recompute
    dora_base_matmul: Literal["reuse", "recompute"] | None = None
    #: the PEFT method (peft's tuners, as peft 0.21.2 runs them: estimate/peft_methods.py):
    #: "lora" (LoRA, DoRA with `dora`), "ia3" (learned vectors scaling k_proj's and v_proj's
    #: outputs and down_proj's input: peft's default targets for the llama family; lora_targets
    #: and lora_rank are not used), "prompt_tuning" (peft_virtual_tokens trained embeddings put
    #: before every sequence: the model sees seq_len + them), "prefix_tuning" (trained keys and
    #: values of peft_virtual_tokens positions in every layer, no projection), "loha" and "lokr"
    #: (LyCORIS' Hadamard and Kronecker products of rank lora_rank on lora_targets, the dense
    #: delta weight formed each forward), "vera" (frozen shared random A and B of rank lora_rank,
    #: trained per-linear vectors). Other methods are not modelled. Non-LoRA methods: a bf16,
    #: fp16 or fp32 base (method lora), peft's eager layers, no dropout
    peft_method: Literal["lora", "ia3", "prompt_tuning", "prefix_tuning", "loha", "lokr",
                         "vera"] = "lora"
    #: prompt_tuning and prefix_tuning: peft's num_virtual_tokens (needed by both)
    peft_virtual_tokens: int | None = Field(default=None, ge=1, le=100_000)
    #: ia3: the linears it scales: "k-v-down" (peft's llama default: k_proj, v_proj, and
    #: down_proj's input) or "all-linear" (all seven, the MLP's as feedforward: their inputs)
    ia3_targets: Literal["k-v-down", "all-linear"] = "k-v-down"
    #: lokr: peft's decompose_factor (its default -1: factors near the square root)
    lokr_decompose_factor: int = Field(default=-1, ge=-1)
    #: fp8-mixed: the decoder layers' matmul weights are Transformer Engine fp8 tensors, with
    #: no half-precision copy (Megatron-Core's fp8_param, --fp8-param-gather: NeMo 2's
    #: bf16_with_fp8_mixed, Megatron-Bridge's FP8 current-scaling and MXFP8 recipes): each is
    #: its fp8 data and transpose (assumptions.FP8_WEIGHT_COPY_BYTES), the fp32 main copy in
    #: the optimizer. False: half-precision weights, cast to fp8 copies for the GEMMs
    fp8_params: bool = False
    zero_stage: ZeroStage = 0
    #: how the weights reach the GPU before training, which sets what the caching allocator
    #: holds cached when the step starts (estimate/load_cache.py): "from-pretrained" (loaded
    #: to the device directly: nothing cached is modelled, the flat allocator reserve only) or
    #: "fsdp-flatten" (Answer.AI's fsdp_qlora train.py: rank 0 holds the weights on the CPU,
    #: QLoRA quantised on the GPU then moved off with empty_cache, and FSDP (torch 2.1-2.3)
    #: copies each unit to the GPU, broadcasts it (sync_module_states), flattens and shards
    #: it, leaving the freed copies cached; zero_stage 3 is FULL_SHARD, 0 NO_SHARD). LoRA and
    #: QLoRA on dense decoder models without CPU offload
    load_path: Literal["from-pretrained", "fsdp-flatten"] = "from-pretrained"
    #: CPU offload (Offload above): GPU memory without the offloaded state, host RAM for it,
    #: PCIe traffic and the CPU Adam step in the step time
    offload: Offload = "none"
    #: DeepSpeed ZeRO-1/2's reduce_bucket_size, elements: with contiguous_gradients (its
    #: default) every backward allocates a gradient buffer of that many elements in the model's
    #: dtype, two with overlap_comm (deepspeed/runtime/zero/stage_1_and_2.py, backward);
    #: 0 = not DeepSpeed ZeRO-1/2 (torch DDP, FSDP)
    deepspeed_reduce_bucket: int = Field(default=0, ge=0, le=100_000_000_000)
    #: CPU offload's host memory (estimate/offload.py OffloadCopies): pinned; pageable-step (the
    #: optimizer's state pinned, but the step's half-precision copy up goes through a CPU-side
    #: cast into pageable memory: DeepSpeed before 0.14.1); pageable (DeepSpeed's pin_memory
    #: off, its default before PR #8207: every offload copy staged through pageable memory)
    offload_copies: OffloadCopies = "pinned"
    #: DeepSpeed's overlap_comm: a second bucket buffer, so that reduction and backward overlap;
    #: with offload below ZeRO-3 the gradients' copies to the host overlap backward only with it
    #: (estimate/offload.py). None: DeepSpeed's own default, on for ZeRO-3 only
    #: (deepspeed_overlap_comm_of)
    deepspeed_overlap_comm: bool | None = None
    #: DeepSpeed's PipelineEngine runs the step (GPT-NeoX at any pipe-parallel-size of 1 or more,
    #: Megatron-DeepSpeed with pipelining): the engine turns the backward's gradient reduction
    #: off and all-reduces every gradient after the last micro-batch's backward (its ReduceGrads
    #: instruction), so none of it runs beside compute; with ZeRO-1 the updated weights are
    #: all-gathered in the optimizer step (estimate/pipe_engine.py). ZeRO-2 and 3 are refused by
    #: the engine; with bf16 it reduces BF16_Optimizer's fp32 gradients (give zero_stage 1:
    #: that optimizer shards its state as ZeRO-1 does).
    deepspeed_pipe_engine: bool = False
    #: CUDA_LAUNCH_BLOCKING=1 in the run's environment (BigScience's BLOOM script sets it: "do
    #: not remove or the training will hang"): each kernel launch returns only when the kernel
    #: has run, so the host's issuing of each operator and the GPU's running of it add up, and
    #: no collective runs beside compute (estimate/timing.py)
    cuda_launch_blocking: bool = False
    #: who runs ZeRO stage 3: "fsdp" (PyTorch FSDP: hooks per wrapped unit, their host cost not
    #: counted) or "deepspeed" (DeepSpeed's stage 3 engine, which hooks every submodule and
    #: fetches and releases its parameters around each forward and backward of it: a host cost
    #: per module, estimate/host.py zero3_hook_ops_per_micro_batch)
    zero3_engine: Literal["fsdp", "deepspeed"] = "fsdp"
    #: how FSDP (zero_stage 3, zero3_engine fsdp) accumulates gradients over the micro-batches
    #: of a step (estimate/fsdp_no_sync.py): "reduce-scatter" (every micro-batch's gradients
    #: reduce-scattered into the shards: 1/N of them held) or "no-sync" (FSDP.no_sync() on the
    #: accumulating micro-batches, as Lightning Fabric's no_backward_sync and litgpt run it:
    #: every unit keeps its whole unsharded gradient until the last micro-batch, and with
    #: use_orig_params a LoRA unit's gradient covers its frozen base weights too)
    fsdp_grad_accum: Literal["reduce-scatter", "no-sync"] = "reduce-scatter"
    #: FSDP (zero_stage 3, zero3_engine fsdp) with each LoRA adapter's lora_A and lora_B a unit
    #: of its own inside its decoder layer's unit, under FSDP1's rate limiter
    #: (limit_all_gathers, its default): how Answer.AI's fsdp_qlora train.py wraps peft's
    #: model. The adapter units' freed weights hold the host within two units of the GPU, so
    #: no layer's all-gather is hidden behind compute (estimate/parallel.py, the note above
    #: fsdp_adapter_unit_collectives); their own small collectives are counted too
    fsdp_adapter_units: bool = False
    #: which PyTorch FSDP runs zero_stage 3 (zero3_engine fsdp): "fsdp1" (FullyShardedDataParallel
    #: with flat parameters: HF Accelerate/Trainer, Lightning, Answer.AI's train.py) or "fsdp2"
    #: (fully_shard with per-parameter DTensor shards: torchtune, torchtitan). Used where their
    #: memory differs in a way that is modelled: the step replay of FSDP1's CPU offload, whose
    #: host-to-GPU shard copies take their own stream's segments (estimate/step_replay.py);
    #: FSDP2's CPU offload keeps the flat reserve
    fsdp_api: Literal["fsdp1", "fsdp2"] = "fsdp1"
    #: FSDP (zero_stage 3, zero3_engine fsdp) with the token embedding and the LM head units of
    #: their own (torchtune's `custom_sharded_layers: ['tok_embeddings', 'output']`), each
    #: resharded after its forward, so the root unit holds only the final norm: at the loss the
    #: head's unit is gathered for its backward, the embedding's is not (estimate/memory.py
    #: gathered_working_bytes). False: they are the root's, gathered from forward into backward
    fsdp_embedding_units: bool = False
    #: qlora: peft's prepare_model_for_kbit_training casts every weight that is not 4-bit
    #: (embeddings, LM head, norms) to fp32, as TRL, axolotl and the PEFT recipes run it;
    #: None = yes, unless ZeRO-3/FSDP (the FSDP-QLoRA recipe keeps them in bf16), a GPTQ base
    #: (peft skips the cast for GPTQ models) or nf4-torchao (torchtune's recipe: no peft at all)
    kbit_upcast: bool | None = None
    #: qlora's 4-bit base (estimate/quant.py): nf4 (bitsandbytes, double quantisation),
    #: gptq-int4 (auto-gptq, group size 128: a GPTQ checkpoint such as Qwen-7B-Chat-Int4),
    #: awq-int4 (AutoAWQ, group size 128), nf4-nodq (bitsandbytes NF4 without double
    #: quantisation: an fp32 absmax per 64 weights, 4.5 bits a weight), nf4-torchao (torchao's
    #: NF4Tensor, torchtune's QLoRA: nf4's bits, and its matmul keeps no input for backward),
    #: int8-bnb (not 4-bit: bitsandbytes' LLM.int8 Linear8bitLt, transformers' load_in_8bit,
    #: LoRA on an 8-bit base; estimate/bnb_int8.py)
    base_quant: BaseQuant = "nf4"
    #: qlora, bitsandbytes bases (nf4, nf4-nodq): what MatMul4Bit keeps of each 4-bit linear's
    #: input. "step": bitsandbytes before 0.43.2 keeps it (`ctx.tensors = (A, B)`,
    #: autograd/_functions.py) for backward, a loop that drops its loss after backward (HF
    #: Trainer) frees it with the graph. "held": the same release under a loop that keeps the
    #: last micro-batch's loss alive into the next one (lit-gpt of 2023: `loss` stays a tensor):
    #: a ctx attribute is not released by backward, so every 4-bit linear's input of the
    #: previous micro-batch is alive until the next loss is made. "held-output": a loop that
    #: keeps only its output (litgpt of 2024, finetune/lora.py @ 00af8b0d: log_interval 1
    #: turns `loss` into a float, `logits` stays): those inputs and the previous logits are
    #: alive through the next forward, freed when `logits` is reassigned, before the next loss.
    #: "none": bitsandbytes from 0.43.2 (PR #1270) keeps only the 4-bit weight
    bnb_saved_input: Literal["step", "held", "held-output", "none"] = "step"
    #: qlora: the LM head is a bitsandbytes 4-bit linear too, as Lightning's
    #: BitsandbytesPrecision converts every nn.Linear (litgpt passes no ignore_modules); it
    #: quantises from fp16, so each matmul of the head dequantises an fp16 copy and casts it to
    #: the compute dtype (estimate/memory.py head_dequant_bytes)
    lm_head_4bit: bool = False
    #: the LM head's weight stored in the other half dtype than autocast computes in (fp16
    #: weights under bf16 autocast): autocast casts it at every forward, and F.linear keeps
    #: that copy for the input's gradient until the head's backward (estimate/memory.py
    #: head_weight_cast_bytes). Not cached: autocast caches casts of fp32 leaves that require
    #: grad only (aten/src/ATen/autocast_mode.cpp cached_cast). As transformers of late 2023
    #: loads a bitsandbytes model given no torch_dtype (the fp16 it forces) while the Trainer
    #: runs bf16 autocast: ms-swift's Qwen bitsandbytes rows of Jan 2024
    head_weight_cast: bool = False
    #: LoRA/QLoRA also train the token embedding and the LM head, as peft's
    #: modules_to_save=["wte", "lm_head"] does: a whole trainable copy of each (copy.deepcopy,
    #: in the frozen weights' dtype) beside the frozen original, with its gradient and the
    #: optimizer's state; the LM head's weight gradient adds a matmul to backward
    lora_trainable_embeddings: bool = False
    #: LoRA/QLoRA also adapt the LM head (peft target_modules with "lm_head", litgpt's
    #: lora_head): one more adapter of r x (d + vocab) parameters, whose A keeps the head's input
    #: (d per token) for its gradient (estimate/lora.py lm_head_adapter_params)
    lora_lm_head: bool = False
    #: tensor parallelism with sequence parallelism (Megatron-LM): GPUs each layer's weights and
    #: activations are split over (estimate/parallel.py); it must divide the attention heads,
    #: the KV heads and the MLP width (parallel.tp_split_widths)
    tp: int = Field(default=1, ge=1, le=1024)
    #: pipeline parallelism: stages the layers are split over (1F1B schedule; grad_accum is the
    #: number of micro-batches per step)
    pp: int = Field(default=1, ge=1, le=1024)
    #: context parallelism: GPUs the sequence is split over (ring attention)
    cp: int = Field(default=1, ge=1, le=1024)
    #: expert parallelism (MoE): GPUs the routed experts are split over (all-to-all)
    ep: int = Field(default=1, ge=1, le=4096)
    #: model chunks per pipeline rank of the interleaved schedule (1 = plain 1F1B)
    virtual_stages: int = Field(default=1, ge=1, le=128)
    #: tensor-parallel all-gathers and reduce-scatters split into chunks pipelined with the
    #: GEMMs that use them (Megatron-Core --tp-comm-overlap, Transformer Engine userbuffers;
    #: within a node, Hopper or later: CUDA multicast over NVSwitch). estimate/parallel.py
    tp_comm_overlap: bool = False
    #: the expert all-to-all of one micro-batch hidden behind another micro-batch's compute
    #: (Megatron-Core --overlap-moe-expert-parallel-comm, "combined 1F1B"; DeepSeek-V3's
    #: DualPipe): without pipelining or with the interleaved schedule, no full recomputation
    moe_a2a_overlap: bool = False

    #: vision-language models: images per example; each adds its image tokens to the sequence
    #: the language model sees (beyond seq_len's text tokens) and one vision-tower forward
    images_per_example: int = Field(default=0, ge=0, le=100_000)
    #: pixels of each image as given to the processor (assumed square), resized by its
    #: smart-resize rule to one token per 28 x 28 pixels (estimate/vision.py)
    image_pixels: int | None = Field(default=None, ge=1, le=1_000_000_000)
    #: language-model tokens per image, given directly instead of image_pixels
    image_tokens: int | None = Field(default=None, ge=1, le=1_000_000)
    #: the processor's max_pixels (images above it are shrunk); None = its default,
    #: 28 x 28 x 1280 = 1,003,520 (transformers' Qwen2VLImageProcessor)
    image_max_pixels: int | None = Field(default=None, ge=784, le=1_000_000_000)
    #: the vision tower trains (full fine-tuning only); default frozen, as LLaMA-Factory
    #: (freeze_vision_tower: true) and Qwen's own Qwen2.5-VL fine-tuning script (tune_mm_vision
    #: False) run it: LoRA adapts the language model only, and a frozen tower keeps no
    #: gradients, optimizer state or activations
    train_vision: bool = False

    @field_validator("cuda_graph_scope", "recompute_modules", mode="before")
    @classmethod
    def _scope_list(cls, scope: Any) -> Any:
        """"attn,moe_router" (the CLI's, a plan's string) as the list; none named: None."""
        if isinstance(scope, str):
            scope = [part.strip() for part in scope.split(",") if part.strip()]
        return scope if scope is None or len(scope) else None

    @model_validator(mode="after")
    def _check_images(self) -> Training:
        if not self.images_per_example:
            if (self.image_pixels is not None or self.image_tokens is not None
                    or self.image_max_pixels is not None):
                raise FieldError("images_per_example", "an image size is given but no images "
                                 "per example: give images_per_example too.")
            if self.train_vision:
                raise FieldError("train_vision", "a trained vision tower needs images: give "
                                 "images_per_example.")
            return self
        if self.arch.vision is None:
            raise FieldError("images_per_example", f"{self.arch.name} has no vision tower "
                             "(no vision_config gpuhours reads); images cannot be fed to it.",
                             "Use a vision-language model such as qwen2.5-vl-7b.")
        if (self.image_pixels is None) == (self.image_tokens is None):
            raise FieldError(("image_pixels", "image_tokens"), "give the size of each image: "
                             "its pixels (e.g. 480000) or its tokens, one of the two.")
        if (self.image_max_pixels is not None
                and self.arch.model_type not in ("qwen2_vl", "qwen2_5_vl", "qwen3_5",
                                                 "qwen3_5_moe")):
            raise FieldError("image_max_pixels", f"{self.arch.name}'s processor resizes images "
                             "to its own fixed size or tiles (estimate/vit.py); max_pixels is "
                             "Qwen2-VL's and Qwen2.5-VL's.")
        if self.train_vision and self.method != "full":
            raise FieldError(("train_vision", "method"), f"a trained vision tower is modelled "
                             f"for full fine-tuning only; with {self.method} it stays frozen.")
        return self

    @property
    def image_tokens_per_image(self) -> int:
        """Language-model tokens of one image (0 without images)."""
        grid = self.image_grid
        return grid.tokens if grid is not None else 0

    @property
    def image_grid(self) -> Any:
        """The patch grid of one image (estimate/vision.py ImageGrid), or None without images."""
        if not self.images_per_example or self.arch.vision is None:
            return None
        from gpuhours.estimate.vision import grid_for_tokens, image_grid

        if self.image_tokens is not None:
            return grid_for_tokens(self.arch.vision, self.image_tokens)
        assert self.image_pixels is not None
        # unset: the tower's own processor bounds (Qwen2-VL's defaults, Qwen3.5's own)
        return image_grid(self.arch.vision, self.image_pixels, max_pixels=self.image_max_pixels)

    @property
    def attention_span(self) -> int:
        """Tokens one attention kernel call spans: a packed document (document_tokens) or the
        whole sequence the language model sees (llm_seq_len)."""
        return self.document_tokens if self.document_tokens is not None else self.llm_seq_len

    @property
    def llm_seq_len(self) -> int:
        """Tokens per sequence the language model sees: seq_len's text tokens plus the image
        tokens of every image of the example, and prompt tuning's virtual tokens (peft puts
        them before every sequence)."""
        prompt = self.peft_virtual_tokens if self.peft_method == "prompt_tuning" else 0
        return self.seq_len + self.images_per_example * self.image_tokens_per_image + (prompt or 0)

    @model_validator(mode="after")
    def _check(self) -> Training:
        _check_layout(self)
        if self.method == "qlora" and self.precision == "fp8-mixed":
            raise FieldError(("method", "precision"), "qlora's 4-bit base is dequantised to "
                             "bf16, fp16 or fp32 for its matmuls; fp8 GEMMs are not a QLoRA "
                             "setup.")
        if (self.method == "qlora" and self.precision == "fp32"
                and self.base_quant not in ("nf4", "nf4-nodq")):
            # bitsandbytes' BitsAndBytesConfig computes in fp32 unless told otherwise
            # (bnb_4bit_compute_dtype=None -> torch.float32, transformers
            # utils/quantization_config.py): modelled for its NF4 bases only
            raise FieldError(("precision", "base_quant"), f"qlora in fp32 is modelled for "
                             f"bitsandbytes' NF4 bases (whose compute dtype defaults to fp32); "
                             f"a {self.base_quant} base computes in half precision.",
                             "Use bf16-mixed or fp16-mixed.")
        if self.fp8_params and self.precision != "fp8-mixed":
            raise FieldError(("fp8_params", "precision"), "fp8 weights (fp8_params) are "
                             "Transformer Engine's fp8-mixed training: use precision fp8-mixed.",
                             "Drop fp8_params, or set precision fp8-mixed.")
        if loss_kernel_of(self) in ("half", "chunked-half", "chunked-fabric") and (
                self.precision == "fp32" or self.precision.endswith("-amp")):
            raise FieldError(("loss_kernel", "precision"), f"the {loss_kernel_of(self)} "
                             f"kernel is a half-precision loss: it needs a half-precision "
                             f"head without autocast; under {self.precision} the head or the "
                             "log-softmax runs in fp32.", "Use loss kernel hf.")
        if loss_kernel_of(self) == "half-amp" and self.precision in ("fp32", "fp8-mixed"):
            raise FieldError(("loss_kernel", "precision"), f"the half-amp loss is a model's "
                             f"loss on half-precision logits under autocast; under "
                             f"{self.precision} the logits are not bf16 or fp16.",
                             "Use loss kernel hf.")
        if self.base_quant != "nf4" and self.method != "qlora":
            raise FieldError(("base_quant", "method"), f"a {self.base_quant} base is a quantised "
                             f"base for qlora; {self.method} trains on an unquantised one.")
        if self.lora_trainable_embeddings and self.method == "full":
            raise FieldError(("lora_trainable_embeddings", "method"), "full fine-tuning trains "
                             "the embeddings already; trainable embeddings are a LoRA/QLoRA "
                             "choice.")
        if self.lora_lm_head and self.method == "full":
            raise FieldError(("lora_lm_head", "method"), "full fine-tuning trains the LM head "
                             "already; an adapter on it is a LoRA/QLoRA choice.")
        if self.document_tokens is not None:
            _check_documents(self)
        if self.method == "full" and self.lora_dropout > 0:
            raise FieldError(("lora_dropout", "method"), "LoRA dropout acts on the adapters' "
                             "inputs; full fine-tuning has no adapters.", "Leave it at 0.")
        if self.lora_adapter_dtype == "half" and self.method == "full":
            raise FieldError(("lora_adapter_dtype", "method"), "the adapters' dtype is a "
                             "LoRA/QLoRA choice; full fine-tuning has no adapters.",
                             "Leave it at fp32.")
        if self.lora_adapter_dtype == "half" and (self.precision == "fp32"
                                                  or self.precision.endswith("-amp")):
            raise FieldError(("lora_adapter_dtype", "precision"), "half-precision adapters "
                             "take the dtype of a half-precision base (bf16 or fp16, pure or "
                             f"-mixed); under {self.precision} the base weights are fp32.",
                             "Use a bf16 or fp16 precision, or fp32 adapters.")
        if self.method == "full" and self.lora_branch is not None:
            raise FieldError(("lora_branch", "method"), "how the LoRA branch runs is a "
                             "LoRA/QLoRA choice; full fine-tuning has no adapters.")
        if self.lora_adapter_dtype == "half" and self.precision == "fp16-mixed":
            raise FieldError(("lora_adapter_dtype", "precision"), "fp16-mixed trains with a "
                             "gradient scaler, and torch's GradScaler refuses fp16 gradients "
                             "('Attempting to unscale FP16 gradients'): the trained adapters "
                             "must be fp32.", "Use fp32 adapters, or bf16 / pure fp16.")
        if self.lora_adapter_dtype == "half" and self.lora_branch == "peft-fp32":
            raise FieldError(("lora_adapter_dtype", "lora_branch"), "half-precision adapters "
                             "compute in half precision; peft-fp32 is the branch of fp32 "
                             "adapters, which cast their inputs to fp32.",
                             "Use lora_branch peft-half (or leave it to its default), or fp32 "
                             "adapters.")
        if self.lora_branch == "peft-half" and self.precision == "fp32":
            raise FieldError(("lora_branch", "precision"), "half-precision adapters need "
                             "half-precision activations; under fp32 the adapters run in fp32.",
                             "Use lora_branch peft-fp32, or a half precision.")
        if (self.dora or self.dora_base_matmul is not None) and self.method == "full":
            raise FieldError(("dora" if self.dora else "dora_base_matmul", "method"),
                             "DoRA is a LoRA/QLoRA choice; full fine-tuning has no adapters.")
        if self.dora_base_matmul is not None and not self.dora:
            raise FieldError(("dora_base_matmul", "dora"), "dora_base_matmul says how DoRA "
                             "gets its base output; this setup does not use DoRA.",
                             "Set dora true, or drop dora_base_matmul.")
        if self.dora_base_matmul == "reuse" and self.lora_dropout > 0:
            raise FieldError(("dora_base_matmul", "lora_dropout"), "peft reuses the base "
                             "output only without dropout: with lora_dropout above 0 the base "
                             "matmul is recomputed on the dropped input (tuners/lora/"
                             "variants.py DoraLinearVariant.forward).",
                             "Use dora_base_matmul recompute, or lora_dropout 0.")
        _check_peft_method(self)
        if self.dora and self.lora_lm_head:
            raise FieldError(("dora", "lora_lm_head"), "DoRA on the LM head (a vocabulary-"
                             "wide magnitude and rescaled logits) is not modelled.",
                             "Drop lora_lm_head, or estimate plain LoRA.")
        if self.dora and self.kernels == "megatron":
            raise FieldError(("dora", "kernels"), "DoRA is modelled as peft runs it; "
                             "Megatron's adapters have no DoRA path here.",
                             "Use the eager kernel path.")
        bnb = self.method == "qlora" and self.base_quant in ("nf4", "nf4-nodq")
        if (self.bnb_saved_input != "step" or self.lm_head_4bit) and not bnb:
            raise FieldError(("bnb_saved_input" if self.bnb_saved_input != "step"
                              else "lm_head_4bit",
                              "base_quant" if self.method == "qlora" else "method"),
                             "bnb_saved_input and lm_head_4bit describe a bitsandbytes 4-bit "
                             f"base (qlora, nf4 or nf4-nodq); this is {self.method}"
                             + (f" on {self.base_quant}" if self.method == "qlora" else "") + ".",
                             "Leave them at their defaults, or use qlora on nf4/nf4-nodq.")
        if self.lm_head_4bit and self.lora_trainable_embeddings:
            raise FieldError(("lm_head_4bit", "lora_trainable_embeddings"), "a 4-bit LM head is "
                             "frozen base weights; trainable embeddings make the head a trained "
                             "16-bit copy (peft's modules_to_save): one or the other.",
                             "Drop --lm-head-4bit or --lora-trainable-embeddings.")
        if self.method != "qlora" and self.kbit_upcast is not None:
            raise FieldError(("kbit_upcast", "method"), "kbit_upcast is peft's preparation of a "
                             f"4-bit base for QLoRA; {self.method} has no quantised base.")
        if self.offload != "none":
            _check_offload(self)
        elif self.offload_copies != "pinned":
            raise FieldError(("offload_copies", "offload"), "offload_copies says how CPU "
                             "offload's copies reach host memory; offload is none.",
                             "Give --offload, or leave --offload-copies out.")
        _check_lengths(self)
        _check_torchtune_memory(self)
        if self.load_path == "fsdp-flatten":
            _check_load_path(self)
        if self.kernels == "megatron":
            _check_megatron(self)
        elif self.cuda_graph_scope is not None:
            raise FieldError(("cuda_graph_scope", "kernels"), "cuda_graph_scope names regions "
                             "of Megatron-Core's training step replayed as CUDA graphs; the "
                             "kernel path is not megatron (other paths' graphs are not "
                             "modelled).", "Give --kernels megatron, or leave "
                             "--cuda-graph-scope out.")
        elif self.moe_dispatch != "fused":
            raise FieldError(("moe_dispatch", "kernels"), "moe_dispatch says how Megatron-Core's "
                             "MoE layer routes its tokens; the kernel path is not megatron.",
                             "Give --kernels megatron, or leave --moe-dispatch out.")
        elif self.moe_router_dtype is not None:
            raise FieldError(("moe_router_dtype", "kernels"), "moe_router_dtype is the dtype of "
                             "Megatron-Core's MoE router; the kernel path is not megatron.",
                             "Give --kernels megatron, or leave --moe-router-dtype out.")
        elif self.recompute_modules is not None:
            raise FieldError(("recompute_modules", "kernels"), "recompute_modules names "
                             "Megatron-Core's selectively recomputed modules; the kernel path "
                             "is not megatron.", "Give --kernels megatron, or leave "
                             "--recompute-modules out.")
        elif self.grad_reduce_in_fp32:
            raise FieldError(("grad_reduce_in_fp32", "kernels"), "grad_reduce_in_fp32 says "
                             "Megatron-Core's gradient buffer is fp32; the kernel path is not "
                             "megatron.", "Give --kernels megatron, or leave "
                             "--grad-reduce-fp32 out.")
        elif self.moe_fused_mlp:
            raise FieldError(("moe_fused_mlp", "kernels"), "moe_fused_mlp says Megatron-Core "
                             "runs the routed experts through Transformer Engine's op fuser; "
                             "the kernel path is not megatron.",
                             "Give --kernels megatron, or leave --moe-fused-mlp out.")
        check_kernel_path(self)
        if self.liger_kernels != "none" and (self.kernels != "eager" or self.compile):
            raise FieldError(("liger_kernels", "kernels" if self.kernels != "eager"
                              else "compile"),
                             "Liger's kernels are modelled patched into transformers' eager "
                             "layers; this setup runs "
                             + (f"kernels {self.kernels} (its own fused kernels)"
                                if self.kernels != "eager" else "under torch.compile")
                             + ": not modelled together.", "Leave --liger-kernels out, or use "
                             "--kernels eager without --compile.")
        if self.checkpoint_offload and not self.checkpointing:
            raise FieldError(("checkpoint_offload", "checkpointing"), "checkpoint_offload moves "
                             "the checkpointed block inputs to the host; checkpointing is off.",
                             "Give --checkpointing, or leave --checkpoint-offload out.")
        if self.checkpoint_offload and self.activation_offload:
            raise FieldError(("checkpoint_offload", "activation_offload"), "both move the "
                             "checkpointed layer inputs to the host: Unsloth's offloaded "
                             "checkpointing or torchtune's activation offloading, not both.",
                             "Keep one of --checkpoint-offload and --activation-offload.")
        if self.fsdp_grad_accum == "no-sync":
            _check_fsdp_no_sync(self)
        if self.fsdp_adapter_units:
            _check_fsdp_adapter_units(self)
        if self.head_weight_cast and (self.precision not in AUTOCAST_PRECISIONS
                                      or self.lm_head_4bit):
            raise FieldError(("head_weight_cast", "precision"), "head_weight_cast is autocast's "
                             "copy of a half-precision LM head in the other half dtype; this "
                             f"setup has precision {self.precision}"
                             + (" and a 4-bit head" if self.lm_head_4bit else "") + ".",
                             "Use a bf16 or fp16 precision with a half-precision head, or leave "
                             "--head-weight-cast out.")
        if self.fsdp_embedding_units and (self.zero_stage != 3 or self.zero3_engine != "fsdp"):
            raise FieldError(("fsdp_embedding_units", "zero_stage"), "embedding units are "
                             "PyTorch FSDP's units: they need zero_stage 3 run by FSDP "
                             f"(zero3_engine fsdp); this is zero_stage {self.zero_stage}, "
                             f"{self.zero3_engine}.",
                             "Use --zero 3 --zero3-engine fsdp, or leave --fsdp-embedding-units "
                             "out.")
        if self.deepspeed_pipe_engine and self.precision == "bf16":
            raise FieldError(("deepspeed_pipe_engine", "precision"), "DeepSpeed's bf16 runs "
                             "BF16_Optimizer, with fp32 master weights and moments beside the "
                             "bf16 weights: bf16-mixed, not pure bf16.",
                             "Give precision bf16-mixed with deepspeed_pipe_engine.")
        if self.deepspeed_pipe_engine and self.zero_stage == 0 and self.precision == "bf16-mixed":
            raise FieldError(("deepspeed_pipe_engine", "zero_stage"), "with bf16 DeepSpeed's "
                             "PipelineEngine runs BF16_Optimizer whatever the ZeRO config "
                             "(engine.py _do_optimizer_sanity_check: pipeline parallelism "
                             "returns BFLOAT16), which shards its fp32 master weights and "
                             "moments over the data-parallel ranks and all-gathers the bf16 "
                             "weights, as ZeRO-1 does; zero_stage is 0.",
                             "Give zero_stage 1 with deepspeed_pipe_engine and bf16.")
        if self.deepspeed_pipe_engine and (self.virtual_stages > 1 or self.tp_comm_overlap
                                           or self.moe_a2a_overlap):
            offender = ("virtual_stages" if self.virtual_stages > 1 else "tp_comm_overlap"
                        if self.tp_comm_overlap else "moe_a2a_overlap")
            raise FieldError(("deepspeed_pipe_engine", offender), "DeepSpeed's "
                             "PipelineEngine runs its TrainSchedule (plain 1F1B: "
                             "pipe/schedule.py), without interleaved stages or Megatron-Core's "
                             "tensor-parallel and all-to-all overlaps; this setup asks for "
                             f"virtual_stages {self.virtual_stages}, tp_comm_overlap "
                             f"{self.tp_comm_overlap}, moe_a2a_overlap {self.moe_a2a_overlap}.",
                             "Leave virtual_stages at 1 and the overlaps off, or "
                             "deepspeed_pipe_engine off.")
        if self.deepspeed_pipe_engine and self.zero_stage > 1:
            raise FieldError(("deepspeed_pipe_engine", "zero_stage"), "DeepSpeed's "
                             "PipelineEngine runs ZeRO stage 0 or 1 only (it asserts "
                             f"stage < 2); zero_stage is {self.zero_stage}.",
                             "Give zero_stage 0 or 1, or leave deepspeed_pipe_engine off.")
        if self.zero3_engine == "deepspeed" and self.zero_stage != 3:
            raise FieldError(("zero3_engine", "zero_stage"), "the DeepSpeed ZeRO-3 engine runs "
                             f"ZeRO stage 3; zero_stage is {self.zero_stage}.",
                             "Give zero_stage 3, or zero3_engine fsdp.")
        if self.optimizer_impl == "fused" and self.optimizer not in ("adamw", "adamw-8bit"):
            raise FieldError("optimizer_impl", f"fused is an AdamW implementation; "
                             f"{self.optimizer} has none.")
        if self.optimizer_impl == "foreach-2.0" and self.optimizer != "adamw":
            raise FieldError(("optimizer_impl", "optimizer"), "foreach-2.0 is torch 2.0's "
                             f"foreach AdamW; the optimizer is {self.optimizer}.",
                             "Give optimizer adamw, or optimizer_impl foreach.")
        if self.arch.position_embeddings and self.seq_len > self.arch.position_embeddings:
            raise FieldError("seq_len", f"{self.arch.name} has learned position embeddings for "
                             f"{self.arch.position_embeddings} positions; a sequence of "
                             f"{self.seq_len} tokens cannot run.")
        return self

    @property
    def tokens_per_micro_batch(self) -> int:
        """Tokens the language model processes per micro-batch, image tokens included."""
        return self.micro_batch * self.llm_seq_len

    @property
    def tokens_per_step(self) -> int:
        """Tokens per optimizer step on one GPU (micro-batch x sequence x accumulation)."""
        return self.micro_batch * self.llm_seq_len * self.grad_accum

    def choices(self) -> dict[str, Any]:
        """The setup as flat JSON-ready data: the model reference and every choice (what the
        ledger stores and what outputs show as `setup`), the loss kernel as it runs
        (loss_kernel_of: its default resolved)."""
        data = {**self.model_dump(mode="json", include=set(CHOICE_FIELDS)),
                "loss_kernel": loss_kernel_of(self)}
        return {"model": self.model or self.arch.name, "config_overrides":
                dict(self.config_overrides), **data}

    def label(self, with_model: bool = True) -> str:
        """Short text naming the setup, for tables and progress lines."""
        parts = [self.model or self.arch.name] if with_model else []
        parts += [self.method, self.precision, f"b{self.micro_batch}", f"s{self.seq_len}"]
        if self.grad_accum > 1:
            parts.append(f"ga{self.grad_accum}")
        if self.checkpointing:
            parts.append("ckpt")
        if self.method != "full":
            parts.append(f"r{self.lora_rank}" + ("+emb" if self.lora_trainable_embeddings else "")
                         + ("+head" if self.lora_lm_head else "")
                         + ("+dora" if self.dora else "")
                         + ("" if self.peft_method == "lora" else f"+{self.peft_method}"))
        if self.base_quant != "nf4":
            parts.append(self.base_quant)
        if self.optimizer != "adamw" or self.optimizer_impl != "foreach":
            parts.append(f"{self.optimizer}/{self.optimizer_impl}")
        if self.zero_stage:
            parts.append(f"zero{self.zero_stage}")
        if self.fsdp_grad_accum == "no-sync":
            parts.append("no-sync")
        if self.optimizer_in_backward:
            parts.append("optim-in-bwd")
        if self.optimizer_paged:
            parts.append("paged")
        if self.activation_offload:
            parts.append("act-offload")
        if self.liger_kernels != "none":
            parts.append(f"liger-{self.liger_kernels}")
        if self.offload != "none":
            parts.append(f"offload:{self.offload}")
            if self.offload_copies != "pinned":
                parts.append(f"copies:{self.offload_copies}")
        if loss_kernel_of(self) != "hf":
            parts.append(f"loss:{loss_kernel_of(self)}")
        if self.images_per_example:
            parts.append(f"img{self.images_per_example}x{self.image_tokens_per_image}t")
        parts += [f"{k}{getattr(self, k)}" for k in ("tp", "pp", "cp", "ep")
                  if getattr(self, k) > 1]
        if self.virtual_stages > 1:
            parts.append(f"v{self.virtual_stages}")
        parts += [name for name, on in (("tp-overlap", self.tp_comm_overlap),
                                        ("a2a-overlap", self.moe_a2a_overlap),
                                        ("fp32-grads", self.grad_reduce_in_fp32),
                                        ("ds-pipe-engine", self.deepspeed_pipe_engine),
                                        ("launch-blocking", self.cuda_launch_blocking)) if on]
        return " ".join(parts)


def loss_kernel_of(t: Training) -> LossKernel:
    """The loss kernel that runs (Training.loss_kernel; its default when None): megatron on the
    megatron kernel path, else hf (transformers' own loss, the default of every family it
    models: LossKernel above).

    Megatron-Core's LanguageModule.compute_language_model_loss (megatron/core/models/common/
    language_module/language_module.py at NVIDIA/Megatron-LM@b997545c and @d98e8a64) runs
    tensor_parallel.vocab_parallel_cross_entropy unless cross_entropy_loss_fusion is set, and
    with it the native fused variant, which keeps the same tensors; TransformerConfig's
    defaults are fusion off and cross_entropy_fusion_impl "native". Transformer Engine's kernel
    (te) is an opt-in (--cross-entropy-fusion-impl te: Megatron-Bridge's performance
    scripts), chosen explicitly."""
    if t.loss_kernel is not None:
        return t.loss_kernel
    if t.kernels == "unsloth":  # Unsloth's models call its own fast_cross_entropy_loss
        return "unsloth-ce"
    # Megatron-LM's 2021 code ran the same vocab-parallel cross-entropy (megatron/mpu/
    # cross_entropy.py at NVIDIA/Megatron-LM@50a4b5fa)
    return "megatron" if t.kernels in ("megatron", "megatron-2021") else "hf"


def deepspeed_overlap_comm_of(t: Training) -> bool:
    """DeepSpeed's overlap_comm as it runs (Training.deepspeed_overlap_comm; its default when
    None): on for ZeRO-3, off below it. DeepSpeed's DeepSpeedZeroConfig leaves overlap_comm
    None and its validator sets it to `stage == 3` (deepspeed/runtime/zero/config.py
    overlap_comm_valid, v0.10 through v0.16); a config that states it (transformers' and
    Qwen's example ZeRO-2 configs set it true) is taken as stated."""
    if t.deepspeed_overlap_comm is not None:
        return t.deepspeed_overlap_comm
    return t.zero_stage >= 3


def _check_peft_method(t: Training) -> None:
    """The PEFT methods beside LoRA as modelled (estimate/peft_methods.py): peft's eager layers
    on a half or fp32 base, without dropout or LoRA's own options."""
    m = t.peft_method
    virtual = m in ("prompt_tuning", "prefix_tuning")
    if virtual and t.peft_virtual_tokens is None:
        raise FieldError(("peft_virtual_tokens", "peft_method"), f"{m} trains "
                         "num_virtual_tokens positions; how many is not set.",
                         "Set peft_virtual_tokens (peft's num_virtual_tokens).")
    if not virtual and t.peft_virtual_tokens is not None:
        raise FieldError(("peft_virtual_tokens", "peft_method"), "peft_virtual_tokens is for "
                         f"prompt_tuning and prefix_tuning; this setup is {m}.",
                         "Drop peft_virtual_tokens.")
    if t.ia3_targets != "k-v-down" and m != "ia3":
        raise FieldError(("ia3_targets", "peft_method"), "ia3_targets is IA3's; this setup "
                         f"is {m}.", "Drop ia3_targets.")
    if t.lokr_decompose_factor != -1 and m != "lokr":
        raise FieldError(("lokr_decompose_factor", "peft_method"), "lokr_decompose_factor is "
                         f"LoKr's; this setup is {m}.", "Drop lokr_decompose_factor.")
    if m == "lora":
        return
    if t.method != "lora":
        raise FieldError(("peft_method", "method"), f"{m} is modelled on a half-precision or "
                         f"fp32 base (method lora); this setup is {t.method}.",
                         "Use method lora, or peft_method lora.")
    if t.precision not in ("bf16", "fp16", "fp32"):
        raise FieldError(("precision", "peft_method"), f"{m} is modelled as peft runs it on "
                         "a bf16, fp16 or fp32 model without autocast (autocast changes what "
                         f"its layers keep); this setup is {t.precision}.",
                         "Use precision bf16, fp16 or fp32.")
    for name, bad in (("dora", t.dora), ("lora_lm_head", t.lora_lm_head),
                      ("lora_trainable_embeddings", t.lora_trainable_embeddings),
                      ("lora_dropout", t.lora_dropout > 0),
                      ("lora_adapter_dtype", t.lora_adapter_dtype != "fp32"),
                      ("lora_branch", t.lora_branch is not None),
                      ("kernels", t.kernels != "eager"), ("zero_stage", t.zero_stage != 0)):
        if bad:
            raise FieldError((name, "peft_method"), f"{m} is modelled as peft 0.21 runs it "
                             "(fp32 adapters, peft's eager layers, no dropout, one GPU's "
                             f"state unsharded); {name} is set otherwise.",
                             f"Drop {name}, or use peft_method lora.")


def _check_load_path(t: Training) -> None:
    """load_path 'fsdp-flatten' is the replay of estimate/load_cache.py: what it models."""
    if t.method == "full":
        raise FieldError(("load_path", "method"), "the fsdp-flatten load path is modelled for "
                         "LoRA and QLoRA (train.py's adapter units), not full fine-tuning.",
                         "Use --load-path from-pretrained, or method lora / qlora.")
    if t.zero_stage not in (0, 3):
        raise FieldError(("load_path", "zero_stage"), "the fsdp-flatten load path is FSDP's: "
                         "zero_stage 3 (FULL_SHARD) or 0 (NO_SHARD), not DeepSpeed ZeRO-1/2.",
                         "Use --zero 3 or 0, or --load-path from-pretrained.")
    if t.seq_len_mean is not None:
        raise FieldError(("load_path", "seq_len_mean"), "the fsdp-flatten load path with "
                         "variable-length samples (two allocator replays on one cache) is not "
                         "modelled.", "Use --load-path from-pretrained with --seq-mean.")
    if t.offload != "none":
        raise FieldError(("load_path", "offload"), "the fsdp-flatten load path with CPU "
                         "offload (the shards move back to the host) is not modelled.",
                         "Use --load-path from-pretrained with --offload.")
    if not t.arch.plain_dense_decoder:
        raise FieldError("load_path", f"the fsdp-flatten load path knows dense decoder layers "
                         f"only (q, k, v, o and the MLP's linears); {t.arch.name} has experts, "
                         f"latent attention, SSM mixers, a vision tower or an encoder.",
                         "Use --load-path from-pretrained.")


def _check_fsdp_no_sync(t: Training) -> None:
    """fsdp_grad_accum 'no-sync' is PyTorch FSDP's no_sync() (estimate/fsdp_no_sync.py)."""
    if t.zero_stage != 3 or t.zero3_engine != "fsdp":
        raise FieldError(("fsdp_grad_accum", "zero_stage"), "no-sync is PyTorch FSDP's "
                         "no_sync(): it needs zero_stage 3 run by FSDP (zero3_engine fsdp); "
                         f"this is zero_stage {t.zero_stage}, {t.zero3_engine}.",
                         "Use --zero 3 --zero3-engine fsdp, or --fsdp-grad-accum "
                         "reduce-scatter.")
    if t.method == "qlora":
        raise FieldError(("fsdp_grad_accum", "method"), "no-sync with a 4-bit base (the "
                         "gradient of a unit of packed 4-bit storage) is not modelled.",
                         "Use --fsdp-grad-accum reduce-scatter with qlora.")
    if t.offload != "none":
        raise FieldError(("fsdp_grad_accum", "offload"), "no-sync with CPU offload (FSDP "
                         "keeps the unsharded gradients on the host then) is not modelled.",
                         "Use --fsdp-grad-accum reduce-scatter with --offload.")


def _check_fsdp_adapter_units(t: Training) -> None:
    """fsdp_adapter_units is PyTorch FSDP's wrapping of LoRA adapters (estimate/parallel.py)."""
    if t.zero_stage != 3 or t.zero3_engine != "fsdp":
        raise FieldError(("fsdp_adapter_units", "zero_stage"), "adapter units are PyTorch "
                         "FSDP's units: they need zero_stage 3 run by FSDP (zero3_engine "
                         f"fsdp); this is zero_stage {t.zero_stage}, {t.zero3_engine}.",
                         "Use --zero 3 --zero3-engine fsdp, or leave --fsdp-adapter-units out.")
    if t.method == "full":
        raise FieldError(("fsdp_adapter_units", "method"), "adapter units wrap LoRA adapters; "
                         "full fine-tuning has none.",
                         "Use method lora or qlora, or leave --fsdp-adapter-units out.")
    if max(t.tp, t.pp, t.cp, t.ep) > 1:
        raise FieldError(("fsdp_adapter_units", "tp"), "adapter units with tensor, pipeline, "
                         "context or expert parallelism are not modelled.",
                         "Leave --fsdp-adapter-units out with tp/pp/cp/ep.")
    if t.lora_targets != "all-linear" or not t.arch.plain_dense_decoder:
        raise FieldError(("fsdp_adapter_units", "lora_targets"), "adapter units are modelled "
                         "for adapters on every linear of dense decoder layers (fsdp_qlora "
                         f"train.py's); this is {t.lora_targets} on {t.arch.name}.",
                         "Use lora_targets all-linear on a dense decoder, or leave "
                         "--fsdp-adapter-units out.")


def _check_cuda_graph_scope(scope: tuple[str, ...]) -> None:
    """Combinations Megatron-Core refuses or that mean nothing (transformer_config.py
    __post_init__ and cuda_graphs.py @d98e8a64): full_iteration and full each stand alone (one
    graph of the step; the whole layer), moe_preprocess needs moe_router, and moe (the whole
    MoE MLP) already holds moe_router's part."""
    names = set(scope)
    if len(names) != len(scope):
        raise FieldError("cuda_graph_scope", f"a region named twice: {', '.join(scope)}.",
                         "Name each region once.")
    for alone in ("full_iteration", "full"):
        if alone in names and len(names) > 1:
            raise FieldError("cuda_graph_scope", f"{alone} graphs "
                             f"{'the whole step' if alone == 'full_iteration' else 'each whole layer'}"
                             f"; it cannot be listed with {', '.join(sorted(names - {alone}))}.",
                             f"Give {alone} alone, or the regions without it.")
    if "moe_preprocess" in names and "moe_router" not in names:
        raise FieldError("cuda_graph_scope", "moe_preprocess must be used together with "
                         "moe_router (Megatron-Core's rule).", "Add moe_router.")
    if "moe" in names and "moe_router" in names:
        raise FieldError("cuda_graph_scope", "moe graphs a MoE layer's whole MLP, router "
                         "included; moe_router names a part of it.",
                         "Give moe, or moe_router (with moe_preprocess).")


def _check_megatron(t: Training) -> None:
    """The megatron kernel path counts Megatron-Core's own operators (estimate/host.py): it has
    no 4-bit base to dequantise, no DeepSpeed ZeRO-3 hooks and no LoRA dropout, so those
    choices would be costed without their host operators. Refused rather than dropped."""
    why = "the megatron kernel path (Megatron-Core's operators) does not model "
    if t.method == "qlora":
        raise FieldError(("kernels", "method"), why + "a 4-bit base (QLoRA is peft's and "
                         "bitsandbytes'): its dequantisation would be left out.",
                         "Use kernels eager, or method lora.")
    if t.zero3_engine == "deepspeed":
        raise FieldError(("kernels", "zero3_engine"), why + "DeepSpeed ZeRO-3: its parameter "
                         "hooks' operators would be left out.",
                         "Use kernels eager, or zero3_engine fsdp.")
    if t.lora_dropout > 0:
        raise FieldError(("kernels", "lora_dropout"), why + "LoRA dropout: its mask and "
                         "multiply operators would be left out.",
                         "Use kernels eager, or lora_dropout 0.")
    if t.grad_reduce_in_fp32 and not (t.method == "full" and t.precision.endswith("-mixed")):
        raise FieldError(("grad_reduce_in_fp32", "precision", "method"), "an fp32 gradient "
                         "buffer is Megatron-Core's for full training in half precision with "
                         f"fp32 master weights (a *-mixed precision); this setup is "
                         f"{t.method} in {t.precision}.", "Give method full and a -mixed "
                         "precision, or leave --grad-reduce-fp32 out.")
    if t.cuda_graph_scope is not None:
        _check_cuda_graph_scope(t.cuda_graph_scope)
    if t.recompute_modules is not None:
        if len(set(t.recompute_modules)) != len(t.recompute_modules):
            raise FieldError("recompute_modules", "a module named twice: "
                             f"{', '.join(t.recompute_modules)}.", "Name each module once.")
        if t.checkpointing:
            raise FieldError(("recompute_modules", "checkpointing"), "Megatron-Core "
                             "recomputes selectively or fully (recompute_granularity), not "
                             "both.", "Give checkpointing (full) or recompute_modules "
                             "(selective).")


def check_kernel_path(t: Training) -> None:
    """Refuse a setup its kernel path's code does not run (FieldError): Unsloth's (one GPU or
    data parallel, no ZeRO) and Megatron-LM 2021's (GPT-shaped full training, no context
    parallelism). Run by the validator and on every setup fit, the chooser and the remedies
    derive by copying fields (pydantic's model_copy runs no validator)."""
    if t.kernels == "unsloth":
        _check_unsloth(t)
    if t.kernels == "megatron-2021":
        _check_megatron_2021(t)


def _check_megatron_2021(t: Training) -> None:
    """The megatron-2021 path counts Megatron-LM's 2021 layer (estimate/megatron_2021.py): full
    training of a GPT-shaped layer (LayerNorm, GeLU MLP, dense) with its unfused attention, in
    half precision. Anything else would be costed with kernels that code does not issue."""
    why = "the megatron-2021 kernel path (Megatron-LM's 2021 layer) does not model "
    if t.flash_attention:
        raise FieldError(("kernels", "flash_attention"), why + "a flash kernel: its attention "
                         "is baddbmm, the fused masked softmax, dropout and bmm.",
                         "Turn flash attention off (--no-flash), or use kernels megatron (Megatron-Core).")
    if t.method != "full":
        raise FieldError(("kernels", "method"), why + f"{t.method}: it trained full models.",
                         "Use method full, or kernels megatron.")
    a = t.arch
    if (a.gated_mlp or a.is_moe or not a.norm_bias or a.position_embeddings == 0
            or a.parallel_residual or a.num_kv_heads != a.num_heads):
        raise FieldError(("kernels", "model"), why + f"{a.name}: its layer is GPT's (learned "
                         "positions, a LayerNorm, multi-head attention, a dense GeLU MLP, "
                         "sequential residuals); rotary positions, a parallel residual and "
                         "grouped-query attention came later.",
                         "Use kernels megatron (Megatron-Core) or eager for this model.")
    if t.cp > 1:
        raise FieldError(("kernels", "cp"), why + "context parallelism: the 2021 code splits "
                         "layers by tensor and pipeline parallelism only (context parallelism "
                         "came with Megatron-Core, 2023).", "Leave --cp out, or use kernels "
                         "megatron.")
    if t.compile:
        raise FieldError(("kernels", "compile"), why + "torch.compile: the 2021 code "
                         "predates it (its fused kernels are TorchScript and CUDA).",
                         "Leave --compile out.")
    if t.precision not in ("fp16-mixed", "bf16-mixed"):
        raise FieldError(("kernels", "precision"), why + f"{t.precision}: it ran fp16 or bf16 "
                         "with fp32 master weights.", "Use fp16-mixed or bf16-mixed.")


def _check_unsloth(t: Training) -> None:
    """The unsloth kernel path (estimate/unsloth.py) is Unsloth's LoRA/QLoRA on one GPU over
    a Llama-family dense decoder (gated MLP, RMSNorm), its 4-bit base bitsandbytes NF4:
    what its fast_lora Functions and patched layers run. Other setups refused."""
    why = "the unsloth kernel path models Unsloth's LoRA layer on a dense Llama-family decoder; "
    if t.method == "full":
        raise FieldError(("kernels", "method"), why + "full fine-tuning is not modelled.",
                         "Use kernels eager, or method lora/qlora.")
    if t.method == "qlora" and t.base_quant not in ("nf4", "nf4-nodq"):
        raise FieldError(("kernels", "base_quant"), why + f"its 4-bit base is bitsandbytes "
                         f"NF4, not {t.base_quant}.", "Use --base-quant nf4.")
    arch = t.arch
    if (not arch.plain_dense_decoder or not arch.gated_mlp or arch.norm_bias or arch.qk_norm
            or arch.encoder):
        raise FieldError(("kernels", "model"), why + f"{arch.name} is not one (gated MLP, "
                         "RMSNorm, no q/k norms).", "Use kernels eager.")
    if t.dora:
        raise FieldError(("kernels", "dora"), why + "DoRA layers it leaves to peft (its "
                         "patching skips a lora_magnitude_vector) are not modelled on it.",
                         "Use kernels eager with --dora.")
    layout = {"tp": t.tp, "pp": t.pp, "cp": t.cp, "ep": t.ep}
    split = [k for k, v in layout.items() if v > 1]
    if split:
        # Unsloth patches a model on one GPU (data parallel copies at most): it has no tensor,
        # pipeline, context or expert sharding of a layer
        raise FieldError(("kernels", split[0]), why + f"it runs whole layers on each GPU, no "
                         f"{split[0]} {layout[split[0]]}.", f"Leave --{split[0]} out, or use "
                         "kernels eager or megatron.")
    if t.zero_stage or t.offload != "none" or not t.flash_attention:
        raise FieldError(("kernels", "zero_stage"), why + "one GPU, no ZeRO or CPU offload of "
                         "state, flash attention (Unsloth's flash-attn or xformers kernels).",
                         "Use kernels eager.")


def _check_lengths(t: Training) -> None:
    """A length distribution that a run can draw from (estimate/fragmentation.py)."""
    if t.seq_len_mean is None:
        if t.seq_len_std or t.long_samples != "drop":
            raise FieldError("seq_len_mean", "a spread of sample lengths or what happens to "
                             "long samples is given, but no mean length: give seq_len_mean "
                             "too (seq_len is then the longest).")
        return
    if t.tp * t.pp * t.cp > 1:
        raise FieldError(("seq_len_mean", "tp"), "variable-length samples are replayed for "
                         "one model replica per GPU (no tp, pp or cp).")
    if t.long_samples == "drop" and t.seq_len_std > 0:
        from gpuhours.estimate.lengths import LengthDistribution

        kept = LengthDistribution(t.seq_len_mean, t.seq_len_std, t.seq_len).kept_fraction()
        if kept < 1e-4:
            raise FieldError(("seq_len_mean", "seq_len"), f"with samples of {t.seq_len_mean:g} "
                             f"+- {t.seq_len_std:g} tokens, dropping those longer than "
                             f"{t.seq_len} keeps {kept:.1e} of them: nothing to train on.",
                             "Raise seq_len, or truncate long samples (long_samples "
                             "truncate).")
    elif t.long_samples == "drop" and t.seq_len_mean > t.seq_len:
        raise FieldError(("seq_len_mean", "seq_len"), f"every sample has {t.seq_len_mean:g} "
                         f"tokens (no spread), more than seq_len {t.seq_len}: all would be "
                         "dropped.", "Give seq_len_std, raise seq_len or truncate.")


def _check_layout(t: Training) -> None:
    """A parallel layout the model can be split by: heads by tp, layers by pp x virtual stages,
    the sequence by cp, experts by ep (the GPU count is checked where it is known,
    estimate/parallel.py layout_of)."""
    arch = t.arch
    if t.tp > 1:
        problem = tp_split_problem(arch, t.tp)
        if problem:
            ok = ", ".join(str(x) for x in tp_sizes_that_split(arch, max(t.tp, 8)))
            raise FieldError("tp", f"tensor parallelism {t.tp} cannot split {arch.name}: "
                             f"{problem} (Megatron-Core divides heads, key-value heads and the "
                             "MLP width by tp; estimate/parallel.py tp_split_widths).",
                             f"Sizes that split it: {ok}.")
    if t.virtual_stages > 1 and t.pp == 1:
        raise FieldError("virtual_stages", "virtual stages interleave a pipeline: they need "
                                           "pipeline stages (pp) above 1.")
    if t.pp > arch.num_layers:
        raise FieldError("pp", f"{arch.name} has {arch.num_layers} layers: {t.pp} pipeline "
                               f"stages would leave stages without a layer.")
    chunks = t.pp * t.virtual_stages
    if t.virtual_stages > 1 and all((arch.num_layers + k) % chunks for k in (0, 1, 2)):
        # Megatron-Core's interleaved split needs the layers, or the layers with the embedding
        # and/or the loss counted as one each (--account-for-embedding-in-pipeline-split,
        # --account-for-loss-in-pipeline-split: Llama 3.1 405B's 126 + 2 on 8 x 8 chunks), to
        # divide evenly into the chunks; then each stage holds estimate/parallel.py's uneven
        # stage_layers, and the interleaved bubble is the even one's, (pp - 1)/(v m)
        # torch's pipelining (NeMo Automodel: DeepSeek-V3's 61 layers on pp 4 x vp 8) runs
        # uneven interleaved stages beyond that rule; their schedule is not modelled
        raise FieldError(("pp", "virtual_stages"), f"{arch.name} has {arch.num_layers} layers "
                         f"and pp {t.pp} x virtual stages {t.virtual_stages} do not divide "
                         "them, nor them with the embedding and the loss counted as a layer "
                         "each (Megatron-Core's rule, the one modelled); interleaved stages "
                         "more uneven than that (torch pipelining runs some) are not modelled.")
    if t.virtual_stages > 1 and t.grad_accum % t.pp:
        raise FieldError(("grad_accum", "virtual_stages"), f"the interleaved schedule runs the "
                         f"micro-batches in groups of pp ({t.pp}): {t.grad_accum} micro-batches "
                         f"per step are not a multiple of it (Megatron-LM requires it).")
    if t.tp_comm_overlap and t.tp == 1:
        raise FieldError(("tp_comm_overlap", "tp"), "tensor-parallel overlap needs tensor "
                         "parallelism (tp above 1).", "Give tp as well; or, with the layout "
                         "left open, leave the overlap out: gpuhours then turns it on where "
                         "Megatron-Core runs it (turning it off, alone, keeps it off).")
    if t.moe_a2a_overlap:
        if t.ep == 1:
            raise FieldError(("moe_a2a_overlap", "ep"), "the expert all-to-all overlap needs "
                             "expert parallelism (ep above 1).", "Give ep as well; or, with the "
                             "layout left open, leave the overlap out: gpuhours then turns it on "
                             "where Megatron-Core runs it (turning it off, alone, keeps it off).")
        if t.checkpointing:
            raise FieldError(("moe_a2a_overlap", "checkpointing"), "Megatron-Core's combined "
                             "1F1B (the expert all-to-all overlap) does not run with full "
                             "activation recomputation.")
        if t.pp > 1 and t.virtual_stages == 1:
            raise FieldError(("moe_a2a_overlap", "virtual_stages"), "with pipeline stages, "
                             "Megatron-Core's combined 1F1B runs in the interleaved schedule "
                             "only: give virtual stages (2 or more).")
    if t.cp > 1 and t.seq_len % (2 * t.cp):
        # Megatron-LM's get_batch_on_this_cp_rank (megatron/training/utils.py) views the
        # sequence as 2 x cp chunks and gives rank r chunks r and 2 cp - 1 - r (load-balanced
        # causal attention): the view needs 2 x cp to divide the sequence
        raise FieldError("cp", f"context parallelism splits the sequence into 2 x cp chunks "
                               f"(Megatron-Core's load-balanced split): 2 x {t.cp} = "
                               f"{2 * t.cp} must divide the sequence length {t.seq_len}.",
                         f"Give a sequence length that is a multiple of {2 * t.cp}.")
    if t.moe_fused_mlp and not arch.is_moe:
        raise FieldError("moe_fused_mlp", f"the op fuser's expert MLP is a MoE layer's; "
                                          f"{arch.name} has no experts.")
    if t.ep > 1 and not arch.is_moe:
        raise FieldError("ep", f"expert parallelism splits the experts of an MoE; {arch.name} "
                               f"has none.")
    if t.ep > 1 and arch.num_experts % t.ep:
        raise FieldError("ep", f"{arch.name} has {arch.num_experts} experts; expert "
                               f"parallelism must divide them ({t.ep} does not).")
    if t.method == "qlora" and t.tp * t.pp * t.cp * t.ep > 1:
        # LoRA is modelled with them as Megatron-Bridge runs it (its adapters sharded with their
        # base linear: estimate/parallel.py local_trainable_params); a 4-bit base is not
        raise FieldError(("method", "tp", "pp", "cp", "ep"), "tensor, pipeline, context and "
                         "expert parallelism are modelled for full training and LoRA "
                         "(Megatron-LM, Megatron-Bridge); qlora with them is not.",
                         "Use data parallelism (--zero) for QLoRA.")


def _check_torchtune_memory(t: Training) -> None:
    """optimizer_in_backward and activation_offload as torchtune allows them (recipes/
    full_finetune_single_device.py at pytorch/torchtune@1814feb17: RuntimeError for
    optimizer_in_bwd with gradient_accumulation_steps > 1, and for activation offloading
    without activation checkpointing)."""
    if t.optimizer_in_backward and t.grad_accum > 1:
        raise FieldError(("optimizer_in_backward", "grad_accum"), "the optimizer step inside "
                         "backward updates each weight as soon as its gradient is made, so "
                         f"gradients cannot accumulate over {t.grad_accum} micro-batches "
                         "(torchtune refuses it too).",
                         "Give grad_accum 1, or drop optimizer_in_backward.")
    if t.optimizer_in_backward and t.offload != "none":
        raise FieldError(("optimizer_in_backward", "offload"), "the optimizer step inside "
                         "backward runs on the GPU; CPU offload steps on the host.",
                         "Use one or the other.")
    if t.eager_attention != "fp32-softmax" and t.flash_attention:
        raise FieldError(("eager_attention", "flash_attention"), "eager_attention is what "
                         "attention keeps without a flash kernel; this setup runs flash "
                         "attention, which keeps no scores.",
                         "Drop eager_attention, or turn flash_attention off.")
    if t.held_kv_cache and t.checkpointing:
        raise FieldError(("held_kv_cache", "checkpointing"), "transformers turns use_cache "
                         "off under gradient checkpointing, so no KV cache is held.",
                         "Drop held_kv_cache, or checkpointing.")
    for field, on in (("held_kv_cache", t.held_kv_cache), ("padding_mask", t.padding_mask),
                      ("eager_attention", t.eager_attention != "fp32-softmax")):
        if on and t.kernels != "eager":
            raise FieldError((field, "kernels"), f"{field} is how transformers' eager layers "
                             f"run (their SDPA call and DynamicCache); this setup runs "
                             f"{t.kernels} kernels.", f"Drop {field}, or use kernels eager.")
    if t.optimizer_paged and (t.optimizer not in ("adamw", "adamw-8bit")
                              or t.offload != "none"):
        raise FieldError(("optimizer_paged", "optimizer"), "a paged optimizer is "
                         "bitsandbytes' AdamW (32-bit or 8-bit) on the GPU; this setup has "
                         f"{t.optimizer}" + (f" with offload {t.offload}"
                                             if t.offload != "none" else "") + ".",
                         "Give optimizer adamw or adamw-8bit without offload, or drop "
                         "optimizer_paged.")
    if t.activation_offload and not t.checkpointing:
        raise FieldError(("activation_offload", "checkpointing"), "activation offloading is "
                         "modelled as torchtune runs it, under activation checkpointing "
                         "(torchtune refuses it without).", "Turn checkpointing on.")


def _check_offload(t: Training) -> None:
    """Offload as DeepSpeed and FSDP run it: the optimizer needs ZeRO (its partition is what
    moves), the weights ZeRO-3 (DeepSpeed's offload_param; FSDP's CPUOffload is full shard);
    the host steps AdamW (DeepSpeedCPUAdam); model-parallel layouts are not modelled with it."""
    if t.zero_stage == 0:
        raise FieldError(("offload", "zero_stage"), "CPU offload moves each rank's ZeRO "
                         "partition to the host: it needs ZeRO stage 1-3 (DeepSpeed refuses "
                         "offload_optimizer without ZeRO).", "Give zero_stage 1, 2 or 3.")
    if t.offload == "optimizer+params" and t.zero_stage != 3:
        raise FieldError(("offload", "zero_stage"), "offloading the weights needs them "
                         f"sharded: ZeRO stage 3 (DeepSpeed offload_param; FSDP full shard), "
                         f"not {t.zero_stage}.", "Give zero_stage 3, or offload optimizer.")
    if t.optimizer != "adamw":
        raise FieldError(("offload", "optimizer"), f"the offloaded step is DeepSpeedCPUAdam's "
                         f"AdamW on the host; {t.optimizer} is not modelled there.",
                         "Use optimizer adamw with offload.")
    if t.tp * t.pp * t.cp * t.ep > 1:
        raise FieldError(("offload", "tp", "pp", "cp", "ep"), "CPU offload is modelled for data "
                         "parallelism (ZeRO/FSDP), not with tensor, pipeline, context or expert "
                         "parallelism.")


def nest_training(data: Any, own: tuple[str, ...]) -> Any:
    """Let a model that wraps a Training (TraceSetup, BenchSetup) be built flat too:
    `TraceSetup(model="qwen2.5-7b", method="lora", steps=1)` puts every key but its `own`
    into its `training`."""
    if not isinstance(data, dict) or "training" in data:
        return data
    return {**{k: v for k, v in data.items() if k in own},
            "training": {k: v for k, v in data.items() if k not in own}}


def check_runs_in_torch(t: Training, what: str) -> None:
    """What a real model's step in one torch process (trace, bench) cannot run: no model to
    build, ZeRO sharding, bitsandbytes' 8-bit AdamW, a loss kernel other than transformers' own.
    `what` names the command in the messages ("the trace", "the bench")."""
    if t.model is None:
        raise FieldError("model", f"{what} builds the real model: it needs a catalog name or a "
                                  f"config.json, not a parameter count or a bare shape.")
    if t.images_per_example or t.arch.vision is not None:
        raise FieldError("images_per_example" if t.images_per_example else "model",
                         f"{what} builds a causal language model; a vision-language model and "
                         "its images are not run in torch here (issue 15).",
                         "Rely on the analytic answer (gpuhours estimate), or give the "
                         "language model alone (qwen2.5-7b for qwen2.5-vl-7b).")
    if t.zero_stage:
        raise FieldError("zero_stage", f"{what} runs one process without sharding; ZeRO stage "
                         f"{t.zero_stage} divides state over GPUs and is not run here.",
                         "Use ZeRO stage 0, or rely on the analytic answer (basis: formula).")
    if t.optimizer == "adamw-8bit":
        raise FieldError("optimizer", f"adamw-8bit needs bitsandbytes, which {what} does not "
                                      f"drive.", "Use adamw, sgd or sgd-momentum.")
    if t.tp * t.pp * t.cp * t.ep > 1:
        raise FieldError(("tp", "pp", "cp", "ep"), f"{what} runs one process; a parallel "
                         f"layout splits the model over GPUs and is not run here.")
    if t.lm_head_4bit or t.bnb_saved_input != "step":
        raise FieldError("lm_head_4bit" if t.lm_head_4bit else "bnb_saved_input",
                         f"{what} runs transformers' 4-bit loading (LM head in 16 bits) with "
                         "the installed bitsandbytes; a 4-bit head or another bitsandbytes "
                         "release is not what runs here.", "Rely on the analytic answer "
                         "(gpuhours estimate).")
    if t.base_quant != "nf4" or t.lora_trainable_embeddings or t.lora_lm_head:
        field = ("base_quant" if t.base_quant != "nf4" else "lora_trainable_embeddings"
                 if t.lora_trainable_embeddings else "lora_lm_head")
        raise FieldError(field, f"{what} does not build a GPTQ/AWQ base, NF4 without double "
                         "quantisation, peft's "
                         "modules_to_save copies or an adapter on the LM head.", "Rely on the "
                         "analytic answer (gpuhours estimate).")
    if t.offload != "none":
        raise FieldError("offload", f"{what} runs one process on one device; CPU offload is "
                         "DeepSpeed's or FSDP's and is not run here.",
                         "Rely on the analytic answer (gpuhours estimate).")
    if t.kernels != "eager":  # before the loss: the megatron path's default loss is megatron
        raise FieldError("kernels", f"{what} runs transformers' modelling in eager PyTorch; the "
                         f"{t.kernels} path is not what runs in {what}.",
                         "Use kernels eager, or rely on the analytic answer (gpuhours estimate).")
    if loss_kernel_of(t) != "hf":
        raise FieldError("loss_kernel", f"the real model computes transformers' own loss (hf); "
                         f"a {loss_kernel_of(t)} kernel is not what runs in {what}.",
                         "Use loss kernel hf, or rely on the analytic answer (gpuhours "
                         "estimate).")


#: the fields of Training that are choices of the setup (not the model reference): what a plan's
#: settings, a sweep or a CLI option may set
def _check_documents(t: Training) -> None:
    """Packed documents fit in their sequence, and hold text only."""
    assert t.document_tokens is not None
    if t.document_tokens > t.seq_len:
        raise FieldError(("document_tokens", "seq_len"), f"a packed document of "
                         f"{t.document_tokens} tokens is longer than the {t.seq_len}-token "
                         "sequence it is packed into (the packer cuts it into pieces of at most "
                         "the sequence).", f"Give at most {t.seq_len}, or leave it out for "
                         "attention over the whole sequence.")
    if t.seq_len_mean is not None:
        raise FieldError(("document_tokens", "seq_len_mean"), "packed documents fill sequences "
                         "of seq_len tokens; variable sample lengths (seq_len_mean) describe "
                         "unpacked batches.", "Give one of the two.")
    if t.images_per_example:
        raise FieldError(("document_tokens", "images_per_example"), "packed documents with "
                         "images (their image tokens inside each document) are not modelled.",
                         "Leave document_tokens out for a vision-language setup.")


CHOICE_FIELDS: tuple[str, ...] = tuple(
    name for name in Training.model_fields
    if name not in ("arch", "model", "model_basis", "config_overrides"))


def _catalog_gpu(data: Any) -> Any:
    """`Hardware(gpu="h100-sxm")`: a catalog name is looked up (an unknown one is an error with
    the closest names)."""
    if isinstance(data, dict) and isinstance(data.get("gpu"), str):
        from gpuhours.resolve import catalog_gpu

        return {**data, "gpu": catalog_gpu(data["gpu"], field="gpu")}
    return data


def _fill_node(data: Any) -> Any:
    """Hardware(node="dgx-h100", ...): a catalog node type (gpuhours catalog nodes) fills
    gpus_per_node and inter_node_gb_per_s_one_way, as --node and a plan's hardware.node do;
    neither may be given beside it (a FieldError keyed by `node`)."""
    if not isinstance(data, dict) or "node" not in data:
        return data
    from gpuhours.catalog import node_for_gpu

    node = data["node"]
    if not isinstance(node, str):
        raise FieldError("node", f"expected a node type's name, got {node!r}.")
    both = [k for k in ("gpus_per_node", "inter_node_gb_per_s_one_way") if k in data]
    if both:
        raise FieldError(("node", both[0]), f"node {node} sets {both[0]}; give one or the other.")
    gpu = data.get("gpu")
    n = node_for_gpu(node, gpu if isinstance(gpu, str) else getattr(gpu, "name", str(gpu)))
    rest = {k: v for k, v in data.items() if k != "node"}
    return {**rest, "gpus_per_node": n.gpus_per_node,
            "inter_node_gb_per_s_one_way": n.inter_node_gb_per_s_one_way}


class Hardware(_Strict):
    """Where it runs: an accelerator, how many, how they are connected."""

    gpu: GpuSpec
    num_gpus: int = Field(default=1, ge=1, le=1_000_000)
    gpus_per_node: int = Field(default=8, ge=1, le=1024)
    #: network bandwidth between nodes per GPU, GB/s, one direction. Default 25 GB/s: a
    #: 200 Gb/s InfiniBand/RoCE NIC per GPU (8 x 200 Gb/s per node, e.g. DGX A100).
    inter_node_gb_per_s_one_way: float = Field(default=25.0, gt=0, allow_inf_nan=False)
    #: host (CPU) microseconds per eager device operator; None = the assumption
    #: (estimate/assumptions.py HOST_S_PER_OP, measured on one H100 VM host). A step cannot be
    #: shorter than its host's issuing of its operators (docs/bench.md, "The host floor").
    host_us_per_op: float | None = Field(default=None, gt=0, le=10_000, allow_inf_nan=False)
    #: PCIe lanes each GPU's slot gives it where fewer than the 16 the catalog's PCIe figures
    #: are for (a consumer CPU's 16 lanes split x8/x8 between two cards): the GPU-to-GPU PCIe
    #: link (peer-to-peer or staged through host memory) and the host link (CPU offload) carry
    #: lanes/16 of the catalog's rate. None = 16
    pcie_lanes: int | None = Field(default=None, ge=1, le=16)
    #: job interruptions per GPU-hour, for the expected downtime of a long run (restarts, lost
    #: work, checkpoint writes: estimate/goodput.py); None = the assumption (Llama 3 paper's
    #: 16K-H100 run: 419 in 54 days, goodput.INTERRUPTIONS_PER_GPU_HOUR); 0 = no interruptions
    interruptions_per_gpu_hour: float | None = Field(default=None, ge=0, le=1.0,
                                                     allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _fill_gpu(cls, data: Any) -> Any:
        return _fill_node(_catalog_gpu(data))

    @field_validator("pcie_lanes")
    @classmethod
    def _slot_width(cls, lanes: int | None) -> int | None:
        if lanes is not None and lanes not in (1, 2, 4, 8, 16):
            raise ValueError(f"a PCIe slot has 1, 2, 4, 8 or 16 lanes, got {lanes}")
        return lanes

    @property
    def num_nodes(self) -> int:
        return math.ceil(self.num_gpus / self.gpus_per_node)


def hf_release(version: str) -> tuple[int, int]:
    """(major, minor) of a transformers release string ("4.38", "4.46.0", "5.17"), checked:
    4.36 (the DynamicCache whose copies estimate/generation.py counts) up to 5.x."""
    m = re.fullmatch(r"(\d+)\.(\d+)(?:\.\d+)?", version.strip())
    if m is None or not (4, 36) <= (int(m[1]), int(m[2])) < (6, 0):
        raise FieldError("hf_transformers_version", f"expected a transformers release 4.36 or "
                         f"later such as 4.38, 4.46.0 or 5.17, got {version!r}.",
                         "Give MAJOR.MINOR or MAJOR.MINOR.PATCH (pip show transformers); 4.36 "
                         "brought the DynamicCache whose copies are counted.")
    return int(m[1]), int(m[2])


#: the bytes per weight a generation estimate takes, (low, high, format): the formats its
#: kernels are costed for (16-bit; 8- and 4-bit weights on Marlin's GPTQ/AWQ kernel with their
#: scales: a 4-bit weight with one fp16 scale and a 4-bit zero per 32 weights is
#: 0.5 + 2.5/32 = 0.578 bytes, per 128 weights 0.52; an 8-bit one 1 to 1.08) and fp32. Any
#: other value (3, 0.3) describes nothing that runs and is refused.
WEIGHT_BYTES_RANGES: tuple[tuple[float, float, str], ...] = (
    (0.5, 0.625, "4-bit weights with their group scales, e.g. 0.56"),
    (1.0, 1.125, "8-bit: int8 or fp8, with their scales"),
    (2.0, 2.0, "bf16/fp16"),
    (4.0, 4.0, "fp32"),
)

#: bytes per cached K or V element the estimate knows, as (low, high, what): 4-bit with scales
#: (transformers' QuantizedCache, nbits=4), 8-bit (vLLM/SGLang kv_cache_dtype fp8, or int8 with
#: scales), bf16/fp16, fp32 (a float32 model's cache)
KV_BYTES_RANGES: tuple[tuple[float, float, str], ...] = (
    (0.5, 0.625, "4-bit with scales: transformers' QuantizedCache nbits=4"),
    (1.0, 1.125, "8-bit: fp8 kv_cache_dtype in vLLM and SGLang, or int8 with scales"),
    (2.0, 2.0, "bf16/fp16"),
    (4.0, 4.0, "fp32"),
)


def _formats(ranges: tuple[tuple[float, float, str], ...]) -> str:
    return ", ".join(f"{low:g}" + (f"-{high:g}" if high > low else "") + f" ({what})"
                     for low, high, what in ranges)


class Generation(_ReadsModel):
    """An inference/generation setup (RL rollouts, evaluation, serving), per GPU replica."""

    arch: ModelArch
    model: str | None = None
    model_basis: str = "architecture given by the caller"
    config_overrides: dict[str, ConfigValue] = Field(default_factory=dict)
    prompt_tokens: int = Field(default=512, ge=1, le=10_000_000)
    output_tokens: int = Field(default=512, ge=0, le=10_000_000)
    #: the longest output (a spread of lengths: `output_tokens` is then the mean); the last
    #: wave lasts until it is decoded. None = every output `output_tokens` long
    max_output_tokens: int | None = Field(default=None, ge=1, le=10_000_000)
    #: concurrent sequences; None = as many as fit in memory
    batch: int | None = Field(default=None, ge=1, le=1_000_000)
    #: bytes per stored weight: 2 (bf16/fp16), 1 (fp8/int8), ~0.56 (4-bit AWQ/GPTQ with one
    #: fp16 scale per 128 weights). Matmuls run at the bf16 rate unless matmul_precision fp8.
    weight_bytes_per_param: float = Field(default=2.0, gt=0, le=4)
    #: the weights as the model is released (catalog released_weights): "mxfp4" puts only the
    #: routed experts at weight_bytes_per_param and keeps the rest 16-bit (gpt-oss); None: the
    #: caller's weight_bytes_per_param on every linear layer (the LM head and embedding 16-bit
    #: under 8/4-bit weights), as "fp8" does (DeepSeek-V3's block-FP8 release)
    released_format: Literal["mxfp4", "fp8"] | None = None
    #: the matmuls' precision: bf16, or fp8 (W8A8: vLLM quantization="fp8", TensorRT-LLM fp8;
    #: fp8 GEMMs at the GPU's fp8 rate, Hopper or later; weights then 1 byte each: the
    #: default of weight_bytes_per_param with fp8, and more than 1 is refused)
    matmul_precision: Literal["bf16", "fp8"] = "bf16"
    #: bytes per cached K or V element: 2 (bf16), 1 (vLLM kv_cache_dtype="fp8")
    kv_bytes_per_element: float = Field(default=2.0, gt=0, le=4)
    #: the engine's per-step costs are assumptions, estimate/assumptions.py (DECODE_*)
    engine: Engine = "vllm"
    #: sequences the engine runs at once (vLLM's max_num_seqs); None = the engine's default
    #: (estimate/generation.py engine_max_num_seqs_default, by GPU; no cap for hf-generate)
    max_num_seqs: int | None = Field(default=None, ge=1, le=1_000_000)
    #: lmdeploy only: TurboMind's cache_max_entry_count, the size of its paged KV cache on each
    #: GPU: below 1 the share of the device's memory, 1 or more a count of 128-token blocks;
    #: None = its converter's default, 0.5 (estimate/lmdeploy.py)
    cache_max_entry_count: float | None = Field(default=None, gt=0, le=10_000_000,
                                                allow_inf_nan=False)
    #: GPUs one replica is split over by tensor parallelism (attention heads and MLP columns,
    #: two all-reduces of the activations per layer per step; vLLM tensor_parallel_size)
    tensor_parallel: Literal[1, 2, 4, 8, 16, 32, 64] = 1
    #: GPUs one NVLink domain joins (a DGX/HGX node's 8; 72 in a GB200 NVL72 rack): a
    #: tensor-parallel group wider than it all-reduces over the network between nodes, and a
    #: group wider than 8 through NCCL (estimate/tp_allreduce.py)
    gpus_per_node: int = Field(default=8, ge=1, le=1024)
    #: network bandwidth between nodes per GPU, GB/s, one direction (as Hardware's)
    inter_node_gb_per_s_one_way: float = Field(default=25.0, gt=0, allow_inf_nan=False)
    #: GPUs transformers' generate (hf-generate only) splits the model over by
    #: `device_map="auto"`: its layers in sequence, one GPU busy at a time, accelerate's hooks
    #: moving the activations (estimate/device_map.py); 1 = one GPU. Not with tensor_parallel
    device_map_gpus: int = Field(default=1, ge=1, le=64)
    #: the transformers release hf-generate runs ("4.38", "4.46.0", "5.17"; 4.36 or later):
    #: what a decode step copies and rebuilds differs by release
    #: (estimate/hf_generate_memory.py hf_generate_kv_cache_passes, hf_generate_mask_bytes_per_sequence).
    #: The default is the release hf-generate's constants were fitted on; other engines ignore it
    hf_transformers_version: str = "4.46"
    #: hf-generate only: the library a GPTQ/AWQ checkpoint's linears load into under
    #: transformers (estimate/hf_quant.py): "gptqmodel-2.2.0" (8-bit GPTQ, its Marlin kernel)
    #: or "autoawq-0.2.9" (4-bit AWQ, WQLinear_GEMM with awq_ext). None: 8/4-bit weights under
    #: hf-generate take their bytes' time alone (the kernels not costed)
    hf_quant_linear: Literal["gptqmodel-2.2.0", "autoawq-0.2.9"] | None = None
    #: whether decode steps replay CUDA graphs: auto = the engine's own capture rules (vLLM V0
    #: up to 256 sequences and 8,192 tokens, V1 up to 512 sequences, SGLang 0.4.6 up to 160 or
    #: 256 by GPU memory; estimate/cuda_graphs.py), on = every step (captured for any batch
    #: and length), off = none (vLLM enforce_eager=True, SGLang --disable-cuda-graph).
    #: hf-generate always runs eagerly: `on` is refused for it
    cuda_graphs: Literal["auto", "on", "off"] = "auto"
    #: vLLM V1's async scheduling (its default from vLLM 0.14.0: the release notes' "Async
    #: scheduling is now enabled by default", vllm#27614; off before, unless asked for): the
    #: engine's host work for the next step (scheduler, input preparation, sampling's trip
    #: back) runs while the GPU runs this one, so a step takes the longer of the two
    #: (assumptions.DECODE_HOST_STEP_S, else serial with the GPU). vLLM (V1) only
    async_scheduling: bool = False
    #: whether each request asks the engine for its sampled tokens' log-probabilities
    #: (SamplingParams.logprobs=0, as NeMo-RL's vllm_worker.py does): vLLM V1 then turns each
    #: running sequence's logprob into Python objects every step (the scheduler's
    #: LogprobsLists.slice, the output processor's LogprobsProcessor;
    #: assumptions.DECODE_HOST_LOGPROB_S_PER_SEQUENCE), host work serial with the GPU where the
    #: engine's host step is (not under async_scheduling). vLLM (V1) only; off = not asked
    returns_logprobs: bool = False

    @model_validator(mode="before")
    @classmethod
    def _fp8_weights(cls, data: Any) -> Any:
        # W8A8 stores its weights in fp8: 1 byte each unless the caller says otherwise
        if (isinstance(data, dict) and data.get("matmul_precision") == "fp8"
                and data.get("weight_bytes_per_param") is None):
            return {**data, "weight_bytes_per_param": 1.0}
        return data

    @model_validator(mode="after")
    def _check(self) -> Generation:
        w = self.weight_bytes_per_param
        if not any(low <= w <= high for low, high, _ in WEIGHT_BYTES_RANGES):
            raise FieldError("weight_bytes_per_param", f"{w:g} bytes per weight is no format "
                             f"the estimate knows.", f"Give {_formats(WEIGHT_BYTES_RANGES)}.")
        kv = self.kv_bytes_per_element
        if not any(low <= kv <= high for low, high, _ in KV_BYTES_RANGES):
            raise FieldError("kv_bytes_per_element", f"{kv:g} bytes per cached element is no "
                             f"KV-cache format the estimate knows.",
                             f"Give {_formats(KV_BYTES_RANGES)}.")
        if self.matmul_precision == "fp8" and self.weight_bytes_per_param > 1.125:
            raise FieldError("weight_bytes_per_param", f"fp8 matmuls (W8A8) read fp8 weights, "
                             f"1 byte each (1-1.125 with their scales); "
                             f"{self.weight_bytes_per_param:g} bytes per weight is a bf16 or "
                             f"fp16 model.", "Leave it out, or give 1 (or less, for 4-bit "
                             "weights dequantised to fp8).")
        if self.max_output_tokens is not None and self.max_output_tokens < self.output_tokens:
            raise FieldError("max_output_tokens", f"the longest output ({self.max_output_tokens}"
                             f" tokens) is below the mean output_tokens ({self.output_tokens}).")
        if self.arch.num_heads % self.tensor_parallel:
            raise FieldError("tensor_parallel", f"{self.arch.name} has {self.arch.num_heads} "
                             f"attention heads; tensor parallelism must divide them "
                             f"({self.tensor_parallel} does not).")
        hf_release(self.hf_transformers_version)
        if self.device_map_gpus > 1 and self.engine != "hf-generate":
            raise FieldError(("device_map_gpus", "engine"), f"{self.engine} does not split a "
                             f"model by device_map: that is transformers' generate "
                             f"(hf-generate).", "Use tensor_parallel for vLLM and SGLang.")
        if self.device_map_gpus > 1 and self.tensor_parallel > 1:
            raise FieldError(("device_map_gpus", "tensor_parallel"), "a model split by "
                             "device_map runs its layers in sequence; tensor parallelism "
                             "splits every layer: give one of them.")
        if self.cache_max_entry_count is not None and self.engine != "lmdeploy":
            raise FieldError(("cache_max_entry_count", "engine"), "cache_max_entry_count is "
                             f"TurboMind's (LMDeploy) KV-cache size, not {self.engine}'s.",
                             "Leave it out, or use engine lmdeploy.")
        if self.async_scheduling and self.engine != "vllm":
            raise FieldError(("async_scheduling", "engine"), f"async scheduling is vLLM V1's "
                             f"(0.11 or later); {self.engine} is not modelled with it.",
                             "Use engine vllm, or leave async scheduling off.")
        if self.returns_logprobs and self.engine != "vllm":
            raise FieldError(("returns_logprobs", "engine"), f"the per-sequence cost of "
                             f"returning logprobs is measured for vLLM V1's output path "
                             f"(0.11.2); {self.engine}'s is not modelled.",
                             "Use engine vllm, or leave returns_logprobs off.")
        if self.engine == "hf-generate" and self.cuda_graphs == "on":
            raise FieldError(("cuda_graphs", "engine"), "hf-generate runs every step eagerly "
                             "(transformers' generate with its dynamic cache); its static-cache "
                             "CUDA-graph path (torch.compile) is not modelled.",
                             "Leave it at auto or off for hf-generate.")
        return self


# How the choices run in torch (trace and bench; no torch imported here) -------------------
@dataclass(frozen=True)
class TorchPrecision:
    """How a precision of ours runs in torch: parameter dtype, autocast dtype, and what that
    means beside what the name promises (`note`, empty when it is exact)."""

    param_dtype: str
    autocast_dtype: str | None
    #: the precision the analytic estimator should use to describe what was traced
    analytic_precision: str
    note: str


def torch_precision(precision: str, method: str = "full") -> TorchPrecision:
    """Map our precision names onto a torch setup that runs on fake CPU tensors.

    - fp32: fp32 weights, no autocast. bf16 / fp16 (pure): the model cast to that dtype
      (`model.to(torch.bfloat16)`), AdamW state in the same dtype.
    - bf16-amp / fp16-amp: fp32 weights under torch.autocast (HF Trainer's bf16=True).
    - bf16-mixed / fp16-mixed (DeepSpeed, Megatron, FSDP: half-precision weights with fp32 master
      weights in the optimizer) have no single-process torch equivalent; the closest real one,
      autocast over fp32 weights, is traced instead, and the note says so. With LoRA (nothing
      of the base trains, so there is no master copy) it is exact: a model loaded in half
      precision, peft's fp32 adapters, and autocast (the HF Trainer with bf16=True).
    Autocast here is CPU autocast: it casts the same matmuls (linear, bmm, baddbmm, matmul) as
    CUDA autocast, and keeps the loss's softmax in fp32 as CUDA's does.
    """
    if precision == "fp8-mixed":
        raise FieldError("precision", "fp8-mixed (fp8 GEMMs through Transformer Engine or "
                         "torchao) is modelled by estimate, fit and plan; the fake-tensor and "
                         "real runs here are bf16.", "Use bf16-mixed for trace and bench.")
    half = "bfloat16" if precision.startswith("bf16") else "float16"
    if precision == "fp32":
        return TorchPrecision("float32", None, "fp32", "")
    if precision in ("bf16", "fp16"):
        return TorchPrecision(half, None, precision, "")
    amp = precision.replace("-mixed", "-amp")
    if precision.endswith("-amp"):
        return TorchPrecision("float32", half, amp, "")
    if precision.endswith("-mixed") and method != "full":
        return TorchPrecision(half, half, precision, "")
    if precision.endswith("-mixed"):
        return TorchPrecision(
            "float32", half, amp,
            f"{precision} (half-precision weights + fp32 master weights, as DeepSpeed/FSDP keep "
            f"them) has no single-process torch equivalent; traced as {amp}: fp32 weights, "
            f"gradients and AdamW moments under torch.autocast({half}), the closest real setup.")
    raise FieldError("precision", f"unknown precision {precision!r}.")


def lora_target_modules(targets: str) -> str | list[str]:
    """peft's `target_modules` for our LoRA target names (llama-style module names)."""
    if targets == "all-linear":
        return "all-linear"
    if targets == "attention":
        return ["q_proj", "k_proj", "v_proj", "o_proj"]
    if targets == "qkv":
        return ["q_proj", "k_proj", "v_proj"]
    if targets == "mlp":
        return ["gate_proj", "up_proj", "down_proj"]
    return ["q_proj", "v_proj"]
