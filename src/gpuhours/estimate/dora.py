"""DoRA (weight-decomposed LoRA, Liu et al. 2024, arXiv:2402.09353) as peft runs it: what each
adapted linear adds to LoRA's parameters, saved tensors, transient memory, FLOPs and traffic.

peft 0.21.2 (tuners/lora/variants.py DoraLinearVariant.forward, tuners/lora/dora.py
DoraLinearLayer.forward), per adapted linear of fan-in i and fan-out o, per forward:

    result = base_layer(x)                                    # the frozen linear, as in LoRA
    x = x.to(lora_A.weight.dtype)                             # LoRA's cast (peft-fp32 branch)
    x_eye = torch.eye(i, dtype=lora_A.weight.dtype)           # get_lora_weight: B A through the
    lora_weight = lora_B(lora_A(x_eye)).T.to(x.dtype)         #   modules, "FSDP-safe" (o x i)
    weight = dequantize_module_weight(base).to(x.dtype)       # W (a 4-bit base dequantised)
    weight_norm = linalg.norm(weight + scaling * lora_weight.detach(), dim=1)   # no graph
    mag_norm_scale = (magnitude / weight_norm.detach()).view(1, -1)            # magnitude: o
    lora_result = lora_B(lora_A(x))
    base_result = result  (dropout 0: "reuse")  or  F.linear(dropout(x), weight)  ("recompute")
    result = result + (mag_norm_scale - 1) * base_result + mag_norm_scale * lora_result * scaling

The recompute path is every peft from 0.9 (DoRA's first release) to 0.13 (v0.12.0 a1432e18
dora.py forward: `F.linear(x, transpose(weight, ...))` always) and every later one with
lora_dropout above 0; peft 0.14 (PR #2122, 42841b5f) reuses the base result without dropout.
Training disables peft's DoRA cache (ENABLE_DORA_CACHING is off and `self.training` clears it),
so the norm runs every forward (twice under checkpointing).

Autograd then keeps, per token, the two outputs the magnitude multiplies (mag_norm_scale
requires grad, so each mul saves its other operand): base_result (o elements in the base
output's dtype) and lora_result (o in the LoRA output's dtype); the recompute path keeps
instead its own output, and the weight the matmul was
given when that is a new tensor (a cast or dequantised copy: o x i per module, not per token;
its input is not kept, the weight being frozen).
The dense B A product, the weight copy and the norm's sum are alive together inside the
forward (the transient); lora_weight's graph keeps x_eye's matmul input until it is dropped.

Dtypes (DoraDtypes): a the base output (activation) bytes, s the adapters' (4 on the peft-fp32
branch, else a: the magnitude and the scale's products), e the adapters' input after peft's
cast and so the norm's (s; a for a 4-bit base under autocast, which peft does not cast), o
the LoRA output's (a under autocast, else e), w the frozen weight's.
Half adapters (peft 0.10-0.11) are e = a. Checked on a real tiny Llama with peft 0.21.2 on CPU
(tests/test_dora_real.py). Not modelled: DoRA on embeddings, convolutions, the LM head, and
peft's ParamWrapper (fused experts), which refuses DoRA.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuhours.errors import FieldError
from gpuhours.estimate.arch import ModelArch
from gpuhours.estimate.lora import PEFT_FUSED_EXPERT_TYPES, adapted_linears
from gpuhours.estimate.lora_traffic import adapted_fan_in, lora_branch_of
from gpuhours.setup import Training


@dataclass(frozen=True)
class DoraLinear:
    """One kind of DoRA-adapted linear: fan-in and fan-out (elements), `copies` in the model,
    `active` on one token's path."""

    fan_in: int
    fan_out: int
    copies: int
    active: float


@dataclass(frozen=True)
class DoraDtypes:
    """Bytes per element of DoRA's tensors (module docstring)."""

    a: float  # the base output / activations
    e: float  # the adapters' input after peft's cast: the norm's dtype
    s: float  # the magnitude's and the scale's products (the adapters' dtype)
    o: float  # lora_B's output
    w: float  # the frozen weight as stored (a 4-bit base: its compute dtype after dequant)
    autocast: bool
    quantised: bool


def dora_dtypes(t: Training, a: float) -> DoraDtypes:
    """DoRA's dtypes for `t` with activation bytes `a` (memory.ACTIVATION_BYTES)."""
    autocast = t.precision.endswith(("-mixed", "-amp"))
    s = 4.0 if lora_branch_of(t) == "peft-fp32" else float(a)
    # peft's bitsandbytes Linear4bit casts the input only outside autocast (tuners/lora/bnb.py
    # `requires_conversion = not torch.is_autocast_enabled()`): under autocast x stays half
    e = float(a) if (t.method == "qlora" and autocast) else s
    frozen = 4.0 if (t.precision == "fp32" or t.precision.endswith("-amp")) else 2.0
    return DoraDtypes(a=float(a), e=e, s=s, o=float(a) if autocast else e, w=frozen,
                      autocast=autocast, quantised=t.method == "qlora")


