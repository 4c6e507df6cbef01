"""Multi-head latent attention (DeepSeek-V2, arXiv:2405.04434 sec. 2.1): what a layer keeps for
backward. Parameters are in estimate/blocks.py, FLOPs and KV cache on ModelArch
(score_flops_per_key, kv_cache_elements_per_token)."""

from __future__ import annotations

from gpuhours.estimate.arch import ModelArch


def mla_attention_activation_bytes(arch: ModelArch, a: int, residual: int, full: bool,
                                   amp: bool) -> int:
    """Bytes one token keeps in one MLA layer for backward, following transformers'
    DeepseekV3Attention tensor by tensor with the conventions of estimate/memory.py
    (a = activation bytes, residual = residual-stream bytes, H heads, r_q / r_kv the ranks):
    - the attention kernel's q and k (H (qk_nope + qk_rope) each, the keys expanded from the
      latent by kv_b_proj), v (H v_head_dim) and output (H v_head_dim): a H (2 qk + 2 v);
    - the rotary parts before their embedding (q_rot: H qk_rope; k_rot: qk_rope): a;
    - the RMSNorms on the q latent and the kv latent: their fp32 input (4 (r_q + r_kv)) and,
      when their weights train, the normalised tensor (residual bytes);
    - full fine-tuning: the inputs of the trained linears: the hidden state (a d, read by
      q_a and kv_a; under autocast each keeps its own copy, one more a d), q_b's and kv_b's
      (a (r_q + r_kv)) and o_proj's (a H v).
    Without q_lora_rank, q_proj reads the hidden state and there is no q latent."""
    m = arch.mla
    assert m is not None
    d, h = arch.hidden_size, arch.num_heads
    kernel = a * h * (2 * m.qk_head_dim + 2 * m.v_head_dim)
    rotary = a * (h + 1) * m.qk_rope_head_dim
    latents = m.q_lora_rank + m.kv_lora_rank
    norms = 4 * latents + (residual * latents if full else 0)
    inputs = 0
    if full:
        inputs = a * d + a * latents + a * h * m.v_head_dim
        if amp:
            inputs += a * d
    return kernel + rotary + norms + inputs
