"""PEFT methods beside LoRA as peft 0.21.2 runs them (setup.peft_method): trainable
parameters, what autograd keeps for backward, transient memory and matmul FLOPs.

Read from peft 0.21.2's code (the venv's site-packages/peft/tuners), for a half-precision base
with peft's default fp32 adapters (get_peft_model autocast_adapter_dtype=True) and no autocast;
a = activation bytes, e = the adapters' dtype (4), i fan-in and o fan-out of an adapted linear:

- ia3 (ia3/layer.py Linear.forward; peft's llama targets k_proj, v_proj and down_proj, the
  last "feedforward"; ia3_targets all-linear: all seven, the MLP's feedforward, each casting
  its own copy of its input): k and v return `(base(x) * ia3_scaling).to(dtype)`: the product with an
  fp32 vector promotes to fp32 and the mul keeps the half-precision base output (a o per
  token) and the vector `1 * ia3_l.flatten()` (a new fp32 tensor, o per layer); down_proj
  runs `base((x.to(fp32) * ia3_scaling).to(dtype))`: the mul keeps the fp32 copy of its input
  (4 f per token) and the vector (f per layer). Trainable: o for k and v, f for down.
- prompt_tuning (peft_model.py PeftModelForCausalLM.forward): num_virtual_tokens trained
  embeddings (P x d) concatenated before the input embeddings and the labels padded with
  -100: the model runs seq_len + P positions (setup.llm_seq_len), logits included.
- prefix_tuning (peft_model.py get_prompt, no projection): an embedding of P x (layers x 2 x
  kv) gives every layer's past keys and values; transformers' cache concatenates them before
  the layer's own. The prefix makes transformers build an attention mask (S x (S + P) per
  sequence), and with a mask its SDPA path repeats k and v to the query heads
  (integrations/sdpa_attention.py use_gqa_in_sdpa: GQA only without a mask on CUDA), so the
  kernel keeps k and v at the query width over S + P positions, where the frozen model keeps
  them at kv width over S: 2 a (q - kv) per token and layer (estimate/kv_repeat.py's term)
  plus 2 a q per prefix position, sequence and layer; and each layer's SDPA keeps its own
  copy of the mask in the activation dtype (the boolean mask made an additive bias: a S (S +
  P) per sequence and layer).
- loha (loha/layer.py, lycoris_utils.py LycorisLayer.forward): `result + F.linear(
  x.to(e), delta)` with delta = (w1a w1b) * (w2a w2b) * scale (HadaWeight, a custom Function
  that keeps only its four factors). F.linear keeps its input's fp32 copy (e i per token, one
  per adapted linear) and the dense delta (e o i per linear and layer). Forming it holds
  w1a w1b, w2a w2b and their product at once: 2 o i beyond the kept delta. Trainable
  2 r (i + o).
- lokr (lokr/layer.py): delta = kron(w1, w2) * scale, w2 = w2_a w2_b when the rank is below
  half its larger side (w1 full unless decompose_both), shapes from peft's factorization()
  of i and o by decompose_factor. Kept as LoHa's (input copy, dense delta) plus w2 (kept by
  kron); forming holds kron's output and the scaled copy: o i beyond the kept delta.
- vera (vera/layer.py Linear.forward): `result + lambda_b * F.linear(lambda_d *
  F.linear(x.to(e), A[:, :i]), B[:o])` with A, B frozen and shared: the frozen linears keep
  no activation, the two products keep their other operand: the fp32 r-wide and o-wide
  outputs (e (r + o) per token). Trainable r + o per adapted linear.

Checked on a real tiny Llama with peft 0.21.2 on CPU (tests/test_peft_methods_real.py):
trainable parameters equal to peft's, saved storage to the byte. Not modelled: autocast
(peft's bf16 branches), dropouts, 4-bit bases, MoE, and every other peft method (AdaLoRA,
OFT/BOFT, p-tuning's prompt encoder, adaption prompt, FourierFT, ...).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuhours.errors import FieldError
from gpuhours.estimate.arch import ModelArch
from gpuhours.estimate.lora import adapted_linears
from gpuhours.estimate.lora_traffic import adapted_fan_in
from gpuhours.setup import Training

#: bytes per element of peft's adapters (fp32: autocast_adapter_dtype=True, peft 0.12+)
ADAPTER_BYTES = 4.0


@dataclass(frozen=True)
class PeftLinear:
    """One kind of adapted linear: fan-in and fan-out (elements), `copies` in the model."""

    fan_in: int
    fan_out: int
    copies: int
    feedforward: bool = False  # IA3 scales the input (down_proj), else the output


def _check_arch(arch: ModelArch, method: str) -> None:
    if arch.is_moe or arch.encoder or arch.mla is not None or arch.ssm is not None:
        raise FieldError(("peft_method", "model"), f"{method} is modelled on dense decoders "
                         f"(attention and a gated or plain MLP); {arch.name} is not one.",
                         "Use peft_method lora.")


def peft_linears(arch: ModelArch, t: Training) -> list[PeftLinear]:
    """The linears a LoHa, LoKr or VeRA adapts (lora_targets, as LoRA's: estimate/lora.py);
    IA3's (ia3_targets: peft's llama default k_proj, v_proj and down_proj, or all seven)."""
    _check_arch(arch, t.peft_method)
    if t.peft_method == "ia3":
        L, d, q, kv = arch.num_layers, arch.hidden_size, arch.q_dim, arch.kv_dim
        f = arch.intermediate_size
        down = PeftLinear(f, d, L, feedforward=True)
        if t.ia3_targets == "k-v-down":
            return [PeftLinear(d, kv, L), PeftLinear(d, kv, L), down]
        mlp = [PeftLinear(d, f, L, feedforward=True)] * (2 if arch.gated_mlp else 1)
        return [PeftLinear(d, q, L), PeftLinear(d, kv, L), PeftLinear(d, kv, L),
                PeftLinear(q, d, L), *mlp, down]
    out = []
    for ad in adapted_linears(arch, t.lora_targets):
        fan_in = int(adapted_fan_in(arch, ad))
        out.append(PeftLinear(fan_in, ad.width - fan_in, ad.copies))
    return out


def lokr_factorization(dimension: int, factor: int = -1) -> tuple[int, int]:
    """peft's lokr factorization(): two factors of `dimension`, the smaller first, the first
    grown from 1 while it divides, stays at most `factor` (-1: no bound) and the sum falls."""
    if factor > 0 and dimension % factor == 0:
        m, n = factor, dimension // factor
        return (m, n) if m <= n else (n, m)
    bound = dimension if factor < 0 else factor
    m, n = 1, dimension
    while m < n:
        new_m = m + 1
        while dimension % new_m != 0:
            new_m += 1
        new_n = dimension // new_m
        if new_m + new_n > m + n or new_m > bound:
            break
        m, n = new_m, new_n
    return (m, n) if m <= n else (n, m)


def lokr_shapes(fan_in: int, fan_out: int, rank: int, factor: int
                ) -> tuple[tuple[int, int], tuple[int, int], bool]:
    """(w1's shape, w2's shape, w2 factored into rank-r w2_a w2_b): peft's update_layer,
    w1 = (out_l, in_m) full (decompose_both off), w2 = (out_k, in_n), factored when
    r < max(out_k, in_n) / 2."""
    in_m, in_n = lokr_factorization(fan_in, factor)
    out_l, out_k = lokr_factorization(fan_out, factor)
    return (out_l, in_m), (out_k, in_n), rank < max(out_k, in_n) / 2


def peft_method_trainable_params(arch: ModelArch, t: Training) -> int:
    """Parameters the method trains over the whole model (module docstring)."""
    m, r = t.peft_method, t.lora_rank
    if m == "prompt_tuning":
        return (t.peft_virtual_tokens or 0) * arch.hidden_size
    if m == "prefix_tuning":
        _check_arch(arch, m)
        return (t.peft_virtual_tokens or 0) * arch.num_layers * 2 * arch.kv_dim
    total = 0
    for p in peft_linears(arch, t):
        if m == "ia3":  # a vector over the output (k, v) or the input (down_proj)
            n = p.fan_in if p.feedforward else p.fan_out
        elif m == "loha":
            n = 2 * r * (p.fan_in + p.fan_out)
        elif m == "lokr":
            w1, w2, factored = lokr_shapes(p.fan_in, p.fan_out, r, t.lokr_decompose_factor)
            n = w1[0] * w1[1] + (r * (w2[0] + w2[1]) if factored else w2[0] * w2[1])
        else:  # vera: lambda_d (r) and lambda_b (o)
            n = r + p.fan_out
        total += p.copies * n
    return total


def peft_method_saved_bytes_per_token_layer(arch: ModelArch, t: Training, a: float) -> float:
    """Bytes per token and decoder layer (mean) the method's layers keep for backward (a the
    activation bytes; module docstring); prefix and prompt tuning keep nothing per token
    beyond the frozen model's own."""
    m = t.peft_method
    if m == "prefix_tuning" and not t.kv_repeated:  # k and v at the query width (docstring)
        return 2 * a * (arch.q_dim - arch.kv_dim)
    if m in ("lora", "prompt_tuning", "prefix_tuning"):
        return 0.0
    e = ADAPTER_BYTES
    total = 0.0
    for p in peft_linears(arch, t):
        if m == "ia3":  # the half output of k/v, or down_proj's input cast to fp32
            total += p.copies * (e * p.fan_in if p.feedforward else a * p.fan_out)
        elif m in ("loha", "lokr"):  # the input's fp32 copy F.linear keeps (a no-op in fp32)
            total += p.copies * e * p.fan_in
        else:  # vera: the two products' fp32 operands, r and o wide
            total += p.copies * e * (t.lora_rank + p.fan_out)
    if m in ("loha", "lokr") and a == e:
        # in fp32 the cast returns the input itself: linears on one input keep one tensor
        total -= _shared_input_elements(arch, t) * e
    return total / arch.num_layers


