"""What Liger-Kernel's fused layer kernels change in a training step (Training.liger_kernels).

Liger-Kernel (Hsu et al. 2024, arXiv:2410.10989) patches transformers' decoder layers with
Triton kernels: `apply_liger_kernel_to_<model>(rope=True, rms_norm=True, swiglu=True)`, which
TRL's `use_liger_kernel`, LLaMA-Factory's `enable_liger_kernel` and axolotl's `liger_rope`,
`liger_rms_norm`, `liger_glu_activation` turn on together. Its fused linear cross-entropy is a
separate choice (Training.loss_kernel "fused-linear"). Called before the model is built
(LLaMA-Factory, axolotl's LigerPlugin, scripts) it replaces the classes, so every RMSNorm of
the model, Qwen3's per-head q/k norms too (Training.liger_kernels "classes"); called on a built
model (`_apply_liger_kernel_to_instance`: HF Trainer, TRL, verl) it swaps the block norms and
the MLP module by module and leaves the per-head norms eager ("instance"); the rotary function
is replaced in the modelling module either way (monkey_patch.py apply_liger_kernel_to_qwen3).
Read at linkedin/Liger-Kernel
@0a62700752e8592c0bf16916d1e4dbf598cee8c1 (v0.6.4, 2025-11-21), src/liger_kernel/ops/:

- rms_norm.py LigerRMSNormFunction: one kernel forward writes Y and a per-row 1/rms (fp32 in
  the llama and gemma casting modes); `ctx.save_for_backward(X, W, RSTD)`. Backward: one kernel
  writing dX into dY in place (in_place=True, the default but for Gemma 2), then
  `_dW.sum(dim=0).to(W.dtype)` over the per-SM fp32 partial sums.
- rope.py LigerRopeFunction: q and k rotated in place by one kernel (each made contiguous
  first, a no-op for transformers' layout); `ctx.save_for_backward(cos, sin)` only. Backward:
  one kernel on dq and dk.
- swiglu.py LigerSiLUMulFunction (geglu.py LigerGELUMulFunction the same): one kernel reads the
  gate and up projections' outputs a and b and writes c = silu(a) b;
  `ctx.save_for_backward(a, b)`. Backward: one kernel recomputes silu(a) and writes da and db
  over a and b.
- layer_norm.py LigerLayerNormFunction saves X, W, B, mean and 1/std, as torch's own
  native_layer_norm (one kernel each way) does already: a LayerNorm model is unchanged here.

What transformers' eager modelling does in their place (LlamaRMSNorm, apply_rotary_pos_emb,
LlamaMLP's act_fn(gate_proj(x)) * up_proj(x)), and what it keeps, is
estimate/memory.py's activation_bytes_per_token_layer; its operators are counted on CPU
(LIGER_REPLACED_EAGER_OPS). tests/test_liger.py holds both sides: the eager parts to the storage
autograd saves for a real CPU forward, Liger's to a hand count of its save_for_backward calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuhours.estimate.arch import ModelArch
    from gpuhours.setup import Training

#: the Liger-Kernel commit read (v0.6.4, the release of the rows' date)
LIGER_COMMIT = "linkedin/Liger-Kernel@0a62700752e8592c0bf16916d1e4dbf598cee8c1"

#: eager operators of the parts Liger replaces in one Llama-shaped decoder layer (two RMSNorms,
#: the rotary embedding of q and k, the gated activation), (forward, backward), by how the
#: precision runs (host.precision_kind). Counted on CPU with gpuhours.torchkit.ops.count_ops
#: (torch 2.13, transformers 5.23; forward under autograd, backward by torch.autograd.grad;
#: tests/test_liger.py re-counts them):
#: - LlamaRMSNorm with its weight trained, forward: pow, mean, add, rsqrt, two mul (6), plus
#:   the input's cast to fp32 and the result's back in a half precision (8); backward: 8 mul,
#:   2 sum, 2 pow, div, add (14), plus the two casts' backwards in half (16). Autocast runs the
#:   norms on the fp32 residual stream: the fp32 count.
#: - apply_rotary_pos_emb on q and k, forward: 4 mul, 2 neg, 2 cat, 2 add (10); backward: 4
#:   mul, 2 neg, 4 slice_backward, 4 add (14). Under autocast the rotary tables follow the fp32
#:   residual stream (LlamaRotaryEmbedding returns cos.to(x.dtype)) while q and k are bf16:
#:   autograd casts the four products' fp32 gradients back to bf16 (4 _to_copy: 18).
#: - silu(gate) * up, forward: silu, mul (2); backward: 2 mul, silu_backward (3).
#: Per layer: fp32 2 x 6 + 10 + 2 = 24 forward, 2 x 14 + 14 + 3 = 45 backward; half 28 and 49;
#: autocast 24 and 49.
LIGER_REPLACED_EAGER_OPS: dict[str, tuple[float, float]] = {
    "fp32": (24.0, 45.0), "half": (28.0, 49.0), "autocast": (24.0, 49.0)}
#: ... and Liger's operators for the same parts (LIGER_COMMIT, counted by hand from the code:
#: allocations and views excluded, as count_ops excludes them): forward one kernel per RMSNorm
#: (2), the RoPE kernel (1), the SwiGLU kernel (1): 4; backward per RMSNorm the kernel and
#: _dW.sum (2) and, for a half-precision weight, .to(W.dtype) (1), the RoPE kernel (1), the
#: SwiGLU kernel (1): 6, half 8.
LIGER_OPS: dict[str, tuple[float, float]] = {
    "fp32": (4.0, 6.0), "half": (4.0, 8.0), "autocast": (4.0, 6.0)}


def liger_layer_applies(arch: ModelArch, t: Training) -> str | None:
    """None where the Liger count below covers the setup's decoder layers, else why it does
    not (the eager count is then kept)."""
    if t.liger_kernels == "none":
        return "Liger's layer kernels not patched in"
    if arch.encoder or arch.mla is not None or arch.ssm is not None:
        return "an encoder, latent-attention or Mamba layer (Liger's patches not counted)"
    if arch.norm_bias or not arch.gated_mlp:
        return ("LayerNorm or an ungated MLP: Liger's LayerNorm saves what torch's own one-kernel "
                "layer_norm saves, and there is no SwiGLU to fuse")
    return None


def eager_replaced_saved_bytes_per_token_layer(arch: ModelArch, a: float, r: float,
                                               full: bool, qk_norms: bool = True) -> float:
    """Bytes per token and layer that transformers' eager RMSNorms and gated activation save
    for backward (a = activation bytes, r = residual-stream bytes; d hidden, q = heads x
    head_dim, kv = kv heads x head_dim, f = MLP width), the part of
    memory.activation_bytes_per_token_layer that Liger replaces:
    - each RMSNorm of the block: the fp32 copy of its input (4 d; kept by pow and the multiply
      by 1/rms) and, when its weight trains (full), the normalised input before the weight
      multiply (r d). Qwen3's per-head q and k norms the same over q + kv, where Liger
      replaces them (`qk_norms`: Training.liger_kernels "classes").
    - the gated activation: the gate projection's output (kept by SiLU), SiLU's output and the
      up projection's output (kept by the product): 3 a f. (A MoE layer's experts: not counted.)
    - the rotary embedding keeps only cos and sin, shared by the layers: 0 per token.
    """
    d, q, kv, f = arch.hidden_size, arch.q_dim, arch.kv_dim, arch.intermediate_size
    norms = arch.norms_per_block * (4 * d + (r * d if full else 0.0))
    if arch.qk_norm and qk_norms:
        norms += 4 * (q + kv) + (a * (q + kv) if full else 0.0)
    mlp = 0.0 if arch.is_moe else 3 * a * f
    return norms + mlp


def liger_saved_bytes_per_token_layer(arch: ModelArch, a: float, r: float,
                                      qk_norms: bool = True) -> float:
    """Bytes per token and layer that Liger's Functions save in place of
    eager_replaced_saved_bytes_per_token_layer's (LIGER_COMMIT, each save_for_backward):
    - LigerRMSNormFunction: X (r d, the residual stream as it comes) and an fp32 1/rms per row
      (4 per token); W is the parameter. Whether the weight trains or not. Qwen3's per-head q
      and k norms where the class is patched before the model is built (`qk_norms`;
      apply_liger_kernel_to_qwen3 with a built model patches only the block norms and the
      MLP): q and k before them (a (q + kv)) and a 1/rms per head (4 (heads + kv heads)).
    - LigerSiLUMulFunction: a and b, the gate and up outputs (2 a f).
    - LigerRopeFunction: cos and sin (no per-token tensor).
    """
    d, q, kv, f = arch.hidden_size, arch.q_dim, arch.kv_dim, arch.intermediate_size
    norms = arch.norms_per_block * (r * d + 4)
    if arch.qk_norm and qk_norms:
        norms += a * (q + kv) + 4 * (arch.num_heads + arch.num_kv_heads)
    mlp = 0.0 if arch.is_moe else 2 * a * f
    return norms + mlp


def liger_saved_delta_bytes_per_token_layer(arch: ModelArch, t: Training, a: float,
                                            r: float) -> float:
    """Liger's saved bytes less eager's for the parts it replaces, per token and layer
    (negative: it keeps less); 0 where liger_layer_applies says it does not apply."""
    if liger_layer_applies(arch, t) is not None:
        return 0.0
    full, qk = t.method == "full", t.liger_kernels == "classes"
    return (liger_saved_bytes_per_token_layer(arch, a, r, qk)
            - eager_replaced_saved_bytes_per_token_layer(arch, a, r, full, qk))


def liger_moved_bytes_per_token_layer(arch: ModelArch, t: Training, a: float,
                                      r: float) -> float:
    """Bytes Liger's kernels move per token and layer, forward and backward: each kernel reads
    its inputs and writes its outputs once (a count from the kernels' loads and stores at
    LIGER_COMMIT, not a measurement):
    - RMSNorm forward reads X and writes Y (2 r d; 1/rms 4 per row, W negligible); backward
      reads dY and X and writes dX (3 r d). Per-head q and k norms the same over q + kv in a,
      where Liger replaces them (Training.liger_kernels "classes").
    - RoPE forward reads and writes q and k (2 a (q + kv)); backward dq and dk the same.
      (cos and sin, head_dim wide, read per token: left out.)
    - SwiGLU forward reads a and b and writes c (3 a f); backward reads dc, a and b and writes
      da and db (5 a f). (A MoE layer's experts: not counted.)
    Under checkpointing the forward kernels run again in backward."""
    d, q, kv, f = arch.hidden_size, arch.q_dim, arch.kv_dim, arch.intermediate_size
    forward = arch.norms_per_block * 2 * r * d + 2 * a * (q + kv)
    backward = arch.norms_per_block * 3 * r * d + 2 * a * (q + kv)
    if arch.qk_norm and t.liger_kernels == "classes":
        forward += 2 * a * (q + kv)
        backward += 3 * a * (q + kv)
    if not arch.is_moe:
        forward += 3 * a * f
        backward += 5 * a * f
    return forward * (2 if t.checkpointing else 1) + backward


def liger_ops_delta_per_layer(kind: str) -> tuple[float, float]:
    """Host operators per Llama-shaped decoder layer that Liger's kernels take away,
    (forward, backward): LIGER_OPS less LIGER_REPLACED_EAGER_OPS for the precision's kind
    (host.precision_kind). Negative. Per-head q and k norms are not in the eager layer count
    (assumptions.OPS_PER_LAYER: Llama-shaped), so not here either."""
    e_fwd, e_bwd = LIGER_REPLACED_EAGER_OPS[kind]
    l_fwd, l_bwd = LIGER_OPS[kind]
    return l_fwd - e_fwd, l_bwd - e_bwd


def liger_terms(arch: ModelArch, t: Training, a: float, r: float) -> tuple[str, ...]:
    """The basis lines of a setup with Liger's layer kernels: what they changed and where the
    figures come from."""
    if t.liger_kernels == "none":
        return ()
    why = liger_layer_applies(arch, t)
    if why is not None:
        return (f"liger: the layers keep the eager count: {why}",)
    full, qk = t.method == "full", t.liger_kernels == "classes"
    eager = eager_replaced_saved_bytes_per_token_layer(arch, a, r, full, qk)
    liger = liger_saved_bytes_per_token_layer(arch, a, r, qk)
    moved = liger_moved_bytes_per_token_layer(arch, t, a, r)
    # how the precision runs in torch, as host.precision_kind has it (host imports this module)
    kind = ("fp32" if t.precision == "fp32" else
            "autocast" if t.precision.endswith(("-amp", "-mixed")) else "half")
    d_fwd, d_bwd = liger_ops_delta_per_layer(kind)
    return (f"liger: RMSNorm, RoPE and SwiGLU as Liger's Triton kernels save {liger:,.0f} "
            f"bytes per token and layer where transformers' eager ones save {eager:,.0f} "
            f"(their save_for_backward at Liger-Kernel 0a62700, v0.6.4: estimate/liger.py)"
            + ("; the MoE experts' activation keeps the eager count" if arch.is_moe else "")
            + ("; the per-head q/k norms stay eager (patched on a built model)"
               if arch.qk_norm and not qk else ""),
            f"liger: those kernels move {moved:,.0f} bytes per token and layer (one read and "
            f"one write of each kernel's tensors: a count), in place of eager's "
            f"elementwise_passes x the saved bytes; host operators per layer "
            f"{-d_fwd:.0f} fewer in forward and {-d_bwd:.0f} in backward (the eager ones "
            f"counted on CPU, less one kernel each)")
