"""The Gated DeltaNet token mixer (Yang, Kautz & Hatamizadeh 2024, "Gated Delta Networks",
arXiv:2412.06464) as Qwen3-Next and Qwen3.5 build it: its parameters, FLOPs per token, recurrent
state and what training keeps for backward. Widths in elements. No torch here.

transformers 5.23's Qwen3NextGatedDeltaNet (modeling_qwen3_next.py) and Qwen3_5GatedDeltaNet
(modeling_qwen3_5.py): with Hk key heads of dk and Hv value heads of dv, key_dim = Hk dk and
value_dim = Hv dv,
- in_proj: hidden -> q, k (key_dim each), v (value_dim), the output gate z (value_dim) and the
  per-value-head b (beta) and a (decay) inputs; Qwen3-Next fuses them as in_proj_qkvz and
  in_proj_ba, Qwen3.5 keeps in_proj_qkv, in_proj_z, in_proj_b and in_proj_a (the same weights);
  no biases;
- a depthwise causal conv1d (no bias) of linear_conv_kernel_dim taps over q, k and v
  (conv_dim = 2 key_dim + value_dim channels), SiLU;
- dt_bias and A_log, one each per value head (g = -exp(A_log) softplus(a + dt_bias));
- the delta rule over (dk x dv) states, one per value head (each key head serves Hv / Hk value
  heads), q and k L2-normalised in the kernel;
- a gated RMSNorm over each value head (its weight dv wide, shared by the heads), gated by
  SiLU(z);
- out_proj: value_dim -> hidden, no bias.
"""

from __future__ import annotations

from dataclasses import dataclass

#: fla's chunk_gated_delta_rule works on chunks of 64 tokens (fla-org/flash-linear-attention
#: @ 0315a70e fla/ops/gated_delta_rule/chunk.py: chunk_local_cumsum(g, chunk_size=64); the A
#: matrix is [B, T, H, 64]); transformers' torch fallback torch_chunk_gated_delta_rule uses 64 too
DELTA_RULE_CHUNK = 64


