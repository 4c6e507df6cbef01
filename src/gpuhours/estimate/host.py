"""Device operators the host issues per micro-batch, by the kernel path the model's code takes.

An eager step cannot finish before its host has issued every operator (docs/bench.md, "The host
floor"); how many there are depends on the code that runs, not on the model's shape alone:

- ``eager`` (the default): transformers' own modelling, eager PyTorch, attention by SDPA. Counted
  on CPU with gpuhours.torchkit.ops.count_ops (assumptions.OPS_PER_LAYER and
  OPS_PER_LORA_ADAPTER; `python scripts/host_overhead.py count`; tests/test_torchkit.py re-counts
  them).
- ``flash-attn``: modelling code that calls flash-attn itself, with its fused rotary and RMSNorm
  kernels: Qwen-1's remote code (modeling_qwen.py) with flash-attn 2 and its layer_norm
  extension installed, as the Qwen README's profiling ran it. Counted by hand from that code
  (FLASH_ATTN_* below, each operator named), since those kernels do not run on a CPU.
- ``megatron``: Megatron-Core's TransformerLayer built from Transformer Engine's fused modules
  (Megatron-LM, Megatron-Bridge, NeMo 1 and 2): layer norm fused into the qkv and fc1 linears,
  fused rotary, cuDNN attention, fused SwiGLU and bias-dropout-add, weight gradients accumulated
  in the wgrad GEMM. Counted by hand from that code (MEGATRON_* below, each kernel named).
- ``megatron-2021``: Megatron-LM's own layer before Megatron-Core (the PTD-P paper's code, 2021):
  fused LayerNorm, jit-fused bias-GeLU and bias-dropout-add, unfused attention with the fused
  scaled masked softmax, a gradient add per parameter. Counted by hand from that code
  (estimate/megatron_2021.py, each kernel named).

Operators are dispatcher-level calls that launch device work (views and allocations excluded),
the unit count_ops counts. A quantised base adds its dequantisation's operators per quantised
linear (QUANT_LINEAR_EXTRA_OPS). Liger's layer kernels (Training.liger_kernels) take the eager
RMSNorms', rotary embedding's and gated activation's operators off, leaving one kernel each
(estimate/liger.py liger_ops_delta_per_layer). torch.compile is not modelled here (docs/bench.md
says why).
"""

from __future__ import annotations

from gpuhours.estimate import assumptions as A
from gpuhours.estimate.arch import ModelArch
from gpuhours.estimate.dora import dora_base_matmul_of
from gpuhours.estimate.liger import liger_layer_applies, liger_ops_delta_per_layer
from gpuhours.estimate.lora import FUSED_GATE_UP_TYPES, FUSED_QKV_TYPES, adapted_linears
from gpuhours.estimate.megatron_2021 import layer_ops as megatron_2021_layer_ops
from gpuhours.estimate.moe_gemm import unfused_expert_mlp_runs
from gpuhours.estimate.peft_methods import peft_linears
from gpuhours.estimate.rope import eager_rope_runs
from gpuhours.setup import Training

#: flash-attn path, operators per decoder layer besides its linears, (forward, backward), in
#: count_ops' unit (the same as the eager counts' and the fitted host cost's). Read from Qwen-1's
#: modeling_qwen.py (QWenBlock, QWenAttention, apply_rotary_pos_emb, RMSNorm, QWenMLP) with
#: flash-attn 2.3, and counted on CPU by tests/test_host.py on that layer with flash-attn's
#: kernels replaced by one-operator stand-ins:
#: forward 16 = ln_1 and ln_2 (flash_attn.ops.rms_norm: one dropout_add_ln_fwd each: 2)
#:   + rotary on q and on k (t.float(); flash_attn.ops.triton.rotary.apply_rotary's
#:     cos.contiguous() and sin.contiguous() of the sliced cache; the Triton kernel;
#:     .type_as(t): 5 each, 10) + flash_attn_func (1; batch 1, no unpadding) + the two residual
#:     adds (2) + silu and the gating mul (2), less the view a biased c_attn does not make (-1).
#: backward 24 = two norm backwards (dropout_add_ln_bwd, dgamma reduced inside: 2) + rotary on
#:   q and on k (the casts' backwards 2, ApplyRotaryEmb.backward's do.clone() 1, apply_rotary's
#:   cos/sin copies 2, the kernel 1: 6 each, 12) + flash_attn's backward (1) + the split of
#:   c_attn's output (one cat, 1) + the gating mul's two products and silu's backward (3) + the
#:   gradients summed where a tensor feeds two consumers (each residual stream, w1 and w2's
#:   shared input: 3) + one copy and one view autograd adds on the way (2, counted).
FLASH_ATTN_LAYER_OPS = (16.0, 24.0)
#: ... and per linear (on a 3-D input): forward the matmul and its _unsafe_view (2); backward its
#: input gradient (1) and, when the weight trains, its weight gradient (1). Autocast with fp32
#: weights casts each weight in forward and its gradient back in backward (+1, +1).
FLASH_ATTN_LINEAR_OPS = {"half": (2.0, 2.0), "autocast": (3.0, 3.0), "fp32": (2.0, 2.0)}

#: LoRA dropout (Training.lora_dropout above 0) on each adapter's input, (forward, backward): on
#: CUDA one fused native_dropout and its backward (ATen's is_fused_kernel_acceptable takes CUDA
#: tensors only; on a CPU it is bernoulli_, div_ and mul, 3). The adapters of OPS_PER_LORA_ADAPTER
#: were counted with peft's default, 0 (nn.Identity).
OPS_PER_LORA_DROPOUT = (1.0, 1.0)

#: DoRA (Training.dora) per adapted linear beyond LoRA's, (forward, backward), by how the
#: precision runs: counted with a TorchDispatchMode on peft 0.21.2 (one nn.Linear, views and
#: permutes left out; base output reused). forward: eye, lora_A and lora_B on it (2 mm), the
#: scaled sum and its norm (mul, add, linalg_vector_norm), magnitude / norm (div), - 1 (sub),
#: the two products and the scaling (3 mul), their sum and the add to the result (2 add):
#: 11 in fp32; pure half precision adds the weight's cast to the fp32 input dtype (12);
#: autocast casts the identity, A and B for the two matmuls and the result back (15).
#: backward: 4 mul, 2 sum (the magnitude's reductions), div, 2 add (11 less the casts: 9 in
#: fp32, 10 half, 13 autocast). The recomputed base matmul (dora_base_matmul recompute) adds
#: its mm forward (and autocast's two casts) and its input gradient and that gradient's sum
#: backward (from the code: DoraLinearLayer.forward's F.linear), not counted here.
OPS_PER_DORA_ADAPTER = {"fp32": (11.0, 9.0), "half": (12.0, 10.0), "autocast": (15.0, 13.0)}
#: ... and what the recompute path adds, (forward, backward) by kind
OPS_PER_DORA_RECOMPUTE = {"fp32": (1.0, 2.0), "half": (1.0, 2.0), "autocast": (3.0, 2.0)}

