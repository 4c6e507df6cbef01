"""What transformers' `generate` holds at its peak, and the largest batch that fits (issue 13).

vLLM sizes its KV cache after profiling a forward of at most max_num_batched_tokens tokens
(estimate/engine_reserve.py) and SGLang keeps its activations outside its static share, so their
activations are bounded and the KV cache is what caps the batch
(estimate/generation.py max_batch_by_memory). transformers' `generate` has no such bound: it
prefills every prompt of the batch in one forward over batch x prompt tokens, so the batch is
capped by the largest transient of that forward (or of a decode step) beside the weights and
the KV cache. Counted from the code of each release (sources in the docstrings below; the
releases read: 4.38.2, 4.40.2, 4.41.2, 4.42.4, 4.44.2, 4.45.2, 4.46.3, 4.51.3 wheels from PyPI,
5.23.0 installed here):

    peak = weights + max(KV(prompt) + prefill transient, KV(prompt + output) + decode transient)
    reserved = peak x (1 + allocator_reserve_fraction) + cuda_context_bytes   (as estimate/memory.py)

The two phases are apart: the prefill's transients are freed before the cache grows, and the
caching allocator hands their blocks to the growing cache (large blocks are split). Under
`torch.no_grad` nothing is saved for backward: a transient lives only while an operator's
inputs and output are alive at once.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuhours.estimate import assumptions as A
from gpuhours.estimate import hf_quant
from gpuhours.estimate.arch import ModelArch
from gpuhours.setup import hf_release


def hf_generate_kv_cache_passes(arch: ModelArch, release: str = "4.46") -> float:
    """Passes over the KV cache (reads plus writes, in units of the whole cache of K and V) that
    one decode step of transformers' `generate` makes in `release`, counted from its code:

    - `DynamicCache.update` appends the step's K and V with `torch.cat`, which reads the old
      cache and writes a new one: 2 in every release (v4.38.2 `cache_utils.py` DynamicCache.update,
      lines 131-132; v4.46's the same; 5.23's DynamicLayer.update, cache_utils.py lines 136-137);
    - 4.x with transformers' default attention (SDPA; 4.48+ through
      `integrations/sdpa_attention.py`): `repeat_kv` (n = query heads per KV head > 1) expands
      the cache to one copy per query head: reads it once, writes n copies (v4.38.2
      `modeling_llama.py` repeat_kv, called by LlamaSdpaAttention; v4.46's Qwen2FlashAttention2
      before flash-attn too), and attention reads the n copies: 2 + (1 + n) + n, 17 for
      Qwen2.5-7B (n = 7); with n = 1 repeat_kv returns the tensor itself: 3;
    - 5.x: SDPA runs grouped-query attention without `repeat_kv` when the step has no attention
      mask and head_dim <= 256 (5.23 `integrations/sdpa_attention.py` use_gqa_in_sdpa, CUDA), and
      a decode step of an unpadded batch has none (5.23 `masking_utils.py`
      _ignore_causal_mask_sdpa: q_length 1, no padding): attention reads the cache once, 3.
      A padded batch keeps its mask and repeats the cache; not counted (an equal-length batch
      assumed, as our H100 run's). The 4.48-era `sdpa_attention_forward` repeats the cache
      unconditionally; `use_gqa_in_sdpa` came in a late 4.x release not pinned here, so the
      count changes at 5.0, and a 4.5x release after it is counted as 4.46 (slower than it is).

    Not counted: 4.48+'s flash-attention path (`attn_implementation="flash_attention_2"`,
    `integrations/flash_attention.py` hands the grouped cache to flash-attn without repeat_kv: 3;
    v4.51.3's `integrations/sdpa_attention.py` still repeats it unconditionally, lines 29-31).
    4.46's Qwen2 flash-attention class repeats it before flash-attn (v4.46.3 modeling_qwen2.py
    Qwen2FlashAttention2), so the Qwen2.5 benchmark's flash-attention rows count as SDPA's. The
    Qwen3 benchmark rows (4.51.3, flash-attn 2.7.4 installed, the script not published) show
    which path ran: between each model's 14K- and 30K-prompt rows a counted pass takes 858-884
    GB/s under this count for Qwen3-1.7B to 32B (n = 2-8) and 136-379 GB/s, falling with n,
    under flash-attention's 3 (gpuhours_dev.validation.hf_kv_rate; docs/generation.md): the
    cache was repeated, and SDPA, transformers' default, is what is counted.
    The release's major.minor is checked by setup.hf_release."""
    n = arch.num_heads / max(1, arch.num_kv_heads)
    if hf_release(release) >= (5, 0) or n <= 1:
        return 3.0
    return 2.0 + (1.0 + n) + n


