"""Unsloth's training path: what its patched Llama-family layer saves for backward, its
cross-entropy, and its offloaded gradient checkpointing (setup: kernels "unsloth",
checkpoint_offload).

Read from Unsloth's code (github.com/unslothai/unsloth, unslothai/unsloth-zoo) at the commits
nearest the published rows: ef70177a (2023-12-23, the "unsloth==2023.12" LLaMA-Factory
required), 7a0ded3a (2024-04-20) and d9ed4bef with unsloth-zoo 9c643b66 (2024-12-12, the
Llama 3.3 release whose context-length table the docs keep).

- LoRA groups (unsloth/kernels/fast_lora.py). `get_peft_model` patches a layer's MLP only
  when gate, up and down all carry LoRA (LoRA_MLP), its q/k/v only when all three do
  (LoRA_QKV), and o_proj when it does (LoRA_W). Each Function saves, besides the adapters:
  LoRA_QKV the input X (one tensor for q, k and v); LoRA_W its input (o_proj's: the attention
  kernel's output, kept by the kernel already); LoRA_MLP X and the gate and up outputs e and
  g (the activation h = silu(e) g is recomputed in backward, in place into e and g). The
  4-bit base is dequantised per matmul (`fast_dequantize`) into a half-precision copy that
  is freed after it (`del upW`): only the largest such copy is alive at once.
- An unpatched group runs as in transformers and peft: LlamaMLP keeps the gate output, the
  activation's output and the up output (3 f); each adapted linear's LoRA A keeps its input
  (fp32 adapters: their own fp32 copy each) and B keeps A's output (r); a bitsandbytes
  Linear4bit keeps its input by `bnb_saved_input` as estimate/memory.py counts it.
- RMSNorm (unsloth/kernels/rms_layernorm.py, Fast_RMS_Layernorm.forward): saves its input X
  in its own dtype and the fp32 reciprocal RMS per row (`r`, 4 bytes a token); no fp32 copy
  of X. RoPE (rope_embedding.py) saves only cos and sin. Attention by flash-attn or xformers:
  q, k, v and the output (the log-sum-exp, 4 bytes per head and token, left out as
  memory.py leaves it out).
- Unsloth prepares a 4-bit model itself (unsloth/models/_utils.py prepare_model_for_kbit_training
  at every commit above: it freezes the base and leaves the non-4-bit weights in their half
  precision, no peft fp32 upcast), so the residual stream stays half precision.
- Loss (unsloth/kernels/cross_entropy_loss.py, Fast_CrossEntropyLoss): the LM head's
  half-precision logits are saved with two fp32 values per token (loss, log-sum-exp); the
  backward writes the gradient into the saved logits (`return logits, None, None`).
  From unsloth-zoo 2024.11 (9c643b66, loss_utils.py) a micro-batch of more than 1024 tokens
  goes to Apple's Cut Cross-Entropy (`fused_linear_cross_entropy`, cut_cross_entropy a
  dependency): loss_kernel cut-ce, chosen by the caller.
- Offloaded checkpointing (unsloth-zoo gradient_checkpointing.py
  Unsloth_Offloaded_Gradient_Checkpointer; in unsloth/models/_utils.py at 7a0ded3a): forward
  runs `hidden_states.to("cpu", non_blocking=True)` and the layer under no_grad, saving only
  the host copy; backward brings it back with `.to("cuda:0", non_blocking=True)` and
  recomputes. A non_blocking copy from the GPU lands in pinned host memory (PyTorch's
  aten/src/ATen/native/TensorConversions.cpp `_to_copy`: `pin_out = non_blocking &&
  self.is_cuda() && options.device().is_cpu()`), and it is queued on the current stream, so
  the kernels queued after it wait for it: the copies are not overlapped with compute
  (`offloaded_checkpoint_copy_s`); non_blocking only frees the host thread.
"""

from __future__ import annotations

from gpuhours.estimate.arch import ModelArch
from gpuhours.setup import Training

#: the LoRA groups Unsloth fuses into one autograd Function, and their members
UNSLOTH_GROUPS = {"qkv": frozenset({"q", "k", "v"}), "o": frozenset({"o"}),
                  "mlp": frozenset({"gate", "up", "down"})}

#: fp32 values per token that Fast_CrossEntropyLoss makes beside the logits: losses and
#: logsumexp (cross_entropy_loss.py: two torch.empty(n_rows, dtype=torch.float32))
UNSLOTH_CE_FP32_PER_TOKEN = 2