#: Extra operators per quantised linear of a QLoRA base over a plain one, (forward, backward):
#: - nf4 (bitsandbytes MatMul4Bit, double quantisation): dequantize_4bit before the matmul in
#:   forward and again in backward: the absmax's dequantize_blockwise, its += offset, the 4-bit
#:   dequantisation kernel: 3 each way.
#: - gptq-int4 (auto-gptq qlinear_cuda_old, the torch path it takes at 128 tokens or more, or
#:   with exllama disabled as Qwen's finetune.py loads it): the zeros' shift, cast, mask and +1
#:   (4), the weight's shift, cast, mask (3), weight - zeros and the scales' product (2): 9 in
#:   forward; backward only the matmul's input gradient, as for a plain linear.
#: - awq-int4: taken as gptq-int4's (AutoAWQ's training path also unpacks in torch; not counted)
QUANT_LINEAR_EXTRA_OPS = {"nf4": (3.0, 3.0), "gptq-int4": (9.0, 0.0), "awq-int4": (9.0, 0.0),
                          # as nf4's (assumed: the absmax is not itself dequantised first)
                          "nf4-nodq": (3.0, 3.0), "nf4-torchao": (3.0, 3.0),
                          # bitsandbytes 0.49.1 MatMul8bitLt (estimate/bnb_int8.py): forward the
                          # input's cast and quantisation, the int8 GEMM's dequantisation, the
                          # outlier columns' gather, their weights and addmm; backward the
                          # weight's copy, the scales' product and the in-place multiply
                          "int8-bnb": (6.0, 3.0)}


#: submodules a decoder layer runs besides its linears, each hooked by DeepSpeed's ZeRO-3 engine
#: (every module called in forward gets the hooks): the layer, its two norms, the attention and
#: MLP modules, and one more by kernel path: flash-attn: Qwen-1's FlashSelfAttention module
#: (modeling_qwen.py QWenAttention.core_attention_flash; its SiLU is F.silu); eager:
#: transformers' act_fn module (ACT2FN, an nn.Module)
ZERO3_MODULES_PER_LAYER = 5 + 1
#: ... and outside the layers: the causal-LM wrapper, the base model, embedding, final norm and
#: LM head (peft's PeftModel and LoraModel wrappers add two for LoRA)
ZERO3_MODULES_OUTSIDE = 5
#: peft LoRA: each adapted linear runs three more modules (lora_dropout, lora_A and lora_B of
#: the active adapter: peft/tuners/lora Linear.forward; nn.Identity when dropout is 0)
ZERO3_MODULES_PER_ADAPTER = 3


def precision_kind(precision: str) -> str:
    """How the precision runs in torch: fp32, half (pure bf16/fp16), or autocast."""
    return ("fp32" if precision == "fp32" else
            "autocast" if precision.endswith(("-amp", "-mixed")) else "half")


def linears_per_layer(arch: ModelArch) -> int:
    """Linears in one decoder layer as the modelling code has them (q, k, v fused or not)."""
    attention = 2 if arch.model_type in FUSED_QKV_TYPES else 4
    fused_gate_up = arch.model_type in FUSED_GATE_UP_TYPES
    return attention + (3 if arch.gated_mlp and not fused_gate_up else 2)


def adapters_per_layer(arch: ModelArch, t: Training) -> float:
    """LoRA adapter modules peft puts in a decoder layer, on average over the layers: one per
    targeted linear module as estimate/lora.py lists them (fused q/k/v and gate/up one each;
    routers, shared experts); peft's wrapper of a layer's fused 3-D expert tensor once a layer
    (it adapts the tensor, not each expert). A PEFT method beside LoRA (setup.peft_method):
    its adapted linears (estimate/peft_methods.py; none for prompt and prefix tuning), each
    counted with LoRA's operators per adapter (an assumption: IA3's scaling issues fewer, LoHa's
    and LoKr's delta weights more)."""
    if t.peft_method in ("prompt_tuning", "prefix_tuning"):
        return 0.0
    if t.peft_method != "lora":
        return sum(p.copies for p in peft_linears(arch, t)) / arch.num_layers
    modules = sum(arch.moe_layers if a.name.startswith("experts_") else a.copies
                  for a in adapted_linears(arch, t.lora_targets))
    return modules / arch.num_layers


def _layer_ops(arch: ModelArch, t: Training, kind: str) -> tuple[float, float, float]:
    """(forward, backward with every weight trained, biases) of one decoder layer."""
    if t.kernels == "flash-attn":
        fwd, bwd = FLASH_ATTN_LAYER_OPS
        lf, lb = FLASH_ATTN_LINEAR_OPS[kind]
        n = linears_per_layer(arch)
        qkv_biases = 1 if arch.model_type in FUSED_QKV_TYPES else 3
    else:
        fwd, bwd = A.OPS_PER_LAYER[kind]
        if liger_layer_applies(arch, t) is None:  # Liger's kernels (estimate/liger.py)
            d_fwd, d_bwd = liger_ops_delta_per_layer(kind)
            fwd, bwd = fwd + d_fwd, bwd + d_bwd
        lf = lb = 0.0
        n = 0
        qkv_biases = 3
    biases = qkv_biases * arch.qkv_bias + arch.out_bias \
        + (3 if arch.gated_mlp else 2) * arch.mlp_bias
    return fwd + lf * n, bwd + lb * n, float(biases)


def host_ops_per_micro_batch(arch: ModelArch, t: Training, moe_weight: float = 1.0) -> float:
    """Device operators the host issues for one micro-batch, forward and backward: per layer by
    the kernel path and how the precision runs, LoRA adapters and their dropout, bias
    gradients, a quantised base's dequantisation, the recomputed forward under checkpointing,
    and the embedding, head and loss outside the layers (assumptions.OPS_PER_MICRO_BATCH).
    `moe_weight`: what one of Megatron-Core's MoE router and dispatcher operators counts for
    (megatron_moe_host_op_weight where the host's time is wanted; 1 for the count)."""
    if t.kernels == "megatron":
        return megatron_ops_per_micro_batch(arch, t, moe_weight)
    if t.kernels == "megatron-2021":
        fwd, bwd = megatron_2021_layer_ops(arch)
        if t.checkpointing:
            bwd += fwd  # CheckpointFunction runs the layer's forward again in backward
        return arch.num_layers * (fwd + bwd) + sum(A.OPS_PER_MICRO_BATCH)
    kind = precision_kind(t.precision)
    fwd, bwd, biases = _layer_ops(arch, t, kind)
    outside_fwd, outside_bwd = A.OPS_PER_MICRO_BATCH
    if t.method == "full":
        bwd += A.OPS_PER_BIAS_GRAD * biases
    else:
        adapters = adapters_per_layer(arch, t)
        a_fwd, a_bwd = A.OPS_PER_LORA_ADAPTER[kind]
        # the frozen base linear's weight-gradient matmul is not issued
        fwd, bwd = fwd + a_fwd * adapters, bwd + (a_bwd - 1) * adapters
        outside_bwd = 0.0
        if t.lora_dropout > 0:
            d_fwd, d_bwd = OPS_PER_LORA_DROPOUT
            fwd, bwd = fwd + d_fwd * adapters, bwd + d_bwd * adapters
        if t.dora:
            d_fwd, d_bwd = OPS_PER_DORA_ADAPTER[kind]
            if dora_base_matmul_of(t) == "recompute":
                r_fwd, r_bwd = OPS_PER_DORA_RECOMPUTE[kind]
                d_fwd, d_bwd = d_fwd + r_fwd, d_bwd + r_bwd
            fwd, bwd = fwd + d_fwd * adapters, bwd + d_bwd * adapters
        if t.method == "qlora":
            q_fwd, q_bwd = QUANT_LINEAR_EXTRA_OPS[t.base_quant]
            quantised = linears_per_layer(arch)
            fwd, bwd = fwd + q_fwd * quantised, bwd + q_bwd * quantised
    if t.checkpointing:
        bwd += fwd  # the forward again, layer by layer, inside the backward
    return (arch.num_layers * (fwd + bwd) + outside_fwd + outside_bwd
            + zero3_hook_ops_per_micro_batch(arch, t))


