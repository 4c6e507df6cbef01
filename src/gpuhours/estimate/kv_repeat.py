"""K and v repeated to the query heads before the attention kernel (Training.kv_repeated), the
KV cache a held model output keeps beside them (Training.held_kv_cache), and the padding mask's
copies the kernels save (Training.padding_mask).

Grouped-query attention shares each k and v head among several query heads. Code that calls an
attention kernel without grouped-query support repeats k and v to the query heads first:
torchtune's MultiHeadAttention (torchtune/modules/attention.py at 30b8519e8 and 1814feb17:
`k.expand(...)` then a reshape, a contiguous copy) and transformers' `repeat_kv` where SDPA is
not given `enable_gqa`. The kernel then saves the repeated copies for backward, at the query
width, where the unrepeated k and v (after the rotary embedding) are not needed by anything else.
Read from the compiled partition of torchtune 0.6.1's own layer on this CPU (the same expand):
the count of estimate/compiled.py plus exactly this term, full and LoRA, bf16 and fp32.

transformers 5 (5.23.0's integrations/sdpa_attention.py `use_gqa_in_sdpa`: on CUDA grouped
k and v reach SDPA only with no mask) repeats them whenever a mask is passed, as it is for
batches padded to their longest. Two more tensors come with such a step:
- the mask: transformers builds one 4D boolean mask (B, 1, S, S) per forward; torch's
  scaled_dot_product_attention turns a boolean mask into an additive bias in the query's
  dtype in every call (convert_boolean_attn_mask) and the kernel saves that bias for
  backward: a S bytes per token and layer (S the positions a sequence runs);
- the KV cache: a training forward without checkpointing keeps use_cache=True, so the model
  returns a DynamicCache whose layers hold `torch.cat` copies of k and v at kv width
  (cache_utils.py DynamicLayer.update). A loop that holds the output (`outputs = model(...)`
  then `outputs.loss.backward()`: PEFT's method_comparison run.py) keeps it through backward
  and the optimizer step. Where k and v are not repeated the kernel saves those very tensors
  (nothing added); where they are, the kernel saves the repeated copies and the cache's are
  kept beside them: 2 a kv per token and layer.
Measured on a real tiny Llama (transformers 5.23.0, CPU, bf16): a padded batch keeps, beside
the unpadded one's saved tensors, exactly the repeat and one bias per layer, and its output
holds the cache on top (tests/test_padding_mask_real.py).
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


def held_cache_extra_bytes_per_token_layer(arch: ModelArch, t: Training, a: float) -> float:
    """Bytes per token and layer a held KV cache keeps beside what the attention kernel saves
    (module docstring): 2 a kv where k and v are repeated before the kernel (kv_repeated, or
    prefix tuning, whose mask makes its SDPA path repeat them: estimate/peft_methods.py), a
    mean over the layers for hybrids; 0 with no cache held, no grouped heads to repeat (the
    kernel then saves the cache's own tensors), multi-head latent attention and encoders."""
    repeated = t.kv_repeated or t.peft_method == "prefix_tuning"
    if (not t.held_kv_cache or not repeated or arch.mla is not None or arch.encoder
            or arch.q_dim == arch.kv_dim):
        return 0.0
    share = arch.attention_layer_count / arch.num_layers
    return a * 2 * arch.kv_dim * share


def held_kv_cache_bytes(arch: ModelArch, t: Training, a: float) -> float:
    """The KV cache a held output keeps, bytes: k and v at kv width for every position of
    every attention layer, a 2 kv per position and layer (a the activation bytes; prefix
    tuning's virtual positions too: its cache starts with them). What it adds to the step's
    peak is `held_cache_extra_bytes_per_token_layer`; this whole stays allocated after the
    step, until the next forward's output replaces it."""
    if not t.held_kv_cache or arch.mla is not None or arch.encoder:
        return 0.0
    n = t.tokens_per_micro_batch
    if t.peft_method == "prefix_tuning":
        n += t.micro_batch * (t.peft_virtual_tokens or 0)
    return n * arch.kv_cache_elements_per_token * a


def padding_mask_bytes_per_token_layer(arch: ModelArch, t: Training, a: float) -> float:
    """Bytes per token and layer of the padding mask's additive copies the SDPA kernels save
    (module docstring): a S, S the positions a sequence runs (prompt tuning's virtual tokens
    included), a mean over the layers for hybrids. 0 without a padding mask, for prefix
    tuning (estimate/peft_methods.py counts its S x (S + P) mask), without SDPA's fused
    kernels (flash_attention False: the eager path adds the mask into the scores it keeps)
    and for encoders."""
    if (not t.padding_mask or t.peft_method == "prefix_tuning" or not t.flash_attention
            or arch.encoder):
        return 0.0
    share = arch.attention_layer_count / arch.num_layers
    return a * t.llm_seq_len * share


def held_output_terms(arch: ModelArch, t: Training, a: float) -> tuple[str, ...]:
    """The basis lines of a held KV cache and of a padding mask, with what each adds."""
    out: list[str] = []
    tokens = t.tokens_per_micro_batch
    if t.held_kv_cache:
        extra = held_cache_extra_bytes_per_token_layer(arch, t, a)
        whole = held_kv_cache_bytes(arch, t, a)
        out.append(f"held_kv_cache: the held output's KV cache, {whole / 2**30:.2f} GiB (k and v "
                   f"at kv width, every layer), kept through backward and the step; beside the "
                   f"kernel's saved tensors +{extra * tokens * arch.num_layers / 2**30:.2f} GiB "
                   "(estimate/kv_repeat.py)")
    mask = padding_mask_bytes_per_token_layer(arch, t, a)
    if mask:
        out.append(f"padding_mask: each layer's SDPA keeps the mask as an additive bias, "
                   f"{mask:,.0f} bytes per token and layer: "
                   f"+{mask * tokens * arch.num_layers / 2**30:.2f} GiB (estimate/kv_repeat.py)")
    return tuple(out)