#: model types whose transformers 4.38 code rebuilds a [batch, 1, max_pos, max_pos] causal mask
#: every forward from a registered buffer (v4.38.2 modeling_llama.py, modeling_gemma.py)
MASK_BUFFER_TYPES = frozenset({"llama", "gemma"})


def hf_generate_mask_bytes_per_sequence(arch: ModelArch, release: str, context: float) -> float:
    """Bytes that transformers 4.38's per-forward causal-mask rebuild reads and writes for one
    sequence of a decode step at `context` tokens, counted from v4.38.2 `modeling_llama.py`
    LlamaModel._update_causal_mask (SDPA and eager; flash-attention returns early). With the
    buffer of M x M positions (max_position_embeddings, doubled while the context exceeds it),
    P = M^2 elements per sequence, 2-byte (bf16/fp16) mask:

    - `causal_mask[None, None].repeat(batch)` writes P bools: 1 P bytes;
    - `.to(dtype)` reads them and writes 2 P: 3 P; `* min_dtype` reads and writes 2 P: 4 P;
    - generate's 2-D attention mask, over the first L = context columns (f = L / M): `.eq(0.0)`
      reads 2 and writes 1, the product with the padding row reads 1 and writes 1,
      `masked_fill` reads 2 + 1 and writes 2, the slice assignment reads 2 and writes 2:
      14 f P;
    - SDPA's fix-up for rows fully masked, run when any prompt is padded
      (`torch.any(attention_mask != 1)`, assumed: a batch's prompts differ in length):
      `causal_mask.min()` reads 2 P, `==` reads 2 and writes 1 P, `torch.all(dim=-1)` reads
      1 P, `mul` reads and writes 2 P: 10 P.

    (8 + 14 f + 10) x M^2 bytes: 390 MB a sequence for Llama-2 (M = 4096) at 1,536 tokens.
    Only the model types whose 4.38 code holds that buffer (MASK_BUFFER_TYPES: Llama and
    Gemma; Mistral and Qwen2 kept `_prepare_4d_causal_attention_mask`, sized to the sequence),
    and only 4.38: 4.39 sizes the mask to the cache, 4.36-4.37 to the sequence. 0 otherwise."""
    if hf_release(release) != (4, 38) or arch.model_type not in MASK_BUFFER_TYPES:
        return 0.0
    m = float(arch.max_positions or context)
    while context > m:
        m *= 2.0
    return (8.0 + 14.0 * context / m + 10.0) * m * m

#: bytes per element of the activations and logits the model computes (bf16/fp16)
_ACT_BYTES = 2.0
#: bytes per fp32 element (the logits' upcasts, the sampling tensors)
_FP32_BYTES = 4.0


@dataclass(frozen=True)
class Transient:
    """The largest transient of one phase of `generate`, bytes, and what it is."""

    bytes: float
    what: str


@dataclass(frozen=True)
class DeviceParts:
    """What of `generate`'s work one GPU holds. One GPU holds all of it (ALL_PARTS); a model
    split over GPUs by `device_map` (estimate/device_map.py) holds decoder layers on every GPU,
    the LM head on the GPU it was placed on, and the sampler on the first: accelerate's hook on
    the whole model sends its outputs back to the device of its inputs (accelerate 1.0.1
    hooks.py AlignDevicesHook io_same_device, post_forward), so the logits are copied to the
    first GPU, where generate's sampling and its token ids live."""

    #: decoder layers (their MLP and attention transients)
    layers: bool = True
    #: the LM head (its logits, and at the prefill the final hidden states it reads)
    head: bool = True
    #: generate's sampling (the fp32 logits, probabilities and draws; the token ids)
    sampler: bool = True


#: one GPU holding the whole model
ALL_PARTS = DeviceParts()