def host_forward_ops_per_micro_batch(arch: ModelArch, t: Training, moe_weight: float = 1.0
                                     ) -> float:
    """Device operators the host issues for one forward of a micro-batch with no backward (an
    RL scoring pass: the policy's old log-probs, the reference, a reward model, a critic's
    values): the forward half of host_ops_per_micro_batch, per layer by the kernel path and how
    the precision runs, LoRA adapters, a quantised base's dequantisation, and the embedding and
    head outside the layers (assumptions.OPS_PER_MICRO_BATCH's forward). DeepSpeed ZeRO-3's
    module hooks are left out (a scoring model's ZeRO setting is its own, not the policy's),
    and so are Training.cuda_graph_scope's graphs (Megatron-Core captures them for the
    training step's micro-batches; a scoring pass runs its forward eagerly). `moe_weight`: as
    host_ops_per_micro_batch's."""
    if t.kernels == "megatron":
        fwd = MEGATRON_LAYER_OPS[0] + (MEGATRON_FP8_EXTRA_OPS[0] if t.precision == "fp8-mixed"
                                       else 0.0)
        fwd += (2.0 if arch.qk_norm else 0.0) * MEGATRON_NORM_OPS[0]
        fwd += megatron_moe_ops_per_layer(arch, t, moe_weight)[0]
        fwd += megatron_eager_attn_ops(arch, t)[0] + megatron_eager_moe_ops(arch, t)[0]
        if t.method != "full":
            fwd += MEGATRON_ADAPTERS_PER_LAYER[t.lora_targets] * MEGATRON_LORA_ADAPTER_OPS[0]
    elif t.kernels == "megatron-2021":
        fwd = megatron_2021_layer_ops(arch)[0]
    else:
        kind = precision_kind(t.precision)
        fwd = _layer_ops(arch, t, kind)[0]
        if t.method != "full":
            fwd += A.OPS_PER_LORA_ADAPTER[kind][0] * adapters_per_layer(arch, t)
            if t.method == "qlora":
                fwd += QUANT_LINEAR_EXTRA_OPS[t.base_quant][0] * linears_per_layer(arch)
    return arch.num_layers * fwd + A.OPS_PER_MICRO_BATCH[0]


def zero3_hooked_modules(arch: ModelArch, t: Training) -> float:
    """Submodules DeepSpeed's ZeRO-3 engine fetches and releases in one forward: per layer
    ZERO3_MODULES_PER_LAYER and its linears (and peft's adapter modules), plus those outside
    the layers."""
    per_layer = float(ZERO3_MODULES_PER_LAYER + linears_per_layer(arch))
    outside = ZERO3_MODULES_OUTSIDE
    if t.method != "full":
        per_layer += ZERO3_MODULES_PER_ADAPTER * adapters_per_layer(arch, t)
        outside += 2
    return arch.num_layers * per_layer + outside


def zero3_hook_ops_per_micro_batch(arch: ModelArch, t: Training) -> float:
    """Host operators' worth of DeepSpeed ZeRO-3's module hooks in one micro-batch: every
    hooked module fetched and released once in forward, again in the recomputed forward under
    (reentrant) checkpointing, and once in backward, at assumptions.ZERO3_OPS_PER_MODULE_FETCH
    each. 0 unless zero_stage 3 runs on DeepSpeed's engine (Training.zero3_engine)."""
    if t.zero_stage != 3 or t.zero3_engine != "deepspeed":
        return 0.0
    passes = 3 if t.checkpointing else 2
    return A.ZERO3_OPS_PER_MODULE_FETCH.value * zero3_hooked_modules(arch, t) * passes


# --- the megatron path -------------------------------------------------------------------------
#
# Megatron-Core's TransformerLayer (NVIDIA/Megatron-LM@dc13771, megatron/core/transformer/
# transformer_layer.py: forward = input_layernorm, self_attention, self_attn_bda,
# pre_mlp_layernorm, mlp, mlp_bda) with the Transformer Engine spec of
# megatron/core/models/gpt/gpt_layer_specs.py@00611e6 (get_gpt_layer_with_transformer_engine_spec):
# input_layernorm and pre_mlp_layernorm are IdentityOp because the norms run inside
# TELayerNormColumnParallelLinear (linear_qkv, linear_fc1); linear_proj and linear_fc2 are
# TERowParallelLinear; core_attention is TEDotProductAttention (cuDNN fused attention on Hopper).
# The recipes of Megatron-Bridge and NeMo set apply_rope_fusion, bias_activation_fusion (SwiGLU),
# bias_dropout_fusion and gradient_accumulation_fusion (the wgrad GEMM accumulates into the fp32
# main gradient: no separate add); their weights are bf16 (Float16Module), so no autocast casts.
# Tensor-parallel collectives are costed by estimate/parallel.py, not here. A MoE layer counts
# as a dense one (its pre_mlp_layernorm is a separate TE norm where the dense layer fuses it into
# linear_fc1: the same kernels; TE's grouped GEMMs, one cuBLAS call per local expert issued from
# C++ in one Python call, as one operator each), plus its router's and dispatcher's operators
# by Training.moe_dispatch: the allgather dispatcher's (MEGATRON_MOE_ALLGATHER_OPS) or the
# all-to-all dispatcher's, with the fused or the unfused permute (megatron_alltoall_ops).

# MEGATRON_LAYER_OPS's 31 kernels by the part of TransformerLayer.forward that issues them
# (the whole layer's comment below names each kernel); a CUDA graph scope takes off its parts:
#: _forward_attention, (forward, backward): forward linear_qkv (norm, GEMM: 2), rotary on q and
#: on k (2), cuDNN attention (1), linear_proj's GEMM (1), the residual add (1): 7; backward
#: linear_proj's dgrad and wgrad (2), linear_qkv's dgrad, wgrad, norm backward and dgamma (4),
#: attention's backward (1), rotary's backwards (2), the q, k, v gradients' concatenation (1),
#: the gradient sum at the attention residual's branch point (1): 11
MEGATRON_ATTN_OPS = (7.0, 11.0)
#: _forward_mlp of a dense layer (and, as MEGATRON_LAYER_OPS counts it, of a MoE layer):
#: forward linear_fc1 (norm, GEMM: 2), SwiGLU (1), linear_fc2's GEMM (1), the residual add
#: (1): 5; backward linear_fc2's dgrad and wgrad (2), linear_fc1's four (4), SwiGLU's backward
#: (1), the gradient sum at the MLP residual's branch point (1): 8
MEGATRON_MLP_OPS = (5.0, 8.0)
#: Transformer Engine fp8's extra casts (MEGATRON_FP8_EXTRA_OPS below) by part: linear_proj's
#: input cast and linear_qkv's and linear_proj's output-gradient casts are attention's (1, 2);
#: linear_fc2's and linear_fc1's the MLP's (1, 2)
MEGATRON_FP8_ATTN_OPS = (1.0, 2.0)
MEGATRON_FP8_MLP_OPS = (1.0, 2.0)
#: megatron path, device kernels per decoder layer, (forward, backward), bf16 matmuls:
#: forward 12 = linear_qkv (TE's fused RMSNorm kernel, the GEMM: 2) + fused rotary on q and on k
#:   (2; the split of the fused qkv output is views) + cuDNN fused attention (1) + linear_proj's
#:   GEMM (1) + the attention residual add (bias_dropout_add with no bias and dropout 0: 1)
#:   + linear_fc1 (norm, GEMM: 2) + the fused SwiGLU (1) + linear_fc2's GEMM (1) + the MLP
#:   residual add (1).
#: backward 19 = linear_fc2, linear_proj: dgrad and wgrad GEMMs (2 each, 4) + linear_fc1,
#:   linear_qkv: dgrad, wgrad, the norm's backward and its dgamma reduction (4 each, 8)
#:   + SwiGLU's backward (1) + cuDNN attention's backward (1) + rotary's backward on q and on k
#:   (2) + the concatenation of q, k, v gradients into the fused qkv's (1) + the gradient sums
#:   at the two residual branch points (2).
MEGATRON_LAYER_OPS = (MEGATRON_ATTN_OPS[0] + MEGATRON_MLP_OPS[0],
                      MEGATRON_ATTN_OPS[1] + MEGATRON_MLP_OPS[1])
