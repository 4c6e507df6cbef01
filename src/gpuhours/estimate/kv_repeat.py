"""K and v repeated to the query heads before the attention kernel (Training.kv_repeated).

Grouped-query attention shares each k and v head among several query heads. Code that calls an
attention kernel without grouped-query support repeats k and v to the query heads first:
torchtune's MultiHeadAttention (torchtune/modules/attention.py at 30b8519e8 and 1814feb17:
`k.expand(...)` then a reshape, a contiguous copy) and transformers' `repeat_kv` where SDPA is
not given `enable_gqa`. The kernel then saves the repeated copies for backward, at the query
width, where the unrepeated k and v (after the rotary embedding) are not needed by anything else.
Read from the compiled partition of torchtune 0.6.1's own layer on this CPU (the same expand):
the count of estimate/compiled.py plus exactly this term, full and LoRA, bf16 and fp32.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuhours.estimate.arch import ModelArch
    from gpuhours.setup import Training


def repeated_kv_extra_bytes_per_token_layer(arch: ModelArch, t: Training, a: float) -> float:
    """Bytes per token and layer the repeated k and v add to what a layer saves: a 2 (q - kv)
    (the copies at the query width in place of k and v at theirs), a mean over the layers for
    hybrids whose attention sits on some layers only; 0 where the setup does not repeat them,
    for multi-head latent attention and encoders."""
    if not t.kv_repeated or arch.mla is not None or arch.encoder:
        return 0.0
    share = arch.attention_layer_count / arch.num_layers
    return a * 2 * (arch.q_dim - arch.kv_dim) * share


def repeated_kv_copy_bytes_per_token_layer(arch: ModelArch, t: Training, a: float) -> float:
    """Bytes per token and layer the repeat moves where its kernels are costed one by one
    (compiled): k and v read at their width and written at the query width in forward, the
    gradients read at the query width and summed back in backward: 4 a (q + kv)."""
    if repeated_kv_extra_bytes_per_token_layer(arch, t, a) == 0:
        return 0.0
    return 4 * a * (arch.q_dim + arch.kv_dim) * arch.attention_layer_count / arch.num_layers


def kv_repeat_terms(arch: ModelArch, t: Training, a: float) -> tuple[str, ...]:
    """The basis line of a setup that repeats k and v, with what it adds."""
    extra = repeated_kv_extra_bytes_per_token_layer(arch, t, a)
    if not t.kv_repeated:
        return ()
    if extra == 0:
        return ("kv_repeated: nothing added (no grouped k and v heads to repeat)",)
    return (f"kv_repeated: k and v repeated to the {arch.num_heads} query heads before the "
            f"attention kernel, which saves them at that width: +{extra:,.0f} bytes per token "
            f"and layer (estimate/kv_repeat.py; torchtune's MultiHeadAttention)",)