def mlp_transient_elements_per_token(arch: ModelArch, release: str = "5.0") -> tuple[float, str]:
    """Elements (16-bit units) per token alive during one decoder layer's MLP beyond its input and
    the residual, and its name. A gated MLP's `down_proj(act_fn(gate_proj(x)) * up_proj(x))`
    (v4.38.2 modeling_llama.py line 241; 5.23's LlamaMLP.forward the same) holds act(gate),
    up and their product at once: 3 x intermediate (gate_proj's output is freed once act_fn
    returns). A plain MLP holds fc1's output and its activation: 2 x intermediate.

    An MoE layer (k of E experts a token, I = moe_intermediate, d = hidden), the larger of the
    shared expert's 3 x its width and the routed experts, beside the router's fp32 weights (2 E):
    - 4.x loops over the experts (v4.46.3 modeling_qwen2_moe.py lines 686-709; 4.51.3
      modeling_qwen3_moe.py 266-275): the output accumulator (d), the int64 one-hot expert mask
      (`one_hot(selected_experts, E)`: E x k x 8 bytes, 4 E k units) and one expert's share of
      the tokens (k / E, uniform routing assumed) through its MLP (d + 3 I);
    - 5.x groups them (`grouped_mm`, 5.23's default experts implementation, integrations/moe.py
      grouped_mm_experts_forward): every routed row at once, its gathered input (d), gate_up's
      output (2 I), the activation and the product (2 I): k x (d + 4 I), beside the shared
      expert's output (d)."""
    if arch.is_moe and arch.moe_layers == arch.num_layers:
        e, k, i, d = (float(arch.num_experts), float(arch.experts_per_token),
                      float(arch.moe_intermediate_size), float(arch.hidden_size))
        shared = (3.0 if arch.gated_mlp else 2.0) * arch.shared_expert_intermediate_size
        if hf_release(release) >= (5, 0):
            routed = k * (d + 4.0 * i) + (d if shared else 0.0)
            name = "MoE layer (grouped experts: every routed token's rows at once)"
        else:
            routed = d + 4.0 * e * k + k / e * (d + 3.0 * i)
            name = "MoE layer (the loop over experts with its int64 one-hot mask)"
        return max(shared, routed) + 2.0 * e, name + " and residual stream"
    factor = 3.0 if arch.gated_mlp else 2.0
    return factor * arch.intermediate_size, "MLP intermediates and residual stream"


def repeats_kv(arch: ModelArch, release: str) -> bool:
    """Whether SDPA attention expands the cache to one copy per query head (`repeat_kv`) in
    `release`: the same release logic as the decode step's traffic
    (hf_generate_kv_cache_passes above counts more than 3 passes exactly when it does)."""

    return hf_generate_kv_cache_passes(arch, release) > 3.0


def attention_transient_elements_per_token(arch: ModelArch, release: str) -> float:
    """Elements per token alive in one layer's SDPA attention during a prefill, beyond the
    layer's input, the residual and the cache: q (q_dim), k and v (2 kv_dim, kept by the cache
    after rotary, so counted there), the rotary products of q and k (q_dim + kv_dim), the
    repeated K and V of 4.x (2 q_dim: v4.38.2 modeling_llama.py repeat_kv line 246; not in 5.x
    on an unpadded batch, 5.23 integrations/sdpa_attention.py use_gqa_in_sdpa) and the output
    (q_dim). SDPA's fused kernels (flash, memory-efficient; 4.36+'s default implementation)
    keep no score matrix; the eager implementation's batch x heads x prompt^2 scores are not
    modelled (not the default)."""
    q, kv = float(arch.q_dim), float(arch.kv_dim)
    return q + (q + kv) + (2.0 * q if repeats_kv(arch, release) else 0.0) + q


#: model types whose forward takes `num_logits_to_keep` in 4.45 (text decoders of the v4.45.2
#: wheel's models/*/modeling_*.py with `num_logits_to_keep: int = 0`); 4.46.3 adds glm, phimoe
#: and zamba
_KEEPS_LOGITS_445 = frozenset({
    "cohere", "dbrx", "gemma", "gemma2", "jetmoe", "llama", "mistral", "mixtral", "nemotron",
    "olmo", "olmoe", "persimmon", "phi", "phi3", "qwen2", "qwen2_moe", "stablelm", "starcoder2"})