#: a separate TE norm (qk_layernorm's q and k norms: Qwen3), kernels
#: (forward, backward): the norm; its backward and the dgamma reduction
MEGATRON_NORM_OPS = (1.0, 2.0)
#: ... with Transformer Engine fp8 (fp8-mixed): forward, a cast of the input of each linear whose
#: input no fused norm writes in fp8 (linear_proj, linear_fc2: 2); backward, a cast (with its
#: transpose) of each linear's output gradient (4). The weights' fp8 copies are cast on the first
#: micro-batch of a step only (TE's is_first_microbatch) and are not counted per micro-batch.
MEGATRON_FP8_EXTRA_OPS = (MEGATRON_FP8_ATTN_OPS[0] + MEGATRON_FP8_MLP_OPS[0],
                          MEGATRON_FP8_ATTN_OPS[1] + MEGATRON_FP8_MLP_OPS[1])
#: a LoRA adapter of Megatron-Bridge (src/megatron/bridge/peft/lora.py@0191fc5: LoRALinear around
#: the base linear, ParallelLinearAdapter with activation identity, no norm, dropout 0), kernels
#: (forward, backward): forward linear_in's GEMM, linear_out's GEMM, the alpha/dim scale, the add
#: to the base output (4); backward the two GEMMs' dgrad and wgrad (4), the scale's backward (1),
#: the sum of the adapter's and the base's input gradients (1): 6, less the frozen base's wgrad
#: GEMM that is not issued (-1): 5. The adapters run Megatron's own (non-TE) linears in bf16.
MEGATRON_LORA_ADAPTER_OPS = (4.0, 5.0)
#: Megatron-Bridge's LoRA targets per decoder layer by gpuhours' lora_targets: all-linear is its
#: default target list (linear_qkv, linear_proj, linear_fc1, linear_fc2: q, k, v fused and
#: gate, up fused), attention linear_qkv and linear_proj, qkv linear_qkv, qv CanonicalLoRA's
#: linear_q, linear_v, mlp linear_fc1 and linear_fc2.
MEGATRON_ADAPTERS_PER_LAYER = {"all-linear": 4, "attention": 2, "qkv": 1, "qv": 2, "mlp": 2}
#: megatron path, a MoE layer's router and allgather dispatcher beyond the dense layer's kernels,
#: (forward, backward), as NeMo-RL runs them (grpo_math_1B.yaml @108bffda: moe_token_dispatcher_type
#: allgather, moe_permute_fusion false, moe_router_dtype fp64, freeze_moe_router, no load-balancing
#: loss; Megatron-Bridge's Qwen3 MoE provider sets moe_grouped_gemm) in Megatron-Core's code
#: (NVIDIA/Megatron-LM@4bbcd72d, its main of 2026-01-15, the week of NeMo-RL v0.5; NeMo-RL pins
#: b73ae5cd of a fork, not in the mirror): megatron/core/transformer/moe/router.py TopKRouter,
#: moe_utils.py router_gating_linear, topk_routing_with_score_function, permute, unpermute,
#: token_dispatcher.py MoEAllGatherTokenDispatcher, experts.py TEGroupedMLP. Counted as
#: count_ops counts (device operators; views, slices and CPU-side tensors excluded):
#: forward 39 = the router 15: the fp64 gating (RouterGatingLinearFunction without TE's GEMM in
#:   fp64: the input's and the weight's casts, torch.mm: 3), top-k on the logits, softmax with
#:   dtype fp32 (its cast, the kernel) and .type_as back to fp64 (4), routing_probs (zeros_like,
#:   scatter's copy and scatter: 3), routing_map (zeros_like, .int(), scatter's copy and scatter,
#:   .bool(): 5);
#:   + the dispatch 19: all-gathers of the routing map, the probs and the hidden states over the
#:   EP ranks (3); dispatch_postprocess: the local map's and probs' column slices made contiguous
#:   (2), tokens per expert (sum, .long(), the blocking .cpu(): 3); permute unfused: the map's
#:   transposed copy, arange, masked_select (ATen's CUDA masked_select runs nonzero: the count,
#:   its blocking copy to the host, the gather: 3), index_select (6 in all); the local probs:
#:   both transposed copies and a masked_select (5);
#:   + the combine 5: unpermute unfused without probs (torch.zeros, scatter_add_: 2),
#:   token_combine's cast to the probs' dtype (fp64), the reduce-scatter, the cast back (3).
#:   The weighted SwiGLU (weighted_bias_swiglu_impl, one fused kernel) stands for the dense
#:   SwiGLU: 0.
#: backward 26 = the combine's casts and the reduce-scatter's all-gather (3) + scatter_add_'s
#:   gather (1) + the weighted SwiGLU's extra reduction for the probs' gradient
#:   (weighted_swiglu_back: 1) + index_select's zeros and index_add_ (2) + masked_select's
#:   zeros and masked_scatter_ (2) + the probs slice's backward (zeros, copy: 2) + the
#:   reduce-scatters of the gathered hidden states' and probs' gradients (2) + the router: the
#:   probs scatter's gather, the casts of type_as and softmax, softmax's backward, top-k's zeros
#:   and scatter (6) + RouterGatingLinearFunction.backward in fp64, which forms the weight's
#:   gradient though the router is frozen (the weight's and the input's casts, two mm, two casts
#:   back: 6) + the gradient sum where the normed input feeds the router and the dispatch (1).
#: The three blocking copies to the host each forward (.cpu(), the two masked_select) stop the
#: host running ahead of the GPU (MEGATRON_MOE_FORWARD_SYNCS, estimate/timing.py).
MEGATRON_MOE_ALLGATHER_OPS = (39.0, 26.0)