def _shared_input_elements(arch: ModelArch, t: Training) -> float:
    """Elements per token over the model counted twice where adapted linears share an input
    (q, k and v; gate and up) and it is kept once (fp32)."""
    names = {"qv": ("q", "v"), "attention": ("q", "k", "v"), "qkv": ("q", "k", "v"),
             "all-linear": ("q", "k", "v", "gate", "up"), "mlp": ("gate", "up")}
    shared = names[t.lora_targets]
    attn = sum(1 for n in shared if n in ("q", "k", "v"))
    mlp = sum(1 for n in shared if n in ("gate", "up"))
    return arch.num_layers * arch.hidden_size * (max(attn - 1, 0) + max(mlp - 1, 0))


def peft_method_saved_bytes_per_layer(arch: ModelArch, t: Training, a: float) -> float:
    """Bytes per decoder layer (mean) kept for backward that do not grow with the micro-batch's
    tokens: LoHa's and LoKr's dense delta weights (e o i each; LoKr also w2 when factored),
    IA3's fp32 scaling vectors, and prefix tuning's keys and values at the prefix positions
    (2 q a per position and sequence: micro_batch sequences; with a held KV cache also its
    2 kv a at kv width) and its attention mask (a S (S + P) per sequence, S = seq_len)."""
    m = t.peft_method
    e = ADAPTER_BYTES
    if m == "prefix_tuning":
        prefix = t.peft_virtual_tokens or 0
        # a held output's KV cache starts with the prefix's k and v at kv width, kept beside
        # the repeated copies the kernel saves (estimate/kv_repeat.py)
        cache = prefix * 2 * arch.kv_dim if t.held_kv_cache else 0
        return t.micro_batch * a * (prefix * 2 * arch.q_dim + cache
                                    + t.seq_len * (t.seq_len + prefix))
    if m not in ("ia3", "loha", "lokr"):
        return 0.0
    total = 0.0
    for p in peft_linears(arch, t):
        if m == "ia3":
            total += p.copies * e * (p.fan_in if p.feedforward else p.fan_out)
            continue
        total += p.copies * e * p.fan_in * p.fan_out
        if m == "lokr":
            _, w2, factored = lokr_shapes(p.fan_in, p.fan_out, t.lora_rank,
                                          t.lokr_decompose_factor)
            total += p.copies * e * w2[0] * w2[1] * factored
    return total / arch.num_layers