#: fp32 values per token that Fast_RMS_Layernorm keeps beside its input: r, 1/RMS per row
UNSLOTH_RMS_FP32_PER_TOKEN = 1


def fused_groups(arch: ModelArch, adapted: frozenset[str],
                 lora_dropout: float = 0.0) -> frozenset[str]:
    """The groups of `UNSLOTH_GROUPS` whose every linear carries LoRA and no bias: the ones
    Unsloth's get_peft_model patches with its Functions (4a885399, llama.py: each group's
    `hasattr(..., "lora_A")` and `base_layer.bias is None`, "a bias term (like in Qwen)" left
    unpatched); none with LoRA dropout (`if lora_dropout == 0 and bias == "none"`; 2023.12
    refuses dropout outright)."""
    if lora_dropout > 0:
        return frozenset()
    biased = {"qkv": arch.qkv_bias, "o": arch.out_bias, "mlp": arch.mlp_bias}
    return frozenset(g for g, members in UNSLOTH_GROUPS.items()
                     if members <= adapted and not biased[g])


def unsloth_layer_saved_bytes_per_token(arch: ModelArch, adapted: frozenset[str], a: int,
                                        rank: int, half_adapters: bool, bnb_input_saved: bool,
                                        lora_dropout: float = 0.0) -> float:
    """Bytes one Unsloth decoder layer keeps for backward per token (module docstring), a the
    activation bytes, d hidden, q the attention width, kv the k/v width, f the MLP width:

    - two RMSNorms: 2 (a d + 4);
    - attention: q, k, v and the output: a (2q + 2kv);
    - q/k/v: fused, X once: a d. Unpatched: each adapted one's LoRA input (4 d with fp32
      adapters; half adapters share X, a d once) and A's output (4 r or a r); a 4-bit base
      that keeps its input (`bnb_input_saved`) and no LoRA input already kept: a d;
    - o_proj: fused, nothing new. Unpatched and adapted: its LoRA input (4 q with fp32
      adapters, 0 with half ones: the kernel's output) and A's output;
    - MLP: fused, X, e and g: a (d + 2f). Unpatched: 3 a f, each adapted linear's LoRA input
      and A's output (gate and up share X, a d, with half adapters; down's is the product, a
      f), and a 4-bit base's inputs that no adapter keeps (X: a d; the product: a f).
    With LoRA dropout no group is patched and each adapter keeps its own dropout output (the
    1-byte masks are memory.py's lora_dropout_mask_bytes_per_token_layer).
    """
    d, q, kv, f = arch.hidden_size, arch.q_dim, arch.kv_dim, arch.intermediate_size
    fused = fused_groups(arch, adapted, lora_dropout)
    lora_in = a if half_adapters else 4
    shared = half_adapters and lora_dropout <= 0
    total = 2.0 * (a * d + 4 * UNSLOTH_RMS_FP32_PER_TOKEN) + a * (2 * q + 2 * kv)

    def peft(names: frozenset[str], in_dim: dict[str, int], shared_input: int) -> float:
        """Adapters of an unpatched group: inputs (fp32: one copy each; half: shared) and A's
        outputs."""
        mine = names & adapted
        outs = lora_in * rank * len(mine)
        if shared:
            return outs + (a * shared_input if mine else 0)
        return outs + sum(lora_in * in_dim[n] for n in mine)

    if "qkv" in fused:
        total += a * d
    else:
        qkv = UNSLOTH_GROUPS["qkv"]
        total += peft(qkv, {"q": d, "k": d, "v": d}, d)
        if bnb_input_saved and not (shared and qkv & adapted):
            total += a * d
    if "o" not in fused and "o" in adapted:
        total += lora_in * rank + (0 if shared else lora_in * q)
    if "mlp" in fused:
        total += a * (d + 2 * f)
    else:
        total += 3 * a * f
        total += peft(frozenset({"gate", "up"}), {"gate": d, "up": d}, d)
        total += peft(frozenset({"down"}), {"down": f}, f)
        if bnb_input_saved:
            if not (shared and {"gate", "up"} & adapted):
                total += a * d
            if not (shared and "down" in adapted):
                total += a * f
    return total