# --- the all-to-all dispatcher (Training.moe_dispatch fused and alltoall-unfused) -------------
#
# Megatron-Core's TopKRouter and MoEAlltoAllTokenDispatcher as NVIDIA/Megatron-LM@d98e8a64 has
# them (megatron/core/transformer/moe/router.py TopKRouter.forward / gating / routing,
# moe_utils.py router_gating_linear, topk_routing_with_score_function, permute, unpermute,
# sort_chunks_by_idxs, token_dispatcher.py MoEAlltoAllTokenDispatcher), dropless, with the
# softmax top-k router of Qwen3's MoE (no group-limited top-k, expert bias or load-balancing
# loss: NeMo-RL's moe_router_load_balancing_type none; DeepSeek-V3's sigmoid router with its
# expert bias and group-limited top-k issues more and is counted as this one), expert tensor
# parallelism 1 (NeMo-RL's expert_tensor_parallel_size 1; with more, the dispatcher's
# all-gathers and reduce-scatter of the tokens, not counted). Counted as count_ops counts
# (device operators; views and CPU-side tensors excluded), and the unfused path run on CPU:
# scripts/megatron_moe_dispatch_count.py, whose counts tests/data/megatron_moe_alltoall_counts.json
# keeps and tests/test_moe_dispatch_ops.py holds these constants to.
#: the router, (forward, backward), by moe_router_dtype: forward, the gating (fp64:
#: RouterGatingLinearFunction's torch.mm path, the input's and the weight's casts and the mm:
#: 3; bf16 and fp32: Transformer Engine's general_gemm writing the router's dtype: 1), top-k
#: (1), softmax with dtype fp32 (a cast and the kernel where the logits are not fp32: ATen's
#: half-to-float shortcut takes fp16 only; 1 in fp32), .type_as back to the logits' dtype
#: (1; none in fp32), routing_probs (zeros_like, scatter: 2), routing_map (zeros_like, .int(),
#: scatter, .bool(): 4): fp64 13, fp32 9, bf16 11. Backward, the probs scatter's gather (1),
#: type_as's and softmax's casts back (2; none in fp32), softmax's backward (1), top-k's
#: zeros and scatter (2), and RouterGatingLinearFunction.backward, which forms the weight's
#: gradient though NeMo-RL freezes the router: both GEMMs, and in fp64 and fp32 the weight's
#: and the input's casts up and the two gradients' casts back (6; bf16: 2): fp64 12, fp32 10,
#: bf16 8
MEGATRON_ROUTER_OPS = {"fp64": (13.0, 12.0), "fp32": (9.0, 10.0), "bf16": (11.0, 8.0)}
#: preprocess's token counts, forward: with EP > 1, the per-expert sum of the routing map, the
#: input splits' sum, the all-gather of the counts over the EP group, the local experts'
#: columns made contiguous, the per-rank sum, the TP splits' sum and the local experts' sum
#: (7); with EP 1 only the per-expert sum (1)
MEGATRON_A2A_PREPROCESS_OPS = {"ep": 7.0, "single": 1.0}
#: the non-blocking copies to the host at cuda_dtoh_point (_maybe_dtoh_and_synchronize):
#: tokens_per_expert, and with EP > 1 the input, output and TP splits (EP > 1: 4; EP 1: 1),
#: plus, with the unfused permute and more than one local expert, the per-rank per-expert
#: counts sort_chunks_by_idxs reads on the host (1)
MEGATRON_A2A_DTOH_OPS = {"ep": 4.0, "single": 1.0, "unfused_sort": 1.0}
#: the permute of the tokens and probs into expert order, (forward, backward): unfused, the
#: map's transposed copy, argsort (a sort), the modulo, the probs' transposed copy, their
#: gather by index, the tokens' index_select (6); backward, index_select's zeros and index_add_
#: and the probs gather's zeros and index_put (4). Fused (Transformer Engine @d0067d0d
#: transformer_engine/pytorch/permutation.py moe_permute_with_probs, triton/permutation.py):
#: make_row_id_map's three Triton passes and the permute kernel (4); backward the unpermute
#: kernel (1). A Triton launch is taken as one operator (an assumption)
MEGATRON_A2A_PERMUTE_OPS = {"unfused": (6.0, 4.0), "fused": (4.0, 1.0)}
#: the all-to-alls over the EP group (EP > 1): the tokens and the probs, and the combine's
#: tokens (3); backward the same three
MEGATRON_A2A_COLLECTIVE_OPS = (3.0, 3.0)
#: with more than one local expert, the received tokens sorted by local expert and back:
#: unfused (torch.split, views, and torch.cat of the tokens and of the probs, and the combine's
#: cat: 3; backward each split's cat: 3); fused (make_chunk_sort_map and sort_chunks_by_map
#: each way: 4; backward one sort_chunks_by_map each: 2)
MEGATRON_A2A_SORT_OPS = {"unfused": (3.0, 3.0), "fused": (4.0, 2.0)}
#: the unpermute back to token order (no probs: the weighted SwiGLU applied them): unfused
#: torch.zeros and scatter_add_ (2), backward its gather (1); fused the unpermute kernel (1),
#: backward the permute kernel (1)
MEGATRON_A2A_UNPERMUTE_OPS = {"unfused": (2.0, 1.0), "fused": (1.0, 1.0)}
#: backward only: the gradient sum where the normed input feeds the router and the dispatcher
#: (1) and the weighted SwiGLU's reduction for the probs' gradient (weighted_swiglu_back: 1),
#: as MEGATRON_MOE_ALLGATHER_OPS counts them
MEGATRON_A2A_BACKWARD_EXTRA_OPS = 2.0
#: times a MoE layer's forward waits on the host for the GPU (an event synchronize or a
#: blocking copy to the host), by dispatch: the all-to-all dispatcher's one
#: _maybe_dtoh_and_synchronize at cuda_sync_point (dropless: "before_ep_alltoall" with EP > 1,
#: else "before_permutation_2" unfused with several local experts or "before_finish"); the
#: allgather dispatcher's .cpu() of the token counts and the unfused permute's two
#: masked_select (as MEGATRON_MOE_ALLGATHER_OPS counts them at 4bbcd72d). The backward keeps
#: the forward's splits and does not wait. Megatron-Core's flex dispatcher waits too (DeepEP's
#: dispatch returns the per-expert counts as a host list; HybridEP sizes its buffers by a host
#: sync unless a capacity budget is set); it is not a moe_dispatch choice here
MEGATRON_MOE_FORWARD_SYNCS = {"fused": 1.0, "alltoall-unfused": 1.0, "allgather-unfused": 3.0}


def moe_router_dtype_of(t: Training) -> str:
    """The MoE router's dtype: Training.moe_router_dtype, or by default fp64 with the unfused
    dispatches (NeMo-RL's grpo_math_1B.yaml) and bf16 (Megatron-Core's default: the input's
    dtype) with the fused one."""
    if t.moe_router_dtype is not None:
        return t.moe_router_dtype
    return "bf16" if t.moe_dispatch == "fused" else "fp64"


def megatron_alltoall_ops(num_experts: int, ep: int, fused: bool, router_dtype: str
                          ) -> tuple[float, float]:
    """(forward, backward) operators of one MoE layer's router and all-to-all dispatcher
    beyond the dense layer's kernels (the MEGATRON_ROUTER_OPS and MEGATRON_A2A_* parts above),
    with `num_experts` over `ep` ranks, the fused or the unfused permute."""
    kind = "fused" if fused else "unfused"
    multi_rank = ep > 1
    local_many = num_experts // max(ep, 1) > 1
    fwd, bwd = MEGATRON_ROUTER_OPS[router_dtype]
    fwd += MEGATRON_A2A_PREPROCESS_OPS["ep" if multi_rank else "single"]
    fwd += MEGATRON_A2A_DTOH_OPS["ep" if multi_rank else "single"]
    if local_many and not fused:
        fwd += MEGATRON_A2A_DTOH_OPS["unfused_sort"]
    parts = [MEGATRON_A2A_PERMUTE_OPS[kind], MEGATRON_A2A_UNPERMUTE_OPS[kind]]
    if multi_rank:
        parts.append(MEGATRON_A2A_COLLECTIVE_OPS)
    if local_many:
        parts.append(MEGATRON_A2A_SORT_OPS[kind])
    fwd += sum(p[0] for p in parts)
    bwd += sum(p[1] for p in parts) + MEGATRON_A2A_BACKWARD_EXTRA_OPS
    return fwd, bwd