_KEEPS_LOGITS_446 = _KEEPS_LOGITS_445 | {"glm", "phimoe", "zamba"}
#: model types whose forward still takes no `logits_to_keep` in 4.51.3 (checked: gpt2, bloom,
#: opt, mamba2); the others of 4.50+ are assumed to take it. Every model of 5.23 does.
_ALL_LOGITS_4_5X = frozenset({"gpt2", "bloom", "opt", "mamba", "mamba2"})


def keeps_last_logits(arch: ModelArch, release: str) -> bool:
    """Whether generate's prefill computes the LM head over the last position only in `release`:
    from 4.45 for a model whose forward takes num_logits_to_keep (logits_to_keep from 4.50),
    which generate then sets to 1 (v4.45.2 generation/utils.py lines 1902-1903; 4.51.3 lines
    2318-2319; 5.23 lines 2953-2954)."""
    rel = hf_release(release)
    if rel < (4, 45):
        return False
    if rel < (4, 46):
        return arch.model_type in _KEEPS_LOGITS_445
    if rel < (4, 50):
        return arch.model_type in _KEEPS_LOGITS_446
    return rel >= (5, 0) or arch.model_type not in _ALL_LOGITS_4_5X


def logits_bytes(arch: ModelArch, release: str, batch: int, positions: int) -> Transient:
    """The LM head's output in one forward of `batch` sequences of `positions` new tokens:
    - before 4.45 every position, upcast in the model's forward: the 16-bit output and its fp32
      copy alive at once, positions x V x (2 + 4) bytes (v4.38.2 modeling_qwen2.py lines
      1186-1187 and modeling_llama.py 1195-1196; v4.44.2 modeling_qwen2.py 1118-1119);
    - 4.45: generate passes num_logits_to_keep=1 to a model whose forward takes it (v4.45.2
      generation/utils.py lines 1902-1903; Llama, Qwen2 and others), and the forward still
      upcasts: V x (2 + 4) bytes a sequence (v4.45.2 modeling_qwen2.py line 1187);
    - 4.46 and later: the last position, no upcast: V x 2 (v4.46.3 modeling_qwen2.py line 1179;
      4.51.3 logits_to_keep, line 839; 5.23 slice_logits_to_keep, modeling_qwen2.py 455-456).
    A model whose forward takes no such argument in its release (keeps_last_logits) computes
    every position: with the upcast before 4.46, without it after. The upcast before 4.46 is
    read in Llama's and Qwen2's code and assumed for the other model types (GPT-2, BLOOM, OPT
    have none: an overcount for them)."""
    rel = hf_release(release)
    v = float(arch.vocab_size)
    upcast = rel < (4, 46)
    per = _ACT_BYTES + (_FP32_BYTES if upcast else 0.0)
    fp32 = ", upcast to fp32" if upcast else ""
    if not keeps_last_logits(arch, release):
        return Transient(batch * positions * v * per,
                         f"logits over all {batch:,} x {positions:,} positions{fp32}")
    return Transient(batch * v * per, f"last-position logits{fp32}")


def sampling_bytes(arch: ModelArch, batch: int) -> float:
    """The sampling step's fp32 tensors beside the logits (do_sample, as RL rollouts run):
    generate's fp32 copy of the last position (4.42+ `.clone()`/`.float()`, 5.23
    generation/utils.py line 3247 `.to(copy=True, dtype=torch.float32)`), softmax's
    probabilities (line 3274) and torch.multinomial's exponential draws of the same size (its
    one-sample path, `q = at::empty_like(self).exponential_(1)`, pytorch
    aten/src/ATen/native/Distributions.cpp multinomial_out): 3 x batch x V x 4 bytes, all
    three seen at the peak of a real generate on this CPU. Greedy decoding (argmax) holds one.
    Logits processors (temperature, top-k, top-p) add a batch x V tensor each: not counted
    (none assumed, as TRL's GRPO with temperature 1 and top_p 1)."""
    return 3.0 * batch * arch.vocab_size * _FP32_BYTES


#: generate's own int64 tensors a sequence holds per token: input_ids and attention_mask, each
#: grown by torch.cat every step (5.23 generation/utils.py line 3285 and
#: _update_model_kwargs_for_generation)
IDS_BYTES_PER_TOKEN = 16.0


