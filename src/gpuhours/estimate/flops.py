"""FLOPs per token of training and generation (one multiply-add = 2 FLOPs).

Conventions, stated once:
- Matmul FLOPs: 2 x (matmul weights a token passes through) forward (Kaplan et al. 2020, eq. 2.1;
  the "6N" rule with the backward at twice the forward). Embedding lookups and norms are left
  out; the LM head is in.
- Attention scores: QK^T and AV cost 2 x 2 x (heads x head_dim) x context FLOPs per token and
  layer forward. A causal mask makes the mean context (S+1)/2, and FlashAttention skips the
  masked blocks, so we count the causal half. PaLM (Chowdhery et al. 2022, app. B) and
  llm-foundry count the full S (12 L H Q T), so our MFU reads lower than theirs on long sequences.
- Backward = 2 x forward for every matmul whose weights train. A frozen weight (LoRA base) needs
  only the input gradient: 1 x forward. Attention scores have no weights: 2 x forward.
- Full activation recomputation (gradient checkpointing) adds one forward of the layers (not
  of the LM head, which sits outside the checkpointed blocks).
  MFU counts model FLOPs (without recomputation), HFU counts hardware FLOPs (with it).
- The loss kernel: Cut Cross-Entropy (Wijmans et al. 2024, arXiv:2411.09009, sec. 4) never
  stores the logits and recomputes them blockwise in backward: one more forward of the LM head,
  counted as recomputation. Liger's fused linear cross-entropy computes the LM head's
  gradients inside its forward, chunk by chunk (Liger-Kernel ops/fused_linear_cross_entropy.py):
  the same FLOPs as the unfused head, no recomputation. Chunked cross-entropy changes no FLOPs.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuhours.estimate.arch import ModelArch
from gpuhours.estimate.params import count_params


@dataclass(frozen=True)
class TrainingFlops:
    """FLOPs per trained token, by part. All in FLOPs/token."""

    matmul_forward: float
    matmul_backward: float
    lora_forward: float
    lora_backward: float
    attention_forward: float
    attention_backward: float
    recompute: float

    @property
    def model_flops_per_token(self) -> float:
        """Work the algorithm needs (MFU's numerator): forward + backward, no recomputation."""
        return (
            self.matmul_forward + self.matmul_backward + self.lora_forward + self.lora_backward
            + self.attention_forward + self.attention_backward
        )

    @property
    def hardware_flops_per_token(self) -> float:
        """Work the hardware does (HFU's numerator): model FLOPs + recomputation."""
        return self.model_flops_per_token + self.recompute

    @property
    def matmul_flops_per_token(self) -> float:
        """Dense matmul part of the hardware FLOPs (runs at GEMM efficiency)."""
        mm = self.matmul_forward + self.matmul_backward + self.lora_forward + self.lora_backward
        return mm + self.recompute_matmul

    @property
    def attention_flops_per_token(self) -> float:
        """Attention-score part of the hardware FLOPs (runs at attention-kernel efficiency)."""
        return self.attention_forward + self.attention_backward + self.recompute_attention

    recompute_matmul: float = 0.0
    recompute_attention: float = 0.0


def attention_forward_flops_per_token(arch: ModelArch, seq_len: int, causal: bool = True) -> float:
    """Forward FLOPs/token of QK^T and AV over all layers: 4 x L x (heads x head_dim) x context.

    context = (seq_len + 1) / 2 under a causal mask (mean over positions), seq_len otherwise.
    """
    context = (seq_len + 1) / 2 if causal else float(seq_len)
    return 4.0 * arch.num_layers * arch.q_dim * context


def lora_params_per_layer(arch: ModelArch, rank: int, targets: str) -> int:
    """LoRA A and B matrices of one layer: rank x (in + out) per adapted linear layer.

    targets: "all-linear" (q, k, v, o, and the MLP's linears: peft's `all-linear`),
    "attention" (q, k, v, o), "qv" (q and v, peft's default for llama-type models).
    For an MoE, "all-linear" adapts every expert.
    """
    d = arch.hidden_size
    qv = rank * (d + arch.q_dim) + rank * (d + arch.kv_dim)
    attention = qv + rank * (d + arch.kv_dim) + rank * (arch.q_dim + d)
    if targets == "qv":
        return qv
    if targets == "attention":
        return attention
    ffn = arch.moe_intermediate_size if arch.is_moe else arch.intermediate_size
    mats = 3 if arch.gated_mlp else 2
    experts = max(arch.num_experts, 1)
    return attention + experts * mats * rank * (d + ffn)


def lora_active_params_per_layer(arch: ModelArch, rank: int, targets: str) -> int:
    """LoRA weights one token passes through (for an MoE, the routed experts' adapters only)."""
    if not arch.is_moe or targets != "all-linear":
        return lora_params_per_layer(arch, rank, targets)
    dense_part = lora_params_per_layer(arch, rank, "attention")
    per_expert = (3 if arch.gated_mlp else 2) * rank * (arch.hidden_size + arch.moe_intermediate_size)
    return dense_part + arch.experts_per_token * per_expert


def training_flops_per_token(
    arch: ModelArch,
    seq_len: int,
    method: str = "full",
    lora_rank: int = 16,
    lora_targets: str = "all-linear",
    checkpointing: bool = False,
    loss_kernel: str = "hf",
) -> TrainingFlops:
    """FLOPs per trained token of one training step, by part (see the module docstring)."""
    counts = count_params(arch)
    mm_fwd = 2.0 * counts.matmul_active
    attn_fwd = 0.0 if arch.encoder else attention_forward_flops_per_token(arch, seq_len)
    if arch.encoder:
        attn_fwd = attention_forward_flops_per_token(arch, seq_len, causal=False)
    frozen = method in ("lora", "qlora")
    mm_bwd = (1.0 if frozen else 2.0) * mm_fwd
    lora_fwd = lora_bwd = 0.0
    if frozen:
        lora_fwd = 2.0 * arch.num_layers * lora_active_params_per_layer(arch, lora_rank, lora_targets)
        lora_bwd = 2.0 * lora_fwd
    # checkpointing wraps the decoder layers: the LM head's matmul is not recomputed
    recompute_mm = (mm_fwd - 2.0 * counts.lm_head_matmul + lora_fwd) if checkpointing else 0.0
    if loss_kernel == "cut-ce" and not arch.encoder:
        recompute_mm += 2.0 * counts.lm_head_matmul  # logits recomputed in the loss's backward
    recompute_attn = attn_fwd if checkpointing else 0.0
    return TrainingFlops(
        matmul_forward=mm_fwd,
        matmul_backward=mm_bwd,
        lora_forward=lora_fwd,
        lora_backward=lora_bwd,
        attention_forward=attn_fwd,
        attention_backward=2.0 * attn_fwd,
        recompute=recompute_mm + recompute_attn,
        recompute_matmul=recompute_mm,
        recompute_attention=recompute_attn,
    )


def generation_flops_per_token(arch: ModelArch, context_tokens: float) -> float:
    """Forward FLOPs to process one token with `context_tokens` of context before it."""
    return 2.0 * count_params(arch).matmul_active + 4.0 * arch.num_layers * arch.q_dim * context_tokens