# --- CUDA graphs on the megatron path --------------------------------------------------------
#
# Megatron-Core graphs a training step in one of two ways (NVIDIA/Megatron-LM@d98e8a64,
# megatron/core/transformer/transformer_config.py cuda_graph_impl and cuda_graph_modules, the
# field Megatron-Bridge's recipes still call cuda_graph_scope):
# - per layer ("local": cuda_graphs.py CudaGraphManager; "transformer_engine": TE's
#   make_graphed_callables): each decoder layer's graphed part is one callable, captured as a
#   forward graph and a backward graph (cuda_graphs.py _CudaGraphRunner fwd_graph, bwd_graph)
#   and replayed once each per micro-batch. transformer_layer.py _te_cuda_graph_capture puts
#   _forward_attention in it for "attn" (or the whole layer), _forward_mlp for "mlp" on a
#   dense layer, "moe" on a MoE layer, or a MoE layer's _forward_mlp up to its router for
#   "moe_router" (MoELayer.preprocess too with "moe_preprocess"); what is left runs eagerly
#   (_te_cuda_graph_replay). A layer with nothing graphed replays nothing.
# - "full_iteration" (full_cuda_graph.py FullCudaGraphWrapper): forward_backward_func, every
#   micro-batch of a step, is one graph replayed once a step; each micro-batch's input tensors
#   are first copied into static buffers (StaticBufferLoader). The optimizer step is outside.
# The layer's parts are MEGATRON_ATTN_OPS and MEGATRON_MLP_OPS above.
#: what "moe_router" graphs of a MoE layer's counted kernels: its pre_mlp_layernorm, a
#: separate TE norm (MEGATRON_NORM_OPS: its kernel; backward and dgamma), and, with
#: moe_dispatch allgather-unfused, the router's operators of MEGATRON_MOE_ALLGATHER_OPS
#: (forward 15, backward the router's 6 and the gating GEMM's 6); with the all-to-all
#: dispatcher, the router's MEGATRON_ROUTER_OPS (megatron_router_ops). moe_preprocess's graph
#: (the dispatcher's token counts and permute, up to the all-to-all) is taken to take away
#: nothing more: an upper end of what stays eager
MEGATRON_ROUTER_ALLGATHER_OPS = (15.0, 12.0)
#: graph replays per graphed layer per micro-batch: its forward graph and its backward graph
MEGATRON_GRAPH_LAUNCHES_PER_LAYER = (1.0, 1.0)
#: full_iteration: the input tensors of a GPT micro-batch copied into the static buffers
#: (tokens, labels, loss_mask, attention_mask, position_ids: Megatron's get_batch keys; one
#: copy each, clone_tensors_in_struct), per micro-batch; the step's one replay comes on top
MEGATRON_FULL_ITERATION_COPIES = 5.0


#: megatron path, operators the eager pieces of estimate/rope.py and estimate/moe_gemm.py add
#: to a layer, (forward, backward), as count_ops counts them on the code tests/test_rope.py and
#: tests/test_moe_gemm.py run (device operators; views excluded):
#: - the eager rotary on q and on k (rope.eager_rope_runs): per tensor, cos, its scale and
#:   cast, sin, its scale and cast, _rotate_half's neg and cat, the two products, their sum, the
#:   closing cat (12); backward, the products' gradients (2), the neg's and the chunk's cat (2),
#:   the two paths' sum (1), the empty pass-through's zeros and their sum (2) (7); each less the
#:   fused kernel MEGATRON_ATTN_OPS counts (1, 1). Part of the attention ("attn" graphs it)
MEGATRON_EAGER_ROPE_OPS = (2 * (12.0 - 1.0), 2 * (7.0 - 1.0))
#: - the unfused expert MLP's clamp (moe_gemm.CLAMP_PASSES): the two clamps and the cat (3);
#:   backward, the where()s' two 0-d zeros, ge, le, logical_and_, le, the two where()s and the
#:   chunk's cat (9)
MEGATRON_CLAMP_OPS = (3.0, 9.0)
#: - its fc2 bias (moe_gemm.FC2_BIAS_PASSES), per local expert: b * p and the add (2);
#:   backward, the two products and their sums (4); and per layer the cat (1) and, backward,
#:   the cats of t's and p's split gradients (2)
MEGATRON_FC2_BIAS_OPS_PER_EXPERT = (2.0, 4.0)
MEGATRON_FC2_BIAS_OPS_PER_LAYER = (1.0, 2.0)


def megatron_eager_attn_ops(arch: ModelArch, t: Training) -> tuple[float, float]:
    """(forward, backward) operators the eager rotary adds to an attention layer on the
    megatron path (MEGATRON_EAGER_ROPE_OPS where rope.eager_rope_runs), on average over the
    decoder layers (arch.attention_layer_count of arch.num_layers)."""
    if not eager_rope_runs(arch, t.kernels):
        return 0.0, 0.0
    share = arch.attention_layer_count / arch.num_layers
    return MEGATRON_EAGER_ROPE_OPS[0] * share, MEGATRON_EAGER_ROPE_OPS[1] * share


#: selective recomputation's operators in backward (moe_gemm.recompute_bytes_per_token_layer):
#: moe_act the fused activation (1) and, with a clamp, MEGATRON_CLAMP_OPS' forward; layernorm
#: the MoE layer's pre-MLP norm (MEGATRON_NORM_OPS' forward)
MEGATRON_RECOMPUTE_ACT_OPS = 1.0


def megatron_recompute_ops(arch: ModelArch, t: Training) -> float:
    """Backward operators a MoE layer's selective recomputation (Training.recompute_modules)
    adds, on average over the decoder layers; 0 without it."""
    modules = t.recompute_modules or ()
    if not modules or t.kernels != "megatron" or not arch.is_moe:
        return 0.0
    ops = 0.0
    if "moe_act" in modules and unfused_expert_mlp_runs(arch, t.kernels, t.moe_fused_mlp):
        ops += MEGATRON_RECOMPUTE_ACT_OPS
        if arch.glu_clamp is not None and arch.gated_mlp:
            ops += MEGATRON_CLAMP_OPS[0]
    if "layernorm" in modules:
        ops += MEGATRON_NORM_OPS[0]
    return ops * arch.moe_layers / arch.num_layers


def megatron_eager_moe_ops(arch: ModelArch, t: Training) -> tuple[float, float]:
    """(forward, backward) operators Megatron-Core's unfused expert MLP adds to a MoE layer
    (moe_gemm.unfused_expert_mlp_runs): MEGATRON_CLAMP_OPS with a clamped activation, the fc2
    bias's per local expert (arch.num_experts / ep of them) and per layer with biased experts;
    on average over the decoder layers (arch.moe_layers of arch.num_layers); and, backward,
    the selective recomputation's (megatron_recompute_ops)."""
    if not unfused_expert_mlp_runs(arch, t.kernels, t.moe_fused_mlp):
        return 0.0, megatron_recompute_ops(arch, t)
    fwd = bwd = 0.0
    if arch.glu_clamp is not None and arch.gated_mlp:
        fwd, bwd = MEGATRON_CLAMP_OPS
    if arch.expert_bias:
        local = arch.num_experts / t.ep
        fwd += local * MEGATRON_FC2_BIAS_OPS_PER_EXPERT[0] + MEGATRON_FC2_BIAS_OPS_PER_LAYER[0]
        bwd += local * MEGATRON_FC2_BIAS_OPS_PER_EXPERT[1] + MEGATRON_FC2_BIAS_OPS_PER_LAYER[1]
    share = arch.moe_layers / arch.num_layers
    return fwd * share, bwd * share + megatron_recompute_ops(arch, t)


