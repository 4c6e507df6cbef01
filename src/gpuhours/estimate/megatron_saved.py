"""What a Megatron-Core decoder layer with Transformer Engine's modules saves for backward, bytes
per token (the kernel path `megatron`, setup.Kernels): Megatron-LM, Megatron-Bridge, NeMo 2.

The layer of Megatron-Core's TE spec (megatron/core/models/gpt/gpt_layer_specs.py): the input
norm fused into the q/k/v projection (TELayerNormColumnParallelLinear), TE's DotProductAttention
(cuDNN fused attention), the output projection (TERowParallelLinear), the pre-MLP norm fused
into fc1 (TELayerNormColumnParallelLinear), the fused bias-SwiGLU
(megatron/core/fusions/fused_bias_swiglu.py: `ctx.save_for_backward(input)`, Llama's
`bias_activation_fusion` True in NeMo's LlamaConfig and Megatron-Bridge's llama_bridge.py) and
fc2 (TERowParallelLinear). What each saves, read in NVIDIA/TransformerEngine@1bd45b97 (2025-05)
transformer_engine/pytorch/module/linear.py and layernorm_linear.py:

- a Linear keeps its input only for the weight gradient: `backward_needs_input = is_grad_enabled
  and weight.requires_grad`; a frozen one (a LoRA base) keeps none;
- a LayerNormLinear always keeps the norm's input (`inputmat`) and its statistics (rsigma; mu
  for LayerNorm), and the norm's output (`ln_out`) when the weight trains or when the norm's
  output is returned (`return_layernorm_output`, which Megatron-Bridge's and NeMo's LoRA set on
  an adapted LayerNormLinear: peft/utils.py @ 63b08b39); otherwise `ln_out` is freed;
- under fp8 the kept GEMM inputs are Transformer Engine's fp8 copies (1 byte a value): the
  norm writes fp8 directly where it need not return its output, and a returned output is
  quantised for the GEMM, the fp8 copy kept, the half-precision one with the adapter;
- the attention kernel keeps q, k, v, its output and the softmax statistics (fp32 per head);
  the output projection's input is that output (the same tensor: nothing more in half
  precision; its fp8 copy under fp8).

Megatron-Bridge's and NeMo's LoRA adapter (peft/utils.py ParallelLinearAdapter @ 63b08b39) on a
column-parallel LayerNormLinear gets the norm's output, all-gathered over the tensor-parallel
ranks under sequence parallelism (`return_layernorm_output_gathered`: the full sequence on each
rank); its A keeps that input, its B keeps A's output (rank r values). On a row-parallel linear
the adapter's input is the linear's own input (the attention output, or the SwiGLU output that a
frozen fc2 would not keep).
"""

from __future__ import annotations

from gpuhours.estimate.arch import ModelArch
from gpuhours.setup import Training

#: Megatron-Core's linear of each adapted name of `memory.LORA_ADAPTED`: q, k and v are one
#: linear (linear_qkv), gate and up one (linear_fc1)
_MEGATRON_LINEAR = {"q": "qkv", "k": "qkv", "v": "qkv", "o": "proj", "gate": "fc1",
                    "up": "fc1", "down": "fc2"}


def megatron_path_covers(arch: ModelArch) -> bool:
    """Whether `megatron_layer_saved_bytes_per_token` models this architecture: a dense
    decoder of the TE spec (no experts, latent attention, SSM layers, q/k norms or vision)."""
    return not (arch.encoder or arch.is_moe or arch.mla is not None or arch.ssm is not None
                or arch.qk_norm or arch.vision is not None)


def megatron_adapted_linears(targets: frozenset[str]) -> frozenset[str]:
    """The Megatron-Core linears (qkv, proj, fc1, fc2) that LoRA's adapted names adapt."""
    return frozenset(_MEGATRON_LINEAR[n] for n in targets)


def megatron_layer_saved_bytes_per_token(arch: ModelArch, t: Training, a: float,
                                         adapted: frozenset[str] = frozenset()) -> float:
    """Bytes one decoder layer keeps for backward per token, before the tensor-parallel split
    (the caller divides by tp: sequence parallelism), for `t`'s method and precision; a: the
    activation bytes; `adapted`: the LoRA-adapted linears (`megatron_adapted_linears`).

    With e = a kept GEMM input's bytes (1 under fp8-mixed, else a), d hidden, q = heads x
    head_dim, kv = kv heads x head_dim, f MLP width, h heads, r rank:
    - each of the two norms: its input a d and rsigma 4 (and mu 4 for LayerNorm);
    - attention: a (q + 2 kv) + a q + 4 h;
    - SwiGLU's input 2 a f (a non-gated MLP's activation input: a f);
    - full fine-tuning: the norms' outputs at e d twice (q/k/v and fc1 inputs), fc2's input
      e f, and under fp8 the output projection's 1-byte copy of the attention output (q);
    - LoRA, each adapted LayerNormLinear: the kept norm output e d, and the adapter's input:
      under sequence parallelism (tp > 1) the gathered norm output, tp x a d; without it the
      same tensor as the kept output in half precision, its own a d under fp8; each
      adapter's B input a r; an adapted fc2's adapter keeps the SwiGLU output a f. An adapted
      output projection's adapter keeps the attention output, kept already.
    """
    fp8 = t.precision == "fp8-mixed"
    e = 1.0 if fp8 else a
    d, q, kv, f = arch.hidden_size, arch.q_dim, arch.kv_dim, arch.intermediate_size
    stats = 8 if arch.norm_bias else 4
    saved = 2 * (a * d + stats)
    saved += a * (q + 2 * kv) + a * q + 4 * arch.num_heads
    saved += (2 if arch.gated_mlp else 1) * a * f
    if t.method == "full":
        return saved + 2 * e * d + e * f + (e * q if fp8 else 0.0)
    for linear in ("qkv", "fc1"):
        if linear in adapted:
            adapter_input = t.tp * a * d if t.tp > 1 else (a * d if fp8 else 0.0)
            saved += e * d + adapter_input
    saved += len(adapted) * a * t.lora_rank
    if "fc2" in adapted:
        saved += a * f
    return saved


def megatron_outside_bytes_per_token(arch: ModelArch, a: float, head_trains: bool) -> float:
    """Bytes kept per token outside the layers: the final norm (TE's RMSNorm/LayerNorm: its
    input a d and statistics) and, when the output layer trains, its input a d."""
    stats = 8 if arch.norm_bias else 4
    return a * arch.hidden_size + stats + (a * arch.hidden_size if head_trains else 0.0)
