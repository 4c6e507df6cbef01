"""LoRA on the MLP projections only (lora_targets "mlp"; issue 14).

peft matches each name of `target_modules` against the end of every module's qualified name
(peft/tuners/tuners_utils.py check_target_module_exists: the key equals the target or ends
with "." + target). A list of gate_proj, up_proj and down_proj so adapts the dense MLP's three
nn.Linear projections of each decoder layer (a non-gated MLP's up and down; a model that fuses
gate and up into one gate_up_proj, its gate_up and down), and nothing of the attention. The
PEFT benchmark's rows #372 and #373 (method_comparison/MetaMathQA, Llama 3.2 3B, "target-mlp")
run this list; their trainable-parameter count is the hand check (tests/test_lora_mlp.py).

Refused where the names would find other modules or none that this model counts: models with
routed experts (their experts are 3-D parameters or renamed by peft's conversion, and shared
experts also carry these names) and Mamba-style mixer layers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuhours.errors import FieldError

if TYPE_CHECKING:
    from gpuhours.estimate.arch import ModelArch


def mlp_only_linears(arch: ModelArch, mlp: list[tuple[str, int]]) -> list[tuple[str, int, int]]:
    """The adapted linears of lora_targets "mlp" as (name, fan-in + fan-out, copies in the
    model): `mlp` is one layer's MLP projections as (name, fan-in + fan-out), one of each per
    layer that has a dense MLP."""
    if arch.moe_layers or arch.ssm is not None:
        raise FieldError("lora_targets", f"{arch.name} has "
                         + ("routed experts" if arch.moe_layers else "mixer layers")
                         + ": LoRA on the MLP projections alone is modelled for dense "
                         "transformer layers only.", "Use lora_targets 'all-linear' or "
                         "'attention'.")
    dense = arch.num_layers - arch.mlp_free_layers
    return [(f"mlp_{name}", width, dense) for name, width in mlp]


def unreached_attention_bytes_per_token(arch: ModelArch, a: int, residual: int) -> float:
    """Bytes per token that the first layer's attention block does not save when nothing
    before the first MLP needs a gradient: with the embedding frozen and adapters on the MLP
    only, no tensor that requires a gradient enters the first layer's input norm and attention,
    so autograd records nothing there (measured on a real peft model on this CPU:
    tests/test_lora_mlp.py). Those are the norm's fp32 input (RMSNorm; a LayerNorm keeps its
    input in the residual dtype), q, k, v and the attention output as the kernel keeps them
    (a (q + 2 kv) + a q), and Qwen3's q/k norms' fp32 inputs; 0 for multi-head latent
    attention, whose tensors are counted elsewhere (estimate/mla.py) and not checked here."""
    if arch.mla is not None:
        return 0.0
    d, q, kv = arch.hidden_size, arch.q_dim, arch.kv_dim
    norm = residual * d if arch.norm_bias else 4 * d
    qk_norm = 4 * (q + kv) if arch.qk_norm else 0
    return norm + a * (q + 2 * kv) + a * q + qk_norm