def mask_bytes_per_sequence(arch: ModelArch, release: str) -> float:
    """The 4-D causal mask transformers 4.38 builds for Llama and Gemma from its max_position x
    max_position buffer (v4.38.2 modeling_llama.py line 1074:
    `causal_mask[None, None].repeat(batch).to(dtype) * min_dtype`), held in the model's dtype
    through the forward: 2 x M^2 bytes a sequence (the release logic of
    hf_generate_mask_bytes_per_sequence above). 0 for other releases and models."""

    if hf_release(release) != (4, 38) or arch.model_type not in MASK_BUFFER_TYPES:
        return 0.0
    m = float(arch.max_positions or 0)
    return _ACT_BYTES * m * m


def _with_mask(largest: Transient, arch: ModelArch, release: str, batch: int) -> Transient:
    """`largest` beside 4.38's Llama/Gemma causal mask of the batch (mask_bytes_per_sequence),
    which every forward of that release holds."""
    mask = batch * mask_bytes_per_sequence(arch, release)
    if not mask:
        return largest
    return Transient(largest.bytes + mask, f"{largest.what}, with 4.38's causal mask")


def residual_elements_per_token(arch: ModelArch) -> float:
    """Elements a token holds in the residual stream beside a layer's own transient: 4 d-wide
    tensors (the embeddings, the layer's input, the residual after attention, the normed
    input) and rotary's cos and sin (2 x head_dim); see prefill_transient."""
    return 4.0 * arch.hidden_size + 2.0 * arch.head_dim


def _quant_linear_transient(kernel: str, arch: ModelArch, tokens: float, residual: float,
                            tensor_parallel: int) -> Transient:
    """A layer's quantised linears' transient (hf_quant.layer_transient_elements) beside the
    residual stream's `residual` elements a token."""
    elements, what = hf_quant.layer_transient_elements(kernel, arch, tokens)
    return Transient((elements + tokens * residual) * _ACT_BYTES / tensor_parallel,
                     f"{what} and residual stream")


def prefill_transient(arch: ModelArch, release: str, batch: int, prompt_tokens: int,
                      tensor_parallel: int = 1, parts: DeviceParts = ALL_PARTS,
                      quant_linear: str | None = None) -> Transient:
    """The largest transient of generate's prefill (one forward over batch x prompt tokens):
    the larger of a decoder layer's (MLP or attention) and the LM head's logits with the
    sampling tensors; plus 4.38's Llama/Gemma mask. Beside a layer's own transient the residual
    stream holds 4 d-wide tensors a token: the embeddings (the model's forward keeps
    `inputs_embeds` through its loop over the layers), the layer's input (held by that loop),
    the residual after attention and the normed input (LlamaDecoderLayer.forward, v4.38.2 and
    5.23 alike), and rotary's cos and sin (2 x head_dim): all seen at the peak of a real prefill
    on this CPU (tests/test_hf_generate_memory.py). Split over `tensor_parallel` GPUs like the
    weights (assumed). On a GPU holding only some `parts` (device_map), only theirs: the
    layer's on a GPU with layers, the logits and final hidden states on the LM head's, the
    logits (copied) and the sampling tensors on the sampler's. With `quant_linear`, the
    quantised linears' own (hf_quant.layer_transient_elements) beside the residual stream."""
    tokens = float(batch) * prompt_tokens
    mlp, mlp_name = mlp_transient_elements_per_token(arch, release)
    attn = attention_transient_elements_per_token(arch, release)
    residual = residual_elements_per_token(arch)
    found = [Transient(0.0, "none")]
    if parts.layers and mlp >= attn:
        found.append(Transient(tokens * (mlp + residual) * _ACT_BYTES / tensor_parallel,
                               mlp_name))
    elif parts.layers:
        found.append(Transient(tokens * (attn + residual) * _ACT_BYTES / tensor_parallel,
                               "attention's q, rotary, repeated K/V and output, and residual "
                               "stream"))
    if parts.layers and quant_linear is not None:
        found.append(_quant_linear_transient(quant_linear, arch, tokens, residual,
                                             tensor_parallel))
    if parts.head or parts.sampler:
        logits = logits_bytes(arch, release, batch, prompt_tokens)
        found.append(Transient(
            (logits.bytes + (sampling_bytes(arch, batch) if parts.sampler else 0.0)
             + (tokens * arch.hidden_size * _ACT_BYTES if parts.head else 0.0))
            / tensor_parallel,
            f"{logits.what}" + (" and sampling" if parts.sampler else "")))
    return _with_mask(max(found, key=lambda t: t.bytes), arch, release, batch)