#: Transformer Engine's grouped GEMM (TEGroupedMLP's linear_fc1 and linear_fc2, TE GroupedLinear)
#: issues one cuBLASLt GEMM per local expert from C++ (transformer_engine/pytorch/csrc/extensions/
#: gemm.cpp te_general_grouped_gemm -> common/gemm/cublaslt_gemm.cu multi_stream_cublas_gemm
#: @d0067d0d; the CUTLASS grouped kernel only on Hopper with NVTE_USE_CUTLASS_GROUPED_GEMM, and
#: the one-launch cuBLASLt grouped-tensor path only with GroupedLinear(use_grouped_tensor=True)
#: or NVTE_GROUPED_LINEAR_USE_FUSED_GROUPED_GEMM=1 and cuBLASLt 13.3+, which neither
#: Megatron-LM@2a75ac12 nor Megatron-Bridge@067f987d's recipes set):
#: per linear, the forward's GEMM, and in backward the input gradient's and, when the experts
#: train, the weight gradient's (grouped_linear.py _GroupedLinear.forward/backward: one
#: general_grouped_gemm each). MEGATRON_MLP_OPS counts each grouped call as one operator (its
#: Python side); the per-expert calls' host time is assumptions.CUBLASLT_GEMM_HOST_S each.
EXPERT_LINEARS = 2


