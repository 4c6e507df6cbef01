"""Memory of a training step per GPU, in bytes, by part.

Sources: mixed-precision state sizes from Rajbhandari et al. 2020 (ZeRO, sec. 3.1: 2 + 2 + 12
bytes/param with Adam); activation accounting in the manner of Korthikanti et al. 2022 (sec. 4.1),
redone for today's decoder blocks (RMSNorm, gated MLP, GQA, no dropout) tensor by tensor below;
QLoRA's 4-bit NF4 with double quantisation from Dettmers et al. 2023 (sec. 3): 4.127 bits/param.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from gpuhours.estimate import assumptions as A
from gpuhours.estimate.activation_offload import layer_inputs_kept, offloaded_bytes
from gpuhours.estimate.adamw_temporaries import adamw_temporary_bytes, adamw_temporary_sets
from gpuhours.estimate.arch import ModelArch
from gpuhours.estimate.compiled import (
    compile_terms,
    compiled_logits_bytes,
    compiled_loss_applies,
    compiled_loss_backward_bytes,
    layer_saved_bytes_per_token,
)
from gpuhours.estimate.deepspeed_step import (
    DEEPSPEED_SUB_GROUP_ELEMENTS,
    deepspeed_zero3_step_bytes,
)
from gpuhours.estimate.device_overhead import device_level_bytes
from gpuhours.estimate.dora import (
    dora_base_matmul_of,
    dora_magnitude_params,
    dora_norm_transient_bytes,
    dora_saved_bytes_per_layer,
    dora_saved_bytes_per_token_layer,
)
from gpuhours.estimate.fabric_loss import (
    FP32_BYTES,
    fabric_cast_bytes,
    fabric_loss_backward_bytes,
    fabric_loss_forward_bytes,
)
from gpuhours.estimate.fsdp_no_sync import no_sync_unsharded_grad_bytes
from gpuhours.estimate.fsdp_root_grad import fsdp1_root_backward_grad_bytes, root_params
from gpuhours.estimate.kv_repeat import (
    held_cache_extra_bytes_per_token_layer,
    held_output_terms,
    kv_repeat_terms,
    padding_mask_bytes_per_token_layer,
    repeated_kv_extra_bytes_per_token_layer,
)
from gpuhours.estimate.liger import liger_saved_delta_bytes_per_token_layer, liger_terms
from gpuhours.estimate.lora import fused_adapter_names, lm_head_adapter_params, lora_params
from gpuhours.estimate.lora_mlp import unreached_attention_bytes_per_token
from gpuhours.estimate.lora_traffic import lora_branch_of
from gpuhours.estimate.megatron_saved import (
    megatron_adapted_linears,
    megatron_layer_saved_bytes_per_token,
    megatron_outside_bytes_per_token,
    megatron_path_covers,
)
from gpuhours.estimate.mla import mla_attention_activation_bytes
from gpuhours.estimate.offload import (
    GRAD_BUCKET_ELEMENTS,
    host_accumulation_bytes_per_param,
    host_bytes_per_gpu,
)
from gpuhours.estimate.optim_in_backward import (
    in_backward_step_bytes,
    largest_trainable_tensor_params,
)
from gpuhours.estimate.paged_optimizer import paged_moment_bytes_per_param, paged_state_params
from gpuhours.estimate.parallel import (
    activation_micro_batches_in_flight,
    layout_of,
    local_params,
    zero_shards,
)
from gpuhours.estimate.params import ParamCounts, count_params, norm_params
from gpuhours.estimate.peft_methods import (
    peft_method_saved_bytes_per_layer,
    peft_method_saved_bytes_per_token_layer,
    peft_method_terms,
    peft_method_trainable_params,
    peft_method_transient_bytes,
)
from gpuhours.estimate.quant import (
    GPTQ_KERNEL_SWITCH_ROWS,
    block_linears,
    bnb_dequant_transient_bytes,
    bnb_quant_state_bytes,
    gptq_dequant_transient_bytes,
    quantised_linears_bytes,
)
from gpuhours.estimate.ssm import hybrid_layer_bytes
from gpuhours.estimate.unsloth import (
    checkpointed_inputs_on_gpu,
    dequantised_weight_bytes,
    offloaded_checkpoint_host_bytes,
    unsloth_ce_backward_bytes,
    unsloth_ce_forward_bytes,
    unsloth_layer_saved_bytes_per_token,
    unsloth_term,
)
from gpuhours.estimate.unsloth import outside_bytes_per_token as unsloth_outside_bytes_per_token
from gpuhours.estimate.vision import vision_activation_bytes, vision_linear_params
from gpuhours.setup import Training, deepspeed_overlap_comm_of, loss_kernel_of

#: bytes per element of the activations for each precision
ACTIVATION_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "bf16-mixed": 2, "fp16-mixed": 2,
                    "bf16-amp": 2, "fp16-amp": 2, "fp8-mixed": 2}


def residual_bytes(precision: str) -> int:
    """Bytes per element of the residual stream between layers: fp32 under autocast (the norms
    run and return in fp32), else the activation dtype."""
    return 4 if precision == "fp32" or precision.endswith("-amp") else ACTIVATION_BYTES[precision]

#: NF4 with double quantisation (Dettmers et al. 2023, sec. 3 "Double Quantization"), bytes
#: per weight: the 4-bit data, an 8-bit absmax per block of 64 and an fp32 constant per 256
#: absmax blocks (0.127 bits/param of constants)
NF4_DATA_BYTES_PER_WEIGHT = 4 / 8
NF4_ABSMAX_BYTES_PER_WEIGHT = 1 / 64
NF4_ABSMAX2_BYTES_PER_WEIGHT = 4 / (64 * 256)
QLORA_BYTES_PER_PARAM = (NF4_DATA_BYTES_PER_WEIGHT + NF4_ABSMAX_BYTES_PER_WEIGHT
                         + NF4_ABSMAX2_BYTES_PER_WEIGHT)


@dataclass(frozen=True)
class StateBytesPerParam:
    """Bytes per parameter of each persistent state, before sharding."""

    weights: float
    grads: float
    master: float
    optimizer: float


def state_bytes_per_param(precision: str, optimizer: str, trainable: bool) -> StateBytesPerParam:
    """Bytes per parameter of weights, gradients, fp32 master copy and optimizer moments.

    - fp32: 4 weights, 4 grads, no master; AdamW moments 2 x 4.
    - bf16 / fp16 (pure): 2, 2, no master; moments in the parameter dtype, 2 x 2 (torch AdamW
      keeps its state in the parameter's dtype).
    - *-mixed: 2 weights, 2 grads, 4 master, moments 2 x 4 (ZeRO paper's 16 bytes/param).
    - *-amp (torch.autocast): 4 weights, 4 grads, moments 2 x 4; autocast's 2-byte copies of
      the matmul weights live through the step and are counted with the activations.
    A frozen parameter has only its weights.
    """
    if precision.endswith("-amp"):
        precision = "fp32"  # the parameters, gradients and moments are fp32
    half = precision != "fp32"
    weights = 2.0 if half else 4.0
    if not trainable:
        return StateBytesPerParam(weights=weights, grads=0.0, master=0.0, optimizer=0.0)
    mixed = precision.endswith("-mixed")
    state_dtype_bytes = 4.0 if (mixed or not half) else 2.0
    moments = {
        "adamw": 2 * state_dtype_bytes,
        # bitsandbytes 8-bit AdamW: 1 byte per moment + an fp32 absmax per 2048-block (Dettmers
        # et al. 2022, "8-bit Optimizers via Block-wise Quantization").
        "adamw-8bit": 2 * (1 + 4 / 2048),
        "sgd": 0.0,
        "sgd-momentum": state_dtype_bytes,
    }[optimizer]
    return StateBytesPerParam(
        weights=weights, grads=weights, master=4.0 if mixed else 0.0, optimizer=moments
    )


def lora_trainable_params(arch: ModelArch, rank: int, targets: str) -> int:
    """LoRA adapter parameters of the whole model (estimate/lora.py: as peft adapts them)."""
    return lora_params(arch, rank, targets)


def quantised_params(arch: ModelArch) -> int:
    """Parameters QLoRA stores in 4 bits: the linear layers of the blocks (not the embeddings,
    the LM head or the norms, which bitsandbytes leaves in 16 bits)."""
    counts = count_params(arch)
    # a vision tower's linears too (assumed: bitsandbytes through transformers converts every
    # nn.Linear but the LM head; its Conv3d patch embedding and norms stay unquantised)
    vision = vision_linear_params(arch.vision) if arch.vision is not None else 0
    return vision + (counts.matmul_active - counts.lm_head_matmul if not arch.is_moe else (
        arch.num_layers * (counts.mlp_per_layer + counts.attention_per_layer)
    ))


@dataclass(frozen=True)
class ActivationBytes:
    """Activation memory of one micro-batch, bytes, per GPU."""

    per_token_per_layer: float
    saved_all_layers: float
    #: under checkpointing: layer inputs kept + one layer recomputed during backward
    checkpointed: bool
    attention_scores: float

    @property
    def total(self) -> float:
        return self.saved_all_layers


#: which linear layers LoRA adapts, per `lora_targets`
LORA_ADAPTED = {
    "qv": frozenset({"q", "v"}),
    "attention": frozenset({"q", "k", "v", "o"}),
    "qkv": frozenset({"q", "k", "v"}),
    "all-linear": frozenset({"q", "k", "v", "o", "gate", "up", "down"}),
    "mlp": frozenset({"gate", "up", "down"}),
}


def activation_bytes_per_token_layer(arch: ModelArch, precision: str, flash: bool, seq_len: int,
                                     method: str = "full", lora_targets: str = "all-linear",
                                     lora_rank: int = 16, half_adapters: bool = False,
                                     lora_dropout: float = 0.0, lora_adapters: bool = True,
                                     eager_attention: str = "fp32-softmax"
                                     ) -> tuple[float, float]:
    """Bytes saved for backward per token and layer: (tensors, attention-score matrix).

    Tensor by tensor (a = activation bytes, d hidden, q = heads x head_dim, kv = kv heads x
    head_dim, f = MLP width), as autograd keeps them in transformers' decoder layers:
    - two RMSNorms: an fp32 copy of the input (4d) each, and, when the norm weight trains, the
      normalised tensor before the weight multiply (a d; 4d under autocast, where the residual
      stream is fp32). LayerNorm: its input only, in the residual dtype (a; fp32 under
      autocast). Under autocast (amp) every linear that trains keeps its own half-precision
      copy of an fp32 input: q, k and v three, gate and up two.
    - attention: q and k after the rotary embedding and v (a (q + 2 kv)), the kernel's output
      (a q); full fine-tuning also keeps the input of q/k/v (a d) and of o_proj, a contiguous
      copy of the kernel output (a q). (The trace finds no such copy behind flash kernels,
      which write (batch, seq, heads, dim): a q too many per token and layer, about 1% of a
      full fine-tuning peak; tests/test_formulas.py pins the current count.) Qwen3's RMSNorms
      on q and k keep what the block's norms keep: 4 (q + kv), and a (q + kv) when their
      weights train.
    - MLP: gate and up outputs and the activation's output (3 a f; GELU: a f); full
      fine-tuning also keeps the MLP input (a d) and the input of down_proj (a f; GELU: a f).
    - A frozen linear keeps nothing for its own backward. A LoRA adapter keeps its input, cast
      to the fp32 of peft's adapters (4 x in_features, one copy per adapted linear, even when
      q, k and v share the input; a fused qkv or gate_up matrix, phi3's, is one linear), and
      the fp32 output of its A matrix (4 r); under autocast (mixed, amp) the half-precision
      copies the matmuls run on instead (a x in_features, a r). Half-precision adapters
      (`half_adapters`: a branch that computes in half, lora_traffic.lora_branch_of: half
      adapters, or fp32 ones an engine casts, DeepSpeed's or FSDP's) need no cast: A
      keeps its input as it comes (a x in_features; one tensor for q, k and v, one for gate
      and up, o_proj's the kernel's output kept already, when no dropout makes each adapter
      its own input) and its output (a r).
    - An MoE token saves the MLP part for each routed expert and that expert's output (a d,
      kept for the multiply by the routing weight, which has a gradient), plus fp32 router
      probabilities (transformers' grouped_mm experts; checked by trace, docs/trace_accuracy.md).
    `lora_adapters` False: a non-LoRA PEFT method (its own terms: estimate/peft_methods.py).
    Without flash attention the score matrix is materialised: heads x S per token, kept in fp32
    by the softmax and again in the activation dtype for the AV matmul (transformers' eager
    attention); `eager_attention` "sdpa-mask" (torch 2.0-2.1's SDPA given an additive mask:
    setup.Training.eager_attention) keeps it once, in the activation dtype.
    Checked against the storage autograd saves for a real model: tests/test_activations_real.py.
    """
    if arch.encoder:
        return _encoder_bytes_per_token_layer(arch, precision, seq_len)
    a = ACTIVATION_BYTES[precision]
    d, q, kv = arch.hidden_size, arch.q_dim, arch.kv_dim
    full = method == "full"
    amp = precision.endswith("-amp")
    # the normalised tensor before the weight multiply, in the residual dtype (fp32 under amp)
    rms_normed = residual_bytes(precision) * d if (full and not arch.norm_bias) else 0
    # RMSNorm upcasts its input to fp32 (4d); LayerNorm keeps its input as it comes: the
    # activation dtype, fp32 under autocast (layer_norm is on autocast's fp32 list)
    norm = (residual_bytes(precision) * d if arch.norm_bias else 4 * d) + rms_normed
    attention = a * (q + 2 * kv) + a * q
    if full:
        attention += a * d + a * q  # q/k/v input; o_proj input
        if amp:  # autocast casts the fp32 input once per linear: q, k and v keep a copy each
            attention += 2 * a * d
    if arch.qk_norm:  # Qwen3's per-head RMSNorms on q and k, kept like the block's norms
        attention += 4 * (q + kv) + (a * (q + kv) if full else 0)
    if arch.attention_output_gate:  # Qwen3-Next / Qwen3.5: output x sigmoid(gate) keeps the
        attention += a * q  # sigmoid's output (the attention output is kept already)
    if arch.mla is not None:  # multi-head latent attention: its own tensors (estimate/mla.py)
        attention = mla_attention_activation_bytes(arch, a, residual_bytes(precision), full, amp)

    def ffn_bytes(f: int) -> float:
        # a composite activation (gelu_new) keeps more f-wide tensors: ModelArch
        inner = 3 * a * f if arch.gated_mlp else (1 + arch.activation_extra_saved) * a * f
        # MLP input (under amp gate and up each keep their own copy); down_proj input
        copies = 2 if (amp and arch.gated_mlp) else 1
        return inner + (copies * a * d + a * f if full else 0)

    if arch.is_moe:
        # each routed expert's output is kept for the multiply by its routing weight
        mlp = arch.experts_per_token * (ffn_bytes(arch.moe_intermediate_size) + a * d)
        mlp += 4 * arch.num_experts
        if arch.shared_expert_intermediate_size:
            mlp += ffn_bytes(arch.shared_expert_intermediate_size)
        if arch.dense_mlp_layers:  # dense first layers (DeepSeek): the mean over the layers
            # that have an MLP (Nemotron-H's mixer-only layers have none: mlp_free_layers)
            dense = arch.dense_mlp_layers - arch.mlp_free_layers
            mlp = (arch.moe_layers * mlp + dense * ffn_bytes(arch.intermediate_size)) / (
                arch.num_layers - arch.mlp_free_layers)
    else:
        mlp = ffn_bytes(arch.intermediate_size)
    lora = 0.0
    if not full and lora_adapters:
        f = arch.moe_intermediate_size if arch.is_moe else arch.intermediate_size
        experts = arch.experts_per_token if arch.is_moe else 1
        in_dim = {"q": d, "k": d, "v": d, "o": q, "gate": d, "up": d, "down": f, "qkv": d,
                  "gate_up": d}
        per_token_copies = {"gate": experts, "up": experts, "down": experts,
                            "gate_up": experts}
        # a fused qkv (gate_up) matrix is one adapter: one input cast and kept
        adapted = fused_adapter_names(
            arch, LORA_ADAPTED[lora_targets] - (set() if arch.gated_mlp else {"gate"}))
        # peft casts the input to its fp32 adapters' dtype, and A's fp32 matmul keeps that copy;
        # under autocast the matmul runs in half precision on a half-precision copy, kept instead
        half = half_adapters and a < 4
        kept = a if (half or precision.endswith(("-mixed", "-amp"))) else 4
        for name in adapted:
            copies = per_token_copies.get(name, 1)
            lora += copies * (kept * in_dim[name] + kept * lora_rank)
        if a == 4 or (half and lora_dropout <= 0):
            # in fp32 (or with adapters in the input's half dtype) the cast is a no-op, and
            # without dropout q, k and v (and gate, up) share one saved input
            shared = sum(d for name in ("q", "k", "v") if name in adapted) - (
                d if adapted & {"q", "k", "v"} else 0)
            shared += sum(d * experts for name in ("gate", "up") if name in adapted) - (
                d * experts if adapted & {"gate", "up"} else 0)
            # and o_proj's input is the attention kernel's output, kept already (a q above)
            shared += q if "o" in adapted else 0
            lora -= kept * shared
    scores = 0.0
    if not flash and eager_attention == "sdpa-mask":
        scores = arch.num_heads * seq_len * a
    elif not flash:
        scores = arch.num_heads * seq_len * (4 + (a if a < 4 else 0))
    # fp8-mixed: Transformer Engine and torchao keep each linear's input for its weight gradient
    # as the fp8 copy (1 byte, not a): the q/k/v and o_proj inputs, the MLP and down_proj inputs
    fp8_saved = 0.0
    if precision == "fp8-mixed" and full:
        experts = arch.experts_per_token if arch.is_moe else 1
        f_in = arch.moe_intermediate_size if arch.is_moe else arch.intermediate_size
        fp8_saved = (a - 1) * (d + q + experts * (d + f_in))
    # each norm of the block keeps its input (Gemma 2 has four: pre and post, twice)
    if arch.ssm is not None:  # Mamba-2 layers and hybrids: means over the layers (estimate/ssm.py)
        return arch.norms_per_block * norm + hybrid_layer_bytes(arch, attention, mlp, a, full) \
            + lora - fp8_saved, scores
    return arch.norms_per_block * norm + attention + mlp + lora - fp8_saved, scores


def _encoder_bytes_per_token_layer(arch: ModelArch, precision: str,
                                    seq_len: int) -> tuple[float, float]:
    """A BERT layer (post-LayerNorm, GELU, dropout, eager attention), bytes per token:
    (tensors, attention-score matrices).

    Kept for backward, with a = activation bytes, r = residual bytes, m = 1 byte per dropout
    mask element (CUDA's boolean mask): the inputs of the four linears a (3d + f); Q, K and V
    (3 a d); the two hidden-state dropout masks (2 m d); the two LayerNorm inputs (2 r d); the
    GELU input (a f). Per head and key position: the softmax output, the dropout mask and the
    dropout output, the softmax in fp32 under autocast (4) and its dropout output cast back to
    the activation dtype for the AV matmul (4 + m + 4 + a); in fp32, 4 + m + 4.
    """
    a = ACTIVATION_BYTES[precision]
    r = residual_bytes(precision)
    d, f = arch.hidden_size, arch.intermediate_size
    m = 1 if arch.dropout else 0
    tensors = a * (3 * d + f) + 3 * a * d + 2 * m * d + 2 * r * d + a * f
    per_score = (4 + m + 4 + (a if a < 4 else 0)) if arch.dropout else (4 + (a if a < 4 else 0))
    return tensors, arch.num_heads * seq_len * per_score


def activation_bytes(arch: ModelArch, t: Training) -> ActivationBytes:
    """Activations alive at the end of the forward pass of one micro-batch, bytes."""
    tokens = t.tokens_per_micro_batch
    tensors, scores = activation_bytes_per_token_layer(
        arch, t.precision, t.flash_attention, t.llm_seq_len, t.method, t.lora_targets,
        t.lora_rank, half_adapters=lora_branch_of(t) != "peft-fp32",
        lora_dropout=t.lora_dropout, lora_adapters=t.peft_method == "lora",
        eager_attention=t.eager_attention)
    megatron = t.kernels == "megatron" and megatron_path_covers(arch)
    if megatron:  # Megatron-Core's layer of Transformer Engine modules (estimate/megatron_saved.py)
        adapted = (megatron_adapted_linears(LORA_ADAPTED[t.lora_targets]) if t.method != "full"
                   else frozenset())
        tensors = megatron_layer_saved_bytes_per_token(arch, t, ACTIVATION_BYTES[t.precision],
                                                       adapted)
    # torch.compile: the partitioner's saved set, where measured (estimate/compiled.py)
    tensors = layer_saved_bytes_per_token(arch, t, tensors, ACTIVATION_BYTES[t.precision])
    # Liger's RMSNorm, RoPE and SwiGLU Functions in place of transformers' eager ones
    # (estimate/liger.py)
    tensors += liger_saved_delta_bytes_per_token_layer(arch, t, ACTIVATION_BYTES[t.precision],
                                                       residual_bytes(t.precision))
    unsloth = t.kernels == "unsloth"
    if unsloth:  # Unsloth's patched layer and LoRA Functions (estimate/unsloth.py)
        tensors = unsloth_layer_saved_bytes_per_token(
            arch, LORA_ADAPTED[t.lora_targets], ACTIVATION_BYTES[t.precision], t.lora_rank,
            half_adapters=lora_branch_of(t) != "peft-fp32",
            bnb_input_saved=(t.method == "qlora" and t.bnb_saved_input != "none"))
    # k and v repeated to the query heads before the kernel (estimate/kv_repeat.py)
    tensors += repeated_kv_extra_bytes_per_token_layer(arch, t, ACTIVATION_BYTES[t.precision])
    # a held output's KV cache beside the repeated copies, and the padding mask's additive
    # copies the kernels save (estimate/kv_repeat.py)
    tensors += (held_cache_extra_bytes_per_token_layer(arch, t, ACTIVATION_BYTES[t.precision])
                + padding_mask_bytes_per_token_layer(arch, t, ACTIVATION_BYTES[t.precision]))
    # a bitsandbytes 4-bit base keeps more per layer than a frozen half-precision one
    # (and LoRA's dropout masks)
    per_layer = (tensors + scores + (0.0 if unsloth else quantised_base_bytes_per_token_layer(
        arch, t)) + lora_dropout_mask_bytes_per_token_layer(arch, t)
                 # DoRA's rescaled outputs, kept by its magnitude's products (estimate/dora.py)
                 + dora_saved_bytes_per_token_layer(arch, t, ACTIVATION_BYTES[t.precision])
                 # IA3, LoHa, LoKr, VeRA's kept tensors (estimate/peft_methods.py)
                 + peft_method_saved_bytes_per_token_layer(arch, t,
                                                           ACTIVATION_BYTES[t.precision]))
    a = ACTIVATION_BYTES[t.precision]
    # a trained vision tower keeps its blocks' activations for every image of the micro-batch
    # (a frozen one keeps none: its input, the pixels, needs no gradient)
    vision = 0.0
    if t.train_vision and arch.vision is not None and t.image_grid is not None:
        v, grid = arch.vision, t.image_grid
        per_image = vision_activation_bytes(v, grid, a)
        if t.checkpointing:  # transformers checkpoints the vision blocks too: their inputs
            per_image = grid.patches * v.depth * a * v.hidden_size + per_image / v.depth
        vision = t.micro_batch * t.images_per_example * per_image
    # outside the blocks: the final norm's fp32 input and, when the LM head trains, its input
    # (BERT: the embedding LayerNorm's input and its dropout mask; Megatron: TE's norm)
    head_trains = t.method == "full" or t.lora_trainable_embeddings
    outside: float = tokens * arch.hidden_size * (4 + (a if head_trains else 0))
    if megatron:
        outside = tokens * megatron_outside_bytes_per_token(arch, a, head_trains)
    if unsloth:  # Unsloth's final norm and one LoRA_MLP backward (estimate/unsloth.py)
        outside = tokens * unsloth_outside_bytes_per_token(arch, LORA_ADAPTED[t.lora_targets], a,
                                                           t.lora_dropout)
    if t.lora_lm_head and t.method != "full" and not t.lora_trainable_embeddings:
        # the head's adapter: lora_A keeps its input (the dropout's output, with its 1-byte
        # mask, when lora_dropout is above 0), lora_B keeps A's output (r per token)
        mask = 1 if t.lora_dropout > 0 else 0
        outside += tokens * (arch.hidden_size * (a + mask) + t.lora_rank * a)
    if unsloth and t.method == "qlora":  # one 4-bit weight dequantised at its matmul
        outside += dequantised_weight_bytes(arch, a)
    if t.checkpointing:
        # each block keeps its input (the residual stream); in backward one block is
        # recomputed at a time. With checkpoint_offload the inputs wait on the host
        # (estimate/unsloth.py). (fp32 when peft upcast a QLoRA model's embedding)
        residual = 4 if kbit_upcast_active(t) else residual_bytes(t.precision)
        layer_input = residual * arch.hidden_size
        # activation offloading: the layer inputs go to host memory but the one nearest the
        # loss (estimate/activation_offload.py)
        inputs = (layer_inputs_kept(arch.num_layers) if t.activation_offload
                  else checkpointed_inputs_on_gpu(arch, t))
        saved = inputs * tokens * layer_input + tokens * per_layer + outside + vision
    else:
        saved = arch.num_layers * tokens * per_layer + outside + vision
        if t.method != "full" and t.lora_targets == "mlp" and not t.lora_trainable_embeddings:
            # the first attention block runs before anything needs a gradient (lora_mlp.py)
            saved -= tokens * unreached_attention_bytes_per_token(arch, a, residual_bytes(
                t.precision))
    return ActivationBytes(
        per_token_per_layer=per_layer,
        saved_all_layers=saved,
        checkpointed=t.checkpointing,
        attention_scores=scores * tokens * (1 if t.checkpointing else arch.num_layers),
    )


def fused_linear_chunk_tokens(tokens: int, vocab_size: int, hidden_size: int) -> int:
    """Tokens per chunk of Liger's fused linear cross-entropy: the chunk's logits are about the
    size of the hidden states, rounded up to a power of two (Liger-Kernel,
    src/liger_kernel/ops/fused_linear_cross_entropy.py: inc_factor = ceil(V / H),
    chunk_size = next_power_of_2(ceil(BT / inc_factor)); the last chunk is what is left)."""
    inc_factor = -(-vocab_size // hidden_size)
    per_chunk = -(-tokens // inc_factor)
    return min(tokens, 1 << max(per_chunk - 1, 0).bit_length())


def logits_bytes(arch: ModelArch, t: Training) -> float:
    """Logits and loss working set in the forward pass, bytes, for `loss_kernel_of(t)`
    (N = tokens of the micro-batch, V vocabulary, H hidden size, a activation bytes):

    - hf (transformers' ForCausalLMLoss): the LM head writes the logits in the activation dtype
      (a), the loss upcasts them to fp32 (4) and log-softmax keeps its fp32 output (4) for
      backward: N V (a + 4 + 4); in fp32 N V 3a (no upcast copy; the logits, log-softmax's
      output and the loss's working copy).
    - chunked (torchtune's CEWithChunkedOutputLoss, n = CHUNKED_CE_CHUNKS): the logits stay
      whole in the activation dtype (a) and log-softmax keeps every chunk's fp32 output (4); one
      chunk at a time is upcast (4/n): N V (a + 4 + 4/n).
    - fused-linear (Liger's fused linear cross-entropy, Hsu et al. 2024, arXiv:2410.10989,
      sec. 3.3): only one chunk of c tokens of logits exists at a time (c from
      `fused_linear_chunk_tokens`, ~N H / V), its gradient written in place; the input gradient
      (N H a) and the fp32 loss per token (N 4) are made in the forward: c V a + N H a + 4 N.
    - cut-ce (Cut Cross-Entropy, Wijmans et al. 2024, arXiv:2411.09009): no logits in memory;
      the fp32 log-sum-exp and the loss per token: 8 N.
    - chunked-half (litgpt: the head and F.cross_entropy by chunks of 128 positions on the
      half-precision logits, reduction "none"): every chunk's logits, held by the loop, and
      every chunk's log-softmax output (a each), and the copy that reshaping the last chunk
      (its final position dropped: not contiguous) makes, one chunk of c = 128 x micro-batch
      positions: (2N + c) V a.
    - chunked-fabric (litgpt under Lightning Fabric, whose precision plugin casts the head's
      output to fp32): the held fp32 logits and every chunk's fp32 log-softmax output, N V 8,
      and a reshape copy: the last head chunk's (LoRA scripts) or, above one sequence, all
      the shifted logits (full.py's whole head); estimate/fabric_loss.py.
    - verl-logprobs (verl's actor, volcengine/verl@df340d70 dp_actor.py; flash-attn's
      flash_attn/ops/triton/cross_entropy.py CrossEntropyLoss): the LM head's half-precision
      logits (a), divided by the temperature in place and saved by the kernel, and its fp32
      losses, log-sum-exp and z-losses per token (12): N V a + 12 N.
    - megatron (Megatron-Core's vocab-parallel cross-entropy, `_VocabParallelCrossEntropy` in
      megatron/core/tensor_parallel/cross_entropy.py, and its fused variant in
      megatron/core/fusions/fused_cross_entropy.py, NVIDIA/Megatron-LM@b997545c and
      @d98e8a64): `calculate_logits_max` casts the head's logits to fp32 once (4) while the
      caller still holds them (a); the max is subtracted, exp taken and the softmax normalised
      in place on that copy, which the function saves: N V (a + 4) (fp32 logits: no copy,
      N V 4). The per-token tensors
      (max, target logit, sum, masks: under 30 bytes a token) are left out.
    - te (Transformer Engine's Triton `parallel_cross_entropy`, transformer_engine/pytorch/
      cross_entropy.py and triton/cross_entropy.py at NVIDIA/TransformerEngine@1bd45b97): the
      kernel writes the gradient into the half-precision logits, which it saves (a), beside an
      fp32 loss and three fp32 softmax statistics per token (16): N V a + 16 N.
    - half-amp (a model's own loss on its half-precision logits, run inside accelerate's
      autocast-wrapped forward: Qwen-1's modeling_qwen.py, `CrossEntropyLoss` on
      `lm_logits[..., :-1, :].contiguous()` with no `.float()`, under transformers' Trainer with
      bf16/fp16). torch's cross_entropy calls `log_softmax(self, class_dim, self.scalar_type())`
      (aten/src/ATen/native/LossNLL.cpp) and CUDA autocast's fp32_set_opt_dtype respects an
      explicit dtype ("If the user has explicitly specified a dtype, respect it",
      aten/src/ATen/autocast_mode.h), so the log-softmax runs and is saved in half precision
      (a); nll_loss is on autocast's fp32 list and casts that output to fp32 (4), which
      nll_loss_forward saves. accelerate's prepare_model wraps the forward in
      `convert_outputs_to_fp32` (accelerate/accelerator.py, utils/operations.py): the returned
      half-precision logits are copied to fp32 (4) while they are still held (a), then dropped;
      the copy lives until the Trainer's compute_loss returns. At that copy: N V (2a + 8). The
      contiguous copy of the shifted logits (micro-batch > 1 only; at 1 the slice is
      contiguous) is gone by then (a local of the model's forward).
    The first step of backward can hold more: see `loss_backward_bytes`.
    """
    if arch.encoder:
        return 0.0
    a = ACTIVATION_BYTES[t.precision]
    tokens = t.tokens_per_micro_batch
    kernel = loss_kernel_of(t)
    v = arch.vocab_size
    if compiled_loss_applies(t):  # torch.compile's cross-entropy (estimate/compiled.py)
        return compiled_logits_bytes(tokens, v, a, kernel)
    if kernel == "chunked":
        return tokens * v * (a + 4 + 4 / A.CHUNKED_CE_CHUNKS.value)
    if kernel == "fused-linear":
        chunk = fused_linear_chunk_tokens(tokens, v, arch.hidden_size)
        return chunk * v * a + tokens * arch.hidden_size * a + 4 * tokens
    if kernel == "cut-ce":
        return 8.0 * tokens
    if kernel == "chunked-half":
        chunk = min(tokens, CHUNKED_HALF_POSITIONS * t.micro_batch)
        return (2 * tokens + chunk) * v * a
    if kernel == "chunked-fabric":  # full.py runs the head whole (estimate/fabric_loss.py)
        return fabric_loss_forward_bytes(tokens, v, t.micro_batch, t.llm_seq_len,
                                         whole_head=t.method == "full")
    if kernel == "verl-logprobs":
        return tokens * v * a + VERL_LOGPROBS_FORWARD_BYTES_PER_TOKEN * tokens
    if kernel == "megatron":  # fp32 logits: `.float()` returns them, no copy
        return tokens * v * (a + 4 if a < 4 else 4)
    if kernel == "te":
        return tokens * v * a + TE_CE_FORWARD_BYTES_PER_TOKEN * tokens
    if kernel == "unsloth-ce":  # Unsloth's Triton cross-entropy (estimate/unsloth.py)
        return unsloth_ce_forward_bytes(tokens, v, a)
    if kernel == "half-amp":  # held logits, half log-softmax, its fp32 cast, the fp32 copy
        return tokens * v * (2 * a + 8)
    if kernel == "half":
        # the logits and log-softmax's output (a each); the shifted labels' slice of the
        # logits is contiguous at micro-batch 1 and copied (a) above it
        return tokens * v * a * (3 if t.micro_batch > 1 else 2)
    per_element = (a + 4 + 4) if a < 4 else (3 * a)
    return tokens * v * per_element


#: fp32 tensors of one value per token that flash-attn's cross_entropy_loss makes in its
#: forward: losses, lse and z_losses (flash_attn/ops/triton/cross_entropy.py), 4 bytes each
VERL_LOGPROBS_FORWARD_BYTES_PER_TOKEN = 12


#: fp32 tensors of one value per token that Transformer Engine's cross_entropy_forward makes:
#: the loss and the online softmax's (max, sum, target logit), 4 bytes each
#: (transformer_engine/pytorch/triton/cross_entropy.py @ 1bd45b97: loss_1d, m_d_X_y)
TE_CE_FORWARD_BYTES_PER_TOKEN = 16


#: positions per chunk of litgpt's LM head and loss (finetune/lora.py: lm_head_chunk_size=128;
#: utils.chunked_cross_entropy splits the targets to match)
CHUNKED_HALF_POSITIONS = 128


def loss_backward_bytes(arch: ModelArch, t: Training) -> float:
    """Logits working set at the first step of backward, bytes, for `loss_kernel_of(t)`.

    - hf: backward starts at the loss: the gradient of the log-softmax output (fp32, 4) is
      written while log-softmax's saved fp32 output (4) is alive, and then its input gradient
      (fp32, 4): N V 12. The forward's activation-dtype logits and its fp32 upcast are gone by
      then (the training loop keeps only the loss). Measured: the trace of this step
      (docs/trace_accuracy.md).
    - chunked: every chunk's saved fp32 output (4) and one chunk's two fp32 gradients and their
      cast to the logits dtype ((8 + a)/n), the model's logits deleted before backward
      (torchtune's recipes `del logits`): N V (4 + (8 + a)/n). Each chunk has its own LM-head
      matmul, so no whole-logits gradient is ever assembled.
    Both checked on real CPU tensors by a live-storage count (tests/test_loss_kernel.py).
    - fused-linear: the gradients were made in the forward; backward scales them: N H a + 4 N.
    - cut-ce: the input gradient is written blockwise (N H a) beside the log-sum-exp and loss
      (8 N); its dtype is assumed to be the activations'.
    - half: log-softmax's saved output, the gradient of it and its input gradient, all in the
      activation dtype: N V 3a (the forward holds the logits and that output, N V 2a, and a
      contiguous copy of the shifted logits, a, at micro-batch > 1). Counted on real CPU bf16
      and fp16 tensors (tests/test_half_loss.py).
    - chunked-half: the forward's N V 2a (the loop holds the logits through backward, and the
      chunks' saved log-softmax outputs are freed one chunk at a time), with one chunk's
      gradient of that output and its input gradient (2a per element of c = 128 x micro-batch
      tokens). Counted on real CPU bf16 tensors (tests/test_chunked_half_loss.py).
    - chunked-fabric: the held fp32 logits, the saved fp32 log-softmax outputs and one
      chunk's two fp32 gradients; full.py's split then concatenates the chunks' gradients
      beside the held logits, N V 12 (estimate/fabric_loss.py, on real CPU tensors).
    - verl-logprobs: the kernel writes the logits' gradient into the logits (inplace_backward)
      beside the fp32 log-sum-exp and incoming gradient per token (8 N); the in-place
      temperature division's backward then makes a new gradient (a) while that one is alive:
      N V 2a + 8 N. Counted on real CPU tensors with a stand-in for the Triton kernel that
      allocates as it does (tests/test_verl_logprobs.py).
    - megatron: the saved fp32 softmax becomes the gradient in place (4); returned for a
      half-precision input it is cast to the logits' dtype (a) while it is alive (the fused
      variant's `.to(torch.bfloat16)`, autograd's cast to the input's dtype in the unfused
      one): N V (4 + a) (fp32: N V 4). The forward's half-precision logits are gone (no module saves the
      head's output). Counted on real CPU tensors (tests/test_megatron_loss.py).
    - te: the backward scales the gradient already in the logits in place: N V a.
    - half-amp: nll_loss's backward writes the fp32 gradient of its input (4) beside that
      saved fp32 input (4) and log-softmax's saved half-precision output (a): N V (a + 8); the
      later steps (the cast back to half, log-softmax's backward, the slice's zero-filled
      gradient) hold less.
    """
    if arch.encoder:
        return 0.0
    a = ACTIVATION_BYTES[t.precision]
    tokens = t.tokens_per_micro_batch
    kernel = loss_kernel_of(t)
    if compiled_loss_applies(t):  # torch.compile's cross-entropy (estimate/compiled.py)
        chunks = A.CHUNKED_CE_CHUNKS.value if kernel == "chunked" else 1.0
        return compiled_loss_backward_bytes(tokens, arch.vocab_size, a, kernel, chunks)
    if kernel == "chunked":
        return tokens * arch.vocab_size * (4 + (8 + a) / A.CHUNKED_CE_CHUNKS.value)
    if kernel == "fused-linear":
        return tokens * arch.hidden_size * a + 4 * tokens
    if kernel == "cut-ce":
        return tokens * arch.hidden_size * a + 8 * tokens
    if kernel == "chunked-half":
        chunk = min(tokens, CHUNKED_HALF_POSITIONS * t.micro_batch)
        return (tokens + chunk) * arch.vocab_size * 2 * a
    if kernel == "chunked-fabric":
        return fabric_loss_backward_bytes(tokens, arch.vocab_size, t.micro_batch,
                                          whole_head=t.method == "full")
    if kernel == "verl-logprobs":
        return tokens * arch.vocab_size * 2 * a + 8 * tokens
    if kernel == "half-amp":  # saved half output, nll's saved fp32 input and its gradient
        return tokens * arch.vocab_size * (a + 8)
    if kernel == "half":  # saved output, its gradient, the input gradient: all a
        return tokens * arch.vocab_size * 3 * a
    if kernel == "megatron":  # the fp32 softmax turned gradient, and its cast
        return tokens * arch.vocab_size * (4 + a if a < 4 else 4)
    if kernel == "te":  # the gradient in the logits, scaled in place
        return tokens * arch.vocab_size * a
    if kernel == "unsloth-ce":  # the gradient written into the saved logits
        return unsloth_ce_backward_bytes(tokens, arch.vocab_size, a)
    return tokens * arch.vocab_size * 12


def held_logits_bytes(arch: ModelArch, t: Training) -> float:
    """Logits that the training loop holds through backward (`t.held_logits`), bytes: N V x 4
    (fp32, the model's upcast logits) or N V a (the LM head's output), beside the loss's working
    set of `loss_backward_bytes`. Only the hf and half kernels return whole logits."""
    if t.held_logits == "none" or loss_kernel_of(t) not in ("hf", "half") or arch.encoder:
        return 0.0
    per_element = 4 if t.held_logits == "fp32" else ACTIVATION_BYTES[t.precision]
    return t.tokens_per_micro_batch * arch.vocab_size * per_element


def lm_head_backward_bytes(arch: ModelArch, t: Training, head_grad_bytes: float) -> float:
    """Logits working set when the LM head's weight gradient is written, bytes: the logits'
    gradient in the logits dtype (a per element) beside the head's gradient (hf, chunked). Later
    in backward than `loss_backward_bytes`; larger than it only for few tokens and a trained
    head. The fused kernels make the head's gradient while their loss runs: fused-linear in
    its forward (Liger allocates it before the first chunk), so the forward working set of
    `logits_bytes` and the gradient are alive together; cut-ce in its backward, beside the
    input gradient of `loss_backward_bytes`."""
    if arch.encoder:
        return 0.0
    if loss_kernel_of(t) == "fused-linear":
        return logits_bytes(arch, t) + head_grad_bytes
    if loss_kernel_of(t) == "cut-ce":
        return loss_backward_bytes(arch, t) + head_grad_bytes
    a = ACTIVATION_BYTES[t.precision]
    return t.tokens_per_micro_batch * arch.vocab_size * a + head_grad_bytes


@dataclass(frozen=True)
class MemoryBreakdown:
    """Peak memory per GPU, bytes, by part. `tensors_bytes` is what torch's allocator would
    report as the peak allocated; reserve and context are modelled on top (see assumptions)."""

    weights_bytes: float
    gradients_bytes: float
    master_weights_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    logits_bytes: float
    optimizer_temporaries_bytes: float
    #: autocast's half-precision copies of the matmul weights (-amp), fp8-mixed's fp8 copies
    autocast_weight_copies_bytes: float
    #: ZeRO-3/FSDP: the unsharded weights (and gradients) alive at once, on top of the shards
    gathered_bytes: float
    peak_phase: str
    tensors_bytes: float
    allocator_reserve_bytes: float
    cuda_context_bytes: float
    trainable_params: int
    total_params: int
    #: host RAM per GPU for CPU-offloaded state (estimate/offload.py), not in the GPU's total
    host_bytes: float = 0.0
    #: the setup-dependent terms of this setup (4-bit base, DeepSpeed buckets), each a line
    #: "name = GiB: what and its source", printed with the estimate's assumptions
    setup_terms: tuple[str, ...] = ()
    #: the tensors alive at the peak (`peak_phase`), by part: (key, bytes) pairs that add up to
    #: `tensors_bytes` (the parts above are each a part's own peak, not all alive at once);
    #: keys are the fields above or PEAK_PART_LABELS' extra names
    peak_parts: tuple[tuple[str, float], ...] = ()
    #: a paged optimizer's moments (setup.optimizer_paged): CUDA managed memory, outside
    #: torch's allocator and so in none of the figures above; resident on the GPU while there
    #: is room, paged to the host beyond it (estimate/paged_optimizer.py)
    paged_optimizer_bytes: float = 0.0

    @property
    def reserved_bytes(self) -> float:
        """What torch.cuda.max_memory_reserved would show: tensors + allocator reserve."""
        return self.tensors_bytes + self.allocator_reserve_bytes

    @property
    def total_bytes(self) -> float:
        """What nvidia-smi would show: reserved + CUDA context."""
        return self.reserved_bytes + self.cuda_context_bytes


def kbit_bytes(t: Training) -> float:
    """Bytes per weight that QLoRA leaves unquantised (embeddings, LM head, norms): 4 when
    peft's prepare_model_for_kbit_training upcasts them (peft/utils/other.py: every fp16/bf16
    parameter that is not a bitsandbytes Params4bit goes to float32; not for a GPTQ model,
    which it skips), else 2. torchao's NF4 base (nf4-torchao) stands for torchtune's QLoRA
    recipe, which runs no peft preparation (torchtune/modules/peft: the base stays in the
    model's dtype), so it is not upcast by default either."""
    default = (t.zero_stage < 3 and t.base_quant not in ("gptq-int4", "nf4-torchao")
               and t.kernels != "unsloth")  # Unsloth prepares the 4-bit model itself
    upcast = t.kbit_upcast if t.kbit_upcast is not None else default
    return 4.0 if upcast else 2.0


def kbit_upcast_active(t: Training) -> bool:
    """QLoRA whose unquantised weights peft's prepare_model_for_kbit_training made fp32
    (`kbit_bytes`) while it computes in half precision: the embedding then returns fp32, and
    the residual stream stays fp32 through every block (fp32 + the half-precision attention
    output is fp32). Under fp32 compute the upcast changes nothing: every tensor is fp32
    already and each cast to the compute dtype is the tensor itself."""
    return t.method == "qlora" and kbit_bytes(t) == 4.0 and t.precision != "fp32"


def quantised_base_bytes_per_token_layer(arch: ModelArch, t: Training) -> float:
    """Bytes per token and layer that a bitsandbytes 4-bit base adds to the tensors
    `activation_bytes_per_token_layer` counts for LoRA (a = activation bytes, d hidden,
    f MLP width, per routed expert for an MoE):

    - bitsandbytes' MatMul4Bit keeps its input for backward whenever the input needs a gradient
      (bitsandbytes/autograd/_functions.py, MatMul4Bit.forward: `ctx.tensors = (A, B)`), where
      a frozen nn.Linear keeps nothing. The input is `x.to(compute_dtype)` (bnb/nn/modules.py,
      Linear4bit.forward), the same tensor when x is already half precision: q, k and v share
      one (a d), gate and up one (a d), o_proj's is the attention kernel's output (kept
      already), down_proj's the product of the activation and up (a f): a (2d + f).
    - With peft's fp32 upcast (`kbit_upcast_active`) the residual stream is fp32, so each
      linear's cast is its own copy: q, k, v three, gate and up two: a (5d + f); and
      Linear4bit returns its output in the input's dtype (`.to(inp_dtype)`), so the MLP's gate
      and up outputs and the activation's output are fp32: (4 - a) per element more, 3 f
      (gated; 1 f for a plain MLP). The layer inputs kept under checkpointing are fp32 too
      (`activation_bytes`).
    GPTQ and AWQ bases are not counted here (their kernels' saved tensors are not modelled), nor
    torchao's NF4 (nf4-torchao): its LinearNF4 keeps only the 4-bit weight for backward.
    From bitsandbytes 0.43.2 (`t.bnb_saved_input` "none") MatMul4Bit keeps no input: only the
    fp32 MLP outputs of peft's upcast remain.
    """
    if t.method == "qlora" and t.base_quant == "int8-bnb" and not arch.encoder:
        return int8_saved_input_bytes_per_token_layer(arch, t)
    if t.method != "qlora" or t.base_quant not in ("nf4", "nf4-nodq") or arch.encoder:
        return 0.0
    a = ACTIVATION_BYTES[t.precision]
    experts = arch.experts_per_token if arch.is_moe else 1
    f = arch.moe_intermediate_size if arch.is_moe else arch.intermediate_size
    saved = 0.0 if t.bnb_saved_input == "none" else (
        bnb_linear_input_bytes_per_token_layer(arch, t) - a * arch.q_dim)
    if kbit_upcast_active(t):
        inner = 3 if arch.gated_mlp else 1
        return saved + experts * inner * max(4 - a, 0) * f
    return saved


def int8_saved_input_bytes_per_token_layer(arch: ModelArch, t: Training) -> float:
    """Bytes per token and layer that a bitsandbytes int8 base adds to LoRA's tensors
    (estimate/bnb_int8.py): MatMul8bitLt keeps each linear's input A, which Linear8bitLt
    passes uncast, so q, k and v share one (d), gate and up one (d), o_proj's is the attention
    output (kept already) and down_proj's the product of the activation and up (f), all in
    the dtype the input arrives in: the residual stream's under peft's fp32 upcast
    (`kbit_upcast_active`: 4 bytes, the norms returning fp32), the activation dtype a
    otherwise. Under the upcast the int8 matmul returns the input's dtype, so the MLP's gate
    and up outputs and the activation's output are fp32: (4 - a) more per element, 3 f (gated;
    1 f for a plain MLP), as for the 4-bit bases."""
    a = ACTIVATION_BYTES[t.precision]
    upcast = kbit_upcast_active(t)
    x = 4 if upcast else a
    d = arch.hidden_size
    experts = arch.experts_per_token if arch.is_moe else 1
    f = arch.moe_intermediate_size if arch.is_moe else arch.intermediate_size
    saved = x * (d + experts * (d + f))
    if upcast:
        saved += experts * (3 if arch.gated_mlp else 1) * max(4 - a, 0) * f
    return saved


def bnb_linear_input_bytes_per_token_layer(arch: ModelArch, t: Training) -> float:
    """Bytes per token and layer of the inputs that bitsandbytes' MatMul4Bit (before 0.43.2)
    holds as `ctx.tensors`, one tensor per distinct input (a = activation bytes, d hidden, q the
    attention width, f the MLP width, per routed expert for an MoE): `x.to(compute_dtype)` in
    Linear4bit.forward is the tensor itself when x is already half precision, so q, k and v
    share one (a d), gate and up one (a d); o_proj's is the attention output (a q), down_proj's
    the product of the activation and up (a f): a (2d + q + f). Under peft's fp32 upcast
    (`kbit_upcast_active`) each linear casts its own copy: a (5d + q + f) for a gated MLP."""
    a = ACTIVATION_BYTES[t.precision]
    d = arch.hidden_size
    experts = arch.experts_per_token if arch.is_moe else 1
    f = arch.moe_intermediate_size if arch.is_moe else arch.intermediate_size
    mlp_inputs = 2 if arch.gated_mlp else 1
    if kbit_upcast_active(t):
        return a * (3 * d + arch.q_dim + experts * (mlp_inputs * d + f))
    return a * (d + arch.q_dim + experts * (d + f))


#: the loops that keep the previous micro-batch's graph into the next (setup.bnb_saved_input)
HELD_GRAPH_LOOPS = ("held", "held-output")


def bnb_held_input_bytes(arch: ModelArch, t: Training) -> float:
    """Bytes of the previous micro-batch's 4-bit linear inputs alive in the next micro-batch,
    under a loop that holds its loss or output (`t.bnb_saved_input` "held": up to the next
    loss; "held-output": through the next forward; 0 otherwise).

    bitsandbytes before 0.43.2 keeps MatMul4Bit's input as a plain ctx attribute, not through
    save_for_backward, so backward does not release it (torch releases only saved variables);
    it goes with the graph, and the graph goes when the loop drops the last reference to the
    loss or output: lit-gpt of 2023 (finetune/lora.py @ 8641822) holds `logits` and `loss`
    until the next micro-batch reassigns them, after its forward and loss; litgpt of 2024
    (@ 00af8b0d, log_interval 1) turns `loss` into a float each iteration, and `logits` holds
    the graph until the next forward returns. So every layer's
    `bnb_linear_input_bytes_per_token_layer` of the previous micro-batch is still there, and
    with a 4-bit LM head (`t.lm_head_4bit`) its input, the final norm's output (a d per
    token). Under checkpointing the blocks' forward ran without a graph (reentrant: nothing
    kept); only the head's input is counted then. Checked on real CPU tensors with an
    autograd.Function that keeps its input as bitsandbytes 0.42 did (tests/test_bnb_held.py).
    """
    if t.bnb_saved_input not in HELD_GRAPH_LOOPS or arch.encoder:
        return 0.0
    tokens = t.tokens_per_micro_batch
    head = tokens * arch.hidden_size * ACTIVATION_BYTES[t.precision] if t.lm_head_4bit else 0.0
    if t.checkpointing:
        return head
    return tokens * arch.num_layers * bnb_linear_input_bytes_per_token_layer(arch, t) + head


def head_weight_cast_bytes(arch: ModelArch, t: Training) -> float:
    """Bytes of autocast's copy of a half-precision LM head stored in the other half dtype
    (`t.head_weight_cast`: fp16 weights under bf16 autocast), alive from the head's forward to
    its backward: 2 bytes per vocabulary entry and hidden unit. Autocast casts the weight at
    every forward and does not cache it (aten/src/ATen/autocast_mode.cpp cached_cast caches
    fp32 leaves that require grad only); F.linear's backward needs the weight it was given for
    the input's gradient, so autograd keeps that copy (tests/test_head_weight_cast.py checks
    both on real CPU tensors). 0 otherwise."""
    if not t.head_weight_cast or arch.encoder:
        return 0.0
    return float(arch.vocab_size * arch.hidden_size * 2)


def head_dequant_bytes(arch: ModelArch, t: Training) -> float:
    """Bytes of the dequantised LM head alive at its matmul, for a 4-bit head (`t.lm_head_4bit`,
    Lightning's BitsandbytesPrecision; 0 otherwise): MatMul4Bit runs
    `F.linear(A, F.dequantize_4bit(B, quant_state).to(A.dtype).t())` (bitsandbytes 0.42,
    autograd/_functions.py) in forward and the same dequantisation in backward for the input's
    gradient. dequantize_4bit returns the dtype the weight was quantised from, fp16 under
    Lightning (its _Linear4bit.quantize: `weight.contiguous().to(device, dtype=torch.half)`),
    and `.to(A.dtype)` makes a second copy unless the compute dtype is fp16: V H (2 + a) bytes
    under bf16 for an instant, V H 2 under fp16. A transient, but the head is the largest
    matrix and its matmuls sit beside the logits, at the peak."""
    if not t.lm_head_4bit or arch.encoder:
        return 0.0
    # the head's matmul is V x d whether or not its weight is tied to the embedding
    weights = arch.vocab_size * arch.hidden_size
    cast = 0 if t.precision.startswith("fp16") else ACTIVATION_BYTES[t.precision]
    return weights * (2 + cast)


def held_previous_logits_bytes(arch: ModelArch, t: Training) -> float:
    """The previous micro-batch's logits a loop of HELD_GRAPH_LOOPS keeps until its next
    forward returns and `logits` is reassigned: N V a bytes beside the new forward's head, for
    the losses that return whole logits (0 for the fused kernels, or another loop)."""
    if (t.bnb_saved_input not in HELD_GRAPH_LOOPS or arch.encoder
            or loss_kernel_of(t) not in ("hf", "half", "half-amp", "chunked",
                                         "chunked-half", "chunked-fabric")):
        return 0.0
    # under Fabric the loop holds the plugin's fp32 cast of them (estimate/fabric_loss.py)
    per_logit = (FP32_BYTES if loss_kernel_of(t) == "chunked-fabric"
                 else ACTIVATION_BYTES[t.precision])
    return t.tokens_per_micro_batch * arch.vocab_size * per_logit


#: auto-gptq's QuantLinear's switch between its CUDA kernel and PyTorch's dequantise-and-matmul
GPTQ_KERNEL_SWITCH_TOKENS = GPTQ_KERNEL_SWITCH_ROWS


def gptq_saved_weight_bytes_per_layer(arch: ModelArch, t: Training) -> float:
    """Bytes a GPTQ base keeps per decoder layer for backward: auto-gptq's training path (exllama
    kernels off, as transformers' GPTQConfig(disable_exllama=True) loads it for training: the
    QuantLinear of qlinear_cuda_old.py, or qlinear_cuda.py with act-order) dequantises each
    weight with PyTorch ops, `weight = scales * (weight - zeros)`, an fp16 tensor of in x out,
    and multiplies `torch.matmul(x.half(), weight)`: autograd keeps that weight for the input's
    gradient, 2 bytes per weight of the layer's linears. Alive for every layer through the
    forward without checkpointing, for the one recomputed layer with it. 0 for other bases and
    below GPTQ_KERNEL_SWITCH_TOKENS tokens per micro-batch (its CUDA kernel path)."""
    if (t.method != "qlora" or t.base_quant != "gptq-int4" or arch.encoder or arch.mixed
            or t.tokens_per_micro_batch < GPTQ_KERNEL_SWITCH_TOKENS):
        return 0.0
    return 2.0 * sum(n * i * o for i, o, n in block_linears(arch))


def gptq_layer_weights_in_order(arch: ModelArch) -> list[int]:
    """The weights (in x out) of one decoder layer's linears in the order its forward runs
    them (quant.block_linears: q, k, v, o, then the MLP's gate, up and down, each expert's in
    turn for an MoE). A checkpoint that fuses q, k and v (Qwen-1's c_attn) runs them as one
    matrix; listed apart here, which changes only the no-grad pass's largest linear."""
    return [i * o for i, o, n in block_linears(arch) for _ in range(n)]


def gptq_dequant_bytes(arch: ModelArch, t: Training, keeps_weights: bool) -> float:
    """auto-gptq's torch path's unpacking transient at a layer's worst linear, beyond the fp16
    weights the layer keeps (quant.gptq_dequant_transient_bytes), for a GPTQ base on that path
    (the setups `gptq_saved_weight_bytes_per_layer` counts); 0 otherwise."""
    if not gptq_saved_weight_bytes_per_layer(arch, t):
        return 0.0
    return gptq_dequant_transient_bytes(gptq_layer_weights_in_order(arch), keeps_weights)


def lora_dropout_mask_bytes_per_token_layer(arch: ModelArch, t: Training) -> float:
    """Bytes per token and layer of LoRA's dropout masks: with `t.lora_dropout` above 0 each
    adapter runs `lora_A(dropout(x))` (peft's Linear.forward, its own nn.Dropout per adapted
    linear), and torch's dropout keeps its mask for backward, one byte (bool) per input element
    (native_dropout returns the output and the mask; the output is the adapter input counted in
    `activation_bytes_per_token_layer`). Input widths: d for q, k, v, gate and up, the attention
    width for o, the MLP width for down (per routed expert for an MoE)."""
    if t.method == "full" or t.lora_dropout <= 0 or arch.encoder:
        return 0.0
    d = arch.hidden_size
    f = arch.moe_intermediate_size if arch.is_moe else arch.intermediate_size
    experts = arch.experts_per_token if arch.is_moe else 1
    in_dim = {"q": d, "k": d, "v": d, "o": arch.q_dim, "gate": d, "up": d, "down": f, "qkv": d,
              "gate_up": d}
    # a fused qkv (gate_up) matrix is one adapter with one dropout (estimate/lora.py)
    adapted = fused_adapter_names(
        arch, LORA_ADAPTED[t.lora_targets] - (set() if arch.gated_mlp else {"gate"}))
    return float(sum(in_dim[n] * (experts if n in ("gate", "up", "down", "gate_up") else 1)
                     for n in adapted))


def deepspeed_bucket_bytes(t: Training) -> float:
    """DeepSpeed ZeRO-1/2's contiguous-gradient buffers, bytes: at every backward its
    optimizer allocates `reduce_bucket_size` elements in the model's dtype, twice with
    overlap_comm so that one bucket reduces while the next fills (deepspeed/runtime/zero/
    stage_1_and_2.py, DeepSpeedZeroOptimizer.backward: ipg_buffer, "double buffers"). They
    live from the start of backward, beside the activations. 0 when the setup names no bucket
    (not DeepSpeed)."""
    if not t.deepspeed_reduce_bucket:
        return 0.0
    dtype_bytes = 4 if (t.precision == "fp32" or t.precision.endswith("-amp")) else 2
    return (2 if deepspeed_overlap_comm_of(t) else 1) * t.deepspeed_reduce_bucket * dtype_bytes


def adapter_state_bytes(t: Training) -> StateBytesPerParam:
    """Bytes per LoRA/QLoRA adapter parameter (and lm_head adapter): weights, gradients and
    optimizer state. peft from 0.12 keeps adapters in fp32 under any precision (4, 4 and fp32
    moments); half-precision adapters (`t.lora_adapter_dtype` "half": peft 0.7-0.11 put each
    adapter in its base layer's dtype, torchtune's and litgpt's LoRA layers are built in the
    model's) have 2-byte weights and gradients, and torch's AdamW keeps its moments in the
    parameter's dtype (2 x 2; bitsandbytes' 8-bit state is the same either way)."""
    if t.lora_adapter_dtype == "half":  # 2-byte parameters, no master copy (bf16 or fp16 alike)
        return state_bytes_per_param("bf16", t.optimizer, trainable=True)
    return state_bytes_per_param("fp32", t.optimizer, trainable=True)


def embedding_copy_params(counts: ParamCounts, t: Training) -> int:
    """Parameters of the trainable copies of LoRA's `lora_trainable_embeddings` (peft's
    modules_to_save=["wte", "lm_head"]): the token embedding and an untied LM head (a tied head
    is the embedding's copy, peft ties the copies too); 0 when the choice is off."""
    if not t.lora_trainable_embeddings or t.method == "full":
        return 0
    return counts.embedding + counts.lm_head


def embedding_copy_state_bytes(t: Training) -> StateBytesPerParam:
    """Bytes per parameter of those copies: peft deep-copies the frozen module, so the copy has
    the frozen weights' dtype (c: 2 in bf16/fp16, 4 in fp32, under autocast, or where QLoRA's
    k-bit preparation upcast them); its gradient is of that dtype too, and torch's AdamW keeps
    its two moments in the parameter's dtype (2c); no master copy (HF Trainer)."""
    if t.method == "qlora":
        c = kbit_bytes(t)
    else:
        c = 4.0 if (t.precision == "fp32" or t.precision.endswith("-amp")) else 2.0
    moments = {"adamw": 2 * c, "adamw-8bit": 2 * (1 + 4 / 2048), "sgd": 0.0,
               "sgd-momentum": c}[t.optimizer]
    return StateBytesPerParam(weights=c, grads=c, master=0.0, optimizer=moments)


def gathered_working_bytes(counts: ParamCounts, t: Training, num_gpus: float) -> float:
    """Bytes of unsharded weights and gradients a ZeRO-3/FSDP rank holds at the start of the
    backward pass, beyond its shards (0 without weight sharding).

    FSDP wraps each decoder layer as a unit (HF Trainer's and TRL's transformer-layer auto-wrap,
    torchtitan's fully_shard per block) and the rest (embeddings, LM head, final norm) in the
    root unit. The root's parameters stay gathered from forward into backward (FSDP2's root
    does not reshard after forward; FSDP1 likewise). In backward, with the default
    BackwardPrefetch.BACKWARD_PRE, the current unit's parameters, the next unit's prefetched
    ones, the current unit's unsharded gradient and the previous unit's gradient still being
    reduce-scattered are alive together (PyTorch FSDP docs, BackwardPrefetch). DeepSpeed ZeRO-3's
    prefetch bucket and live-parameter limit are of the same order for one or two layers.
    With `t.fsdp_embedding_units` the embedding and the head are units of their own: of the
    root's, only the head (gathered for its backward) and the final norm are counted.
    """
    if t.zero_stage < 3 or num_gpus <= 1:
        return 0.0
    shard_left = 1 - 1 / num_gpus  # a rank's own shard is already counted in the weights
    full = t.method == "full"
    w = state_bytes_per_param(t.precision, t.optimizer, trainable=full).weights
    if not full:
        w = 4.0 if (t.precision == "fp32" or t.precision.endswith("-amp")) else 2.0
    # QLoRA under FSDP (bnb_4bit_quant_storage set to the compute dtype, so FSDP can flatten
    # and shard the packed 4-bit weights: the Answer.AI / HF FSDP-QLoRA recipe) gathers the
    # layers' 4-bit storage; embeddings and head stay in half precision
    w_layer = QLORA_BYTES_PER_PARAM if t.method == "qlora" else w
    if t.method == "qlora" and t.base_quant in ("nf4", "nf4-nodq"):
        # bitsandbytes' absmax is whole on every rank already (quant.bnb_quant_state_bytes):
        # the gather moves the 4-bit data
        w_layer = NF4_DATA_BYTES_PER_WEIGHT
    layer = counts.attention_per_layer + counts.mlp_per_layer + counts.norms_per_layer
    root = counts.embedding + counts.lm_head + counts.final_norm
    if t.fsdp_embedding_units:
        # the embedding and the head are units of their own, each resharded after its forward
        # (torchtune's custom_sharded_layers under fully_shard, reshard_after_forward True):
        # at the loss the head's unit is gathered again for its backward, the embedding's is
        # not, and the root holds the final norm alone (torchtune/training/_distributed.py
        # shard_model @ 30b8519e8: fully_shard on each matching module, then on the model)
        root = (counts.lm_head or counts.embedding) + counts.final_norm
    params = root * w * shard_left + 2 * layer * w_layer
    return params + gathered_unit_grad_bytes(counts, t, num_gpus)


def gathered_unit_grad_bytes(counts: ParamCounts, t: Training, num_gpus: float) -> float:
    """The unsharded gradients of two units in `gathered_working_bytes` (full fine-tuning under
    ZeRO-3/FSDP: the layer in backward and the one before it being reduce-scattered), bytes; a
    LoRA unit's gradients are its adapters' (counted apart): 0. They exist only from the first
    layer's backward on, so training_memory counts them beside a layer's backward (the
    recomputed layer's under checkpointing), not at the loss, where no layer's gradient has
    been made yet."""
    if t.zero_stage < 3 or num_gpus <= 1 or t.method != "full":
        return 0.0
    layer = counts.attention_per_layer + counts.mlp_per_layer + counts.norms_per_layer
    return 2 * layer * state_bytes_per_param(t.precision, t.optimizer, True).grads


def fsdp2_offload_grad_in_flight_bytes(counts: ParamCounts, t: Training,
                                       grad_bytes_per_param: float, num_gpus: float,
                                       adapter_params: float = 0.0, copy_params: float = 0.0,
                                       copy_grad_bytes: float = 0.0) -> float:
    """Bytes of reduced gradient FSDP2 keeps on the GPU under CPU offload: one unit's
    reduce-scattered shard, the largest unit's (a decoder layer's, or the root's embedding and
    head, or with `t.fsdp_embedding_units` the larger of those alone) trainable parameters /
    `num_gpus` at `grad_bytes_per_param`. A unit does not shrink with pipelining: it is a
    layer's, whatever share of the layers a stage holds. FSDP2 copies each unit's shard to the
    host as its reduce-scatter ends and drops the GPU copy at once (torch/distributed/
    _composable/fsdp/_fsdp_collectives.py foreach_reduce: `new_sharded_grad.to(torch.device(
    "cpu"), non_blocking=...)`, "we can free it here by not keeping a ref"). Not FSDP1: its
    `_offload_grad` copies `flat_param._saved_grad_shard` to `_cpu_grad` but the GPU shard stays
    referenced until the end of backward, when `_finalize_params` (fsdp/_runtime_utils.py)
    has `prepare_gradient_for_optim` (fsdp/_flat_param.py) swap in the host copy and drop it,
    so all its shards are alive, as DeepSpeed's reduce bucket (GRAD_BUCKET_ELEMENTS) bounds
    them. LoRA: one layer's `adapter_params` (all layers' / layers) at `grad_bytes_per_param`,
    or the trainable embedding copies' unit (`copy_params` at `copy_grad_bytes`,
    modules_to_save: in the root unit) if larger."""
    layers = max(counts.num_layers, 1)
    if t.method != "full":
        # the copies (embedding and head) in the root unit, or each its own unit
        if t.fsdp_embedding_units and copy_params:
            copy_params = copy_params * max(counts.embedding, counts.lm_head) / max(
                counts.embedding + counts.lm_head, 1)
        return max(adapter_params / layers * grad_bytes_per_param,
                   copy_params * copy_grad_bytes) / num_gpus
    layer = counts.attention_per_layer + counts.mlp_per_layer + counts.norms_per_layer
    root = counts.embedding + counts.lm_head + counts.final_norm
    if t.fsdp_embedding_units:
        root = max(counts.embedding, counts.lm_head)
    return max(layer, root) * grad_bytes_per_param / num_gpus


#: the name of the setup term that carries the load path's reserve
LOAD_PATH_TERM = "load path (fsdp-flatten) reserve"


def device_overhead_bytes(tensors_bytes: float, load_reserve_bytes: float, stack: str
                          ) -> dict[str, float]:
    """The memory a device's runtime adds beside the live tensors, by software stack
    (GpuSpec.stack), as MemoryBreakdown's allocator_reserve_bytes and cuda_context_bytes:
    - torch-cuda: PyTorch's caching allocator reserves a share above the peak of live tensors
      (assumptions.ALLOCATOR_RESERVE_FRACTION, plus what the loading path leaves cached) and the
      CUDA (or HIP) context with what else sits outside the allocator takes
      estimate/device_overhead.py's figure for its default stack (a lazily loading CUDA 12
      stack on one rank: assumptions.CUDA_CONTEXT_BYTES);
    - xla (TPUs): no CUDA context and no caching allocator: XLA's buffer assignment places
      every buffer of the compiled step at compile time, so the live-tensor peak is the
      program's and no reserve is added. The TPU runtime's own reservation and XLA's
      rematerialisation or layout padding are not modelled (no published figure was read): 0
      here, which leaves the total an under-estimate by whatever they take."""
    if stack == "xla":
        return {"allocator_reserve_bytes": 0.0, "cuda_context_bytes": 0.0}
    return {"allocator_reserve_bytes": tensors_bytes * A.ALLOCATOR_RESERVE_FRACTION.value
            + load_reserve_bytes, "cuda_context_bytes": device_level_bytes()}


def training_memory(arch: ModelArch, t: Training, num_gpus: int = 1,
                    load_reserve_bytes: float = 0.0, stack: str = "torch-cuda"
                    ) -> MemoryBreakdown:
    """Peak memory per GPU of a training step. `load_reserve_bytes`: what the loading path
    leaves cached that the step cannot reuse (estimate/load_cache.py load_path_reserve_bytes,
    which the estimate and fit pass for load_path 'fsdp-flatten'; it replays this module's
    sizes, so it is computed by the caller), added to the flat allocator reserve. `stack`
    (GpuSpec.stack): on "xla" (TPUs) neither a CUDA context nor the caching allocator's reserve
    is added (device_overhead_bytes).

    ZeRO stage s over N data-parallel GPUs divides by N: optimizer state and master weights from
    stage 1, gradients from 2, weights from 3 (ZeRO paper, fig. 1). The peak is the larger of
    (a) the end of the forward pass and the start of backward: weights, optimizer state,
    gradients that persist between micro-batches (when accumulating), activations, and the
    largest of the logits working set at the loss, the LM head's gradient with the logits'
    gradient beside it, and (checkpointing) the one layer recomputed after them; (b) the
    optimizer step: all gradients plus the temporaries of torch's default foreach AdamW (one
    state-sized set; two in torch 2.0: estimate/adamw_temporaries.py). Checked against traces
    of the real models on fake tensors: docs/trace_accuracy.md.
    """
    counts = count_params(arch)
    total = counts.total
    n: float = max(num_gpus, 1)
    # a model-parallel layout (estimate/parallel.py): this GPU holds `held` of the parameters
    # and ZeRO shards its state over the data-parallel ranks only
    lay = layout_of(t.tp, t.pp, t.cp, t.ep, t.virtual_stages, num_gpus, arch,
                    a2a_overlap=t.moe_a2a_overlap)
    held: float = total
    if not lay.trivial:
        local = local_params(arch, counts, lay)
        held, n = local.total, zero_shards(lay, local)
    shard_opt = n if t.zero_stage >= 1 else 1
    shard_grad = n if t.zero_stage >= 2 else 1
    shard_w = n if t.zero_stage >= 3 else 1
    quant_state = 0.0  # bitsandbytes' NF4 state (qlora below)
    paged = 0.0  # a paged optimizer's moments, outside torch's allocator (full below)

    if t.method == "full":
        trainable = total
        s = state_bytes_per_param(t.precision, t.optimizer, trainable=True)
        if t.grad_reduce_in_fp32:  # Megatron-Core's main_grad buffer in fp32 (setup.py)
            s = dataclasses.replace(s, grads=4.0)
        weights = held * s.weights / shard_w
        grads_full = held * s.grads
        master = held * s.master / shard_opt
        opt = held * s.optimizer / shard_opt
        head_grad = counts.lm_head_matmul * s.grads / lay.tp
        temp_per_param = 4.0 if (s.master or s.weights == 4.0) else 2.0
        temp_bytes = held * temp_per_param
        temp_groups = [temp_bytes]
        if counts.vision and not t.train_vision:
            # a frozen vision tower (the default) keeps its weights only (setup.train_vision)
            trainable -= counts.vision
            grads_full -= counts.vision * s.grads
            master -= counts.vision * s.master / shard_opt
            opt -= counts.vision * s.optimizer / shard_opt
        if t.optimizer_paged:  # bitsandbytes' managed-memory moments (paged_optimizer.py)
            # what leaves torch's allocator is the moments as counted here; what sits in
            # managed memory is bitsandbytes' own size (fp32 for 32-bit AdamW)
            paged_local = (paged_state_params(counts, trainable, norm_params(arch))
                           * (held / total) / shard_opt)
            # (8-bit: the absmax vectors, 4 bytes a 2048-value block, stay in torch's allocator)
            managed = paged_moment_bytes_per_param(t.optimizer)
            opt -= paged_local * (managed if t.optimizer == "adamw-8bit" else s.optimizer)
            paged = paged_local * managed
    else:
        trainable = lora_trainable_params(arch, t.lora_rank, t.lora_targets)
        if t.peft_method != "lora":  # estimate/peft_methods.py
            trainable = peft_method_trainable_params(arch, t)
        if t.lora_lm_head:
            trainable += lm_head_adapter_params(arch, t.lora_rank)
        if t.dora:  # DoRA's magnitude vectors, stored and trained as the adapters are
            trainable += dora_magnitude_params(arch, t.lora_targets)
        # peft keeps adapter weights in fp32 (autocast_adapter_dtype=True) under any precision
        # unless they are half (`adapter_state_bytes`);
        # the frozen base is in fp32 for fp32 and for *-amp (autocast over fp32 weights)
        frozen_bytes = 4.0 if (t.precision == "fp32" or t.precision.endswith("-amp")) else 2.0
        if t.method == "qlora":
            q = quantised_params(arch) + (counts.lm_head if t.lm_head_4bit else 0)
            base = quantised_linears_bytes(arch, q, t.base_quant) + (total - q) * kbit_bytes(t)
            # bitsandbytes' quantisation state is no parameter: ZeRO-3/FSDP leaves it whole
            # on every rank (quant.bnb_quant_state_bytes)
            quant_state = bnb_quant_state_bytes(q, t.base_quant)
            base -= quant_state
        else:
            base = held * frozen_bytes
        # under a layout the GPU holds its share of the adapters (parallel.local_trainable_params)
        local_trainable = trainable * held / total
        adapter = adapter_state_bytes(t)
        # ZeRO-3/FSDP shards the adapters as it shards the base (parameters all)
        weights = base / shard_w + quant_state + local_trainable * adapter.weights / shard_w
        grads_full = local_trainable * adapter.grads
        master = 0.0
        opt = local_trainable * adapter.optimizer / shard_opt
        head_grad = 0.0
        temp_bytes = local_trainable * adapter.weights
        temp_groups = [temp_bytes]
        # trainable embeddings (modules_to_save): a copy beside the frozen original, its
        # gradient and optimizer state, sharded like the base under ZeRO-3
        copies = embedding_copy_params(counts, t)
        if copies:
            c = embedding_copy_state_bytes(t)
            weights += copies * c.weights / shard_w
            grads_full += copies * c.grads
            opt += copies * c.optimizer / shard_opt
            head_grad = counts.lm_head_matmul * c.grads
            temp_bytes += copies * c.weights
            # torch's AdamW steps each dtype apart: the copies (the token embedding's first
            # in parameter order) are a group of their own beside adapters of another dtype
            temp_groups = ([copies * c.weights] + temp_groups if c.weights != adapter.weights
                           else [temp_bytes])
            trainable += copies
    engine_fp32_grads = 0.0
    if t.deepspeed_pipe_engine and t.precision == "bf16-mixed":
        # DeepSpeed's PipelineEngine runs bf16 under BF16_Optimizer, which accumulates every
        # micro-batch's bf16 .grad into an fp32 buffer of all this rank's trainable parameters
        # (microsoft/DeepSpeed@5fe9d610, v0.7.0, bf16_optimizer.py: fp32_groups_gradients_flat
        # = zeros_like(bf16_groups_flat, dtype=float32), update_hp_grads; made at start-up,
        # never sharded: only its master weights and moments are partitioned), 4 bytes each
        engine_fp32_grads = trainable * (held / total) * 4.0
        grads_full += engine_fp32_grads
    grads = grads_full / shard_grad
    act = activation_bytes(arch, t)
    # tensor (sequence) parallelism divides every activation and the vocabulary-parallel
    # logits by tp, context parallelism the tokens by cp (Korthikanti et al. 2022 sec. 4.2.2);
    # a pipeline's first stage holds the micro-batches in flight, its last the logits
    split = lay.tp * lay.cp
    in_first, in_last = activation_micro_batches_in_flight(lay, t.grad_accum)
    act_first, act_last = act.total * in_first / split, act.total * in_last / split
    # the logits working set peaks at the start of backward (three fp32 tensors at the loss);
    # the LM head's gradient comes later, when only the logits' gradient is left beside it
    # (plus the logits the loop holds through backward, `held_logits_bytes`)
    kept_logits = held_logits_bytes(arch, t)
    # a 4-bit head's dequantised copy at its matmuls: in forward beside the logits it makes
    # (N V a), in backward beside the loss's working set. A loop that holds the previous
    # micro-batch's graph keeps its 4-bit inputs and its logits through the new forward (the
    # head's matmul), and under "held" the inputs up to the new loss; all freed before backward
    head_copy = head_dequant_bytes(arch, t)
    held_prev = bnb_held_input_bytes(arch, t)
    prev_logits = held_previous_logits_bytes(arch, t)
    head_logits = (t.tokens_per_micro_batch * arch.vocab_size * ACTIVATION_BYTES[t.precision]
                   if head_copy or prev_logits else 0.0)
    # Fabric's fp32 cast of the head's output, both alive as the last chunk is cast (after
    # the head's matmuls and their dequantised copies: estimate/fabric_loss.py)
    cast = (fabric_cast_bytes(t.tokens_per_micro_batch, arch.vocab_size,
                              ACTIVATION_BYTES[t.precision])
            if loss_kernel_of(t) == "chunked-fabric" else 0.0)
    at_head = held_prev + prev_logits + max(head_logits + head_copy, cast)
    at_loss = (held_prev if t.bnb_saved_input == "held" else 0.0) + logits_bytes(arch, t)
    # autocast's copy of a head stored in the other half dtype: from the head's forward
    # through its backward (head_weight_cast_bytes)
    head_cast = head_weight_cast_bytes(arch, t)
    logits = (max(at_head, at_loss, loss_backward_bytes(arch, t) + kept_logits + head_copy)
              + head_cast) / split
    head_phase = (lm_head_backward_bytes(arch, t, head_grad * split / shard_grad)
                  + kept_logits + head_cast) / split
    # (BF16_Optimizer's fp32 buffer persists whatever the accumulation: made at start-up; so
    # does Megatron-Core's: its DistributedDataParallel allocates every parameter's main_grad
    # in one contiguous buffer when it wraps the model, param_and_grad_buffer.py
    # _ParamAndGradBuffer @d98e8a64, and zeroes it each step, never frees it. Its dtype is the
    # weights' here, as Megatron-Bridge's performance recipes set it (perf_recipes/_common.py
    # grad_reduce_in_fp32 False @067f987d), unless grad_reduce_in_fp32 (Megatron-LM's own bf16
    # default: fp32, 4 bytes a parameter, above)
    persisting_grads = (grads if t.grad_accum > 1 or t.kernels == "megatron"
                        else engine_fp32_grads)
    # FSDP's no_sync: every unit's gradient held unsharded across the micro-batches, in place
    # of the shards (estimate/fsdp_no_sync.py); only when accumulating
    no_sync_grads = no_sync_unsharded_grad_bytes(counts, t, num_gpus, trainable) * (held / total)
    if no_sync_grads:
        persisting_grads = no_sync_grads
    # torch.autocast keeps a half-precision copy of each matmul weight for the step
    autocast_cache = (2.0 * counts.matmul_active * (held / total) / shard_w
                      if t.precision.endswith("-amp") else 0.0)
    if t.precision == "fp8-mixed":  # the fp8 copies of the layers' weights (assumptions.py)
        autocast_cache = (A.FP8_WEIGHT_COPY_BYTES.value * quantised_params(arch)
                          * (held / total) / shard_w)
        if t.fp8_params:  # the fp8 tensors are the weights: no half-precision copy of them;
            # they are resident in every phase, the optimizer step's too (Transformer Engine's
            # Float8Tensor parameters), not a cache of the forward and backward
            weights += autocast_cache - (ACTIVATION_BYTES[t.precision] * quantised_params(arch)
                                         * (held / total) / shard_w)
            autocast_cache = 0.0
    # under checkpointing the one layer recomputed in backward comes after the loss: its
    # activations and the logits working set are not alive together
    recomputed = (t.tokens_per_micro_batch * act.per_token_per_layer / split
                  if t.checkpointing else 0.0)
    # a GPTQ base's dequantised weights kept for backward: the recomputed layer's under
    # checkpointing, every layer's (on this GPU) without it
    gptq_layer = gptq_saved_weight_bytes_per_layer(arch, t) / lay.tp
    gptq_kept = gptq_layer if t.checkpointing else gptq_layer * arch.num_layers * (held / total)
    # and the unpacking transient of its worst linear (quant.gptq_dequant_transient_bytes): in
    # a forward that records (the recomputed layer, or every layer without checkpointing)
    # beyond the weights kept; in checkpointing's no-grad first pass, where none are kept,
    # in their place at the end of forward
    gptq_dequant = gptq_dequant_bytes(arch, t, keeps_weights=True) / lay.tp
    gptq_first = (gptq_dequant_bytes(arch, t, keeps_weights=False) / lay.tp
                  if t.checkpointing else gptq_kept)
    # DoRA's per-feature vectors and its recomputed base matmul's weight copies, the same way
    # (estimate/dora.py)
    a_bytes = ACTIVATION_BYTES[t.precision]
    dora_layer = (dora_saved_bytes_per_layer(arch, t, a_bytes)
                  # LoHa/LoKr's dense deltas, prefix tuning's keys and values, IA3's vectors
                  + peft_method_saved_bytes_per_layer(arch, t, a_bytes)) / lay.tp
    dora_kept = dora_layer if t.checkpointing else dora_layer * arch.num_layers * (held / total)
    act_first, act_last = act_first + gptq_first + dora_kept, act_last + gptq_kept + dora_kept
    if t.checkpointing:  # (with the recomputed layer, after the loss)
        recomputed += gptq_layer + dora_layer
    # DoRA's norm inside one adapted linear's forward: B A, the weight's copy and their sum,
    # freed when the layer returns; taken on top of the activations at the end of forward
    # bitsandbytes' dequantised copy of one 4-bit weight at its matmul (quant.py
    # bnb_dequant_transient_bytes): inside a layer's forward and the recomputed layer's
    # backward, not at the loss (the head is not 4-bit here: head_dequant_bytes is). Unsloth's
    # own kernels count theirs in the activations (unsloth.py)
    bnb_dequant = (bnb_dequant_transient_bytes(arch, t.base_quant, a_bytes) / lay.tp
                   if t.method == "qlora" and t.kernels != "unsloth" else 0.0)
    dora_transient = (dora_norm_transient_bytes(arch, t, a_bytes)
                      # LoHa/LoKr forming the dense delta (estimate/peft_methods.py)
                      + peft_method_transient_bytes(arch, t)) / lay.tp
    gathered = gathered_working_bytes(counts, t, n) * (held / total)
    unit_grads = gathered_unit_grad_bytes(counts, t, n) * (held / total)
    host = 0.0
    # activation offloading: pinned host copies of the saved tensors (activation_offload.py)
    host += offloaded_activation_bytes(arch, t) / split
    if t.offload != "none":  # the offloaded state leaves the GPU (estimate/offload.py)
        per_param = host_accumulation_bytes_per_param(
            zero_stage=t.zero_stage, zero3_engine=t.zero3_engine, grad_accum=t.grad_accum,
            grad_bytes=grads_full / max(trainable, 1))
        host += host_bytes_per_gpu(offload=t.offload, master_bytes=master, optimizer_bytes=opt,
                                  trainable_params_per_gpu=trainable / shard_opt,
                                  weights_bytes=weights,
                                  accumulation_bytes=per_param * trainable / shard_opt)
        master = opt = temp_bytes = 0.0
        temp_groups = []
        # the reduced gradients flow to the host bucket by bucket: one bucket stays
        bucket = GRAD_BUCKET_ELEMENTS.value * grads_full / max(trainable, 1)
        if t.zero_stage >= 3 and t.zero3_engine == "fsdp" and t.fsdp_api == "fsdp2":
            if t.method == "full":
                bucket = fsdp2_offload_grad_in_flight_bytes(
                    counts, t, state_bytes_per_param(t.precision, t.optimizer, True).grads, n)
            else:
                copies_n = embedding_copy_params(counts, t)
                bucket = fsdp2_offload_grad_in_flight_bytes(
                    counts, t, adapter_state_bytes(t).grads, n,
                    adapter_params=trainable - copies_n, copy_params=copies_n,
                    copy_grad_bytes=embedding_copy_state_bytes(t).grads if copies_n else 0.0)
        grads = persisting_grads = min(grads, bucket)
        if t.offload == "optimizer+params":  # the gathered working set, and what is no
            # parameter: bitsandbytes' quantisation state stays on the GPU
            weights, gathered = quant_state, gathered_working_bytes(counts, t, math.inf)
            unit_grads = gathered_unit_grad_bytes(counts, t, math.inf)
    # Unsloth's offloaded checkpoints: the block inputs in pinned host memory (estimate/unsloth.py)
    host += offloaded_checkpoint_host_bytes(
        arch, t, 4 if kbit_upcast_active(t) else residual_bytes(t.precision))
    # torch's foreach AdamW makes state-sized sets of temporaries (sqrt of the second moment;
    # torch 2.0 also `denom`: estimate/adamw_temporaries.py); fused kernels (torch fused=True,
    # bitsandbytes' 8-bit) and per-parameter loops do not hold more than one tensor's worth
    # a paged optimizer is bitsandbytes' own kernel whatever optimizer_impl says: no foreach sets
    impl = "fused" if t.optimizer_paged else t.optimizer_impl
    temp_sets = adamw_temporary_sets(t.optimizer, impl)
    opt_temps = adamw_temporary_bytes(t.optimizer, impl, temp_groups) / shard_opt
    if t.zero_stage == 3 and t.zero3_engine == "deepspeed" and t.offload == "none":
        # DeepSpeed steps the partition one sub group at a time: a flat fp32 gradient and the
        # optimizer's temporaries of that sub group only (estimate/deepspeed_step.py)
        ds_local_params = trainable * (held / total)
        opt_temps = deepspeed_zero3_step_bytes(ds_local_params / shard_opt,
                                               grads_full / max(ds_local_params, 1.0),
                                               temp_sets)
    step_peak = grads + opt_temps
    if t.optimizer_in_backward:  # each parameter stepped at its hook (optim_in_backward.py)
        step_peak, opt_temps, head_phase, grads = _in_backward_step(
            arch, t, counts, trainable, grads_full, temp_bytes, temp_sets, head_phase)
    buckets = deepspeed_bucket_bytes(t)
    # the first pipeline stage's activations, or the last's with the loss (one stage: the same)
    # a layer's backward: its activations (recomputed under checkpointing), a dequantised
    # 4-bit weight, and (full fine-tuning under ZeRO-3/FSDP) two units' unsharded gradients,
    # which do not exist yet at the loss (gathered_unit_grad_bytes)
    # (and under checkpointing auto-gptq's unpacking in the recomputed layer; without it, at
    # the forward's last linear)
    layer_backward = recomputed + bnb_dequant + unit_grads + (
        gptq_dequant if t.checkpointing else 0.0)
    forward_dequant = bnb_dequant + (0.0 if t.checkpointing else gptq_dequant)
    forward_peak = (persisting_grads + autocast_cache + gathered - unit_grads + buckets + max(
        act_first + dora_transient + forward_dequant,
        act_last - recomputed + max(logits, head_phase, layer_backward)))
    # FSDP1's root unit at the end of backward: its parameters still gathered, its gradient
    # from the views beside the flat gradient made of them (estimate/fsdp_root_grad.py), on
    # top of the gradients that persist (no_sync's unsharded ones, else the shards)
    root_grads = (fsdp1_root_backward_grad_bytes(counts, t, num_gpus)
                  if lay.trivial and t.offload == "none" else 0.0)
    # FSDP1 gathers a unit into a padded buffer of its own beside the rank's shard
    # (_flat_param.py `_full_param_padded`): the whole root, in the weights' dtype
    root_gathered = (root_params(counts) * weights / max(total, 1) * shard_w
                     if root_grads else 0.0)
    root_peak = ((no_sync_grads or grads) + root_gathered + root_grads) if root_grads else 0.0
    phase = ("start of backward (activations + logits at the loss)"
             if forward_peak >= max(step_peak, root_peak) else
             "end of backward (FSDP1's root unit gradient assembled)"
             if root_peak > step_peak else "optimizer step (gradients + temporaries)")
    tensors = weights + master + opt + max(forward_peak, step_peak, root_peak)
    resident = [("weights_bytes", weights), ("master_weights_bytes", master),
                ("optimizer_bytes", opt)]
    if root_peak > max(forward_peak, step_peak):
        live = [("no_sync_gradients_bytes" if no_sync_grads else "gradients_bytes",
                 no_sync_grads or grads), ("gathered_bytes", root_gathered),
                ("root_unit_gradients_bytes", root_grads)]
    elif forward_peak >= step_peak:
        # the same terms as forward_peak, named: which stage and which loss-side term is larger
        at_loss = max(logits, head_phase, layer_backward)
        loss_part = ("logits_bytes" if at_loss == logits else
                     "lm_head_backward_bytes" if at_loss == head_phase else "recomputed_layer_bytes")
        in_layer = [("bnb_dequant_bytes", bnb_dequant)]
        gptq_part = [("gptq_dequant_bytes", gptq_dequant)]
        in_backward = [*in_layer, *(gptq_part if t.checkpointing else []),
                       ("gathered_gradients_bytes", unit_grads)]
        acts = ([("activations_bytes", act_first), ("dora_norm_bytes", dora_transient), *in_layer,
                 *([] if t.checkpointing else gptq_part)]
                if act_first + dora_transient + forward_dequant >= act_last - recomputed + at_loss
                else [("activations_kept_bytes", act_last - recomputed),
                      *(in_backward if loss_part == "recomputed_layer_bytes" else []),
                      (loss_part, recomputed if loss_part == "recomputed_layer_bytes"
                       else at_loss)])
        grads_key = "no_sync_gradients_bytes" if no_sync_grads else "gradients_bytes"
        live = [(grads_key, persisting_grads), ("autocast_weight_copies_bytes",
                 autocast_cache), ("gathered_bytes", gathered - unit_grads),
                ("deepspeed_buckets_bytes", buckets), *acts]
    else:
        live = [("gradients_bytes", grads), ("optimizer_temporaries_bytes", opt_temps)]
    peak_parts = tuple((k, v) for k, v in resident + live if v)
    load_terms: tuple[str, ...] = ((f"{LOAD_PATH_TERM} = {load_reserve_bytes / 2**30:.2f} GiB: the loading "
                   "path's cached blocks the step cannot reuse, in the allocator reserve (a "
                   "replay of FSDP's wrap "
                   "from the CPU and one step, not a measurement: estimate/load_cache.py)",)
                  if t.load_path != "from-pretrained" else ())
    if no_sync_grads:
        load_terms += (f"fsdp_no_sync_grads_bytes = {no_sync_grads / 2**30:.2f} GiB in the "
                       "gradients: FSDP's no_sync() keeps every unit's gradient unsharded "
                       "through the accumulating micro-batches, a LoRA unit's over its frozen "
                       "base too (use_orig_params), in place of the 1/N shards "
                       "(estimate/fsdp_no_sync.py; fsdp_grad_accum no-sync)",)
    return MemoryBreakdown(
        weights_bytes=weights,
        gradients_bytes=grads,
        master_weights_bytes=master,
        optimizer_bytes=opt,
        activations_bytes=act_first,
        logits_bytes=logits,
        optimizer_temporaries_bytes=opt_temps,
        autocast_weight_copies_bytes=autocast_cache,
        gathered_bytes=gathered,
        peak_phase=phase,
        tensors_bytes=tensors,
        **device_overhead_bytes(tensors, load_reserve_bytes, stack),
        trainable_params=trainable,
        total_params=total,
        host_bytes=host,
        setup_terms=_setup_terms(arch, t, buckets) + load_terms + _paged_terms(paged),
        peak_parts=peak_parts,
        paged_optimizer_bytes=paged,
    )


def _paged_terms(paged_bytes: float) -> tuple[str, ...]:
    """The setup term that says where a paged optimizer's moments are (none without)."""
    if not paged_bytes:
        return ()
    return (f"paged_optimizer = {paged_bytes / 2**30:.2f} GiB: bitsandbytes' paged moments in "
            "CUDA managed memory (cudaMallocManaged), outside torch's allocator: in neither "
            "the allocated nor the reserved figure; on the GPU while it has room, paged to the "
            "host beyond it (its PCIe traffic not timed; estimate/paged_optimizer.py)",)


def offloaded_activation_bytes(arch: ModelArch, t: Training) -> float:
    """Bytes activation offloading copies to the host per micro-batch (0 without it): each
    checkpointed layer's input in the residual stream's dtype and the final RMSNorm's saves,
    its fp32 input twice (saved by its square and by the multiply with the rsqrt, each packed
    and copied apart) and its normalised output in the activation dtype a, which the weight's
    multiply saves: 8 + a bytes per token and hidden unit (torchtune's and transformers'
    RMSNorm alike; estimate/activation_offload.py offloaded_bytes)."""
    if not t.activation_offload:
        return 0.0
    residual = 4 if kbit_upcast_active(t) else residual_bytes(t.precision)
    tokens = t.tokens_per_micro_batch
    norm = 8 + ACTIVATION_BYTES[t.precision]
    return offloaded_bytes(arch.num_layers, tokens, residual * arch.hidden_size,
                           tokens * arch.hidden_size * norm)


def _in_backward_step(arch: ModelArch, t: Training, counts: ParamCounts, trainable: float,
                      grads_full: float, temp_bytes: float, temp_sets: int, head_phase: float
                      ) -> tuple[float, float, float, float]:
    """(step peak, optimizer temporaries, head phase, gradients) when the optimizer steps
    inside backward (estimate/optim_in_backward.py): no step phase of all gradients, only the
    largest tensor's gradient and temporaries at its hook; the LM head's temporaries join its
    gradient's phase; the gradients alive at once are one tensor's."""
    per = max(trainable, 1)
    temps_per_param = temp_sets * temp_bytes / per
    largest = largest_trainable_tensor_params(arch, counts, t.method, t.lora_rank,
                                              embedding_copy_params(counts, t))
    step = in_backward_step_bytes(largest, grads_full / per, temps_per_param)
    head_trains = t.method == "full" or bool(embedding_copy_params(counts, t))
    head_temps = counts.lm_head_matmul * temps_per_param if head_trains else 0.0
    return (step, largest * temps_per_param, head_phase + head_temps,
            largest * grads_full / per)


def _setup_terms(arch: ModelArch, t: Training, buckets: float) -> tuple[str, ...]:
    """The lines naming the setup-dependent terms in this setup's memory, with their basis."""
    out = []
    if t.zero_stage == 3 and t.zero3_engine == "deepspeed" and t.offload == "none":
        out.append("optimizer_temporaries (DeepSpeed ZeRO-3): one sub group's flat gradient "
                   "copy, its fp32 cast and the optimizer's temporaries, at most "
                   f"{DEEPSPEED_SUB_GROUP_ELEMENTS:.0e} elements (sub_group_size; "
                   "estimate/deepspeed_step.py, stage3.py @ v0.12.3)")
    if t.kernels == "megatron" and megatron_path_covers(arch):
        out.append("megatron kernels: each layer keeps what Megatron-Core's Transformer Engine "
                   "modules save (estimate/megatron_saved.py: norm inputs, attention tensors, "
                   "SwiGLU's input, a linear's input only when its weight trains)")
    if t.fp8_params:
        fp8 = quantised_params(arch) * ACTIVATION_BYTES[t.precision]
        out.append(f"fp8_params: {fp8 / 2**30:.2f} GiB of half-precision layer weights (whole "
                   "model) not held: the fp8 copies are the weights")
    if t.kernels == "unsloth":
        a = ACTIVATION_BYTES[t.precision]
        per = unsloth_layer_saved_bytes_per_token(
            arch, LORA_ADAPTED[t.lora_targets], a, t.lora_rank,
            half_adapters=lora_branch_of(t) != "peft-fp32",
            bnb_input_saved=(t.method == "qlora" and t.bnb_saved_input != "none"),
            lora_dropout=t.lora_dropout)
        out.append(unsloth_term(arch, LORA_ADAPTED[t.lora_targets], per, a, t.method,
                                t.lora_dropout))
    if t.checkpoint_offload and t.checkpointing:
        host = offloaded_checkpoint_host_bytes(
            arch, t, 4 if kbit_upcast_active(t) else residual_bytes(t.precision))
        out.append(f"checkpoint_offload: {host / 2**30:.2f} GiB of block inputs in pinned host "
                   "memory (host_bytes), one block's input on the GPU (Unsloth's offloaded "
                   "gradient checkpointing: estimate/unsloth.py)")
    per_token_layer = (quantised_base_bytes_per_token_layer(arch, t)
                       if t.kernels != "unsloth" else 0.0)
    if per_token_layer:
        kept = per_token_layer * t.tokens_per_micro_batch * (
            1 if t.checkpointing else arch.num_layers)
        what = ("peft's upcast makes the MLP's outputs fp32 (bitsandbytes 0.43.2 and later "
                "keep no input)" if t.bnb_saved_input == "none" else
                "bitsandbytes' MatMul4Bit before 0.43.2 keeps each 4-bit linear's input for "
                "backward (0.43.2 and later keep none: --bnb-saved-input none)")
        out.append(f"qlora_base_saved_bytes = {kept / 2**30:.2f} GiB in the activations: "
                   f"{what} ({per_token_layer / 1024:.1f} KiB per token and layer"
                   + (", with the fp32 copies and MLP outputs of peft's upcast)"
                      if kbit_upcast_active(t) and t.bnb_saved_input != "none" else ")")
                   + " (estimate/memory.py quantised_base_bytes_per_token_layer)")
    held_prev = bnb_held_input_bytes(arch, t)
    if held_prev:
        until = ("the next loss" if t.bnb_saved_input == "held"
                 else "the end of the next forward")
        prev = held_previous_logits_bytes(arch, t)
        out.append(f"bnb_held_input_bytes = {held_prev / 2**30:.2f} GiB in the logits and loss "
                   f"part: bitsandbytes before 0.43.2 keeps each 4-bit linear's input as a ctx "
                   f"attribute, which backward does not release, and the loop holds its last "
                   f"{'loss' if t.bnb_saved_input == 'held' else 'output'}: the previous "
                   f"micro-batch's inputs are alive until {until}, with its logits "
                   f"({prev / 2**30:.2f} GiB) until the next forward returns "
                   f"(estimate/memory.py bnb_held_input_bytes, held_previous_logits_bytes)")
    head_cast = head_weight_cast_bytes(arch, t)
    if head_cast:
        out.append(f"head_weight_cast_bytes = {head_cast / 2**30:.2f} GiB in the logits and "
                   f"loss part: the LM head's half-precision weight in the other half dtype "
                   f"than autocast's, cast at each forward and kept by F.linear for its "
                   f"backward (head_weight_cast; estimate/memory.py head_weight_cast_bytes)")
    head_copy = head_dequant_bytes(arch, t)
    if head_copy:
        out.append(f"head_dequant_bytes = {head_copy / 2**30:.2f} GiB in the logits and loss "
                   f"part: the 4-bit LM head (Lightning's BitsandbytesPrecision) is dequantised "
                   f"to fp16 and cast to the compute dtype at each of its matmuls, beside the "
                   f"logits (estimate/memory.py head_dequant_bytes)")
    if t.method == "qlora" and t.bnb_saved_input == "none" and t.base_quant in ("nf4",
                                                                                "nf4-nodq"):
        out.append("bnb_saved_input = none: bitsandbytes 0.43.2 and later keep no input of a "
                   "4-bit linear for backward (PR #1270)")
    if kbit_upcast_active(t) and t.checkpointing:
        out.append("kbit_upcast: the layer inputs kept under checkpointing are fp32 (peft's "
                   "prepare_model_for_kbit_training makes the embedding fp32, and the residual "
                   "stream stays fp32)")
    if t.compile:
        eager, _ = activation_bytes_per_token_layer(
            arch, t.precision, t.flash_attention, t.llm_seq_len, t.method, t.lora_targets,
            t.lora_rank, half_adapters=lora_branch_of(t) != "peft-fp32",
            lora_dropout=t.lora_dropout, eager_attention=t.eager_attention)
        out.extend(compile_terms(arch, t, eager, ACTIVATION_BYTES[t.precision]))
    out.extend(liger_terms(arch, t, ACTIVATION_BYTES[t.precision], residual_bytes(t.precision)))
    out.extend(kv_repeat_terms(arch, t, ACTIVATION_BYTES[t.precision]))
    out.extend(held_output_terms(arch, t, ACTIVATION_BYTES[t.precision]))
    held = held_logits_bytes(arch, t)
    if held:
        out.append(f"held_logits_bytes = {held / 2**30:.2f} GiB at the start of backward: the "
                   f"training loop holds the model's output, its {t.held_logits} logits "
                   f"(tokens x vocabulary x {4 if t.held_logits == 'fp32' else 'a'} bytes), "
                   f"through backward (estimate/memory.py held_logits_bytes)")
    if t.lora_adapter_dtype == "half" and t.method != "full":
        half, full = adapter_state_bytes(t), state_bytes_per_param("fp32", t.optimizer,
                                                                    trainable=True)
        out.append(f"lora_adapter_dtype = half: the adapters' weights and gradients in half "
                   f"precision, {t.optimizer}'s state in their dtype where it keeps one "
                   f"({half.weights:g} + {half.grads:g} + {half.optimizer:.3g} bytes per adapter "
                   f"parameter, not fp32's {full.weights:g} + {full.grads:g} + "
                   f"{full.optimizer:.3g}), and no fp32 "
                   f"copy of their inputs (peft up to 0.11, torchtune's and litgpt's LoRA; "
                   f"estimate/memory.py adapter_state_bytes)")
    masks = lora_dropout_mask_bytes_per_token_layer(arch, t)
    if masks:
        kept = masks * t.tokens_per_micro_batch * (1 if t.checkpointing else arch.num_layers)
        out.append(f"lora_dropout_mask_bytes = {kept / 2**30:.2f} GiB in the activations: "
                   f"dropout {t.lora_dropout:g} on each adapter's input keeps a 1-byte mask "
                   f"({masks:,.0f} bytes per token and layer; estimate/memory.py "
                   f"lora_dropout_mask_bytes_per_token_layer)")
    gptq_layer = gptq_saved_weight_bytes_per_layer(arch, t)
    if gptq_layer:
        layers = 1 if t.checkpointing else arch.num_layers
        out.append(f"gptq_saved_weight_bytes = {gptq_layer * layers / 2**30:.2f} GiB: auto-gptq's "
                   f"PyTorch path dequantises each weight to fp16 and matmul keeps it for "
                   f"backward, {layers} layer(s) x {gptq_layer / 2**30:.2f} GiB "
                   f"(qlinear_cuda_old.py; estimate/memory.py gptq_saved_weight_bytes_per_layer)")
        recording = gptq_dequant_bytes(arch, t, keeps_weights=True)
        first = gptq_dequant_bytes(arch, t, keeps_weights=False)
        out.append(f"gptq_dequant_bytes = {recording / 2**30:.2f} GiB at the "
                   + ("recomputed layer's" if t.checkpointing else "last layer's")
                   + " worst linear beyond the kept weights: unpacking holds an int32 and an "
                   "int8 copy of it, 5 bytes per weight"
                   + (f"; {first / 2**30:.2f} GiB in the no-grad first pass"
                      if t.checkpointing else "")
                   + " (qlinear_cuda_old.py; estimate/quant.py gptq_dequant_transient_bytes)")
    if t.dora and t.method != "full":
        out.extend(_dora_terms(arch, t))
    out.extend(peft_method_terms(arch, t, ACTIVATION_BYTES[t.precision]))
    if buckets:
        overlap = deepspeed_overlap_comm_of(t)
        out.append(f"deepspeed_bucket_bytes = {buckets / 2**30:.2f} GiB from the start of "
                   f"backward: {'2' if overlap else '1'} x reduce_bucket_size "
                   f"{t.deepspeed_reduce_bucket:.3g} elements (DeepSpeed ZeRO-1/2 "
                   f"contiguous_gradients{', overlap_comm' if overlap else ''}:"
                   f" stage_1_and_2.py backward)")
    return tuple(out)


def _dora_terms(arch: ModelArch, t: Training) -> list[str]:
    """The setup terms of DoRA (estimate/dora.py), each a line."""
    a = ACTIVATION_BYTES[t.precision]
    base = dora_base_matmul_of(t)
    saved = dora_saved_bytes_per_token_layer(arch, t, a)
    layers = 1 if t.checkpointing else arch.num_layers
    out = [f"dora_saved_bytes = {saved * t.tokens_per_micro_batch * layers / 2**30:.2f} GiB in "
           f"the activations: DoRA's magnitude scales the base and LoRA outputs, and autograd "
           f"keeps both ({saved:,.0f} bytes per token and layer; base matmul {base}d: "
           + ("peft 0.14+ without dropout" if base == "reuse" else
              "peft before 0.14, or lora_dropout above 0") + "; estimate/dora.py)",
           f"dora_magnitude_params = {dora_magnitude_params(arch, t.lora_targets):,}: one per "
           f"output feature of each adapted linear, trained as the adapters are",
           f"dora_norm_bytes = {dora_norm_transient_bytes(arch, t, a) / 2**30:.2f} GiB transient "
           f"in the largest adapted linear's forward: B A formed through an identity, the "
           f"weight's copy and the norm's sum (estimate/dora.py dora_norm_transient_bytes)"]
    copies = dora_saved_bytes_per_layer(arch, t, a)
    if copies:
        out.append(f"dora_saved_layer_bytes = {copies * layers / 2**30:.2f} GiB in the "
                   f"activations: DoRA's per-feature vectors"
                   + (" and the weight copy the recomputed base matmul was given"
                      if base == "recompute" else "")
                   + f" ({layers} layer(s); estimate/dora.py dora_saved_bytes_per_layer)")
    return out
