"""The plan file: a whole project, phase by phase (YAML, validated here).

Strict models: unknown keys are refused, `None` means "not set", and options that conflict are
rejected by a validator that names them. `gpuhours plan --schema` prints the JSON Schema.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.config import JsonDict

from gpuhours.counts import parse_count
from gpuhours.errors import FieldError
from gpuhours.plan.rl_refit_offload import RefitOffload
from gpuhours.setup import (
    BaseQuant,
    CudaGraphScope,
    Engine,
    Kernels,
    LoraTargets,
    LossKernel,
    Method,
    MoeDispatch,
    MoeRouterDtype,
    Offload,
    Optimizer,
    OptimizerImpl,
    Precision,
    RecomputeModule,
    ZeroStage,
    hf_release,
)

Runs = Literal["once", "per_seed", "single_seed"]
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegativeFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
PositiveInt = Annotated[int, Field(ge=1)]
#: An amount of work as people write it: 2e12, "1.4T", "52k" (gpuhours.counts).
Count = Annotated[float, BeforeValidator(parse_count), Field(gt=0, allow_inf_nan=False)]


def _whole(v: float) -> float:
    if v != int(v):
        raise ValueError("expected a whole number")
    return v


#: A Count of things that come whole (RL steps, prompts): 10.5 is refused, as `estimate
#: --steps 10.5` is, rather than priced.
WholeCount = Annotated[Count, AfterValidator(_whole)]


class _Strict(BaseModel):
    # strict: YAML already gives typed values, so `seeds: true` or `gpus: "8"` is a mistake to
    # refuse, not a 1 or an 8 to accept (pydantic's lax mode reads true as 1)
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Expectation(_Strict):
    """What the plan's author believes; gpuhours compares it with physics (warns beyond 2x)."""

    tokens_per_s: PositiveFloat | None = Field(
        default=None, description="training throughput per GPU the author expects, tokens/s")
    hours: PositiveFloat | None = Field(
        default=None, description="wall-clock hours of one run on the phase's GPUs")
    gpu_hours: PositiveFloat | None = Field(default=None, description="GPU hours of one run")
    steps: Count | None = Field(
        default=None, description="optimizer steps of one run (RL: policy updates)")
    steps_per_hour: PositiveFloat | None = Field(
        default=None, description="optimizer steps per wall-clock hour on the phase's GPUs")


class HardwareSpec(_Strict):
    """Where the project runs."""

    gpu: str = Field(description="catalog name or alias, e.g. a100-80gb; or the device key "
                     "of a machine measured by `gpuhours bench` (with the ledger)")
    node: str | None = Field(
        default=None, description="node type from the catalog (gpuhours catalog nodes), e.g. "
        "dgx-h100: sets gpus_per_node and inter_node_gb_per_s_one_way")
    gpus_per_node: PositiveInt = 8
    nodes: PositiveInt = 1
    inter_node_gb_per_s_one_way: PositiveFloat = Field(
        default=25.0, description="network between nodes per GPU, GB/s one way")
    host_us_per_op: PositiveFloat | None = Field(
        default=None, description="host (CPU) microseconds per eager device operator; "
        "default: the estimator's assumption (32, one H100 VM host)")
    pcie_lanes: Literal[1, 2, 4, 8, 16] | None = Field(
        default=None, description="PCIe lanes per GPU where fewer than 16 (a consumer board "
        "splitting 16 CPU lanes x8/x8 between two cards): PCIe links between GPUs and to the "
        "host at lanes/16 of the catalog's x16 figures; default 16")
    interruptions_per_gpu_hour: NonNegativeFloat | None = Field(
        default=None, le=1.0, description="job interruptions per GPU-hour for the expected "
        "downtime (restarts, lost work, checkpoint writes); default: the Llama 3 paper's "
        "1.97e-5; 0 leaves downtime out")
    usd_per_gpu_hour: PositiveFloat | None = Field(
        default=None, description="your own price; otherwise the price catalog is used")
    electricity_usd_per_kwh: PositiveFloat | None = Field(
        default=None, description="for local hardware: energy cost of the GPUs at their TDP")
    disk_write_gb_per_s: PositiveFloat | None = Field(
        default=None, description="sequential write bandwidth of the checkpoint disk, GB/s")

    @model_validator(mode="before")
    @classmethod
    def _node(cls, data: Any) -> Any:
        """A catalog node type fills gpus_per_node and inter_node_gb_per_s_one_way."""
        if not isinstance(data, dict) or not isinstance(data.get("node"), str):
            return data  # no node, or the field's own check says what is wrong with it
        from gpuhours.catalog import node_for_gpu
        from gpuhours.errors import InputError

        try:  # an unknown node type is the error to report first, not a clash with it
            n = node_for_gpu(data["node"], str(data.get("gpu")))
        except InputError as e:
            raise ValueError(f"{e.message} {e.hint or ''}".strip().rstrip(".")) from None
        both = sorted({"gpus_per_node", "inter_node_gb_per_s_one_way"} & data.keys())
        if both:
            raise ValueError(f"node {data['node']} sets {both[0]}; give one or the other")
        return {**data, "gpus_per_node": n.gpus_per_node,
                "inter_node_gb_per_s_one_way": n.inter_node_gb_per_s_one_way}

    @property
    def num_gpus(self) -> int:
        return self.gpus_per_node * self.nodes


#: settings a phase may also give by the Hugging Face TrainingArguments name
HF_NAMES = {"micro_batch": "per_device_train_batch_size", "grad_accum": "gradient_accumulation_steps",
            "checkpointing": "gradient_checkpointing"}


def _hf_names_in_schema(schema: JsonDict) -> None:
    """`plan --schema` lists each Hugging Face name beside gpuhours' own (editors check plans
    against it, and unknown keys are refused)."""
    props = schema.get("properties")
    if not isinstance(props, dict):
        return
    for ours, theirs in HF_NAMES.items():
        field = props.get(ours)
        if isinstance(field, dict):
            props[theirs] = {**field, "title": theirs,
                             "description": f"{ours}, by its Hugging Face name (one of the two)"}