def unsloth_term(arch: ModelArch, adapted: frozenset[str], per_token_layer_bytes: float, a: int,
                 method: str, lora_dropout: float = 0.0) -> str:
    """The basis line of the unsloth kernel path: which groups its Functions run, what a layer
    keeps, and the dequantised weight of a 4-bit base."""
    fused = sorted(fused_groups(arch, adapted, lora_dropout))
    groups = ", ".join(fused) if fused else ("none (LoRA dropout, or LoRA on part of a group: "
                                             "peft's path)")
    line = (f"unsloth kernels: Unsloth's LoRA Functions on {groups}; a layer keeps "
            f"{per_token_layer_bytes / 1024:.1f} KiB per token (Triton RMSNorm: input and "
            f"fp32 1/RMS; LoRA_MLP: X, gate and up outputs; no fp32 upcast of the base)")
    if method == "qlora":
        line += (f"; one 4-bit weight dequantised at a time "
                 f"({dequantised_weight_bytes(arch, a) / 2**20:.0f} MiB)")
    return line + " (estimate/unsloth.py)"


def mlp_backward_bytes_per_token(arch: ModelArch, adapted: frozenset[str], a: int,
                                 lora_dropout: float = 0.0) -> float:
    """Bytes per token that LoRA_MLP's backward makes while X, e and g are alive: DW =
    matmul_lora(dY, downW.t(), ...), the gradient at the MLP's inner width (a f); the
    activation's backward then writes into DW, e and g in place and dX into X
    (swiglu_DWf_DW_dfg_kernel; `out = X if ctx.inplace`). One layer's at a time: 0 when the
    MLP is not Unsloth's (transformers' MLP's backward temporaries are not counted)."""
    return float(a * arch.intermediate_size) if "mlp" in fused_groups(
        arch, adapted, lora_dropout) else 0.0


def outside_bytes_per_token(arch: ModelArch, adapted: frozenset[str], a: int,
                            lora_dropout: float = 0.0) -> float:
    """Bytes per token outside the layers' saved sets: the final norm (Unsloth's Triton
    RMSNorm: its input as it comes and the fp32 1/RMS, a d + 4) and one layer's LoRA_MLP
    backward gradient (`mlp_backward_bytes_per_token`)."""
    return arch.hidden_size * a + 4.0 * UNSLOTH_RMS_FP32_PER_TOKEN + mlp_backward_bytes_per_token(
        arch, adapted, a, lora_dropout)


def dequantised_weight_bytes(arch: ModelArch, a: int) -> float:
    """The largest half-precision copy fast_dequantize makes of a 4-bit weight at one matmul,
    bytes: the MLP's f x d (a f d), or the q projection's q x d where it is wider; freed after
    the matmul (`del upW` in fast_lora.py), so one is alive at a time."""
    d = arch.hidden_size
    return float(a * max(arch.intermediate_size * d, arch.q_dim * d))


def unsloth_ce_forward_bytes(tokens: int, vocab_size: int, a: int) -> float:
    """Fast_CrossEntropyLoss's forward: the half-precision logits it saves and two fp32 values
    per token: N V a + 8 N bytes."""
    return float(tokens * vocab_size * a + 4 * UNSLOTH_CE_FP32_PER_TOKEN * tokens)


def unsloth_ce_backward_bytes(tokens: int, vocab_size: int, a: int) -> float:
    """Its backward writes the gradient into the saved logits in place: still N V a + 8 N."""
    return unsloth_ce_forward_bytes(tokens, vocab_size, a)


def offloaded_checkpoint_host_bytes(arch: ModelArch, t: Training, residual: int) -> float:
    """Host memory the offloaded checkpoints take, bytes: every block's input (tokens x d x
    the residual stream's bytes), pinned; 0 without checkpoint_offload."""
    if not (t.checkpoint_offload and t.checkpointing):
        return 0.0
    return float(arch.num_layers * t.tokens_per_micro_batch * arch.hidden_size * residual)


def checkpointed_inputs_on_gpu(arch: ModelArch, t: Training) -> int:
    """Block inputs the GPU holds under checkpointing: every block's, or with
    checkpoint_offload one (the block being run, whose input is on its way to or back from
    the host)."""
    return 1 if t.checkpoint_offload else arch.num_layers


def offloaded_checkpoint_copy_s(arch: ModelArch, t: Training, residual: int,
                                host_bytes_per_s: float) -> float:
    """Seconds per optimizer step of the checkpoint copies: each block's input down in
    forward and up in backward, per micro-batch, over the host link (estimate/offload.py
    host_link_bytes_per_s), on the compute stream (not overlapped): 2 L N d r x grad_accum /
    bandwidth."""
    per_micro_batch = 2.0 * offloaded_checkpoint_host_bytes(arch, t, residual)
    return per_micro_batch * t.grad_accum / host_bytes_per_s