def peft_method_transient_bytes(arch: ModelArch, t: Training) -> float:
    """Bytes alive inside the largest adapted linear's forward beyond what it keeps: LoHa's two
    rank-r products and their Hadamard product before the scaled delta (2 o i e beyond it),
    LoKr's Kronecker product beside its scaled copy (o i e)."""
    m = t.peft_method
    if m not in ("loha", "lokr"):
        return 0.0
    extra = 2 if m == "loha" else 1
    return max((extra * ADAPTER_BYTES * p.fan_in * p.fan_out for p in peft_linears(arch, t)),
               default=0.0)


def peft_method_flops_per_token(arch: ModelArch, t: Training) -> tuple[float, float]:
    """(forward, backward) matmul FLOPs per token of the method's adapters: LoHa and LoKr
    multiply by the dense delta (2 i o forward; its input and weight gradients, 4 i o, in
    backward), VeRA by its r-wide A and B (2 r (i + o); 4 r (i + o)); IA3 and the
    virtual-token methods none (prompt tuning's extra positions are in the sequence). The
    delta's formation per micro-batch (LoHa 4 r i o, under 1% here) is left out."""
    m = t.peft_method
    if m in ("loha", "lokr"):
        fwd = sum(p.copies * 2.0 * p.fan_in * p.fan_out for p in peft_linears(arch, t))
    elif m == "vera":
        fwd = sum(p.copies * 2.0 * t.lora_rank * (p.fan_in + p.fan_out)
                  for p in peft_linears(arch, t))
    else:
        return 0.0, 0.0
    return fwd, 2.0 * fwd