@dataclass(frozen=True)
class GatedDeltaNet:
    """One Gated DeltaNet mixer's shape (see the module docstring)."""

    key_heads: int
    value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int
    #: Qwen3-Next's fused in_proj_qkvz and in_proj_ba (two linears) or Qwen3.5's four: the same
    #: parameters and FLOPs, a different list of linears for LoRA
    fused_in_proj: bool = True
    chunk_size: int = DELTA_RULE_CHUNK

    @property
    def key_dim(self) -> int:
        return self.key_heads * self.key_head_dim

    @property
    def value_dim(self) -> int:
        return self.value_heads * self.value_head_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the causal conv: q, k and v (2 key_dim + value_dim)."""
        return 2 * self.key_dim + self.value_dim

    @property
    def inner(self) -> int:
        """Width of out_proj's input (value_dim): what estimate/ssm.py keeps for its weight
        gradient, as Mamba's inner width."""
        return self.value_dim

    @property
    def heads(self) -> int:
        return self.value_heads

    @property
    def in_width(self) -> int:
        """in_proj's output: q, k, v, z and b, a (2 key_dim + 2 value_dim + 2 Hv)."""
        return 2 * self.key_dim + 2 * self.value_dim + 2 * self.value_heads

    def params(self, hidden_size: int, weights_only: bool = False) -> int:
        """One mixer's parameters: in_proj (hidden x in_width), out_proj (value_dim x hidden),
        the conv (conv_dim x kernel, no bias), dt_bias and A_log (Hv each), the gated norm's
        weight (dv); `weights_only`: the two projections' matmul weights."""
        weights = hidden_size * self.in_width + self.value_dim * hidden_size
        if weights_only:
            return weights
        return (weights + self.conv_dim * self.conv_kernel + 2 * self.value_heads
                + self.value_head_dim)

    def linears(self, hidden_size: int) -> list[tuple[int, int]]:
        """(in_features, out_features) of the mixer's linear layers (what LoRA adapts)."""
        d, k, v, h = hidden_size, self.key_dim, self.value_dim, self.value_heads
        if self.fused_in_proj:  # in_proj_qkvz, in_proj_ba, out_proj
            return [(d, 2 * k + 2 * v), (d, 2 * h), (v, d)]
        return [(d, 2 * k + v), (d, v), (d, h), (d, h), (v, d)]  # qkv, z, b, a, out_proj

    @property
    def saved_width(self) -> int:
        """Elements per token (activation dtype) one mixer keeps for backward in training,
        assumed from the fused kernels transformers calls when they are installed (fla's
        chunk_gated_delta_rule and FusedRMSNormGated, causal-conv1d), not from a run: the conv's
        input (conv_dim), the L2-normed q and k and v the delta-rule kernel saves (conv_dim;
        ChunkGatedDeltaRuleFunction.save_for_backward(q, q_rstd, k, k_rstd, v, g, beta, A, ...),
        fla @ 0315a70e), its A matrix (chunk_size per value head, in k's dtype) and beta (Hv),
        the gate z and the kernel's output for the gated norm (2 value_dim). The inputs of
        in_proj and out_proj are added by estimate/ssm.py in full fine-tuning."""
        return (2 * self.conv_dim + 2 * self.value_dim
                + self.value_heads * (self.chunk_size + 1))

    @property
    def saved_fp32_width(self) -> int:
        """fp32 elements per token kept besides: the decay g and softplus's input and output
        (3 Hv: transformers computes g in fp32 outside the kernel)."""
        return 3 * self.value_heads

    @property
    def scan_flops_per_token(self) -> float:
        """Forward FLOPs per token of the chunked gated delta rule (fla's
        chunk_gated_delta_rule_fwd, fla @ 0315a70e fla/ops/gated_delta_rule/chunk.py; the WY
        form of Yang et al. 2024, sec. 3), per value head with chunk C, dk and dv, 2 FLOPs a
        multiply-add, whole C x C blocks (no causal halving, as the kernels compute them):
        beta K K^T in the chunk (chunk_scaled_dot_kkt_fwd: 2 C dk), the unit-triangular inverse
        (solve_tril: C^3 / 3 multiply-adds a chunk, 2 C^2 / 3 per token), w = A K and u = A V
        (recompute_w_u_fwd: 2 C (dk + dv)), the state pass v_new = u - w S and S += K^T v_new
        (chunk_gated_delta_rule_fwd_h: 4 dk dv), the output Q S + (Q K^T) v_new (chunk_fwd_o:
        2 dk dv + 2 C dk + 2 C dv); plus the depthwise conv (2 conv_dim x kernel). The gates,
        L2 norms and decays (elementwise) are left out."""
        c, dk, dv = float(self.chunk_size), float(self.key_head_dim), float(self.value_head_dim)
        per_head = (2 * c * dk + 2 * c * c / 3 + 2 * c * (dk + dv) + 4 * dk * dv
                    + 2 * dk * dv + 2 * c * dk + 2 * c * dv)
        return self.value_heads * per_head + 2.0 * self.conv_dim * self.conv_kernel

    @property
    def decode_flops_per_token(self) -> float:
        """Forward FLOPs of one recurrent step (fused_recurrent_gated_delta_rule; transformers'
        torch_recurrent_gated_delta_rule), per value head: the decay of S (dk dv), S^T k
        (2 dk dv), the rank-1 update S += k (beta (v - S^T k))^T (2 dk dv), the read-out S^T q
        (2 dk dv): 7 dk dv; plus the conv step (2 conv_dim x kernel)."""
        return (7.0 * self.value_heads * self.key_head_dim * self.value_head_dim
                + 2.0 * self.conv_dim * self.conv_kernel)

    @property
    def state_elements(self) -> int:
        """The recurrent state one sequence keeps in one layer whatever its length: Hv states
        of dk x dv, and the conv window (conv_dim x (kernel - 1), as vLLM's and SGLang's
        mamba-style caches keep it; transformers' cache keeps conv_kernel)."""
        return (self.value_heads * self.key_head_dim * self.value_head_dim
                + self.conv_dim * (self.conv_kernel - 1))
