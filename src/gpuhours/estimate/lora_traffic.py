"""Memory traffic of peft's LoRA branch in eager PyTorch, bytes per token and decoder layer.

peft runs each adapter as separate eager operators beside the frozen linear (peft v0.5.0
src/peft/tuners/lora.py, Linear.forward; v0.10+ adds out of place, below):

    result = F.linear(x, W)                      # the frozen base (a GEMM: timed as FLOPs)
    x = x.to(lora_A.weight.dtype)                # a cast where the adapters are fp32
    result += lora_B(lora_A(dropout(x))) * scaling

Every step of the branch is a full pass over a tensor as wide as the linear's input (fan-in) or
output (fan-out): memory-bound, however small the rank. Counted per element, a = the
activation bytes (2 in half precision), e = the branch's element bytes after the cast (4 where
peft's fp32 adapters meet half-precision activations, else a):

forward, per fan-in element: the cast (read a, write 4), the dropout when lora_dropout > 0
  (torch's fused native_dropout: read e, write e and a 1-byte mask), the cast of the fp32 input
  to half for A's matmul where it runs in half precision (autocast: read 4, write a), A's
  matmul reading its input (a); per fan-out element: B's output (write a), the product with
  `scaling` (read a, write a), the in-place add into the base output (read 2a, write a): 6a.
backward, per fan-out element: the product's gradient (read a, write a), B's input-gradient
  and weight-gradient matmuls each reading the output gradient (a + a): 4a; per fan-in element:
  A's input gradient (write a) and weight gradient (read the saved input: a), the cast's
  backward (read a, write 4), the dropout's backward (read e and the mask, write e), the
  first cast's backward (read 4, write a), and the sum of this gradient with the base
  linear's input gradient (read 2a, write a).

Without autocast (a pure bf16/fp16 step) fp32 adapters run B and the scaling in fp32 too, with
no half copy for A (_pure_fp32_branch_bytes). Not counted: peft 0.10+'s out-of-place add
followed by `.to(dtype)` (a pass more), and bitsandbytes' Linear4bit.forward in peft, which
clones the base result (a full-width copy more) and under autocast runs dropout in half.

Checkpointing runs the forward twice. The rank-r intermediates (r elements per token) are
left out (r is 8-64 against fan-ins of 10^3-10^4).

How the branch runs is Training.lora_branch. peft's adapters are fp32 in peft 0.5-0.6
(nn.Linear of the default dtype, only moved to the weight's device: in 0.6 update_layer runs
before the layer has a weight to take a dtype from) and 0.12+ (autocast_adapter_dtype=True),
in the base weight's dtype in 0.7-0.11 (the base layer wrapped: LoraLayer.update_layer
`self.to(weight.device, dtype=weight.dtype)`); DeepSpeed's engine casts the whole module to
its fp16/bf16 dtype and FSDP's flat parameters hold one dtype (peft-half: no cast).
torchtune's eager LoRALinear runs the same operators in bf16. Where the branch is fused
(Triton LoRA kernels such as NeMo Automodel's, torch.compile, Megatron's adapters inside
Transformer Engine layers) only timing's generic passes over the saved tensors are charged.
"""

from __future__ import annotations

from gpuhours.estimate.arch import ModelArch
from gpuhours.estimate.lora import Adapted, adapted_linears
from gpuhours.setup import Training

#: bytes of torch's dropout mask per element (a bool tensor on CUDA)
DROPOUT_MASK_BYTES = 1.0


def lora_branch_of(t: Training) -> str:
    """The LoRA branch that runs (Training.lora_branch; its default when None): fused on the
    megatron kernel path, peft-half for half adapters (Training.lora_adapter_dtype) or where an
    engine casts the model (DeepSpeed: a ZeRO-1/2 bucket or its ZeRO-3 engine; FSDP:
    zero_stage 3), else peft-fp32."""
    if t.lora_branch is not None:
        return t.lora_branch
    if t.kernels == "megatron":
        return "fused"
    if t.lora_adapter_dtype == "half" or t.zero_stage >= 3 or t.deepspeed_reduce_bucket > 0:
        return "peft-half"
    return "peft-fp32"


def branch_bytes_per_element(a: float, fp32_adapters: bool, dropout: bool,
                             checkpointing: bool, autocast: bool = True) -> tuple[float, float]:
    """(per fan-in element, per fan-out element) bytes one token moves through one adapter in a
    training step (module docstring: the count, step by step). `autocast`: the step runs under
    torch.autocast (mixed and amp precisions); without it (pure bf16/fp16) fp32 adapters run the
    whole branch in fp32 (_pure_fp32_branch_bytes)."""
    if fp32_adapters and not autocast:
        return _pure_fp32_branch_bytes(a, dropout, checkpointing)
    e = 4.0 if fp32_adapters else a
    cast_in = (a + 4.0) if fp32_adapters else 0.0  # x.to(fp32)
    half_for_matmul = (4.0 + a) if fp32_adapters else 0.0  # autocast's copy for A's GEMM
    drop_fwd = (2 * e + DROPOUT_MASK_BYTES) if dropout else 0.0
    fwd_in = cast_in + drop_fwd + half_for_matmul + a
    fwd_out = 6 * a
    drop_bwd = (2 * e + DROPOUT_MASK_BYTES) if dropout else 0.0
    bwd_in = (2 * a + (a + 4.0 if fp32_adapters else 0.0) + drop_bwd
              + (4.0 + a if fp32_adapters else 0.0) + 3 * a)
    bwd_out = 4 * a
    passes = 2.0 if checkpointing else 1.0
    return passes * fwd_in + bwd_in, passes * fwd_out + bwd_out