def megatron_expert_gemm_calls_per_micro_batch(arch: ModelArch, t: Training) -> float:
    """cuBLASLt GEMM calls TE's grouped GEMM issues from C++ for one micro-batch of a rank
    (all its layers; the caller takes the pipeline stage's share): per MoE layer, each local
    expert (arch.num_experts / ep) gets EXPERT_LINEARS GEMMs forward, as many input-gradient
    GEMMs backward and, when the experts train (full training), as many weight-gradient GEMMs;
    the forward's again under full recomputation. 0 off the megatron path, for a dense model,
    with Transformer Engine's op fuser (Training.moe_fused_mlp: its grouped MLP is one fused
    kernel per pass) or where CUDA graphs capture the experts (full_iteration, full, moe)."""
    if t.kernels != "megatron" or not arch.is_moe or t.moe_fused_mlp:
        return 0.0
    scope = set(t.cuda_graph_scope or ())
    if scope & {"full_iteration", "full", "moe"}:
        return 0.0
    local = max(arch.num_experts // t.ep, 1)
    passes = 1 + 1 + (1 if t.method == "full" else 0) + (1 if t.checkpointing else 0)
    return arch.moe_layers * local * EXPERT_LINEARS * passes


def megatron_router_dispatch_ops(arch: ModelArch, t: Training) -> tuple[float, float]:
    """(forward, backward) operators of one megatron-path MoE layer's router and dispatcher by
    Training.moe_dispatch: MEGATRON_MOE_ALLGATHER_OPS (allgather-unfused, its fp64 router), or
    the all-to-all dispatcher's with the fused or unfused permute and the router's dtype
    (megatron_alltoall_ops)."""
    if t.moe_dispatch == "allgather-unfused":
        return MEGATRON_MOE_ALLGATHER_OPS
    return megatron_alltoall_ops(arch.num_experts, t.ep, t.moe_dispatch == "fused",
                                 moe_router_dtype_of(t))


def megatron_router_ops(t: Training) -> tuple[float, float]:
    """(forward, backward) operators of a MoE layer's router alone (what a "moe_router" CUDA
    graph captures): MEGATRON_ROUTER_ALLGATHER_OPS with the allgather dispatch, else
    MEGATRON_ROUTER_OPS by the router's dtype."""
    if t.moe_dispatch == "allgather-unfused":
        return MEGATRON_ROUTER_ALLGATHER_OPS
    return MEGATRON_ROUTER_OPS[moe_router_dtype_of(t)]


def megatron_moe_ops_per_layer(arch: ModelArch, t: Training, weight: float = 1.0
                               ) -> tuple[float, float]:
    """(forward, backward) operators a megatron-path MoE layer adds to the dense count, on
    average over the decoder layers (arch.moe_layers of arch.num_layers): the router's and the
    dispatcher's (megatron_router_dispatch_ops); none for a dense model. `weight`: what each
    counts for (megatron_moe_host_op_weight for the host's time; 1 for the count)."""
    if not arch.is_moe:
        return 0.0, 0.0
    share = arch.moe_layers / arch.num_layers * weight
    fwd, bwd = megatron_router_dispatch_ops(arch, t)
    return fwd * share, bwd * share


def megatron_moe_host_op_weight() -> float:
    """Host time of one operator of Megatron-Core's MoE router and token dispatcher over one
    transformers eager layer operator's (assumptions.HOST_S_PER_OP): the measured CPU ratio
    (assumptions.MEGATRON_MOE_HOST_OP_RATIO) on the host-side part of an operator, the CUDA
    launch part (assumptions.CUDA_LAUNCH_HOST_S, in no CPU timing) the same for both:
    (ratio x (HOST_S_PER_OP - launch) + launch) / HOST_S_PER_OP."""
    per_op, launch = A.HOST_S_PER_OP.value, A.CUDA_LAUNCH_HOST_S.value
    return (A.MEGATRON_MOE_HOST_OP_RATIO.value * (per_op - launch) + launch) / per_op


def megatron_graphed_ops_per_layer(arch: ModelArch, t: Training, moe_weight: float = 1.0
                                   ) -> tuple[float, float]:
    """(forward, backward) kernels of one decoder layer, on average over the layers, that
    per-layer CUDA graphs (Training.cuda_graph_scope) take off the host, less the graphs' own
    replays (MEGATRON_GRAPH_LAUNCHES_PER_LAYER on each layer with anything graphed). The
    graphed parts are those of the layer-part counts above; LoRA adapters go with the linear
    they wrap (Megatron-Bridge's adapters run inside the graphed module). (0, 0) without
    per-layer graphs (none, or full_iteration: megatron_ops_per_micro_batch). `moe_weight`:
    what a router or dispatcher operator counts for (megatron_moe_ops_per_layer)."""
    scope = set(t.cuda_graph_scope or ())
    if not scope or "full_iteration" in scope:
        return 0.0, 0.0
    fp8 = t.precision == "fp8-mixed"
    adapters = (MEGATRON_ADAPTERS_PER_LAYER[t.lora_targets] if t.method != "full" else 0)
    mlp_adapters = {"all-linear": 2, "mlp": 2}.get(t.lora_targets, 0) if adapters else 0
    a_fwd, a_bwd = MEGATRON_LORA_ADAPTER_OPS

    def part(ops: tuple[float, float], fp8_ops: tuple[float, float], n_adapters: int
             ) -> tuple[float, float]:
        return (ops[0] + fp8 * fp8_ops[0] + a_fwd * n_adapters,
                ops[1] + fp8 * fp8_ops[1] + a_bwd * n_adapters)

    norms = 2.0 if arch.qk_norm else 0.0
    attn = part(MEGATRON_ATTN_OPS, MEGATRON_FP8_ATTN_OPS, adapters - mlp_adapters)
    attn = (attn[0] + norms * MEGATRON_NORM_OPS[0], attn[1] + norms * MEGATRON_NORM_OPS[1])
    # the eager rotary runs inside _forward_attention (per attention layer, not averaged)
    if eager_rope_runs(arch, t.kernels):
        attn = (attn[0] + MEGATRON_EAGER_ROPE_OPS[0], attn[1] + MEGATRON_EAGER_ROPE_OPS[1])
    mlp = part(MEGATRON_MLP_OPS, MEGATRON_FP8_MLP_OPS, mlp_adapters)
    whole = "full" in scope
    moe_layers = arch.moe_layers if arch.is_moe else 0
    # a dense layer: attention and its MLP
    dense = [attn if whole or "attn" in scope else (0.0, 0.0),
             mlp if whole or "mlp" in scope else (0.0, 0.0)]
    # a MoE layer: attention, and its MLP whole (moe, full) or to the router (moe_router)
    moe_mlp: tuple[float, float] = (0.0, 0.0)
    if whole or "moe" in scope:
        router = megatron_router_dispatch_ops(arch, t)
        moe_mlp = (mlp[0] + router[0] * moe_weight, mlp[1] + router[1] * moe_weight)
        # the unfused expert MLP's eager pieces, per MoE layer (undo the layer average)
        e_fwd, e_bwd = megatron_eager_moe_ops(arch, t)
        per_moe = arch.num_layers / moe_layers if moe_layers else 0.0
        moe_mlp = (moe_mlp[0] + e_fwd * per_moe, moe_mlp[1] + e_bwd * per_moe)
    elif "moe_router" in scope:
        router = megatron_router_ops(t)
        moe_mlp = (MEGATRON_NORM_OPS[0] + router[0] * moe_weight,
                   MEGATRON_NORM_OPS[1] + router[1] * moe_weight)
    moe = [attn if whole or "attn" in scope else (0.0, 0.0), moe_mlp]
    fwd = bwd = 0.0
    for parts, layers in ((dense, arch.num_layers - moe_layers), (moe, moe_layers)):
        p_fwd, p_bwd = sum(p[0] for p in parts), sum(p[1] for p in parts)
        if p_fwd or p_bwd:
            l_fwd, l_bwd = MEGATRON_GRAPH_LAUNCHES_PER_LAYER
            fwd += layers * (p_fwd - l_fwd)
            bwd += layers * (p_bwd - l_bwd)
    return fwd / arch.num_layers, bwd / arch.num_layers


def megatron_ops_per_micro_batch(arch: ModelArch, t: Training, moe_weight: float = 1.0
                                 ) -> float:
    """Device operators of one micro-batch on the megatron path: MEGATRON_LAYER_OPS per layer,
    fp8 casts, q and k norms, a MoE layer's router and dispatcher (megatron_moe_ops_per_layer),
    LoRA adapters (the frozen base's wgrad dropped), the forward again under
    checkpointing, and the embedding, head and loss outside the layers, taken at the eager
    count (assumptions.OPS_PER_MICRO_BATCH; not counted for Megatron). CUDA graphs
    (Training.cuda_graph_scope): per-layer graphs take their parts' kernels off
    (megatron_graphed_ops_per_layer); full_iteration leaves the static-buffer copies and the
    step's one replay shared over its micro-batches. `moe_weight`: what a router or
    dispatcher operator counts for (megatron_moe_ops_per_layer)."""
    return sum(megatron_ops_by_pass(arch, t, moe_weight))


def megatron_ops_by_pass(arch: ModelArch, t: Training, moe_weight: float = 1.0
                         ) -> tuple[float, float]:
    """megatron_ops_per_micro_batch split into (forward, backward): the backward with the
    forward recomputed under checkpointing; full_iteration's copies and replay in the
    forward."""
    if t.cuda_graph_scope is not None and "full_iteration" in t.cuda_graph_scope:
        return MEGATRON_FULL_ITERATION_COPIES + 1.0 / t.grad_accum, 0.0
    fwd, bwd = MEGATRON_LAYER_OPS
    if t.precision == "fp8-mixed":
        fwd, bwd = fwd + MEGATRON_FP8_EXTRA_OPS[0], bwd + MEGATRON_FP8_EXTRA_OPS[1]
    norms = 2.0 if arch.qk_norm else 0.0
    fwd, bwd = fwd + norms * MEGATRON_NORM_OPS[0], bwd + norms * MEGATRON_NORM_OPS[1]
    moe_fwd, moe_bwd = megatron_moe_ops_per_layer(arch, t, moe_weight)
    fwd, bwd = fwd + moe_fwd, bwd + moe_bwd
    for extra in (megatron_eager_attn_ops(arch, t), megatron_eager_moe_ops(arch, t)):
        fwd, bwd = fwd + extra[0], bwd + extra[1]
    outside_fwd, outside_bwd = A.OPS_PER_MICRO_BATCH
    if t.method != "full":
        adapters = MEGATRON_ADAPTERS_PER_LAYER[t.lora_targets]
        a_fwd, a_bwd = MEGATRON_LORA_ADAPTER_OPS
        fwd, bwd = fwd + a_fwd * adapters, bwd + a_bwd * adapters
        outside_bwd = 0.0
    g_fwd, g_bwd = megatron_graphed_ops_per_layer(arch, t, moe_weight)
    fwd, bwd = fwd - g_fwd, bwd - g_bwd
    if t.checkpointing:
        bwd += fwd
    return arch.num_layers * fwd + outside_fwd, arch.num_layers * bwd + outside_bwd


def megatron_moe_forward_syncs_per_micro_batch(arch: ModelArch, t: Training) -> float:
    """Times one micro-batch's forward waits on the host for the GPU in Megatron-Core's MoE
    dispatcher (all layers; the caller takes a pipeline stage's share): per MoE layer
    MEGATRON_MOE_FORWARD_SYNCS by Training.moe_dispatch, again in the recomputed forward
    under full checkpointing. 0 off the megatron path, for a dense model, and where a CUDA
    graph holds the MoE layer whole (full_iteration, full, moe: Megatron-Core graphs a MoE
    layer only with drop-and-pad routing, transformer_config.py @d98e8a64 "moe cuda graph is
    only supported with drop-padding MoE", whose splits are fixed and need no wait)."""
    if t.kernels != "megatron" or not arch.is_moe:
        return 0.0
    if set(t.cuda_graph_scope or ()) & {"full_iteration", "full", "moe"}:
        return 0.0
    passes = 2.0 if t.checkpointing else 1.0
    return arch.moe_layers * MEGATRON_MOE_FORWARD_SYNCS[t.moe_dispatch] * passes


def megatron_expert_gemm_forward_calls_per_micro_batch(arch: ModelArch, t: Training) -> float:
    """The forward pass's share of megatron_expert_gemm_calls_per_micro_batch: EXPERT_LINEARS
    per local expert and MoE layer (the recomputed forward and the backward's are the
    backward's)."""
    calls = megatron_expert_gemm_calls_per_micro_batch(arch, t)
    if not calls:
        return 0.0
    local = max(arch.num_experts // t.ep, 1)
    return float(arch.moe_layers * local * EXPERT_LINEARS)