def dora_base_matmul_of(t: Training) -> str:
    """How DoRA gets its base output (Training.dora_base_matmul; when None: "reuse" without
    dropout, as peft 0.14+ runs it, else "recompute")."""
    if t.dora_base_matmul is not None:
        return t.dora_base_matmul
    return "reuse" if t.lora_dropout <= 0 else "recompute"


def dora_linears(arch: ModelArch, targets: str) -> list[DoraLinear]:
    """The linears DoRA adapts under `targets` (estimate/lora.py's list). Raises FieldError
    where peft refuses DoRA: the fused experts' 3-D parameters (peft's ParamWrapper: "does
    not work with LoRA variants like DoRA", tuners/lora/layer.py)."""
    out = []
    for ad in adapted_linears(arch, targets):
        if ad.name.startswith("experts_") or (ad.name == "router"
                                              and arch.model_type in PEFT_FUSED_EXPERT_TYPES):
            raise FieldError(("dora", "lora_targets"), f"peft adapts {arch.name}'s experts as "
                             "3-D parameters (ParamWrapper), which refuses DoRA.",
                             "Use lora_targets 'attention', or plain LoRA.")
        fan_in = int(adapted_fan_in(arch, ad))
        out.append(DoraLinear(fan_in, ad.width - fan_in, ad.copies, ad.active))
    return out


def dora_magnitude_params(arch: ModelArch, targets: str) -> int:
    """DoRA's magnitude vectors over the model: one element per output feature of every adapted
    linear (peft's lora_magnitude_vector, initialised to the rows' norms)."""
    return sum(d.copies * d.fan_out for d in dora_linears(arch, targets))


def dora_saved_bytes_per_token_layer(arch: ModelArch, t: Training, a: float) -> float:
    """Bytes per token and decoder layer that DoRA's forward keeps for backward beyond LoRA's
    (mean over the layers): base_result and lora_result (reuse), or the recomputed output and
    lora_result (recompute; its matmul keeps only the weight, as the weight is frozen)."""
    if not t.dora or t.method == "full":
        return 0.0
    dt = dora_dtypes(t, a)
    recompute = dora_base_matmul_of(t) == "recompute"
    total = 0.0
    for d in dora_linears(arch, t.lora_targets):
        base_out = (dt.a if dt.autocast else dt.e) if recompute else dt.a
        total += d.active * d.fan_out * (base_out + dt.o)
    return total / arch.num_layers


def dora_saved_bytes_per_layer(arch: ModelArch, t: Training, a: float) -> float:
    """Bytes per decoder layer (mean) DoRA keeps for backward that do not grow with tokens: per
    adapted linear, three vectors of o (the norm the division keeps, in e; mag_norm_scale - 1
    and mag_norm_scale kept by the two products, in s) and, on the recompute path,
    the weight F.linear was given when it is a new tensor (a dequantised 4-bit weight, a cast
    to the adapters' fp32 input dtype, or autocast's half copy of either), which autograd saves
    for the input's gradient: o x i."""
    if not t.dora or t.method == "full":
        return 0.0
    dt = dora_dtypes(t, a)
    per = 0.0
    if dora_base_matmul_of(t) == "recompute":
        if dt.autocast:
            per = dt.a if (dt.quantised or dt.e != dt.a or dt.w != dt.a) else 0.0
        else:
            per = dt.e if (dt.quantised or dt.w != dt.e) else 0.0
    return sum(d.copies * (d.fan_in * d.fan_out * per + (dt.e + 2 * dt.s) * d.fan_out)
               for d in dora_linears(arch, t.lora_targets)) / arch.num_layers


def dora_norm_transient_bytes(arch: ModelArch, t: Training, a: float) -> float:
    """Bytes alive at once inside one adapted linear's DoRA forward, for the largest: the
    identity's input to lora_A kept by its graph (i x i: autocast's half copy, else the
    identity itself), and over the o x i weight, in the adapters' input dtype: the B A
    product, the weight's cast or dequantised copy (when it is a new tensor), scaling x B A
    and their sum, whose row norms are taken. Freed when the layer's forward returns."""
    if not t.dora or t.method == "full":
        return 0.0
    dt = dora_dtypes(t, a)
    eye = dt.a if dt.autocast else dt.s  # torch.eye in lora_A's dtype
    copy = dt.e if (dt.quantised or dt.w != dt.e) else 0.0
    return max((d.fan_in * d.fan_in * eye + d.fan_in * d.fan_out * (3 * dt.e + copy)
                for d in dora_linears(arch, t.lora_targets)), default=0.0)