def _pure_fp32_branch_bytes(a: float, dropout: bool, checkpointing: bool) -> tuple[float, float]:
    """fp32 adapters on a half-precision model without autocast (peft v0.5 Linear.forward in a
    pure bf16 step): no half copy for A's matmul; A, B and the scaling run in fp32, and the
    in-place add promotes. forward, per fan-in element: the cast (read a, write 4), the dropout
    (read 4, write 4 and a 1-byte mask), A's matmul reading its fp32 input (4); per fan-out: B's
    output (write 4), the scaling (read 4, write 4), the add into the half result (read a and 4,
    write a). backward, per fan-out: the output gradient cast to fp32 (read a, write 4), the
    scaling's backward (read 4, write 4), B's two gradient matmuls reading it (4 + 4); per
    fan-in: A's input gradient (write 4) and weight gradient (read the saved input: 4), the
    dropout's backward (read 4 and the mask, write 4), the cast's backward (read 4, write a),
    the sum with the base linear's input gradient (read 2a, write a)."""
    drop = (2 * 4.0 + DROPOUT_MASK_BYTES) if dropout else 0.0
    fwd_in = (a + 4.0) + drop + 4.0
    fwd_out = 4.0 + 8.0 + (2 * a + 4.0)
    bwd_out = (a + 4.0) + 8.0 + 8.0
    bwd_in = 4.0 + 4.0 + drop + (4.0 + a) + 3 * a
    passes = 2.0 if checkpointing else 1.0
    return passes * fwd_in + bwd_in, passes * fwd_out + bwd_out


def _fan_in(arch: ModelArch, adapted: Adapted) -> float:
    """Fan-in of an adapted linear by its name in estimate/lora.py: attention inputs are d
    (o_proj: q); an MLP's down projection takes its intermediate width; others half the width
    (fan-in + fan-out) where the name does not say."""
    name = adapted.name
    if name in ("qkv", "q_proj", "k_proj", "v_proj", "q_a_proj", "kv_a_proj_with_mqa",
                "router"):
        return float(arch.hidden_size)
    if name in ("o", "o_proj"):
        return float(adapted.width - arch.hidden_size)
    if name.endswith("_down") or name == "experts_down":
        return float(adapted.width - arch.hidden_size)
    if name.startswith(("mlp_", "shared_")):
        return float(arch.hidden_size)
    return adapted.width / 2.0


def adapted_fan_in(arch: ModelArch, adapted: Adapted) -> float:
    """Fan-in of an adapted linear (estimate/lora.py's name for it), elements; its fan-out is
    the rest of its width (_fan_in above)."""
    return _fan_in(arch, adapted)


def lora_branch_bytes_per_token_layer(arch: ModelArch, t: Training, a: float) -> float:
    """Bytes peft's LoRA branches move per token and decoder layer in one training step (mean
    over the layers; a routed expert's adapters in the share of tokens routed to it); 0 for a
    fused branch. Under fp32 precision there is nothing to cast. 0 for a PEFT method beside
    LoRA (setup.peft_method): its kept tensors are charged by timing's generic passes."""
    branch = lora_branch_of(t)
    if branch == "fused" or t.peft_method != "lora":
        return 0.0
    fp32_adapters = branch == "peft-fp32" and t.precision != "fp32"
    per_in, per_out = branch_bytes_per_element(
        a, fp32_adapters, t.lora_dropout > 0, t.checkpointing,
        autocast=t.precision.endswith(("-mixed", "-amp")))
    total = 0.0
    for ad in adapted_linears(arch, t.lora_targets):
        fan_in = _fan_in(arch, ad)
        total += ad.active * (per_in * fan_in + per_out * (ad.width - fan_in))
    return total / arch.num_layers


def generic_lora_saved_bytes_per_token_layer(arch: ModelArch, t: Training, a: float,
                                             kept: float) -> float:
    """The LoRA share of what memory.activation_bytes_per_token_layer keeps per token and
    layer (each adapter's input, `kept` bytes per element, and its A output, kept x r): the
    part timing's generic ELEMENTWISE_PASSES would charge for the branch, which
    lora_branch_bytes_per_token_layer counts instead (0 for a PEFT method beside LoRA)."""
    if t.peft_method != "lora":
        return 0.0
    total = sum(ad.active * kept * (_fan_in(arch, ad) + t.lora_rank)
                for ad in adapted_linears(arch, t.lora_targets))
    return total / arch.num_layers