def decode_transient(arch: ModelArch, release: str, batch: int, context_tokens: float,
                     kv_bytes_per_token_layer: float, tensor_parallel: int = 1,
                     parts: DeviceParts = ALL_PARTS,
                     quant_linear: str | None = None) -> Transient:
    """The largest transient of a decode step at `context_tokens`, beside the whole cache:
    - attention: DynamicCache.update's `torch.cat` keeps a layer's old K (or V) beside the new
      one (v4.38.2 cache_utils.py lines 131-132; 5.23 DynamicLayer.update, lines 136-137):
      half a layer's cache; 4.x's repeat_kv then expands the layer's K and V to every query
      head (num_heads / num_kv_heads copies; the repeat logic of hf_generate_kv_cache_passes);
      beside either, the previous step's fp32 logits and probabilities (2 x batch x V x 4);
    - the LM head and sampling: logits_bytes of one position + sampling_bytes.
    `kv_bytes_per_token_layer`: K and V of one token in one attention layer, bytes per GPU.
    4.38's Llama/Gemma mask is added as in prefill_transient. On a GPU holding only some
    `parts` (device_map): the attention's on a GPU with layers, the previous step's fp32
    tensors and the sampling on the sampler's, the logits on the LM head's and the sampler's.
    With `quant_linear`, the quantised linears' own over the batch's one token each, beside the
    residual stream and the previous step's fp32 tensors."""
    layer_kv = batch * context_tokens * kv_bytes_per_token_layer
    # the previous step's fp32 logits and probabilities stay referenced by _sample's loop
    # variables (next_token_logits, probs: 5.23 generation/utils.py lines 3247 and 3274) until
    # this step's sampling replaces them: alive through the forward
    previous = (2.0 * batch * arch.vocab_size * _FP32_BYTES / tensor_parallel
                if parts.sampler else 0.0)
    found = [Transient(previous, "the previous step's fp32 logits and probabilities")]
    if parts.layers and repeats_kv(arch, release):
        n = arch.num_heads / arch.num_kv_heads
        found.append(Transient(n * layer_kv + previous,
                               f"repeat_kv's {n:g} copies of one layer's K and V"))
    elif parts.layers:
        found.append(Transient(layer_kv / 2.0 + previous,
                               "DynamicCache torch.cat: one layer's old K beside the new"))
    if parts.layers and quant_linear is not None:
        linear = _quant_linear_transient(quant_linear, arch, float(batch),
                                         residual_elements_per_token(arch), tensor_parallel)
        found.append(Transient(linear.bytes + previous, linear.what))
    if parts.head or parts.sampler:
        logits = logits_bytes(arch, release, batch, 1)
        found.append(Transient(
            (logits.bytes + (sampling_bytes(arch, batch) if parts.sampler else 0.0))
            / tensor_parallel, f"{logits.what}" + (" and sampling" if parts.sampler else "")))
    return _with_mask(max(found, key=lambda t: t.bytes), arch, release, batch)


def stale_prefill_logits_bytes(arch: ModelArch, release: str, batch: int,
                               prompt_tokens: int) -> float:
    """Before 4.42 `_sample` has no `del outputs` (v4.41.2 generation/utils.py has none, v4.42.4
    line 2716 has it), and `next_token_logits = outputs.logits[:, -1, :]` is a view (v4.38.2
    line 2706): the prefill's fp32 logits over every position stay alive through the first
    decode step's forward, batch x prompt x V x 4 bytes. 0 from 4.42."""
    if hf_release(release) >= (4, 42):
        return 0.0
    return float(batch) * prompt_tokens * arch.vocab_size * _FP32_BYTES