class TrainingSettings(_Strict):
    """Settings a training phase may set; `defaults` sets them for every phase."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True,
                              json_schema_extra=_hf_names_in_schema)

    from_: str | None = Field(
        default=None, alias="from",
        description="a training tool's config (axolotl, LLaMA-Factory, torchtune, HF "
                    "TrainingArguments, TRL, verl), relative to the plan: its settings fill those the "
                    "phase does not set (docs/importers.md)")
    model: str | None = Field(default=None, description="catalog name or config.json path")
    params: PositiveFloat | None = Field(default=None, description="size only, e.g. 7e9")
    method: Method | None = None
    lora_rank: PositiveInt | None = None
    lora_targets: LoraTargets | None = None
    precision: Precision | None = None
    optimizer: Optimizer | None = None
    optimizer_impl: OptimizerImpl | None = None
    seq_len: PositiveInt | None = None
    micro_batch: PositiveInt | None = Field(
        default=None, validation_alias=AliasChoices("micro_batch", "per_device_train_batch_size"),
        description="sequences per GPU per forward (Hugging Face: per_device_train_batch_size)")
    grad_accum: PositiveInt | None = Field(
        default=None, validation_alias=AliasChoices("grad_accum", "gradient_accumulation_steps"),
        description="micro-batches per optimizer step (Hugging Face: "
                    "gradient_accumulation_steps)")
    checkpointing: bool | None = Field(
        default=None, validation_alias=AliasChoices("checkpointing", "gradient_checkpointing"),
        description="activation checkpointing (Hugging Face: gradient_checkpointing)")
    flash_attention: bool | None = None
    eager_attention: Literal["fp32-softmax", "sdpa-mask"] | None = Field(
        default=None, description="without a flash kernel, what attention keeps per score: "
        "fp32-softmax (transformers' eager attention) or sdpa-mask (torch 2.0-2.1's SDPA "
        "given an additive mask: one copy in the activation dtype)")
    fused_attention: bool | None = Field(
        default=None, description="cuDNN fused attention or FlashAttention-3 (Megatron-LM, "
        "NeMo); default: PyTorch SDPA's FlashAttention-2 kernels (transformers)")
    compile: bool | None = Field(
        default=None, description="torch.compile of the decoder layers and the loss "
        "(torchtune compile: true, HF torch_compile): fewer activations saved, a compiled "
        "cross-entropy, fused elementwise kernels; default: eager")
    optimizer_in_backward: bool | None = Field(
        default=None, description="each parameter's optimizer step run in backward at its "
        "gradient, which is then freed (torchtune optimizer_in_bwd): no whole-model gradient; "
        "needs grad_accum 1; default: after backward")
    optimizer_paged: bool | None = Field(
        default=None, description="bitsandbytes' paged AdamW (32-bit or 8-bit): the moments "
        "of tensors of 1e5 elements or more in CUDA managed memory, outside torch's "
        "allocator, paged to the host when the GPU is full; default: not paged")
    activation_offload: bool | None = Field(
        default=None, description="the checkpointed layer inputs copied to pinned host memory "
        "and back in backward (torchtune enable_activation_offloading); needs checkpointing; "
        "default: off")
    liger_kernels: Literal["none", "classes", "instance"] | None = Field(
        default=None, description="Liger-Kernel's fused RMSNorm, RoPE and SwiGLU patched into "
        "transformers' layers: classes (apply_liger_kernel_to_* before the model is built: "
        "LLaMA-Factory, axolotl; every norm), instance (on a built model: HF Trainer/TRL "
        "use_liger_kernel, verl use_liger; per-head q/k norms stay eager); its loss is "
        "loss_kernel fused-linear; default: none")
    kv_repeated: bool | None = Field(
        default=None, description="k and v repeated to the query heads before the attention "
        "kernel (torchtune; transformers' repeat_kv without enable_gqa): saved at the query "
        "width; default: grouped")
    checkpoint_offload: bool | None = Field(
        default=None, description="under checkpointing, each block's input moved to host "
        "memory and back in backward (Unsloth's use_gradient_checkpointing=\"unsloth\"): the "
        "GPU keeps one; default: off")
    loss_kernel: LossKernel | None = Field(
        default=None, description="the cross-entropy's kernel (hf, chunked, fused-linear, "
        "cut-ce, half, chunked-half, chunked-fabric, verl-logprobs, megatron, te, "
        "unsloth-ce, half-amp); default: "
        "megatron on kernels megatron (Megatron-Core's vocab-parallel cross-entropy), "
        "unsloth-ce on kernels unsloth, else hf (transformers' loss)")
    kernels: Kernels | None = Field(
        default=None, description="the code path, for the host's operators per micro-batch: "
        "eager (transformers' modelling; default), flash-attn (code calling flash-attn with "
        "its fused rotary and RMSNorm: Qwen-1's with flash-attn installed), megatron "
        "(Megatron-Core with Transformer Engine's fused layers) or unsloth (Unsloth's "
        "LoRA/QLoRA layer: fused LoRA Functions, Triton norms and cross-entropy)")
    moe_dispatch: MoeDispatch | None = Field(
        default=None, description="on kernels megatron, how a MoE layer routes its tokens: "
        "fused (default: the all-to-all dispatcher with Transformer Engine's fused permute, "
        "Megatron-Bridge's), alltoall-unfused (the all-to-all dispatcher, unfused permute: "
        "NeMo-RL v0.6's grpo_math_1B.yaml) or allgather-unfused (NeMo-RL v0.5's: allgather "
        "dispatcher, unfused permute)")
    moe_router_dtype: MoeRouterDtype | None = Field(
        default=None, description="on kernels megatron, the MoE router's dtype "
        "(Megatron-Core moe_router_dtype): bf16, fp32 or fp64; default fp64 with the unfused "
        "dispatches (NeMo-RL's), else bf16 (Megatron-Core's default)")
    grad_reduce_in_fp32: bool | None = Field(
        default=None, description="on kernels megatron, Megatron-Core's gradient buffer in "
        "fp32, accumulated and reduced in fp32 (Megatron-LM's own default for bf16); default "
        "false: in the weights' dtype, as Megatron-Bridge's performance recipes run")
    moe_fused_mlp: bool | None = Field(
        default=None, description="on kernels megatron, a MoE's routed experts run through "
        "Transformer Engine's op fuser (Megatron-Core use_transformer_engine_op_fuser); "
        "default false: the unfused grouped MLP, whose eager clamp and per-expert output "
        "bias cost passes")
    # strict=False: YAML gives a list, read as Training's tuple
    recompute_modules: tuple[RecomputeModule, ...] | None = Field(
        default=None, strict=False, description="on kernels megatron, the modules "
        "recomputed in backward under selective recomputation, as Megatron-Core names them "
        "(a list): layernorm (a MoE layer's pre-MLP norm), moe_act (the experts' "
        "activation); full recomputation is checkpointing")
    # strict=False: YAML gives a list, read as Training's tuple
    cuda_graph_scope: tuple[CudaGraphScope, ...] | None = Field(
        default=None, strict=False, description="on kernels megatron, the regions of the step replayed as "
        "CUDA graphs, as Megatron-Core names them (a list): "
        "full_iteration, full (each whole layer), attn, mlp, moe, moe_router, moe_preprocess; "
        "default: none")
    zero_stage: ZeroStage | None = None
    offload: Offload | None = Field(
        default=None, description="CPU offload: none, optimizer (DeepSpeed offload_optimizer; "
        "ZeRO 1-3), optimizer+params (ZeRO-3 offload_param, FSDP CPUOffload)")
    tp: PositiveInt | None = Field(default=None, description="tensor parallelism with sequence "
                                   "parallelism (Megatron-LM), within a node; dividing "
                                   "the heads, KV heads and MLP width")
    pp: PositiveInt | None = Field(default=None, description="pipeline stages (1F1B)")
    cp: PositiveInt | None = Field(default=None, description="context parallelism (ring "
                                   "attention)")
    ep: PositiveInt | None = Field(default=None, description="expert parallelism (MoE)")
    virtual_stages: PositiveInt | None = Field(
        default=None, description="model chunks per pipeline stage (interleaved schedule)")
    tp_comm_overlap: bool | None = Field(
        default=None, description="tensor-parallel collectives pipelined with their GEMMs "
        "(Megatron-Core --tp-comm-overlap; Hopper or later)")
    moe_a2a_overlap: bool | None = Field(
        default=None, description="the expert all-to-all hidden behind another micro-batch's "
        "compute (Megatron-Core --overlap-moe-expert-parallel-comm, DeepSeek's DualPipe)")
    kbit_upcast: bool | None = Field(
        default=None, description="qlora: non-4-bit weights cast to fp32 by peft's "
        "prepare_model_for_kbit_training; default yes unless ZeRO-3/FSDP or a GPTQ base")
    base_quant: BaseQuant | None = Field(
        default=None, description="qlora's 4-bit base: nf4 (bitsandbytes), gptq-int4, awq-int4, "
        "nf4-nodq (NF4 without double quantisation), nf4-torchao (torchao's NF4, torchtune), "
        "int8-bnb (bitsandbytes LLM.int8, load_in_8bit)")
    bnb_saved_input: Literal["step", "held", "held-output", "none"] | None = Field(
        default=None, description="qlora on bitsandbytes: what MatMul4Bit keeps of each 4-bit "
        "linear's input: step (before 0.43.2; default), held (and the loop keeps the last loss "
        "into the next micro-batch: lit-gpt 2023), held-output (the loop keeps only its "
        "output into the next forward: litgpt 2024) or none (0.43.2 and later)")
    fp8_params: bool | None = Field(
        default=None, description="fp8-mixed: the layers' weights are Transformer Engine fp8 "
        "tensors with no half-precision copy (Megatron-Core --fp8-param-gather)")
    head_weight_cast: bool | None = Field(
        default=None, description="the LM head's half-precision weight in the other half "
        "dtype than autocast's (fp16 weights under bf16 autocast): autocast's copy kept from "
        "the head's forward to its backward; default no")
    lm_head_4bit: bool | None = Field(
        default=None, description="qlora on bitsandbytes: the LM head is 4-bit too (Lightning's "
        "BitsandbytesPrecision, litgpt), with a dequantised copy at its matmuls")
    deepspeed_reduce_bucket: int | None = Field(
        default=None, ge=0, description="DeepSpeed ZeRO-1/2 reduce_bucket_size, elements: its "
        "gradient buffers (two with overlap_comm) at every backward; 0: not DeepSpeed")
    deepspeed_overlap_comm: bool | None = Field(
        default=None, description="DeepSpeed overlap_comm (a second bucket buffer; with offload "
        "below ZeRO-3, the gradients' host copies beside backward); default DeepSpeed's: on for "
        "ZeRO-3 only")
    deepspeed_pipe_engine: bool | None = Field(
        default=None, description="DeepSpeed's PipelineEngine runs the step (GPT-NeoX, "
        "Megatron-DeepSpeed): every gradient all-reduced after the last backward, none beside "
        "compute; ZeRO 0 or 1 only")
    cuda_launch_blocking: bool | None = Field(
        default=None, description="CUDA_LAUNCH_BLOCKING=1 in the run's environment: each "
        "operator's host time and GPU time add up, no collective beside compute")
    offload_copies: Literal["pinned", "pageable-step", "pageable"] | None = Field(
        default=None, description="with offload: pinned host memory (default); pageable-step "
        "(DeepSpeed before 0.14.1: the step's weights up through a CPU cast); pageable "
        "(DeepSpeed's pin_memory off: every offload copy staged, not overlapped)")
    zero3_engine: Literal["fsdp", "deepspeed"] | None = Field(
        default=None, description="who runs ZeRO stage 3: fsdp (default) or deepspeed (its "
        "engine's per-module hooks cost the host per module fetched and released)")
    fsdp_grad_accum: Literal["reduce-scatter", "no-sync"] | None = Field(
        default=None, description="how FSDP (zero_stage 3) accumulates gradients over the "
        "micro-batches: reduce-scatter (default: into the 1/N shards) or no-sync "
        "(FSDP.no_sync(), Lightning Fabric's and litgpt's: every unit's whole gradient held "
        "unsharded until the last micro-batch, estimate/fsdp_no_sync.py)")
    fsdp_adapter_units: bool | None = Field(
        default=None, description="FSDP (zero_stage 3) with each LoRA adapter a unit of its "
        "own inside its layer's, as Answer.AI's fsdp_qlora train.py wraps peft's model: the "
        "rate limiter then hides none of the layers' gathers (estimate/parallel.py); default "
        "no")
    fsdp_api: Literal["fsdp1", "fsdp2"] | None = Field(
        default=None, description="which PyTorch FSDP runs zero_stage 3: fsdp1 (default: "
        "FullyShardedDataParallel, flat parameters) or fsdp2 (fully_shard: torchtune, "
        "torchtitan); with offload optimizer+params only fsdp1's shard copies are replayed")
    fsdp_embedding_units: bool | None = Field(
        default=None, description="FSDP (zero_stage 3) with the token embedding and the LM "
        "head units of their own (torchtune's custom_sharded_layers): neither stays gathered "
        "with the root from forward into backward; default no")
    lora_adapter_dtype: Literal["fp32", "half"] | None = Field(
        default=None, description="lora/qlora: the adapters' dtype, fp32 (peft from 0.12; "
        "default) or half (the bf16/fp16 base's: peft up to 0.11, torchtune, litgpt)")
    load_path: Literal["from-pretrained", "fsdp-flatten"] | None = Field(
        default=None, description="how the weights reach the GPU: from-pretrained (default) or "
        "fsdp-flatten (Answer.AI's fsdp_qlora: FSDP copies, flattens and shards each unit from "
        "the CPU; the freed copies stay cached, estimate/load_cache.py)")
    lora_dropout: float | None = Field(
        default=None, ge=0.0, lt=1.0, description="lora/qlora: dropout on the adapters' input "
        "(peft lora_dropout; default 0): above 0 a 1-byte mask per input element is kept")
    lora_branch: Literal["peft-fp32", "peft-half", "fused"] | None = Field(
        default=None, description="lora/qlora: how the LoRA branch runs: peft-fp32 (peft's "
        "eager operators, fp32 adapters), peft-half (the same in half precision: peft "
        "0.7-0.11, DeepSpeed, FSDP), fused (Triton LoRA kernels, torch.compile, Megatron); "
        "default fused on the megatron path, peft-half for half adapters or under DeepSpeed or "
        "zero_stage 3, else peft-fp32")
    dora: bool | None = Field(
        default=None, description="lora/qlora: DoRA, weight-decomposed LoRA (peft use_dora): "
        "a trained magnitude per output feature, B A and the weight's norm every forward, the "
        "rescaled outputs kept for backward (estimate/dora.py); default off")
    dora_base_matmul: Literal["reuse", "recompute"] | None = Field(
        default=None, description="DoRA's base output: reuse (peft 0.14+ without dropout) or "
        "recompute (peft 0.9-0.13, or lora_dropout above 0); default reuse without dropout")
    peft_method: Literal["lora", "ia3", "prompt_tuning", "prefix_tuning", "loha", "lokr",
                         "vera"] | None = Field(
        default=None, description="lora: the PEFT method as peft 0.21 runs it: lora, ia3, "
        "prompt_tuning, prefix_tuning, loha, lokr, vera (estimate/peft_methods.py); default lora")
    peft_virtual_tokens: int | None = Field(
        default=None, ge=1, description="prompt_tuning and prefix_tuning: peft's "
        "num_virtual_tokens")
    ia3_targets: Literal["k-v-down", "all-linear"] | None = Field(
        default=None, description="ia3: k-v-down (peft's llama default) or all-linear")
    lokr_decompose_factor: int | None = Field(
        default=None, ge=-1, description="lokr: peft's decompose_factor (default -1)")
    seq_len_mean: float | None = Field(
        default=None, gt=0, description="samples of variable length: the dataset's mean tokens "
        "per sample before the cap (seq_len is then the cap); sets the reserved memory by an "
        "allocator replay (estimate/fragmentation.py)")
    seq_len_std: float | None = Field(
        default=None, ge=0, description="the standard deviation of the sample lengths, tokens "
        "(log-normal shape)")
    long_samples: Literal["drop", "truncate"] | None = Field(
        default=None, description="a sample longer than seq_len: drop (ms-swift's "
        "truncation_strategy delete; the default) or truncate")
    document_tokens: int | None = Field(
        default=None, ge=1, description="packed sequences whose documents attend only within "
        "themselves (flash-attn varlen: TRL padding_free, axolotl sample_packing): their mean "
        "tokens; the attention is counted per document (all taken as this long)")
    held_logits: Literal["none", "fp32", "half"] | None = Field(
        default=None, description="logits the training loop holds through backward (its "
        "model output): fp32 (transformers before 4.45), half, or none (HF Trainer)")
    held_kv_cache: bool | None = Field(
        default=None, description="the held model output carries a KV cache of every layer "
        "(transformers' use_cache=True in a training forward without checkpointing), kept "
        "through backward beside repeated k and v; default: none")
    padding_mask: bool | None = Field(
        default=None, description="batches padded to their longest with an attention mask: "
        "each layer's SDPA keeps an additive copy of it (transformers 5 on CUDA then repeats "
        "k and v: set kv_repeated); default: no mask")
    lora_trainable_embeddings: bool | None = Field(
        default=None, description="lora/qlora: the embeddings and LM head train too (peft "
        "modules_to_save: a trainable copy with gradients and optimizer state)")
    lora_lm_head: bool | None = Field(
        default=None, description="lora/qlora: an adapter on the LM head too (peft "
        "target_modules with lm_head; litgpt lora_head): r x (d + vocab) parameters")
    images_per_example: int | None = Field(
        default=None, ge=0, description="vision-language models: images per example (their "
        "tokens add to seq_len's text tokens; the vision tower's forward to the step)")
    image_pixels: PositiveInt | None = Field(
        default=None, description="pixels of each image (assumed square), resized as the "
        "Qwen2.5-VL processor does: one token per 28 x 28 pixels")
    image_tokens: PositiveInt | None = Field(
        default=None, description="tokens per image, instead of image_pixels")
    image_max_pixels: PositiveInt | None = Field(
        default=None, description="the processor's max_pixels (default 1,003,520)")
    train_vision: bool | None = Field(
        default=None, description="the vision tower trains (full fine-tuning); default frozen")
    gpus: PositiveInt | None = Field(
        default=None, description="GPUs this phase uses; left out (here, in defaults and in a "
        "from: file), a training or rl phase uses the hardware's gpus_per_node x nodes (8 x 1 "
        "unless set), and its result says so")

    @model_validator(mode="before")
    @classmethod
    def _one_name_each(cls, data: Any) -> Any:
        """A setting given under both its gpuhours name and its Hugging Face name is a conflict,
        not a choice of one."""
        if isinstance(data, dict):
            for ours, theirs in HF_NAMES.items():
                if ours in data and theirs in data:
                    raise ValueError(f"`{ours}` and `{theirs}` name the same setting: give one")
        return data


class PhaseStorage(_Strict):
    """What a phase keeps on disk (storage/budget.py turns it into bytes)."""

    checkpoints_kept: int = Field(default=1, ge=0, description="checkpoints on disk at a time")
    save_every_steps: PositiveInt | None = Field(
        default=None, description="optimizer steps between saves; with `disk` in the plan's "
                                  "hardware, the write time is added to the phase")
    with_optimizer: bool = Field(default=False,
                                 description="resumable checkpoints: master weights + moments")
    dataset_layout: Literal["packed", "hf-datasets", "hf-datasets-labels"] = "hf-datasets"
    keep_rollouts: bool = Field(default=False, description="RL: keep every rollout on disk")
    log_gb_per_hour: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    other_gb: float = Field(default=0.0, ge=0, allow_inf_nan=False,
                            description="anything else this phase keeps, as stated (assumed)")


def _one_line_name(name: str) -> str:
    """A phase's or an experiment's name goes into table cells and headings: one line."""
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise ValueError("a name must be one line of text, without control characters "
                         "(newlines, tabs)")
    return name


class _PhaseBase(_Strict):
    name: str = Field(min_length=1, max_length=80)

    @field_validator("name")
    @classmethod
    def _name_one_line(cls, v: str) -> str:
        return _one_line_name(v)
    gpu: str | None = Field(default=None, description="this phase's catalog GPU when it is not "
                                                      "the plan's (hardware.gpu)")
    runs: Runs = Field(default="per_seed", description="once, per_seed or single_seed")
    overheads: list[str] = Field(default_factory=list,
                                 description="names from the plan's `overheads`")
    expect: Expectation | None = None
    storage: PhaseStorage | None = None
    note: str = ""


class FinetunePhase(_PhaseBase, TrainingSettings):
    """Supervised fine-tuning: examples x epochs, each example of `tokens_per_example` tokens
    (padded or packed into sequences of seq_len), or `tokens` in all."""

    kind: Literal["finetune"]
    examples: Count | None = None
    tokens_per_example: PositiveFloat | None = Field(
        default=None, description="mean tokens per example; default: seq_len (padded)")
    packed: bool = Field(default=False, description="examples packed into full sequences")
    tokens: Count | None = None
    epochs: PositiveFloat = 1.0

    @model_validator(mode="after")
    def _amount(self) -> FinetunePhase:
        if (self.examples is None) == (self.tokens is None):
            raise ValueError("give exactly one of `examples` or `tokens`")
        return self


class PretrainPhase(_PhaseBase, TrainingSettings):
    """Pretraining (or continued pretraining) on `tokens`."""

    kind: Literal["pretrain"]
    tokens: Count


class RewardModel(_Strict):
    """The step's reward: `rule` (host code scores each response: plan/rl_reward_host.py) or
    `model` (a reward model's forward over every sequence)."""

    kind: Literal["rule", "model"] = "rule"
    model: str | None = None
    verifier: Literal["math-verify", "string-match", "none"] | None = Field(
        default=None, description="a rule reward's scorer, timed on the host a response "
        "(plan/rl_reward_host.py): math-verify (Math-Verify's math_metric as NeMo-RL's "
        "HFVerifyWorker calls it), string-match (verl's math_dapo: the answer in the last 300 "
        "characters), none (no host work); unset: the host time not costed, and said so")
    workers: PositiveInt | None = Field(
        default=None, description="processes scoring the batch in parallel, each a chunk of "
        "ceil(responses / workers) (NeMo-RL's env.math.num_workers, 8 in grpo_math_1B.yaml; "
        "verl's naive and dapo reward managers: 1); unset: 1")
    per_response: bool = Field(
        default=False, description="each response scored as its generation ends, one at a "
        "time, beside the rollout (NeMo-RL with vLLM's async_engine: one-sample calls to the "
        "environment); false: the whole batch after the rollout")

    @model_validator(mode="after")
    def _model(self) -> RewardModel:
        if self.kind == "model" and not self.model:
            raise ValueError("a reward model of kind `model` needs `model`")
        if self.kind == "model":
            rule_only = [f for f in ("verifier", "workers", "per_response")
                         if f in self.model_fields_set]
            if rule_only:
                raise ValueError(f"{', '.join(rule_only)} set a rule reward's host scoring; "
                                 f"this reward is of kind `model` (give kind: rule, or drop "
                                 f"them)")
        if self.kind == "rule" and self.model:
            raise ValueError("`model` names a reward model, and kind is `rule` (give kind: "
                             "model, or drop model)")
        if self.per_response and self.workers not in (None, 1):
            raise ValueError(f"per_response scores one response a call, on one worker; "
                             f"workers {self.workers} would not be used (drop workers, or set "
                             f"per_response false to chunk the batch over them)")
        if self.verifier is None and ("workers" in self.model_fields_set
                                      or self.per_response):
            raise ValueError("workers and per_response time a verifier's host work; give "
                             "verifier (math-verify, string-match or none)")
        return self


class CriticTraining(_Strict):
    """PPO's critic's own training settings where they differ from the policy's (each unset
    one is the phase's)."""

    zero_stage: Annotated[int, Field(ge=0, le=3)] | None = None
    offload: Offload | None = None
    zero3_engine: Literal["fsdp", "deepspeed"] | None = None


class RLPhase(_PhaseBase, TrainingSettings):
    """GRPO/PPO-style RL: each step generates `generations_per_prompt` responses to
    `prompts_per_step` prompts, scores them, runs the reference model, and updates the policy."""

    kind: Literal["rl"]
    prompts: WholeCount | None = Field(default=None, description="dataset size, prompts")
    epochs: PositiveFloat | None = None
    steps: WholeCount | None = None
    prompts_per_step: PositiveInt
    generations_per_prompt: PositiveInt = 8
    prompt_tokens: PositiveInt = Field(description="mean prompt length, tokens")
    response_tokens: PositiveInt = Field(description="mean response length, tokens")
    max_response_tokens: PositiveInt | None = Field(
        default=None, description="the longest response (max_tokens/max_response_length): a "
        "synchronous step waits for it; unset = every response as long as the mean")
    reference_model: bool = Field(default=True, description="a frozen copy scores the KL term")
    reward: RewardModel = Field(default_factory=RewardModel)
    engine: Engine = "vllm"
    placement: Literal["colocated", "dedicated", "actor"] = Field(
        default="colocated", description="rollouts on the trainer's GPUs in turn (verl's hybrid "
        "engine, TRL colocate), on `rollout_gpus` of the phase's GPUs (TRL vllm-server, "
        "OpenRLHF with vLLM), or on the actor's own `actor_gpus` while the other roles' GPUs "
        "wait (`actor`: OpenRLHF Ray without vLLM, each actor rank generating with HF generate)")
    rollout_gpus: PositiveInt | None = Field(
        default=None, description="GPUs of the phase that run the engine (dedicated placement)")
    rollout_tensor_parallel: Literal[1, 2, 4, 8, 16, 32, 64] = Field(
        default=1, description="GPUs of one rollout engine (vLLM tensor_parallel_size); an "
        "engine wider than a node all-reduces over the network between nodes")
    rollout_batch: PositiveInt | None = Field(
        default=None, description="sequences one engine is given at a time (OpenRLHF 0.2's "
        "micro_rollout_batch_size per generate call, DeepSpeed-Chat's per-device generation "
        "batch; verl fully_async_policy's rollouter keeps 16 prompts in flight per server, "
        "16 x n sequences); unset = as many as max_num_seqs and the KV cache allow")
    rollout_max_num_seqs: PositiveInt | None = Field(
        default=None, description="sequences one engine runs at once (vLLM max_num_seqs, "
        "verl's rollout.max_num_seqs: 1024 in its ppo_trainer.yaml); unset = the engine's "
        "default on the GPU (vLLM V1: 1,024 on a GPU of 70 GiB or more not named A100, else 256; "
        "an AsyncLLM made without a usage context, as NeMo-RL's async engine: 128, set it)")
    rollout_transformers_version: str = Field(
        default="4.46", description="the transformers release of hf-generate rollouts (4.36+; "
        "4.38 rebuilds a causal mask every step, 4.48+ and 5.x read a grouped KV cache without "
        "repeating it); ignored by the other engines")
    rollout_cuda_graphs: Literal["auto", "on", "off"] = Field(
        default="auto", description="whether the engine's decode steps replay CUDA graphs: "
        "auto (its capture limits by batch and length), on, or off (vLLM enforce_eager=True, "
        "SGLang --disable-cuda-graph: every kernel launched by the host)")
    rollout_async_scheduling: bool = Field(
        default=False, description="vLLM's async scheduling (its default from vLLM 0.14.0, "
        "vllm#27614): the engine's host work for the next decode step beside the GPU's "
        "current one; off = serial, as vLLM 0.11-0.13 run by default; engine vllm only")
    rollout_returns_logprobs: bool = Field(
        default=False, description="the rollout requests ask vLLM for each sampled token's "
        "log-probability (SamplingParams.logprobs=0, as NeMo-RL's vllm_worker.py does): V1's "
        "scheduler and output processor turn it into Python objects for every running "
        "sequence every step (assumptions.decode_host_logprob_s_per_sequence), serial with the "
        "GPU unless rollout_async_scheduling; engine vllm only")
    rollout_precision: Literal["bf16", "fp8"] = Field(
        default="bf16", description="the engine's weights and matmuls: bf16, or fp8 W8A8 "
        "(vLLM quantization='fp8': 1 byte per weight, fp8 GEMMs; Hopper or later)")
    rollout_memory_utilisation: float | None = Field(
        default=None, gt=0, le=1, description="the engine's share of GPU memory "
        "(gpu_memory_utilization); default 0.5 colocated, 0.9 dedicated")
    async_rollout: bool = Field(
        default=False, description="one-step off-policy: the next step's rollouts overlap this "
        "step's update (dedicated placement)")
    partial_rollout: bool = Field(
        default=False, description="streamed rollouts (verl fully_async_policy with "
        "staleness_threshold > 0 and partial_rollout): the engines run without stopping, a "
        "response cut by a weight sync goes on after it, so no step waits for its longest "
        "response; the step is the slower of the training side and the engines' production "
        "of its sequences (needs async_rollout)")
    weight_sync_every_rank: bool = Field(
        default=False, description="a dedicated (placement: dedicated) refit's NCCL group "
        "holds every training rank beside the engines' (NeMo-RL: world size = train + "
        "inference ranks, AbstractPolicyWorker.init_collective and "
        "VllmInternalWorkerExtension.init_collective @108bffda), so it spans whole nodes and "
        "its ring broadcast's channels cross them through every NIC of a node "
        "(plan/phases.py weight_sync_s); false: the sender rank and the engines' only "
        "(OpenRLHF's model_update_group), the bytes over one GPU's network link")
    refit_fp8_cast: bool = Field(
        default=False, description="with rollout_precision fp8 and placement dedicated: each "
        "engine GPU casts every received bf16 linear weight, the whole model's, to blockwise "
        "fp8 on load, in eager torch (NeMo-RL's quantization/fp8.py load_weights -> "
        "cast_tensor_to_fp8_blockwise @108bffda and v0.6.0), beside the broadcast of the next "
        "packed buffer (plan/phases.py fp8_refit_cast_s)")
    in_flight_weight_updates: bool = Field(
        default=False, description="NeMo-RL's one-step-off collector with in-flight weight "
        "updates (async_grpo.in_flight_weight_updates with vLLM's async engine; "
        "nemo_rl/algorithms/async_utils.py AsyncTrajectoryCollector @v0.6.0): each prompt group "
        "starts as soon as a slot of the collector's prompts_per_step x "
        "rollout_steps_in_flight frees (a group holds its slot until its longest response "
        "ends), for the next rollout_steps_in_flight weight versions, and the refit does not "
        "wait for the running responses: they stall through it and decode on. The step is "
        "replayed group by group on the engines (estimate/inflight_rollout.py) beside the "
        "training side, not max(rollouts, training side) + sync. Needs async_rollout, "
        "placement dedicated and engine vllm; not with partial_rollout")
    generation_rounds_per_step: float = Field(
        default=1.0, ge=1.0, le=100.0, allow_inf_nan=False,
        description="synchronous generation rounds of prompts_per_step prompts a step, mean: "
        "more than 1 with DAPO's dynamic sampling, which generates again until enough groups "
        "have rewards that differ (verl's recipe/dapo logs it as num_gen_batches, bounded by "
        "max_num_gen_batches; NeMo-RL's DAPO likewise); the scoring passes and the update take "
        "the kept prompts_per_step x generations_per_prompt sequences once")
    rollout_steps_in_flight: PositiveInt = Field(
        default=1, description="steps whose rollouts the engines may run at once in a stream "
        "(NeMo-RL's async_grpo max_trajectory_age_steps with in-flight weight updates: its "
        "collector generates for the next that many weight versions, "
        "nemo_rl/algorithms/async_utils.py _calculate_target_weights): the engines' running "
        "batch is up to that many steps' shares, as the KV cache and max_num_seqs allow; "
        "with in_flight_weight_updates, the collector's slots are that many steps' prompt "
        "groups; needs partial_rollout or in_flight_weight_updates")
    updates_per_sync: PositiveInt = Field(
        default=1, description="local updates the trainer makes per weight sync, each on its "
        "share of the step's prompts as soon as the engines have finished them (verl "
        "fully_async_policy's trigger_parameter_sync_step; with staleness_threshold 0, its "
        "'stream off policy pipeline'): on dedicated rollout GPUs all but the last overlap the "
        "rollouts. Must divide mini_batches; no further effect with async_rollout, whose "
        "update already overlaps the next step's rollouts")
    offload_between_phases: bool = Field(
        default=False, description="the trained model's weights and optimizer state wait in "
        "host memory between the step's phases and come back for each (EasyR1's "
        "actor.offload, verl's FSDP param_offload/optimizer_offload): host<->GPU copies every "
        "step over the GPU's PCIe link")
    refit_offload: RefitOffload = Field(
        default="none", description="what a colocated trainer moves to host memory around each "
        "refit of its engine and back (NeMo-RL's Megatron worker with colocated generation: "
        "offload_before_refit / offload_after_refit, prepare_for_lp_inference / "
        "prepare_for_training): its bf16 weights to pinned memory and back, and its optimizer "
        "state to pageable memory and back, once each a step, over PCIe, not overlapped "
        "(plan/rl_refit_offload.py). The choice names the optimizer state that moves: "
        "'moments' (the fp32 master copy stays), 'moments+remainders' (Megatron's "
        "precision-aware optimizer with store_param_remainders: the master weights' int16 low "
        "halves too, NeMo-RL's recipes), 'moments+master'; 'none' moves nothing")
    rollout_sleep_offload: bool = Field(
        default=False, description="the colocated engine sleeps between rollouts with its "
        "weights backed up in host memory (vLLM `sleep(level=1)` / `wake_up`; EasyR1's "
        "sharding manager around every rollout and validation pass): each GPU's share of the "
        "engine's weights down and up over PCIe every rollout (plan/rl_engine_sleep.py)")
    ref_offload: bool = Field(
        default=False, description="the reference model's weights live in host memory and are "
        "copied up to the GPU for every forward micro-batch of its pass (FSDP "
        "CPUOffload(offload_params=True); EasyR1's ref.fsdp.enable_cpu_offload, on by default): "
        "the copies overlap the pass's compute, what exceeds it is added")
    scoring_tokens_per_gpu: PositiveInt | None = Field(
        default=None, description="tokens each GPU packs into one micro-batch of a scoring pass "
        "(verl's log_prob_max_token_len_per_gpu; EasyR1: micro_batch_size_per_device_for_"
        "experience x the padded input width); sets how often `ref_offload` copies the "
        "reference weights up; default update_tokens_per_gpu, else 16,384")
    padded_prompt_tokens: PositiveInt | None = Field(
        default=None, description="the width every prompt is padded to in a single "
        "controller's batch (EasyR1's and verl's data.max_prompt_length: the dataset left-pads "
        "each prompt to it), which the driver's transfers carry; unset = prompt_tokens; at "
        "least prompt_tokens; needs single_controller")
    image_prep_by_workers: bool = Field(
        default=False, description="the workers prepare each image inside the step (EasyR1: "
        "the batch carries the dataset's image bytes; each rollout worker decodes and scales "
        "its engine's images and vLLM runs the image processor, each actor worker does both "
        "for the distinct prompts of its share before its first scoring pass): host seconds "
        "at assumptions rl_image_prep_s_per_megapixel (plan/rl_images.py); needs images")
    validation_every_steps: PositiveInt | None = Field(
        default=None, description="a validation pass every this many steps, inside the step "
        "(verl's trainer.test_freq, EasyR1's trainer.val_freq): `validation_prompts` prompts, "
        "one response each, generated by the rollout engines after a weight sync; its time / "
        "this many steps is added to each step")
    validation_prompts: PositiveInt | None = Field(
        default=None, description="prompts of the validation set (one response each, the "
        "phase's prompt and response lengths); needs validation_every_steps")
    old_logprob_pass: bool = Field(
        default=True, description="a forward of the policy over the rollouts before the update "
        "(verl always; TRL when num_iterations > 1)")
    policy_epochs: PositiveInt = Field(
        default=1, description="passes of the update over each rollout batch (PPO epochs, TRL "
        "num_iterations)")
    critic: bool = Field(default=False, description="PPO: a value model the size of the policy, "
                                                    "scored and trained every step")
    critic_training: CriticTraining | None = Field(
        default=None, description="PPO's critic trained with its own ZeRO stage, offload and "
        "ZeRO-3 engine (DeepSpeed-Chat's --critic_zero_stage; its --offload on a ZeRO-3 critic "
        "offloads the weights too); unset = the phase's")
    actor_gpus: PositiveInt | None = Field(
        default=None, description="training GPUs the policy's update runs on, the rest of the "
        "trainer's GPUs holding the other roles (OpenRLHF Ray's actor_num_gpus_per_node x "
        "nodes; dedicated or actor placement: with `actor`, the rollouts run on these GPUs "
        "too); unset = all the training GPUs")
    critic_gpus: PositiveInt | None = Field(
        default=None, description="GPUs of PPO's critic, which then trains at the same time as "
        "the actor on its own GPUs (OpenRLHF Ray's critic_num_gpus_per_node: critic.fit.remote "
        "before the actor's update); needs critic and actor_gpus")
    update_tokens_per_gpu: PositiveInt | None = Field(
        default=None, description="tokens each GPU packs into one micro-batch of the update "
        "when the phase sets no `micro_batch` (verl's ppo_max_token_len_per_gpu with "
        "use_dynamic_bsz; a context-parallel group of cp GPUs packs cp times it); default "
        "16,384")
    pad_packed_to_longest: bool = Field(
        default=False, description="every packed micro-batch of the update and of the policy's "
        "log-prob passes padded to the longest of the rank's batch (NeMo-RL's Megatron policy "
        "with pipeline_model_parallel_size > 1: megatron/common.py); needs packed updates (no "
        "micro_batch) and pp > 1; off = each sequence costed at its own tokens")
    mini_batches: PositiveInt = Field(
        default=1, description="optimizer steps per RL step: the step's sequences split into "
        "this many mini-batches, each split over the data-parallel ranks (verl: "
        "data.train_batch_size / actor.ppo_mini_batch_size; TRL: the generation batch / the "
        "per-step batch). Packed micro-batches never mix two mini-batches, so a micro-batch is "
        "at most one rank's share of a mini-batch")
    single_controller: bool = Field(
        default=False, description="one driver process holds the step's batch, padded to the "
        "longest response, and sends it to every phase's workers (verl's RayPPOTrainer)")

    @field_validator("rollout_transformers_version", mode="before")
    @classmethod
    def _release_quoted(cls, v: Any) -> Any:
        """YAML reads an unquoted 4.46 as a number, and 4.20 as 4.2, another release: say so
        rather than pydantic's "a valid string", and do not guess which was meant."""
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            raise ValueError(f"YAML read the release as the number {v!r}; quote it "
                             f"(rollout_transformers_version: '{v}'), since an unquoted 4.20 "
                             f"arrives as 4.2, another release")
        return v

    @field_validator("rollout_transformers_version")
    @classmethod
    def _release(cls, v: str) -> str:
        try:
            hf_release(v)
        except FieldError as err:
            raise ValueError(err.message) from None
        return v.strip()

    @field_validator("max_response_tokens")
    @classmethod
    def _longest_not_below_the_mean(cls, v: int | None, info: ValidationInfo) -> int | None:
        # a field's own check, so a plan's error names this key and its line
        mean = info.data.get("response_tokens")
        if v is not None and mean is not None and v < mean:
            raise ValueError(f"max_response_tokens ({v}) is below the mean response_tokens "
                             f"({mean})")
        return v

    @model_validator(mode="after")
    def _amount(self) -> RLPhase:
        if self.steps is None and (self.prompts is None or self.epochs is None):
            raise ValueError("give `steps`, or `prompts` and `epochs`")
        if self.steps is not None and self.epochs is not None:
            raise ValueError("give `steps` or `epochs`, not both")
        if (self.placement == "dedicated") != (self.rollout_gpus is not None):
            raise ValueError("dedicated placement needs `rollout_gpus`, and `rollout_gpus` "
                             "needs `placement: dedicated`")
        engine_gpus = self.rollout_gpus or 1
        if self.rollout_gpus is not None and engine_gpus % self.rollout_tensor_parallel:
            raise ValueError(f"rollout_gpus ({engine_gpus}) must be a multiple of "
                             f"rollout_tensor_parallel ({self.rollout_tensor_parallel})")
        if self.async_rollout and self.placement != "dedicated":
            raise ValueError("async_rollout overlaps rollouts with the update on other GPUs: it "
                             "needs `placement: dedicated`")
        if self.prompts_per_step % self.mini_batches:
            raise ValueError(f"mini_batches ({self.mini_batches}) must divide prompts_per_step "
                             f"({self.prompts_per_step}): each optimizer step takes whole "
                             "prompts' groups of responses")
        if self.updates_per_sync > 1 and self.placement != "dedicated":
            raise ValueError(f"updates_per_sync ({self.updates_per_sync}) trains while the "
                             "engines generate: it needs `placement: dedicated` (colocated, "
                             "the engines hold the trainer's GPUs)")
        if self.mini_batches % self.updates_per_sync:
            raise ValueError(f"updates_per_sync ({self.updates_per_sync}) must divide "
                             f"mini_batches ({self.mini_batches}): each local update takes "
                             "whole mini-batches (verl: require_batches of them)")
        if self.rollout_sleep_offload and (self.placement != "colocated"
                                           or not self.engine.startswith("vllm")):
            raise ValueError("rollout_sleep_offload is a colocated vLLM engine sleeping between "
                             "rollouts: it needs `placement: colocated` and a vLLM engine")
        if self.refit_offload != "none" and self.placement != "colocated":
            raise ValueError(f"refit_offload ({self.refit_offload}) moves the trainer's state "
                             "out of a colocated engine's way: it needs `placement: colocated` "
                             "(with dedicated rollout GPUs NeMo-RL moves nothing)")
        if self.refit_offload != "none" and self.offload_between_phases:
            raise ValueError("refit_offload and offload_between_phases both move the trainer's "
                             "weights and optimizer state to the host each step: set one")
        if self.padded_prompt_tokens is not None and self.padded_prompt_tokens < self.prompt_tokens:
            raise ValueError(f"padded_prompt_tokens ({self.padded_prompt_tokens}) is the width "
                             f"prompts are padded to: it cannot be below prompt_tokens "
                             f"({self.prompt_tokens})")
        if self.padded_prompt_tokens is not None and not self.single_controller:
            raise ValueError("padded_prompt_tokens is the width a single controller's driver "
                             "sends each prompt at: it needs `single_controller: true`")
        if self.ref_offload and not self.reference_model:
            raise ValueError("ref_offload streams the reference model's weights: it needs "
                             "`reference_model: true`")
        if (self.validation_every_steps is None) != (self.validation_prompts is None):
            raise ValueError("a validation pass needs both `validation_every_steps` and "
                             "`validation_prompts`")
        if self.actor_gpus is not None and self.placement == "colocated":
            raise ValueError("actor_gpus places the trained roles on GPUs of their own beside "
                             "the engines: it needs `placement: dedicated` (or `actor`, the "
                             "actor generating on its own GPUs)")
        if self.placement == "actor" and self.actor_gpus is None:
            raise ValueError("placement: actor generates on the actor's own GPUs: it needs "
                             "`actor_gpus` (how many of the phase's GPUs the actor holds)")
        if (self.placement == "actor" and self.actor_gpus is not None
                and self.actor_gpus % self.rollout_tensor_parallel):
            raise ValueError(f"placement: actor runs the engines on the actor's {self.actor_gpus} "
                             f"GPUs: actor_gpus must be a multiple of rollout_tensor_parallel "
                             f"({self.rollout_tensor_parallel})")
        if self.critic_gpus is not None and not (self.critic and self.actor_gpus is not None):
            raise ValueError("critic_gpus trains PPO's critic on GPUs of its own: it needs "
                             "`critic: true` and `actor_gpus`")
        if self.critic_training is not None and not self.critic:
            raise ValueError("critic_training sets PPO's critic's training: it needs "
                             "`critic: true`")
        if self.generation_rounds_per_step > 1 and (self.async_rollout
                                                    or self.partial_rollout):
            raise ValueError("generation_rounds_per_step repeats a synchronous step's "
                             "generation until its batch is kept: not modelled with "
                             "async_rollout or partial_rollout")
        if (self.rollout_steps_in_flight > 1 and not self.partial_rollout
                and not self.in_flight_weight_updates):
            raise ValueError(f"rollout_steps_in_flight ({self.rollout_steps_in_flight}) runs "
                             "several steps' rollouts at once: it needs "
                             "`partial_rollout: true` or `in_flight_weight_updates: true` (and "
                             "async_rollout)")
        if self.refit_fp8_cast and (self.rollout_precision != "fp8"
                                    or self.placement != "dedicated"):
            raise ValueError("refit_fp8_cast costs fp8 engines' cast of the weights a dedicated "
                             "refit hands them: it needs `rollout_precision: fp8` and "
                             "`placement: dedicated`")
        if self.in_flight_weight_updates and (not self.async_rollout or self.partial_rollout):
            raise ValueError("in_flight_weight_updates replays NeMo-RL's one-step-off "
                             "collector: it needs `async_rollout: true` (and `placement: "
                             "dedicated`), and not `partial_rollout` (a stream with no "
                             "collector slots)")
        if self.partial_rollout and not self.async_rollout:
            raise ValueError("partial_rollout streams rollouts beside the update: it needs "
                             "`async_rollout: true` (and `placement: dedicated`)")
        return self


class OnlinePhase(_PhaseBase):
    """A service that runs for a duration on some GPUs (test-time RL, serving with updates)."""

    kind: Literal["online"]
    duration_hours: PositiveFloat
    gpus: PositiveInt
    utilisation: float = Field(default=1.0, gt=0, le=1)


class Benchmark(_Strict):
    name: str
    samples: PositiveInt
    prompt_tokens: PositiveInt
    answer_tokens: PositiveInt


class EvalPhase(_PhaseBase):
    """Evaluation: benchmarks x samples (generation estimate), or fixed hours."""

    kind: Literal["eval"]
    model: str | None = None
    params: PositiveFloat | None = None
    benchmarks: list[Benchmark] = Field(default_factory=list)
    samples_per_prompt: PositiveInt = 1
    engine: Engine = "vllm"
    cuda_graphs: Literal["auto", "on", "off"] = Field(
        default="auto", description="whether the engine's decode steps replay CUDA graphs: auto "
        "(its capture limits by batch and length), on, or off (vLLM enforce_eager=True, SGLang "
        "--disable-cuda-graph)")
    gpu_hours: PositiveFloat | None = None

    @model_validator(mode="after")
    def _amount(self) -> EvalPhase:
        if (not self.benchmarks) == (self.gpu_hours is None):
            raise ValueError("give `benchmarks` or `gpu_hours`, not both and not neither")
        return self


class FixedPhase(_PhaseBase):
    """GPU hours the author states (analysis scripts, profiling, debugging). Basis: assumed."""

    kind: Literal["one_time", "fixed"]
    gpu_hours: PositiveFloat
    gpus: PositiveInt = 1


class Experiment(_Strict):
    name: str = Field(min_length=1)

    @field_validator("name")
    @classmethod
    def _name_one_line(cls, v: str) -> str:
        return _one_line_name(v)

    steps: Count | None = None
    tokens: Count | None = None
    eval_only_hours: PositiveFloat | None = Field(
        default=None, description="an evaluation-only entry: its hours as stated")
    priority: PositiveInt = Field(default=1, description="1 = essential; larger = optional")
    overrides: TrainingSettings | None = None

    @model_validator(mode="after")
    def _amount(self) -> Experiment:
        given = [x is not None for x in (self.steps, self.tokens, self.eval_only_hours)]
        if sum(given) != 1:
            raise ValueError("give exactly one of `steps`, `tokens` or `eval_only_hours`")
        return self


class GridPhase(_PhaseBase, TrainingSettings):
    """A table of experiments sharing settings (seed 004), scheduled on `schedule_gpus`."""

    kind: Literal["grid"]
    experiments: list[Experiment] = Field(min_length=1)
    schedule_gpus: PositiveInt = 1
    hours_per_day: float = Field(default=24.0, gt=0, le=24)
    essential_priority: PositiveInt = Field(
        default=1, description="the reduced set keeps experiments of this priority or lower")


Phase = Annotated[
    FinetunePhase | PretrainPhase | RLPhase | OnlinePhase | EvalPhase | FixedPhase | GridPhase,
    Field(discriminator="kind"),
]


class Plan(_Strict):
    """A project's compute plan."""

    project: str = Field(min_length=1)
    hardware: HardwareSpec
    seeds: PositiveInt = 1
    contingency_percent: float = Field(default=0.0, ge=0, le=200)
    overheads: dict[str, float] = Field(
        default_factory=dict, description="named multipliers, e.g. curriculum: 0.10 (+10%)")
    defaults: TrainingSettings = Field(default_factory=TrainingSettings)
    phases: list[Phase] = Field(min_length=1)

    @model_validator(mode="after")
    def _references(self) -> Plan:
        names = [p.name for p in self.phases]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"phase names must be unique: {', '.join(dupes)}")
        for key, value in self.overheads.items():
            if not -1 < value <= 10:
                raise ValueError(f"overhead {key!r} must be a fraction above -1 (0.10 = +10%), "
                                 f"got {value}")
        for phase in self.phases:
            unknown = [o for o in phase.overheads if o not in self.overheads]
            if unknown:
                raise ValueError(f"phase {phase.name!r} names overheads not defined in "
                                 f"`overheads`: {', '.join(unknown)}")
        return self