def peft_method_terms(arch: ModelArch, t: Training, a: float) -> list[str]:
    """The setup terms of a PEFT method beside LoRA, each a line (empty for lora)."""
    m = t.peft_method
    if m == "lora":
        return []
    per_token = peft_method_saved_bytes_per_token_layer(arch, t, a)
    per_layer = peft_method_saved_bytes_per_layer(arch, t, a)
    layers = arch.num_layers
    out = [f"peft_method = {m}: {peft_method_trainable_params(arch, t):,} trainable parameters "
           "as peft 0.21.2 counts them (estimate/peft_methods.py)"]
    if m == "prompt_tuning":
        out.append(f"prompt_tuning: {t.peft_virtual_tokens} virtual tokens before each "
                   f"sequence: the model runs {t.llm_seq_len} positions, logits included")
    if per_token:
        kept = per_token * t.tokens_per_micro_batch * layers
        out.append(f"peft_saved_bytes = {kept / 2**30:.2f} GiB in the activations: "
                   f"{per_token:,.0f} bytes per token and layer kept by {m}'s layers "
                   "(peft_method_saved_bytes_per_token_layer)")
    if per_layer:
        out.append(f"peft_saved_layer_bytes = {per_layer * layers / 2**30:.2f} GiB in the "
                   f"activations, {layers} layer(s): "
                   + ("the prefix's keys and values at the query width and the attention "
                      "mask's copies" if m == "prefix_tuning" else "the dense delta weights "
                      "F.linear keeps" if m in ("loha", "lokr") else "the fp32 scaling "
                      "vectors") + " (peft_method_saved_bytes_per_layer)")
    transient = peft_method_transient_bytes(arch, t)
    if transient:
        out.append(f"peft_delta_transient_bytes = {transient / 2**30:.2f} GiB while the "
                   "largest adapted linear forms its delta weight "
                   "(peft_method_transient_bytes)")
    return out
