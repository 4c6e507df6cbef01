"""What torch.compile changes in a training step's memory and memory traffic (Training.compile).

torch.compile traces each compiled region (torchtune compiles every decoder layer and the
loss's cross-entropy: torchtune/training/_compile.py compile_model, compile_loss) into a joint
forward-backward graph. AOTAutograd's min-cut partitioner
(torch/_functorch/partitioners.py min_cut_rematerialization_partition, which Inductor calls
through torch/_inductor/compile_fx.py partition_fn) then chooses what the forward saves for
backward: outputs of cheap elementwise operators (RMSNorm's multiply, the fp32 upcast, SiLU,
the rotary embedding's products, the residual add) are recomputed inside the fused backward
kernels from tensors saved anyway, so a compiled layer saves fewer bytes than eager autograd.

The per-layer count below is a reading of what the partitioner saved on this machine (torch
2.13, transformers 5.23, CPU, Llama, Qwen2 and Qwen3 layers built from configs with random
weights, SDPA's flash kernel), stated as a formula in d, q, kv, f, the heads and the dtype, and held to
the real partition for several shapes by tests/test_compiled.py. It covers the decoder layers
the measurement covered: dense, gated MLP, RMSNorm (per-head q/k norms too), flash attention, a
plain (not autocast) precision. Other layers keep the eager count (`compiled_layer_applies`
says why).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuhours.estimate.lora import fused_adapter_names
from gpuhours.setup import loss_kernel_of

if TYPE_CHECKING:
    from gpuhours.estimate.arch import ModelArch
    from gpuhours.setup import Training

#: which linear layers LoRA adapts, per `lora_targets` (as estimate/memory.py LORA_ADAPTED)
_ADAPTED = {
    "qv": frozenset({"q", "v"}),
    "attention": frozenset({"q", "k", "v", "o"}),
    "qkv": frozenset({"q", "k", "v"}),
    "all-linear": frozenset({"q", "k", "v", "o", "gate", "up", "down"}),
    "mlp": frozenset({"gate", "up", "down"}),
}

#: bytes per logit moved by a compiled cross-entropy at bf16 (scaled by activation bytes / 2 like
#: assumptions.LOGITS_TRAFFIC_BYTES_PER_ELEMENT), a count of the reads and writes. Read from the
#: compiled graphs of `F.cross_entropy(logits.float())` (tests/test_compiled.py): the forward
#: saves its input and two fp32 values per token, the backward is one fused kernel whose only
#: output is the gradient in its input's dtype.
#: chunked (torchtune's chunks, in the LM head's bf16): the head writes them (2), the forward
#: kernel reads them once, upcasting in registers (2), the backward reads them and writes the
#: gradient (2 + 2): 8.
#: hf (the logits upcast to fp32 before the compiled loss: torchtune's TransformerDecoder ends
#: with `.float()` outside the compiled layers): the head's write (2), the cast's read and fp32
#: write (2 + 4), the forward's read (4), the backward's read and fp32 gradient (4 + 4), that
#: gradient cast back (4 + 2): 26, against eager's 30.
COMPILED_CE_TRAFFIC_BYTES_PER_LOGIT = {"chunked": 8.0, "hf": 26.0}


def compiled_layer_applies(arch: ModelArch, t: Training) -> str | None:
    """None where the compiled per-layer count covers the setup, else why it does not (the eager
    count is then used for the layers)."""
    if not t.compile:
        return "not compiled"
    if arch.encoder or arch.is_moe or arch.mla is not None or arch.ssm is not None:
        return "an encoder, MoE, latent-attention or Mamba layer (not measured compiled)"
    if not arch.gated_mlp or arch.norm_bias or arch.qk_norm_full or arch.norms_per_block != 2:
        return ("a layer other than RMSNorm + gated MLP, with per-head q/k norms or none (not "
                "measured compiled)")
    if not t.flash_attention:
        return "eager attention (not measured compiled)"
    if t.precision.endswith("-amp") or t.precision == "fp8-mixed":
        return f"{t.precision} (autocast or fp8: not measured compiled)"
    return None


def compiled_activation_bytes_per_token_layer(arch: ModelArch, a: float, method: str,
                                              lora_targets: str, lora_rank: int,
                                              fp32_adapter_inputs: bool) -> float:
    """Bytes a compiled decoder layer saves for backward per token (a = activation bytes, d
    hidden, q = heads x head_dim, kv = kv heads x head_dim, f = MLP width, h heads).

    Saved in every case: the layer's input and the attention block's output (or the residual
    sum, the same size: a d each; both norms are recomputed from them and their fp32 1/rms,
    4 bytes each); q and k after the rotary embedding and v (a (q + 2 kv)); the attention
    kernel's output (a q) and its fp32 log-sum-exp (4 h); the gate and up projections' outputs
    (2 a f; SiLU and the product are recomputed). Eager autograd keeps besides these the fp32
    upcast of each norm's input (4 d each), the normalised tensor before the weight multiply,
    SiLU's output (a f) and the contiguous copy that feeds o_proj (a q).

    A linear whose weight trains (full fine-tuning) or that carries a LoRA adapter keeps its
    input, once per input shared: the normed input of q, k and v (d), that of gate and up (d),
    down_proj's input (f), in the activation dtype (a); o_proj's input is recomputed from the
    kernel's output (0). Per-head q/k RMSNorms (Qwen3) add q and k before them and a 1/rms
    per head: a (q + kv) + 4 (h + kv heads). peft's fp32 adapters under a half precision
    (`fp32_adapter_inputs`) keep their fp32 cast instead (4 per element, o_proj's too: 4 q).
    Each adapter keeps its A matrix's output (r per token, a or 4 bytes).

    Measured (tests/test_compiled.py): Llama, Qwen2 and Qwen3 layers, fp32 and bf16, full,
    LoRA on q,v and on all linears with fp32 and bf16 adapters; every count equal to the bytes of the
    tensors the compiled backward takes, parameters and the rotary tables excluded.
    """
    d, q, kv, h = arch.hidden_size, arch.q_dim, arch.kv_dim, arch.num_heads
    f = arch.intermediate_size
    common = a * (2 * d + 2 * q + 2 * kv + 2 * f) + 4 * 2 + 4 * h
    if arch.qk_norm:  # Qwen3's per-head RMSNorms: q and k before them, an fp32 1/rms per head
        common += a * (q + kv) + 4 * (h + arch.num_kv_heads)
    if method == "full":
        return common + a * (2 * d + f)
    kept = 4.0 if fp32_adapter_inputs else a
    adapted = fused_adapter_names(arch, _ADAPTED[lora_targets])
    inputs = 0.0
    if adapted & {"q", "k", "v", "qkv"}:
        inputs += kept * d
    if "o" in adapted and fp32_adapter_inputs:
        inputs += kept * q
    if adapted & {"gate", "up", "gate_up"}:
        inputs += kept * d
    if "down" in adapted:
        inputs += kept * f
    return common + inputs + kept * lora_rank * len(adapted)


def compiled_loss_applies(t: Training) -> bool:
    """The loss kernels whose compiled form is counted here: transformers' loss (hf) and
    torchtune's chunked cross-entropy, both `cross_entropy(logits.float())` under
    torch.compile. The others (Liger, Cut Cross-Entropy, litgpt's) run their own kernels."""
    return t.compile and loss_kernel_of(t) in ("hf", "chunked")


def compiled_logits_bytes(tokens: int, vocab: int, a: float, kernel: str) -> float:
    """Forward working set of a compiled cross-entropy, bytes (N tokens, V vocabulary):
    - chunked: the chunks in the LM head's dtype (N V a); the fp32 upcast and log-softmax live
      in the fused kernel's registers; the saved max and log-sum-exp (8 N).
    - hf: the head's output and its fp32 copy while the cast runs (N V (a + 4)), the loss's
      input thereafter, kept for backward, and the two fp32 values per token (8 N). Taken as
      torchtune runs it (the model upcasts outside the compiled layers); a whole-model compile
      whose graph holds the upcast would keep the half-precision logits instead (less): not
      distinguished."""
    if kernel == "chunked":
        return tokens * vocab * a + 8.0 * tokens
    return tokens * vocab * (a + 4.0) + 8.0 * tokens


def compiled_loss_backward_bytes(tokens: int, vocab: int, a: float, kernel: str,
                                 chunks: float) -> float:
    """Logits working set at the first step of backward under a compiled cross-entropy, bytes:
    - chunked: the saved half-precision chunks (N V a: the backward recomputes the softmax from
      them and the per-token statistics, 8 N) and the gradient of the first chunk backward
      reaches, written once in their dtype (N V a / chunks).
    - hf: the saved fp32 logits and their fp32 gradient (N V 8), and the statistics (8 N); the
      cast of the gradient to the head's dtype follows once the saved logits are freed
      (N V (4 + a), less)."""
    if kernel == "chunked":
        return tokens * vocab * a * (1.0 + 1.0 / chunks) + 8.0 * tokens
    return tokens * vocab * 8.0 + 8.0 * tokens


def layer_saved_bytes_per_token(arch: ModelArch, t: Training, eager_bytes: float,
                                a: float) -> float:
    """Bytes a decoder layer saves per token: the compiled count where it applies, else
    `eager_bytes` (estimate/memory.py activation_bytes_per_token_layer's)."""
    if compiled_layer_applies(arch, t) is not None:
        return eager_bytes
    from gpuhours.estimate.lora_traffic import lora_branch_of

    fp32_inputs = t.method != "full" and a < 4 and lora_branch_of(t) == "peft-fp32"
    return compiled_activation_bytes_per_token_layer(arch, a, t.method, t.lora_targets,
                                                     t.lora_rank, fp32_inputs)


def compile_terms(arch: ModelArch, t: Training, eager_bytes: float, a: float) -> tuple[str, ...]:
    """The basis lines of a compiled setup: what compile changed and where the figures come
    from."""
    if not t.compile:
        return ()
    out = []
    why = compiled_layer_applies(arch, t)
    if why is None:
        compiled = layer_saved_bytes_per_token(arch, t, eager_bytes, a)
        out.append(f"compile: a compiled layer saves {compiled:,.0f} bytes per token for "
                   f"backward, eager {eager_bytes:,.0f} (AOTAutograd's min-cut partition "
                   f"recomputes norms, SiLU and the rotary products in backward; count read "
                   f"from the partition of real layers on CPU, estimate/compiled.py)")
        moved = compiled_elementwise_bytes_per_token_layer(arch, t, a)
        out.append(f"compile: the layers' elementwise work costed as Inductor's fused kernels, "
                   f"{moved:,.0f} bytes moved per token and layer (one read and one write of "
                   f"each kernel's tensors: a count, estimate/compiled.py "
                   f"compiled_elementwise_bytes_per_token_layer), where eager is costed as "
                   f"elementwise_passes x the saved bytes; host operators not reduced")
    else:
        out.append(f"compile: the layers keep the eager count: {why}")
    kernel = loss_kernel_of(t)
    if compiled_loss_applies(t):
        kept = "the LM head's dtype" if kernel == "chunked" else "fp32 (upcast before it)"
        out.append(f"compile: the {kernel} cross-entropy compiled keeps its input logits "
                   f"in {kept} and two fp32 values per token, no fp32 log-softmax "
                   f"(estimate/compiled.py compiled_logits_bytes)")
    elif kernel not in ("hf", "chunked"):
        out.append(f"compile: the {kernel} loss runs its own kernels: not changed")
    return tuple(out)


def compiled_elementwise_bytes_per_token_layer(arch: ModelArch, t: Training, a: float) -> float:
    """Bytes the fused (Inductor) elementwise kernels of one compiled decoder layer move per
    token, forward and backward: each fused kernel reads its inputs and writes its outputs
    once (a count over the partitioned graphs' fused regions, not a measurement).

    Forward: RMSNorm (read x, write the normed input: 2 a d); the rotary embedding on q and k
    (2 a (q + kv)); the residual add fused with the second RMSNorm (read x and the attention
    output, write the sum and the normed input: 4 a d); SiLU x up (read gate and up, write the
    product: 3 a f); the last residual add (3 a d): a (9 d + 2 (q + kv) + 3 f).
    Backward: the SiLU x up gradient with its recomputation (read the incoming gradient, gate
    and up; write both gradients and the recomputed product: 6 a f); each RMSNorm's gradient
    with its recomputation and the residual gradient's add (read the normed gradient, the
    input, the residual gradient; write the input gradient: 4 a d, twice); the rotary
    embedding's gradient (2 a (q + kv)); o_proj's input recomputed from the kernel's output
    where its weight trains (2 a q): a (8 d + 2 (q + kv) + 6 f) (+ 2 a q).
    LoRA: each adapter's add of B's output to the base output (read both, write: 3 a x its
    fan-out) in forward. Checkpointing recomputes the forward's kernels once more.
    Eager PyTorch runs each of these operators as its own kernel (the fp32 upcasts, pow, mean,
    rsqrt, the multiplies, the rotary's slices, negation and concatenation), each a full pass
    over its tensor; the estimate costs that as ELEMENTWISE_PASSES over the saved bytes.
    """
    d, q, kv, f = arch.hidden_size, arch.q_dim, arch.kv_dim, arch.intermediate_size
    forward = a * (9 * d + 2 * (q + kv) + 3 * f)
    backward = a * (8 * d + 2 * (q + kv) + 6 * f)
    if t.method == "full":
        backward += 2 * a * q
    else:
        fan_out = {"q": q, "k": kv, "v": kv, "o": d, "gate": f, "up": f, "down": d,
                   "qkv": q + 2 * kv, "gate_up": 2 * f}
        adapted = fused_adapter_names(arch, _ADAPTED[t.lora_targets])
        forward += sum(3 * a * fan_out[name] for name in adapted)
    return forward * (2 if t.checkpointing else 1) + backward