@dataclass(frozen=True)
class HfGeneratePeak:
    """generate's peak for one batch, bytes per GPU: what set it and its parts."""

    batch: int
    #: "prefill", "decode" (the last step) or "first decode" (beside the prefill's logits)
    phase: str
    weights_bytes: float
    kv_bytes: float
    transient: Transient
    #: live tensors at the peak: weights + KV (with generate's token ids) + transient
    tensors_bytes: float
    #: tensors x (1 + allocator reserve) + CUDA context: what nvidia-smi would show
    reserved_bytes: float

    def describe(self, prompt_tokens: int) -> str:
        """What set the peak, for the report: '<phase>: <transient> x GB (+ KV, weights)'."""
        phase = (f"prefill of {self.batch:,} x {prompt_tokens:,} tokens" if self.phase == "prefill"
                 else f"{'first' if self.phase == 'first decode' else 'last'} decode step of "
                      f"{self.batch:,} sequences")
        return (f"{phase}: {self.transient.what} {self.transient.bytes / 1e9:.1f} GB beside KV "
                f"{self.kv_bytes / 1e9:.1f} GB and weights {self.weights_bytes / 1e9:.1f} GB; "
                f"peak {self.reserved_bytes / 1e9:.1f} GB with the allocator reserve and CUDA "
                f"context")


def hf_generate_peak(arch: ModelArch, release: str, batch: int, prompt_tokens: int,
                     output_tokens: int, weights_bytes: float, kv_bytes_per_token: float,
                     kv_tokens_at: dict[str, float], tensor_parallel: int = 1,
                     state_bytes_per_sequence: float = 0.0, parts: DeviceParts = ALL_PARTS,
                     kv_layers: int | None = None,
                     quant_linear: str | None = None) -> HfGeneratePeak:
    """The peak of generating `batch` sequences with transformers `release`, per GPU.
    `weights_bytes` per GPU; `kv_bytes_per_token` per GPU over all layers; `kv_tokens_at`:
    the tokens of cache a sequence holds after the prefill ("prefill") and at the end
    ("decode") (generation.kv_tokens_held: sliding windows kept to their window);
    `state_bytes_per_sequence`: an SSM's recurrent state (0 for attention-only models).
    A GPU of a `device_map` split holds `parts` and `kv_layers` attention layers' cache
    (`kv_bytes_per_token` is theirs); generate's token ids sit with the sampler. `quant_linear`:
    GPTQModel's or AutoAWQ's linears (estimate/hf_quant.py), whose own transients count."""
    layers = max(1, arch.attention_layer_count if kv_layers is None else kv_layers)
    ids = IDS_BYTES_PER_TOKEN if parts.sampler else 0.0
    # the cache (and SSM state), and generate's input_ids and attention_mask beside it
    kv_prefill = batch * (kv_bytes_per_token * kv_tokens_at["prefill"]
                          + state_bytes_per_sequence + ids * prompt_tokens)
    kv_end = batch * (kv_bytes_per_token * kv_tokens_at["decode"] + state_bytes_per_sequence
                      + ids * (prompt_tokens + output_tokens))
    pre = prefill_transient(arch, release, batch, prompt_tokens, tensor_parallel, parts,
                            quant_linear)
    candidates = [("prefill", kv_prefill, pre)]
    if output_tokens > 0:
        dec = decode_transient(arch, release, batch, prompt_tokens + output_tokens,
                               kv_bytes_per_token / layers, tensor_parallel, parts,
                               quant_linear)
        candidates.append(("decode", kv_end, dec))
        stale = (stale_prefill_logits_bytes(arch, release, batch, prompt_tokens)
                 / tensor_parallel if parts.sampler else 0.0)
        if stale:
            first = decode_transient(arch, release, batch, prompt_tokens + 1,
                                     kv_bytes_per_token / layers, tensor_parallel, parts,
                                     quant_linear)
            candidates.append(("first decode", kv_prefill, Transient(
                stale + first.bytes, f"the prefill's fp32 logits (no `del outputs` before "
                                     f"4.42) held through the first decode step, with "
                                     f"{first.what}")))
    phase, kv, transient = max(candidates, key=lambda c: c[1] + c[2].bytes)
    tensors = weights_bytes + kv + transient.bytes
    reserved = (tensors * (1.0 + A.ALLOCATOR_RESERVE_FRACTION.value)
                + A.CUDA_CONTEXT_BYTES.value)
    return HfGeneratePeak(batch=batch, phase=phase, weights_bytes=weights_bytes, kv_bytes=kv,
                          transient=transient, tensors_bytes=tensors, reserved_bytes=reserved)