def dora_flops_per_micro_batch(arch: ModelArch, t: Training) -> float:
    """FLOPs of the dense B A product per micro-batch: lora_A then lora_B applied to an i x i
    identity (peft 0.12+ get_lora_weight), 2 r i (i + o) per adapted linear and forward (two
    forwards under checkpointing). Not per token: its cost is fixed per micro-batch."""
    if not t.dora or t.method == "full":
        return 0.0
    forwards = 2 if t.checkpointing else 1
    return forwards * sum(d.copies * 2.0 * t.lora_rank * d.fan_in * (d.fan_in + d.fan_out)
                          for d in dora_linears(arch, t.lora_targets))


def dora_flops_per_token(arch: ModelArch, t: Training) -> float:
    """FLOPs per token of the recomputed base matmul (recompute only): 2 i o forward (twice
    under checkpointing) and 2 i o for its input gradient (the weight is frozen)."""
    if not t.dora or t.method == "full" or dora_base_matmul_of(t) != "recompute":
        return 0.0
    passes = 3 if t.checkpointing else 2
    return sum(d.active * passes * 2.0 * d.fan_in * d.fan_out
               for d in dora_linears(arch, t.lora_targets))


def dora_norm_bytes_per_micro_batch(arch: ModelArch, t: Training, a: float) -> float:
    """Memory traffic of forming B A and the weight norm, bytes per micro-batch (every forward):
    per i x i identity element, its write, autocast's cast (read, write) and lora_A's read; per
    weight element, lora_B's output (write), its cast to the input dtype where it differs (read,
    write), the weight's copy (read the stored weight, write; a 4-bit base: its dequantisation
    reads half a byte and writes the compute dtype, then the cast), scaling x (read, write), the
    sum (read two, write one) and the norm (read)."""
    if not t.dora or t.method == "full":
        return 0.0
    dt = dora_dtypes(t, a)
    eye = dt.s + ((dt.s + dt.a) if dt.autocast else 0.0) + (dt.a if dt.autocast else dt.s)
    if dt.quantised:
        copy = 0.5 + dt.w + ((dt.w + dt.e) if dt.w != dt.e else 0.0)
    else:
        copy = (dt.w + dt.e) if dt.w != dt.e else 0.0
    per_weight = dt.o + ((dt.o + dt.e) if dt.o != dt.e else 0.0) + copy + 2 * dt.e \
        + 3 * dt.e + dt.e
    forwards = 2 if t.checkpointing else 1
    return forwards * sum(d.copies * (d.fan_in * d.fan_in * eye
                                      + d.fan_in * d.fan_out * per_weight)
                          for d in dora_linears(arch, t.lora_targets))


def dora_elementwise_bytes_per_fan_out(dt: DoraDtypes) -> tuple[float, float]:
    """(forward, backward) bytes per fan-out element per token of DoRA's elementwise work beyond
    LoRA's branch (estimate/lora_traffic.py counts LoRA's scaling, 2a, and add, 3a, forward, and
    the product's gradient and B's two reads of it, 4a, backward). s is the scale's dtype.
    forward: (m - 1) x base (read a, write s), m x lora (read o, write s), x scaling (read s,
    write s), their sum (read 2s, write s), result + it (read a and s, write s), the cast back
    to the base dtype where s != a (read s, write a). backward: that cast's and the add's
    casts of the gradient (read s, write a, each where s != a), x scaling (read s, write s),
    the lora path's gradient (read s, write s; cast to o where s != o: read s, write o) and
    the magnitude's (read s and o), the base path's (read s, write s; cast to a where s != a)
    and the magnitude's (read s and a), B's two reads of its gradient (2 o), and the base
    output's two gradients summed (read 2a, write a)."""
    a, s, o = dt.a, dt.s, dt.o
    cast_a = (s + a) if s != a else 0.0
    fwd = (a + s) + (o + s) + 2 * s + 3 * s + (a + 2 * s) + cast_a - 5 * a
    bwd = (2 * cast_a + 2 * s + 2 * s + ((s + o) if s != o else 0.0) + (s + o)
           + 2 * s + cast_a + (s + a) + 2 * o + 3 * a - 4 * a)
    return fwd, bwd


def dora_elementwise_bytes_per_token_layer(arch: ModelArch, t: Training, a: float) -> float:
    """Bytes per token and decoder layer (mean) of DoRA's elementwise work beyond LoRA's
    (dora_elementwise_bytes_per_fan_out), the forward twice under checkpointing."""
    if not t.dora or t.method == "full":
        return 0.0
    fwd, bwd = dora_elementwise_bytes_per_fan_out(dora_dtypes(t, a))
    per = fwd * (2 if t.checkpointing else 1) + bwd
    return sum(d.active * d.fan_out * per
               for d in dora_linears(arch, t.lora_targets)) / arch.num_layers
