"""A transformer's shape, normalised from a Hugging Face config.json.

Only the numbers that parameter counts, FLOPs and memory depend on are kept. Exact or refused:
the `model_type`s in COVERED_MODEL_TYPES are read by the analytic model, whose parameter count
equals `sum(p.numel())` of the model transformers builds from the same config
(tests/test_catalog_models.py checks every one). Another model_type is counted, when transformers
is installed, by building it on the meta device (no memory, seconds): if the shape read from its
generic llama-style fields matches that count within MATCH_TOLERANCE, the shape is used and the
exact total carried (the basis says so); otherwise, and always without transformers, it is
refused with an error naming the model type and the covered ones (docs/models.md).

Covered, each read as transformers builds it (the reader's docstring cites the modelling file):
- llama-style decoders (LLAMA_LIKE_MODEL_TYPES): llama, mistral, mixtral, qwen2, qwen2_moe,
  qwen3, qwen3_moe (dense layers by mlp_only_layers / decoder_sparse_step too), gemma, gemma2,
  gemma3_text (Gemma 2's four norms a block, plus q/k RMSNorms), phi3, granite; gpt2, mpt and
  bert; qwen2_5_vl with its vision tower (estimate/vision.py); llava, llava_next, gemma3 and
  llama4 with their ViT towers and projectors (estimate/vit.py) and the language model of their
  text_config as its own model_type is read;
- multi-head latent attention with DeepSeek's MoE (MLA_MODEL_TYPES): deepseek_v2, deepseek_v3;
- MoE families (MOE_MODEL_TYPES): llama4_text (and a llama4 config's language model),
  gpt_oss, glm4_moe, olmoe, granitemoe;
- state-space models and hybrids (SSM_MODEL_TYPES): mamba2, falcon_h1, granitemoehybrid,
  nemotron_h (Mamba-2 mixers), jamba and mamba (Mamba-1 mixers);
- LayerNorm decoders with non-gated MLPs (CLASSIC_MODEL_TYPES): phi, starcoder2, gpt_neox, falcon;
- qwen2_vl, like qwen2_5_vl, with its own tower (estimate/vision.py).
Models whose layers differ are summed layer kind by layer kind in estimate/blocks.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from gpuhours.errors import FieldError, InputError
from gpuhours.estimate.arch_remote import REMOTE_CODE_MODEL_TYPES, remote_code_fields
from gpuhours.estimate.delta_net import GatedDeltaNet
from gpuhours.estimate.vision import VISION_MODEL_TYPES, VisionTower, vision_tower_from_config
from gpuhours.estimate.vit import ViTTower, vit_tower_from_config


@dataclass(frozen=True)
class LatentAttention:
    """Multi-head latent attention (DeepSeek-V2, arXiv:2405.04434 sec. 2.1; transformers'
    DeepseekV3Attention). Sizes in elements per token.

    q: hidden -> q_lora_rank (RMSNorm) -> heads x (qk_nope + qk_rope); or hidden -> heads x
    (qk_nope + qk_rope) directly when q_lora_rank is 0. kv: hidden -> kv_lora_rank + qk_rope (the
    compressed latent and the shared rotary key, which is all a KV cache keeps), RMSNorm on the
    latent, latent -> heads x (qk_nope + v). o: heads x v -> hidden.
    """

    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def cache_elements_per_layer(self) -> int:
        """What one token leaves in the KV cache of one layer: the latent and the rotary key
        (DeepSeek-V2 Table 1: (d_c + d_h^R) l elements over l layers)."""
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True)
class MambaMixer:
    """A Mamba-2 mixer (Dao & Gu 2024, "Transformers are SSMs", arXiv:2405.21060; transformers'
    Mamba2Mixer, FalconH1Mixer, GraniteMoeHybridMambaLayer). Widths in elements.

    in_proj: hidden -> inner (gate z) + conv_dim (x, B, C) + heads (dt); a depthwise causal
    conv1d of conv_kernel taps over conv_dim = inner + 2 x groups x state channels; dt_bias,
    A_log and D per head; a gated RMSNorm over inner; out_proj: inner -> hidden.
    """

    inner: int
    heads: int
    head_dim: int
    state_size: int
    groups: int
    conv_kernel: int
    chunk_size: int
    in_bias: bool = False
    out_bias: bool = False
    conv_bias: bool = True
    gated_norm: bool = True
    #: 1: a Mamba-1 mixer (Gu & Dao 2023, arXiv:2312.00752; transformers' JambaMambaMixer):
    #: in_proj hidden -> 2 x inner (x, z), a conv over inner, x_proj inner -> dt_rank + 2 x
    #: state, dt_proj dt_rank -> inner (biased), A_log inner x state, D inner, out_proj, and
    #: Jamba's RMSNorms on dt, B and C; heads = inner and head_dim = 1 (one channel a "head")
    version: int = 2
    dt_rank: int = 0
    #: Jamba's RMSNorms on dt, B and C (dt_rank + 2 x state); Mamba-1 LMs have none
    dt_bc_norms: bool = True

    @property
    def conv_dim(self) -> int:
        if self.version == 1:
            return self.inner
        return self.inner + 2 * self.groups * self.state_size

    def params(self, hidden_size: int, weights_only: bool = False) -> int:
        """One mixer's parameters; `weights_only`: the projections' matmul weights."""
        if self.version == 1:
            return self._mamba1_params(hidden_size, weights_only)
        in_width = self.inner + self.conv_dim + self.heads
        weights = hidden_size * in_width + self.inner * hidden_size
        if weights_only:
            return weights
        return (weights + (in_width if self.in_bias else 0) + (hidden_size if self.out_bias else 0)
                + self.conv_dim * (self.conv_kernel + (1 if self.conv_bias else 0))
                + 3 * self.heads + (self.inner if self.gated_norm else 0))

    def linears(self, hidden_size: int) -> list[tuple[int, int]]:
        """(in_features, out_features) of the mixer's linear layers (what LoRA adapts)."""
        d, i = hidden_size, self.inner
        if self.version == 1:
            return [(d, 2 * i), (i, self.dt_rank + 2 * self.state_size), (self.dt_rank, i),
                    (i, d)]
        return [(d, i + self.conv_dim + self.heads), (i, d)]

    @property
    def saved_width(self) -> int:
        """Elements per token the fused training kernel keeps for backward (assumed):
        Mamba-2's mamba_split_conv1d_scan_combined keeps in_proj's output (z, x, B, C, dt);
        Mamba-1's mamba_inner_fn keeps x and z, the conv output, x_proj's output and dt."""
        if self.version == 1:
            return 4 * self.inner + self.dt_rank + 2 * self.state_size
        return self.inner + self.conv_dim + self.heads

    @property
    def saved_fp32_width(self) -> int:
        """fp32 elements per token kept besides saved_width: none assumed for Mamba."""
        return 0

    def _mamba1_params(self, d: int, weights_only: bool) -> int:
        i, n, r = self.inner, self.state_size, self.dt_rank
        weights = d * 2 * i + i * (r + 2 * n) + r * i + i * d
        if weights_only:
            return weights
        return (weights + (2 * i if self.in_bias else 0) + (d if self.out_bias else 0)
                + i * (self.conv_kernel + (1 if self.conv_bias else 0)) + i  # conv, dt bias
                + i * n + i + ((r + 2 * n) if self.dt_bc_norms else 0))  # A_log, D, norms

    @property
    def scan_flops_per_token(self) -> float:
        """Forward FLOPs per token of the SSD algorithm with chunk length Q (Dao & Gu 2024,
        sec. 6): C B^T within a chunk (Q x N per group and token), its masked product with X
        (Q x P per head), the chunk states B^T X and the states' contribution C h (N x P per
        head each), 2 FLOPs a multiply-add; plus the depthwise conv (conv_dim x conv_kernel).
        The inter-chunk recurrence (N x P per head and chunk) is left out. Assumed: the kernel
        computes whole Q x Q blocks (no causal halving), as mamba_ssm's chunked kernels do."""
        if self.version == 1:
            return self.decode_flops_per_token  # the selective scan is the recurrence itself
        g, h, n, p, q = self.groups, self.heads, self.state_size, self.head_dim, self.chunk_size
        return 2.0 * (g * q * n + h * (q * p + 2 * n * p)) + 2.0 * self.conv_dim * self.conv_kernel

    @property
    def decode_flops_per_token(self) -> float:
        """Forward FLOPs of one recurrent step: the state update h = exp(dt A) h + dt B x and
        the output C h (2 x heads x head_dim x state multiply-adds), plus the conv step.
        Mamba-1 (the selective scan, Gu & Dao 2023 sec. 3.2, per channel and state): dt A,
        dt B x, h = exp(dt A) h + dt B x, C h: 7 FLOPs (exp and the D skip left out)."""
        if self.version == 1:
            return 7.0 * self.inner * self.state_size + 2.0 * self.conv_dim * self.conv_kernel
        return (4.0 * self.heads * self.head_dim * self.state_size
                + 2.0 * self.conv_dim * self.conv_kernel)

    @property
    def state_elements(self) -> int:
        """The recurrent state one sequence keeps in one layer, whatever its length: the SSM
        state (heads x head_dim x state) and the conv window (conv_dim x (conv_kernel - 1), as
        mamba_ssm's and vLLM's decoding keep it; transformers' cache keeps conv_kernel)."""
        return (self.heads * self.head_dim * self.state_size
                + self.conv_dim * (self.conv_kernel - 1))


@dataclass(frozen=True)
class ModelArch:
    """Shape of a decoder (or encoder) transformer. Counts are per model, sizes in elements."""

    name: str
    model_type: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_embeddings: bool
    gated_mlp: bool
    #: learned absolute position embeddings (GPT-2, BERT); 0 for rotary / ALiBi models
    position_embeddings: int = 0
    qkv_bias: bool = False
    out_bias: bool = False
    mlp_bias: bool = False
    #: LayerNorm has a bias (2d params per norm); RMSNorm has not (d)
    norm_bias: bool = False
    #: Qwen3-style RMSNorm on q and k per head
    qk_norm: bool = False
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    #: an encoder (bert) has no LM head in our workloads: a pooler and a small classifier
    encoder: bool = False
    #: extra parameters outside the blocks (bert pooler, token types), counted but not matmul'd
    extra_params: int = 0
    #: the context the config was trained for (max_position_embeddings); None when not stated.
    #: With learned position embeddings it is a hard limit (the table has that many rows).
    max_positions: int | None = None
    #: dropout is active in training (BERT's 0.1): its masks are kept for backward
    dropout: bool = False
    #: normalisation layers per block: 2 (before attention and MLP); Gemma 2 has 4 (before and
    #: after each)
    norms_per_block: int = 2
    #: how the total was counted when the analytic model does not cover the model_type (built
    #: by transformers on the meta device); "" when the analytic count is exact by itself
    params_basis: str = ""
    #: sliding-window (local) attention: the window in tokens and how many of the layers use it
    #: (the others attend to the whole context); None / 0 when every layer is global
    sliding_window: int | None = None
    sliding_layers: int = 0
    #: the vision tower of a vision-language model (estimate/vision.py); None for text models
    vision: VisionTower | ViTTower | None = None
    #: chunked local attention (Llama 4): on `chunked_layers` layers a query attends only to the
    #: earlier tokens of its own chunk of `attention_chunk` tokens
    attention_chunk: int | None = None
    chunked_layers: int = 0
    #: multi-head latent attention (DeepSeek-V2/V3) in place of q/k/v/o projections; None else
    mla: LatentAttention | None = None
    #: in an MoE model, how many layers have a dense MLP (intermediate_size wide) instead of
    #: the experts: DeepSeek's and GLM-4-MoE's first_k_dense_replace first layers
    dense_mlp_layers: int = 0
    #: the shared expert has a sigmoid gate (a d -> 1 linear, Qwen-MoE); DeepSeek's has none
    shared_expert_gate: bool = True
    #: q/k RMSNorms over the whole projections (OLMoE: q_dim and kv_dim wide) instead of per head
    qk_norm_full: bool = False
    #: gpt-oss: one learned attention-sink logit per head and layer
    attention_sinks: bool = False
    #: gpt-oss: the experts' linears have biases, and the router has one
    expert_bias: bool = False
    router_bias: bool = False
    #: YaRN's attention factor (transformers' and Megatron-Core's concentration factor, the
    #: "mscale" q and k are scaled by through cos and sin): 0.1 ln(factor) + 1 for a yarn
    #: rope_scaling without mscale / mscale_all_dim (gpt-oss: factor 32, 1.3466), their
    #: ratio with both; 1.0 without YaRN
    rope_attention_factor: float = 1.0
    #: gpt-oss: the experts' gate half clamped above and linear half on both sides at this
    #: value before the gated activation (config `swiglu_limit`, 7.0: transformers'
    #: GptOssExperts; Megatron-Core's activation_func_clamp_value). None: no clamp
    glu_clamp: float | None = None
    #: counted by estimate/blocks.py whatever the other fields (the families of MOE_MODEL_TYPES)
    counted_by_blocks: bool = False
    #: state-space (Mamba-2) mixers, or Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5:
    #: estimate/delta_net.py), and the layers that have one; the layers with attention (None:
    #: all) and those without an MLP (Mamba-2 LMs have none)
    ssm: MambaMixer | GatedDeltaNet | None = None
    ssm_layers: int = 0
    attention_layers: int | None = None
    mlp_free_layers: int = 0
    #: attention and MLP read the same normed input and add to one residual (Phi-1/2, GPT-NeoX,
    #: Falcon); it changes no count or FLOP
    parallel_residual: bool = False
    #: the share of each head's dimensions that rotary embedding turns (Phi-2 0.4, GPT-NeoX
    #: 0.25); no parameters, and its elementwise FLOPs are not counted
    rotary_fraction: float = 1.0
    #: f-wide tensors a non-gated MLP's activation keeps for backward beyond its input, per
    #: token: 0 for torch's native GELU kernels; transformers' Python composites keep more
    #: (gelu_new 3, gelu_fast 6, quick_gelu 1: measured with saved_tensors_hooks on tiny
    #: models, tests/test_arch_classic.py)
    activation_extra_saved: int = 0
    #: gated attention (Qwen3-Next, Qwen3.5): q_proj also makes a per-head output gate (heads x
    #: head_dim more outputs), and the attention output is multiplied by its sigmoid before o_proj
    attention_output_gate: bool = False
    #: bytes per element of the mixers' recurrent (temporal) state in an inference engine's
    #: cache, from the config's mamba_ssm_dtype (Qwen3.5: float32, 4); None: the KV cache's
    #: dtype. SGLang reads it from the config (text_config for a VL model) before its own
    #: float32 default (sgl-project/sglang@02e208de python/sglang/srt/configs/mamba_utils.py
    #: mamba2_state_dtype); the conv window stays in the model dtype. Nemotron-H: the config's
    #: mamba_ssm_cache_dtype (NemotronHConfig's default float32), which vLLM takes when its own
    #: --mamba-ssm-cache-dtype is "auto" (vllm-project/vllm vllm/model_executor/models/config.py
    #: NemotronHForCausalLMConfig.update_mamba_ssm_cache_dtype, float32 when the config has none;
    #: vLLM releases before that hook, e.g. @1936cf38, keep it in the model dtype)
    ssm_state_bytes: int | None = None

    @property
    def attention_layer_count(self) -> int:
        return self.num_layers if self.attention_layers is None else self.attention_layers

    @property
    def mixed(self) -> bool:
        """Layers that the per-layer counts of estimate/params.py cannot describe alone (latent
        attention, dense and MoE layers mixed, the MoE families' own parts): counted by
        estimate/blocks.py."""
        return (self.counted_by_blocks or self.mla is not None or self.dense_mlp_layers > 0
                or self.ssm is not None or (self.is_moe and not self.shared_expert_gate))

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is the routed experts (0 for a dense model)."""
        return self.num_layers - self.dense_mlp_layers if self.is_moe else 0

    @property
    def score_flops_per_key(self) -> float:
        """Forward FLOPs of QK^T and AV for one query and one attended key, summed over the
        layers: 2 x heads x (qk width + v width) per layer, 4 x q_dim when keys and values are
        as wide as queries. MLA attends with qk_nope + qk_rope wide keys and v_head_dim wide
        values per head (the expanded form transformers and training kernels compute)."""
        if self.mla is not None:
            width = self.num_heads * (self.mla.qk_head_dim + self.mla.v_head_dim)
            return 2.0 * width * self.num_layers
        return 4.0 * self.q_dim * self.attention_layer_count

    @property
    def kv_cache_elements_per_token(self) -> int:
        """Elements one token leaves in the KV cache over all layers (windows aside):
        2 x kv_dim per layer (K and V), MLA's latent and rotary key per layer."""
        if self.mla is not None:
            return self.mla.cache_elements_per_layer * self.num_layers
        return 2 * self.kv_dim * self.attention_layer_count

    @property
    def ssm_scan_flops_per_token(self) -> float:
        """Forward FLOPs per token of the SSM layers' scans (MambaMixer.scan_flops_per_token)."""
        return self.ssm.scan_flops_per_token * self.ssm_layers if self.ssm else 0.0

    @property
    def ssm_decode_flops_per_token(self) -> float:
        return self.ssm.decode_flops_per_token * self.ssm_layers if self.ssm else 0.0

    @property
    def ssm_state_elements(self) -> int:
        """Recurrent state of one sequence over the SSM layers, constant in its length."""
        return self.ssm.state_elements * self.ssm_layers if self.ssm else 0

    @property
    def ssm_conv_state_elements(self) -> int:
        """The conv windows' part of ssm_state_elements (conv_dim x (kernel - 1) a layer)."""
        if self.ssm is None:
            return 0
        return self.ssm.conv_dim * (self.ssm.conv_kernel - 1) * self.ssm_layers

    @property
    def plain_dense_decoder(self) -> bool:
        """A dense decoder of standard attention layers only: no experts, MLA, SSM mixers,
        vision tower or encoder (what the layer-by-layer allocator replays model)."""
        return (not self.is_moe and self.mla is None and self.ssm is None and self.vision is None
                and not self.encoder)

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    def attended_tokens(self, context: float, cached: bool = False) -> float:
        """Mean over layers of the tokens one query attends to with `context` tokens before it:
        min(context, window) on the sliding-window layers, the whole context on the others. On
        chunked layers (Llama 4) a query sees the earlier tokens of its own chunk: the context
        while it is shorter than a chunk, then (C + 1) / 2 on average over a chunk's positions;
        with `cached`, the tokens such a layer keeps, up to a whole chunk (min(context, C)),
        assumed freed chunk by chunk as vLLM's chunked local attention does."""
        windowed = chunked = 0.0
        if self.sliding_window and self.sliding_layers:
            windowed = self.sliding_layers * (min(context, float(self.sliding_window)) - context)
        if self.attention_chunk and self.chunked_layers:
            c = float(self.attention_chunk)
            seen = min(context, c) if cached or context < c else (c + 1) / 2
            chunked = self.chunked_layers * (seen - context)
        if not windowed and not chunked:
            return context
        return context + (windowed + chunked) / self.num_layers

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim


def _get(cfg: dict[str, Any], where: str, *keys: str, default: Any = None) -> Any:
    for key in keys:
        if key in cfg and cfg[key] is not None:
            return cfg[key]
    if default is not None:
        return default
    raise InputError(
        where,
        f"config has none of the fields {', '.join(keys)}.",
        "Expected a Hugging Face config.json of a transformer (hidden_size, num_hidden_layers, ...).",
    )


def _positive_int(value: Any, where: str, field: str) -> int:
    if (isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
            or value <= 0 or float(value) != int(value)):
        raise InputError(where, f"field {field!r} must be a positive integer, got {value!r}.")
    return int(value)


def _count(cfg: dict[str, Any], where: str, *keys: str) -> int:
    """An optional count (experts, MoE widths): absent or null is 0, otherwise a positive int."""
    for key in keys:
        if cfg.get(key) is not None:
            return _positive_int(cfg[key], where, key)
    return 0


#: model_types read as a llama-style decoder (RMSNorm, gated MLP, rotary): each one's default
#: config in transformers is counted exactly (tests/test_catalog_models.py). phi3 fuses q/k/v and
#: gate/up into one matrix each, which has the same parameters and FLOPs; granite's multipliers
#: (embedding, attention, residual, logits) are scalars, not parameters.
LLAMA_LIKE_MODEL_TYPES = frozenset({
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2",
    "gemma3_text", "phi3", "granite",
})
#: multi-head latent attention with routed + shared experts and dense first layers
MLA_MODEL_TYPES = frozenset({"deepseek_v2", "deepseek_v3"})
#: MoE decoders with grouped-query attention and their own parts (_moe_family): Llama 4's
#: interleaved dense/MoE layers and shared expert, gpt-oss's biased experts, router and sinks,
#: GLM-4-MoE's dense first layers and shared experts, OLMoE's whole-projection q/k norms,
#: Granite MoE
MOE_MODEL_TYPES = frozenset({"llama4_text", "gpt_oss", "glm4_moe", "olmoe", "granitemoe"})
#: state-space models and hybrids with Mamba-2 mixers (_mamba_family), Jamba's and Mamba's
#: Mamba-1 mixers
SSM_MODEL_TYPES = frozenset({"mamba2", "falcon_h1", "granitemoehybrid", "jamba", "mamba",
                             "falcon_mamba", "nemotron_h"})
#: LayerNorm decoders with biased, non-gated GELU MLPs (_classic): Phi-1/2 (parallel block,
#: biased head, q/k LayerNorms), StarCoder2 (GQA), GPT-NeoX (fused qkv, parallel residual),
#: Falcon (fused multi-query or grouped qkv, parallel attention)
CLASSIC_MODEL_TYPES = frozenset({"phi", "starcoder2", "gpt_neox", "falcon"})
#: Gated DeltaNet linear attention mixed with gated full attention (_qwen3_next): Qwen3-Next
#: (MoE with a gated shared expert), Qwen3.5's language models (dense; MoE), and the Qwen3.5
#: vision-language models that hold them (with their vision tower, estimate/vision.py)
LINEAR_ATTENTION_MODEL_TYPES = frozenset({"qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"})
QWEN3_5_VL_MODEL_TYPES = frozenset({"qwen3_5", "qwen3_5_moe"})
#: every model_type the analytic model counts exactly
COVERED_MODEL_TYPES = (LLAMA_LIKE_MODEL_TYPES | {"gpt2", "mpt", "bert"} | VISION_MODEL_TYPES
                       | MLA_MODEL_TYPES | MOE_MODEL_TYPES | SSM_MODEL_TYPES
                       | CLASSIC_MODEL_TYPES | LINEAR_ATTENTION_MODEL_TYPES
                       | QWEN3_5_VL_MODEL_TYPES)
#: types whose config class ties the LM head to the embedding when the config.json omits
#: tie_word_embeddings (Gemma's hub configs do omit it); the others default to untied
_TIED_BY_DEFAULT = frozenset({"gemma", "gemma2", "gemma3_text", "starcoder2", "falcon", "mamba",
                              "falcon_mamba"})
#: an uncovered model_type whose generic llama-style reading is this close (relative) to the
#: count of the model transformers builds is estimated from that reading, with the exact total
#: carried; assumption: 0.5% keeps every size-driven figure (weights, gradients, optimizer
#: state) exact and the shape-driven ones (FLOPs, activations) within about that much
MATCH_TOLERANCE = 0.005


#: model_types whose hidden size transformers requires to be a multiple of the attention heads,
#: a head_dim given or not (transformers 5.23, each tried with hidden 66 and 4 heads): the
#: config classes' validate_architecture of llama, gemma2, gemma3 (gemma3_text), deepseek_v2
#: and gpt_neox refuse the config; FalconAttention, GPT2Attention and BertSelfAttention raise
#: when the model is built; MptAttention's view and OLMoE's q_norm (over hidden_size, applied to
#: heads x head_dim) fail in the forward. The other covered types (mistral, qwen2/3, gemma,
#: phi3, granite, phi, starcoder2, the MoE decoders but olmoe, deepseek_v3) build and run such a
#: config with head_dim = hidden // heads, or the head_dim given (Gemma, Qwen3, Mistral-Nemo).
HIDDEN_SPLIT_BY_HEADS_MODEL_TYPES = frozenset({
    "llama", "gemma2", "gemma3_text", "deepseek_v2", "gpt_neox", "falcon", "gpt2", "bert",
    "mpt", "olmoe",
})
#: (hidden size, attention heads) under each spelling of them
_HIDDEN_HEADS_KEYS = (("hidden_size", "num_attention_heads"), ("n_embd", "n_head"),
                      ("d_model", "n_heads"))


def heads_split_problem(cfg: dict[str, Any], model_type: str) -> str:
    """Why transformers refuses or cannot run `cfg` because its attention heads do not divide
    its hidden size (HIDDEN_SPLIT_BY_HEADS_MODEL_TYPES), or "" when they do or the type does
    not require it. Sizes that are not positive integers are left to the readers' checks."""
    if model_type not in HIDDEN_SPLIT_BY_HEADS_MODEL_TYPES:
        return ""
    for d_key, h_key in _HIDDEN_HEADS_KEYS:
        d, heads = cfg.get(d_key), cfg.get(h_key)
        if isinstance(d, int) and isinstance(heads, int) and heads > 0 and d > 0:
            if d % heads:
                return (f"{d_key} ({d}) is not a multiple of {h_key} ({heads}): transformers "
                        f"refuses that for model_type {model_type}"
                        + (", a head_dim given or not" if cfg.get("head_dim") else ""))
            return ""
    return ""


def from_hf_config(cfg: dict[str, Any], name: str, where: str | None = None) -> ModelArch:
    """Read a Hugging Face config.json dict into a ModelArch: exactly for COVERED_MODEL_TYPES,
    through transformers on the meta device for others (see the module docstring), or refused
    with a FieldError keyed by `model`.

    `where` names the input in errors (a file path or a catalog name).
    """
    where = where or name
    if not isinstance(cfg, dict):
        raise InputError(where, "a config.json must be a JSON object.")
    vision = None
    if str(cfg.get("model_type", "")) in ("llava", "llava_next", "gemma3", "llama4"):
        return _vit_vlm(cfg, name, where)
    if str(cfg.get("model_type", "")) in QWEN3_5_VL_MODEL_TYPES:
        return _qwen3_5_vlm(cfg, name, where)
    if str(cfg.get("model_type", "")) in VISION_MODEL_TYPES:
        vision = vision_tower_from_config(cfg.get("vision_config"), where,
                                          str(cfg["model_type"]))
        text = cfg.get("text_config")
        # Qwen2-VL and Qwen2.5-VL: a Qwen2 language model; hub configs keep its fields at the
        # top level, transformers 5's saved configs under text_config
        base = {**cfg, **(text if isinstance(text, dict) else {})}
        base = {k: v for k, v in base.items() if k not in ("vision_config", "text_config")}
        arch = _llama_like({**base, "model_type": "qwen2"}, name, where, "qwen2")
        return replace(arch, model_type=str(cfg["model_type"]), vision=vision)
    # Vision-language configs keep the language model under text_config.
    if "text_config" in cfg and "hidden_size" not in cfg:
        if not isinstance(cfg["text_config"], dict):
            raise InputError(where, "field 'text_config' must be an object (the language "
                                    f"model's config), got {cfg['text_config']!r}.")
        outer = str(cfg.get("model_type", "a vision-language"))
        cfg = {**cfg["text_config"], "tie_word_embeddings": cfg.get("tie_word_embeddings")}
        text_type = str(cfg.get("model_type", "llama"))
        if text_type in COVERED_MODEL_TYPES:  # a tower the analytic model does not cover
            arch = _read_text_model(cfg, name, where, text_type)
            return replace(arch, params_basis=(
                f"the language model ({text_type}) of this {outer} config, counted exactly; "
                "its vision tower is not covered and not counted"))
    return _read_text_model(cfg, name, where, str(cfg.get("model_type", "llama")))


#: the language model a llava / gemma3 config builds when text_config leaves fields out:
#: transformers' LlamaConfig and Gemma3TextConfig defaults (5.23; LLaVA-1.5's hub config states
#: only model_type and vocab_size, Gemma 3's only the sizes that differ from these)
_VLM_TEXT_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                  num_attention_heads=32, vocab_size=32000),
    "gemma3_text": dict(hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                        num_attention_heads=8, num_key_value_heads=4, head_dim=256,
                        vocab_size=262208, sliding_window=4096),
}


def _vit_vlm(cfg: dict[str, Any], name: str, where: str) -> ModelArch:
    """A llava, gemma3 or llama4 config: the language model of its text_config, read as its
    own model_type is (LLaVA: llama by default; Gemma 3: gemma3_text; Llama 4: llama4_text),
    plus the ViT
    tower and projector (vit.py)."""
    outer = str(cfg["model_type"])
    text = cfg.get("text_config", {})
    if not isinstance(text, dict):
        raise InputError(where, "field 'text_config' must be an object (the language model's "
                                f"config), got {text!r}.")
    text_type = str(text.get("model_type", {"llava": "llama", "llava_next": "llama",
                                            "gemma3": "gemma3_text"}.get(
        outer, "llama4_text")))
    tie = cfg.get("tie_word_embeddings", text.get("tie_word_embeddings"))
    if tie is None:  # Llava(Next)Config unties, Gemma3Config ties when the config does not say
        tie = outer == "gemma3"
    text = {**_VLM_TEXT_DEFAULTS.get(text_type, {}), **text, "model_type": text_type,
            "tie_word_embeddings": tie}
    arch = _read_text_model(text, name, where, text_type)
    vision = vit_tower_from_config(cfg, where, arch.hidden_size)
    basis = arch.params_basis
    if basis:
        basis = f"the language model ({text_type}) of this {outer} config: {basis}"
    return replace(arch, model_type=outer, vision=vision, params_basis=basis)


def _read_text_model(cfg: dict[str, Any], name: str, where: str, model_type: str) -> ModelArch:
    """A text model's config by its model_type (see from_hf_config)."""
    problem = heads_split_problem(cfg, model_type)
    if problem:
        raise InputError(where, f"{problem}.", "Give a hidden size that the heads divide (each "
                                               "head takes hidden / heads).")
    if model_type in REMOTE_CODE_MODEL_TYPES:  # read from the checkpoint's own modelling code
        return ModelArch(**remote_code_fields(cfg, name, where, model_type))
    not_covered = _not_covered(cfg, model_type)
    if not_covered:
        return _counted_by_transformers(cfg, name, where, model_type, not_covered)
    if model_type == "gpt2":
        return _gpt2(cfg, name, where)
    if model_type == "mpt":
        return _mpt(cfg, name, where)
    if model_type == "bert":
        return _bert(cfg, name, where)
    if model_type in MLA_MODEL_TYPES:
        return _deepseek(cfg, name, where, model_type)
    if model_type in MOE_MODEL_TYPES:
        return _moe_family(cfg, name, where, model_type)
    if model_type in SSM_MODEL_TYPES:
        return _mamba_family(cfg, name, where, model_type)
    if model_type in CLASSIC_MODEL_TYPES:
        return _classic(cfg, name, where, model_type)
    if model_type in LINEAR_ATTENTION_MODEL_TYPES:
        return _qwen3_next(cfg, name, where, model_type)
    return _llama_like(cfg, name, where, model_type)


def _not_covered(cfg: dict[str, Any], model_type: str) -> str:
    """Why the analytic model cannot count this config exactly, or "" when it can."""
    if model_type not in COVERED_MODEL_TYPES:
        return f"model_type {model_type!r} is not one the analytic model covers"
    return ""


def _qwen_moe_dense_layers(cfg: dict[str, Any], where: str, layers: int) -> int:
    """Layers a qwen2_moe/qwen3_moe config keeps dense (an MLP of intermediate_size): as
    Qwen2MoeDecoderLayer decides, layer i is sparse unless it is in `mlp_only_layers` or
    (i + 1) is not a multiple of `decoder_sparse_step`."""
    only = cfg.get("mlp_only_layers") or []
    step = cfg.get("decoder_sparse_step") or 1
    if not isinstance(only, list) or not all(isinstance(i, int) for i in only):
        raise InputError(where, f"field 'mlp_only_layers' must list layer indices, got {only!r}.")
    step = _positive_int(step, where, "decoder_sparse_step")
    return sum(1 for i in range(layers) if i in only or (i + 1) % step)


def _refusal_hint() -> str:
    return (f"Covered model types: {', '.join(sorted(COVERED_MODEL_TYPES))} (docs/models.md). "
            "Other types are counted by building the model with transformers on the meta device "
            "when it is installed; or give a parameter count (--params) for a standard "
            "Llama-shaped model of that size.")


def _count_built(cfg: dict[str, Any], model_type: str, where: str, why: str) -> int | None:
    """Parameters of the causal LM transformers builds from `cfg` on the meta device (no memory;
    tied weights once, as `parameters()` yields a shared tensor once), or None when transformers
    or torch is not installed. Imported here only: the covered types never load torch."""
    try:
        import torch
        import transformers
    except ImportError:
        return None
    fields = {k: v for k, v in cfg.items() if k != "model_type"}
    try:
        hf_config = transformers.AutoConfig.for_model(model_type, **fields)
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(hf_config)
    except Exception as e:  # any failure to build is the refusal, naming what transformers said
        raise FieldError("model", f"{where}: {why}, and transformers "
                         f"{transformers.__version__} could not build it as a causal LM to "
                         f"count it ({type(e).__name__}: {str(e)[:200]}).",
                         _refusal_hint()) from None
    return int(sum(p.numel() for p in model.parameters()))


def _counted_by_transformers(cfg: dict[str, Any], name: str, where: str, model_type: str,
                             why: str) -> ModelArch:
    """An uncovered config: its total from the model transformers builds, its shape from the
    generic llama-style fields when they agree within MATCH_TOLERANCE; refused otherwise."""
    from gpuhours.estimate.params import count_params  # params imports this module

    real = _count_built(cfg, model_type, where, why)
    if real is None:
        raise FieldError("model", f"{where}: {why}, and transformers is not installed to count "
                         "it by building the model on the meta device.", _refusal_hint())
    try:
        arch: ModelArch | None = _llama_like(cfg, name, where, model_type)
    except InputError:
        arch = None
    analytic = count_params(arch).total if arch is not None else None
    if arch is None or analytic is None or abs(analytic - real) > MATCH_TOLERANCE * real:
        reading = ("its fields cannot be read as a llama-style decoder" if analytic is None else
                   f"reading its fields as a llama-style decoder gives {analytic:,} "
                   f"({(analytic - real) / real:+.1%})")
        raise FieldError("model", f"{where}: {why}: transformers builds {real:,} parameters from "
                         f"this config, and {reading}, so its shape is unknown to gpuhours and "
                         "no estimate is made.", _refusal_hint())
    basis = (f"model_type {model_type} is not covered by the analytic model: {real:,} parameters "
             "counted by building it with transformers on the meta device; the shape read from "
             f"its llama-style fields gives {analytic:,} ({(analytic - real) / real:+.2%}), the "
             "difference carried as parameters outside the blocks")
    return replace(arch, extra_params=arch.extra_params + real - analytic, params_basis=basis)


def _llama_like(cfg: dict[str, Any], name: str, where: str, model_type: str) -> ModelArch:
    d = _positive_int(_get(cfg, where, "hidden_size"), where, "hidden_size")
    layers = _positive_int(_get(cfg, where, "num_hidden_layers"), where, "num_hidden_layers")
    heads = _positive_int(_get(cfg, where, "num_attention_heads"), where, "num_attention_heads")
    kv = _count(cfg, where, "num_key_value_heads") or heads
    head_dim = _count(cfg, where, "head_dim") or max(d // heads, 1)
    vocab = _positive_int(_get(cfg, where, "vocab_size"), where, "vocab_size")
    ffn = _positive_int(_get(cfg, where, "intermediate_size"), where, "intermediate_size")
    if heads % kv:
        raise InputError(where, f"num_attention_heads ({heads}) is not a multiple of "
                                f"num_key_value_heads ({kv}).")
    experts = _count(cfg, where, "num_local_experts", "num_experts")
    top_k = _count(cfg, where, "num_experts_per_tok")
    if experts and not top_k:
        raise InputError(where, "an MoE config needs num_experts_per_tok.")
    if top_k > experts:
        raise InputError(where, f"num_experts_per_tok ({top_k}) exceeds the number of experts "
                                f"({experts}).")
    moe_ffn = _count(cfg, where, "moe_intermediate_size") or (ffn if experts else 0)
    shared_ffn = _count(cfg, where, "shared_expert_intermediate_size")
    # Qwen2 puts a bias on q, k and v but not on o; llama's attention_bias covers all four.
    qkv_bias = model_type == "qwen2" or model_type == "qwen2_moe" or bool(
        cfg.get("attention_bias", False)
    )
    out_bias = bool(cfg.get("attention_bias", False))
    tied = cfg.get("tie_word_embeddings")
    dense_layers = (_qwen_moe_dense_layers(cfg, where, layers)
                    if experts and model_type in ("qwen2_moe", "qwen3_moe") else 0)
    return ModelArch(
        name=name,
        model_type=model_type,
        hidden_size=d,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=head_dim,
        intermediate_size=ffn,
        vocab_size=vocab,
        tie_embeddings=model_type in _TIED_BY_DEFAULT if tied is None else bool(tied),
        gated_mlp=True,
        dense_mlp_layers=dense_layers,
        # Gemma 2 and 3: norms before and after attention and MLP; Gemma 3 adds q/k RMSNorms
        norms_per_block=4 if model_type in ("gemma2", "gemma3_text") else 2,
        qkv_bias=qkv_bias,
        out_bias=out_bias,
        mlp_bias=bool(cfg.get("mlp_bias", False)),
        norm_bias=False,
        qk_norm=model_type in ("qwen3", "qwen3_moe", "gemma3_text"),
        num_experts=experts,
        experts_per_token=top_k,
        moe_intermediate_size=moe_ffn,
        shared_expert_intermediate_size=shared_ffn,
        max_positions=_count(cfg, where, "max_position_embeddings") or None,
        rope_attention_factor=yarn_attention_factor(cfg, where),
        **_sliding(cfg, where, model_type, layers),
    )


def yarn_attention_factor(cfg: dict[str, Any], where: str) -> float:
    """YaRN's attention factor of a config's `rope_scaling` (ModelArch.rope_attention_factor):
    with rope_type (or type) "yarn" and factor s > 1, mscale(s, m) = 0.1 m ln(s) + 1, and the
    factor mscale(s, mscale) / mscale(s, mscale_all_dim) where both are given, else
    mscale(s, 1) (transformers' _compute_yarn_parameters; NVIDIA/Megatron-LM@2a75ac12
    yarn_rotary_pos_embedding.py _yarn_get_concentration_factor); an explicit
    `attention_factor` is taken as given, as transformers does. 1.0 otherwise."""
    rs = cfg.get("rope_scaling")
    if not isinstance(rs, dict) or (rs.get("rope_type") or rs.get("type")) != "yarn":
        return 1.0
    factor = rs.get("factor", 1.0)
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or factor <= 0:
        raise InputError(where, f"field 'rope_scaling.factor' must be a positive number, got "
                                f"{factor!r}.")
    given = rs.get("attention_factor")  # transformers takes an explicit one first
    if given is not None:
        if isinstance(given, bool) or not isinstance(given, (int, float)) or given <= 0:
            raise InputError(where, f"field 'rope_scaling.attention_factor' must be a positive "
                                    f"number, got {given!r}.")
        return float(given)
    if factor <= 1:
        return 1.0

    def mscale(m: float) -> float:
        return 0.1 * m * math.log(factor) + 1.0

    m, m_all = rs.get("mscale"), rs.get("mscale_all_dim")
    if m is None or m_all is None:
        return mscale(1.0)
    return mscale(float(m)) / mscale(float(m_all))


def _deepseek(cfg: dict[str, Any], name: str, where: str, model_type: str) -> ModelArch:
    """DeepSeek-V2/V3 (transformers' modeling_deepseek_v2/v3): latent attention (with
    attention_bias, q_a, kv_a and o have biases); the first `first_k_dense_replace` layers a
    dense gated MLP of intermediate_size, the others `n_routed_experts` routed experts of
    moe_intermediate_size (num_experts_per_tok per token), a router without bias (V3's
    e_score_correction_bias is a buffer, not a parameter) and n_shared_experts shared experts
    fused into one gated MLP of n_shared x moe_intermediate_size, with no gate of its own. V3's
    multi-token-prediction layers (num_nextn_predict_layers) are not built by transformers and
    not counted (DeepSeek-V3's 671B excludes them)."""
    layers = _positive_int(_get(cfg, where, "num_hidden_layers"), where, "num_hidden_layers")
    experts = _count(cfg, where, "n_routed_experts", "num_local_experts", "num_experts")
    top_k = _count(cfg, where, "num_experts_per_tok")
    if experts and not top_k:
        raise InputError(where, f"a {model_type} config with routed experts needs "
                                "num_experts_per_tok (DeepSeek-V2: 6, V3: 8).")
    dense_first = cfg.get("first_k_dense_replace") or 0
    if isinstance(dense_first, bool) or not isinstance(dense_first, int) or dense_first < 0:
        raise InputError(where, f"field 'first_k_dense_replace' must be a non-negative integer, "
                                f"got {dense_first!r}.")
    base = _llama_like({**cfg, "sliding_window": None, "num_local_experts": experts or None,
                        "num_experts": None, "num_experts_per_tok": top_k or None,
                        "shared_expert_intermediate_size": None}, name, where, model_type)
    q_lora = _count(cfg, where, "q_lora_rank")
    mla = LatentAttention(
        q_lora_rank=q_lora,
        kv_lora_rank=_positive_int(_get(cfg, where, "kv_lora_rank"), where, "kv_lora_rank"),
        qk_nope_head_dim=_positive_int(_get(cfg, where, "qk_nope_head_dim"), where,
                                       "qk_nope_head_dim"),
        qk_rope_head_dim=_positive_int(_get(cfg, where, "qk_rope_head_dim"), where,
                                       "qk_rope_head_dim"),
        v_head_dim=_positive_int(_get(cfg, where, "v_head_dim"), where, "v_head_dim"),
    )
    shared = _count(cfg, where, "n_shared_experts") if experts else 0
    moe_ffn = base.moe_intermediate_size
    return replace(
        base,
        # MLA's heads all read the one latent: num_kv_heads/head_dim describe no cache
        num_kv_heads=base.num_heads,
        head_dim=mla.qk_head_dim,
        qkv_bias=False,
        out_bias=bool(cfg.get("attention_bias", False)),
        # DeepseekV2MLP honours mlp_bias; DeepseekV3MLP has no biases whatever the config says
        mlp_bias=model_type == "deepseek_v2" and bool(cfg.get("mlp_bias", False)),
        mla=mla,
        dense_mlp_layers=min(dense_first, layers) if experts else 0,
        shared_expert_intermediate_size=shared * moe_ffn,
        shared_expert_gate=False,
    )


def _moe_family(cfg: dict[str, Any], name: str, where: str, model_type: str) -> ModelArch:
    """The MoE families of MOE_MODEL_TYPES, as transformers builds them (modeling_<type>.py):
    a llama-style block (RMSNorm, rotary, GQA, q/k/v/o with attention_bias) whose MLP is routed
    experts (3-D parameters gate_up_proj and down_proj) and a bias-free router (d x E), and:
    - llama4_text: the layers of `moe_layers` (default every `interleave_moe_layer_step`-th)
      are MoE with a shared expert (a gated MLP of intermediate_size, no gate of its own), the
      others a dense gated MLP of intermediate_size_mlp; its q/k L2 norm has no weights;
    - gpt_oss: biased experts (2 f + d per expert) and router (E), one attention-sink logit per
      head and layer; attention_bias on q, k, v and o; the experts' activation clamped at
      `swiglu_limit` (glu_clamp);
    - glm4_moe: the first `first_k_dense_replace` layers dense (intermediate_size), the others
      routed experts of moe_intermediate_size and n_shared_experts shared ones fused into one
      gated MLP without gate; q/k/v biased (attention_bias), o not; per-head q/k RMSNorms with
      use_qk_norm; the e_score_correction_bias is a buffer;
    - olmoe: RMSNorms over the whole q and k projections (hidden and kv-heads x head_dim wide);
    - granitemoe: nothing more (its multipliers are scalars).
    Experts have intermediate_size wide MLPs unless the type names moe_intermediate_size."""
    layers = _positive_int(_get(cfg, where, "num_hidden_layers"), where, "num_hidden_layers")
    experts_key = "n_routed_experts" if model_type == "glm4_moe" else "num_local_experts"
    experts = _count(cfg, where, experts_key, "num_experts")
    if not experts:
        raise InputError(where, f"a {model_type} config needs {experts_key} (its number of "
                                "experts).")
    fields: dict[str, Any] = {**cfg, "num_local_experts": experts, "num_experts": None,
                              "shared_expert_intermediate_size": None}
    if model_type != "glm4_moe":
        fields["moe_intermediate_size"] = cfg.get("intermediate_size")
    if model_type == "llama4_text":
        fields["intermediate_size"] = cfg.get("intermediate_size_mlp") or cfg.get(
            "intermediate_size")
    base = _llama_like(fields, name, where, model_type)
    attention_bias = bool(cfg.get("attention_bias", model_type == "gpt_oss"))
    arch = replace(base, counted_by_blocks=True, qkv_bias=attention_bias,
                   out_bias=attention_bias and model_type != "glm4_moe", mlp_bias=False)
    if model_type == "llama4_text":
        moe_layers = cfg.get("moe_layers")
        if moe_layers is None:
            step = _count(cfg, where, "interleave_moe_layer_step") or 1
            moe_layers = list(range(step - 1, layers, step))
        if not isinstance(moe_layers, list) or not all(
                isinstance(i, int) and 0 <= i < layers for i in moe_layers):
            raise InputError(where, f"field 'moe_layers' must list layer indices below {layers}, "
                                    f"got {moe_layers!r}.")
        return replace(arch, dense_mlp_layers=layers - len(set(moe_layers)),
                       shared_expert_intermediate_size=base.moe_intermediate_size,
                       shared_expert_gate=False, **_chunked(cfg, where, layers))
    if model_type == "gpt_oss":
        limit = cfg.get("swiglu_limit", 7.0)  # GptOssConfig's default
        if isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit <= 0:
            raise InputError(where, f"field 'swiglu_limit' must be a positive number, got "
                                    f"{limit!r}.")
        return replace(arch, attention_sinks=True, expert_bias=True, router_bias=True,
                       glu_clamp=float(limit))
    if model_type == "glm4_moe":
        dense_first = cfg.get("first_k_dense_replace") or 0
        if isinstance(dense_first, bool) or not isinstance(dense_first, int) or dense_first < 0:
            raise InputError(where, "field 'first_k_dense_replace' must be a non-negative "
                                    f"integer, got {dense_first!r}.")
        shared = _count(cfg, where, "n_shared_experts")
        return replace(arch, dense_mlp_layers=min(dense_first, layers),
                       shared_expert_intermediate_size=shared * base.moe_intermediate_size,
                       shared_expert_gate=False, qk_norm=bool(cfg.get("use_qk_norm", False)))
    if model_type == "olmoe":
        return replace(arch, qk_norm=True, qk_norm_full=True)
    return arch


def _mamba_family(cfg: dict[str, Any], name: str, where: str, model_type: str) -> ModelArch:
    """Mamba-2 LMs and hybrids (transformers' modeling_<type>.py), each mixer a MambaMixer:
    - mamba2: every layer a mixer (inner = expand x hidden, `use_bias` on both projections)
      and one RMSNorm, no attention and no MLP;
    - falcon_h1: every layer attention and a mixer side by side (inner = mamba_d_ssm, or
      mamba_expand x hidden; in_proj biased with mamba_proj_bias, out_proj with
      projectors_bias; the gated norm only with mamba_rms_norm) and a dense gated MLP;
    - granitemoehybrid (Granite 4): each layer a mixer ("linear_attention" or "mamba" in
      layer_types) or attention, then the MoE (when num_local_experts > 0) and a shared gated
      MLP of shared_intermediate_size;
    - nemotron_h: one kind of layer each (_nemotron_h)."""
    if model_type == "nemotron_h":  # its layer count is its pattern's length
        return _nemotron_h(cfg, name, where)
    layers = _positive_int(_get(cfg, where, "num_hidden_layers"), where, "num_hidden_layers")
    d = _positive_int(_get(cfg, where, "hidden_size"), where, "hidden_size")
    if model_type == "jamba":
        return _jamba(cfg, name, where, layers, d)
    if model_type in ("mamba", "falcon_mamba"):
        # FalconMamba (transformers' FalconMambaMixer) is Mamba-1 with weightless RMS norms on
        # B, C and the time step: the same parameters, the norms' elementwise work left out
        return _mamba1(cfg, name, where, layers, d)
    if model_type == "mamba2":
        inner = int(cfg.get("expand", 2) * d)
        ssm = MambaMixer(
            inner=inner, heads=_positive_int(_get(cfg, where, "num_heads"), where, "num_heads"),
            head_dim=_positive_int(_get(cfg, where, "head_dim", default=64), where, "head_dim"),
            state_size=_positive_int(_get(cfg, where, "state_size", default=128), where,
                                     "state_size"),
            groups=_positive_int(_get(cfg, where, "n_groups", default=1), where, "n_groups"),
            conv_kernel=_positive_int(_get(cfg, where, "conv_kernel", default=4), where,
                                      "conv_kernel"),
            chunk_size=_positive_int(_get(cfg, where, "chunk_size", default=256), where,
                                     "chunk_size"),
            in_bias=bool(cfg.get("use_bias", False)), out_bias=bool(cfg.get("use_bias", False)),
            conv_bias=bool(cfg.get("use_conv_bias", True)))
        vocab = _positive_int(_get(cfg, where, "vocab_size"), where, "vocab_size")
        return ModelArch(
            name=name, model_type=model_type, hidden_size=d, num_layers=layers, num_heads=1,
            num_kv_heads=1, head_dim=1, intermediate_size=inner, vocab_size=vocab,
            tie_embeddings=bool(cfg.get("tie_word_embeddings", False)), gated_mlp=True,
            norms_per_block=1, counted_by_blocks=True, ssm=ssm, ssm_layers=layers,
            attention_layers=0, mlp_free_layers=layers,
            max_positions=None)
    fields = {**cfg, "sliding_window": None}
    if model_type == "granitemoehybrid":
        # 0 experts is a dense Granite 4 (the shared MLP alone)
        experts = _count({"n": cfg.get("num_local_experts") or None}, where, "n")
        shared = _positive_int(_get(cfg, where, "shared_intermediate_size"), where,
                               "shared_intermediate_size")
        fields.update(num_local_experts=experts or None, num_experts=None,
                      num_experts_per_tok=cfg.get("num_experts_per_tok") if experts else None,
                      moe_intermediate_size=cfg.get("intermediate_size") if experts else None,
                      intermediate_size=shared)
    base = _llama_like(fields, name, where, model_type)
    inner = (cfg.get("mamba_d_ssm") if model_type == "falcon_h1" else None) or int(
        cfg.get("mamba_expand", 2) * d)
    heads = _positive_int(_get(cfg, where, "mamba_n_heads"), where, "mamba_n_heads")
    head_dim = cfg.get("mamba_d_head")
    head_dim = head_dim if isinstance(head_dim, int) else inner // heads
    ssm = MambaMixer(
        inner=inner, heads=heads, head_dim=head_dim,
        state_size=_positive_int(_get(cfg, where, "mamba_d_state"), where, "mamba_d_state"),
        groups=_positive_int(_get(cfg, where, "mamba_n_groups", default=1), where,
                             "mamba_n_groups"),
        conv_kernel=_positive_int(_get(cfg, where, "mamba_d_conv", default=4), where,
                                  "mamba_d_conv"),
        chunk_size=_positive_int(_get(cfg, where, "mamba_chunk_size", default=256), where,
                                 "mamba_chunk_size"),
        in_bias=bool(cfg.get("mamba_proj_bias", False)),
        out_bias=bool(cfg.get("projectors_bias" if model_type == "falcon_h1"
                              else "mamba_proj_bias", False)),
        conv_bias=bool(cfg.get("mamba_conv_bias", True)),
        gated_norm=model_type != "falcon_h1" or bool(cfg.get("mamba_rms_norm", False)))
    attention_bias = bool(cfg.get("attention_bias", False))
    arch = replace(base, counted_by_blocks=True, ssm=ssm, qkv_bias=attention_bias,
                   out_bias=attention_bias)
    if model_type == "falcon_h1":
        return replace(arch, ssm_layers=layers, attention_layers=layers,
                       mlp_bias=bool(cfg.get("mlp_bias", False)))
    types = cfg.get("layer_types") or cfg.get("layers_block_type") or (
        ["linear_attention"] * layers)
    if not isinstance(types, list) or len(types) != layers:
        raise InputError(where, f"layer_types must list {layers} entries, got {types!r}.")
    mamba = sum(1 for x in types if x in ("linear_attention", "mamba"))
    shared = base.intermediate_size
    if not base.is_moe:  # the shared MLP alone: a dense gated MLP in every layer
        return replace(arch, ssm_layers=mamba, attention_layers=layers - mamba)
    return replace(arch, ssm_layers=mamba, attention_layers=layers - mamba,
                   shared_expert_intermediate_size=shared, shared_expert_gate=False)


#: NemotronHConfig's pattern characters and layer_types names (transformers 5.23
#: configuration_nemotron_h.py _pattern_to_list; "mamba" and "attention" are the legacy names
#: configuration_utils.remap_legacy_layer_types maps to the newer ones)
_NEMOTRON_H_KINDS = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe",
                     "mamba": "linear_attention", "attention": "full_attention",
                     "linear_attention": "linear_attention", "full_attention": "full_attention",
                     "mlp": "mlp", "moe": "moe"}
#: the fields a nemotron_h config takes from NemotronHConfig when it leaves them out
#: (transformers 5.23 configuration_nemotron_h.py); the older spellings (mamba_n_groups,
#: mamba_d_conv, mamba_chunk_size, mamba_conv_bias) are read first as its __post_init__ does
_NEMOTRON_H_DEFAULTS: dict[str, Any] = dict(
    vocab_size=131072, hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
    head_dim=128, intermediate_size=21504, mlp_bias=False, ssm_state_size=128,
    mamba_num_heads=128, mamba_head_dim=64, n_groups=8, conv_kernel=4, use_conv_bias=True,
    chunk_size=128, mamba_ssm_cache_dtype="float32", n_routed_experts=8,
    moe_intermediate_size=7688, moe_shared_expert_intermediate_size=7688,
    num_experts_per_tok=2, use_bias=False, max_position_embeddings=4096)
_NEMOTRON_H_OLD_NAMES = {"n_groups": "mamba_n_groups", "conv_kernel": "mamba_d_conv",
                         "chunk_size": "mamba_chunk_size", "use_conv_bias": "mamba_conv_bias"}


def _nemotron_h_layer_kinds(cfg: dict[str, Any], where: str) -> list[str]:
    """The kind of each layer: layers_block_type (or layer_types, its attribute_map alias),
    else hybrid_override_pattern, else NemotronHConfig's default of four layers; the layer
    count is that list's length (transformers ignores num_hidden_layers)."""
    kinds = cfg.get("layers_block_type") or cfg.get("layer_types")
    field = "layers_block_type"
    if kinds is None and cfg.get("hybrid_override_pattern") is not None:
        field, kinds = "hybrid_override_pattern", cfg["hybrid_override_pattern"]
        if not isinstance(kinds, str):
            raise InputError(where, f"field 'hybrid_override_pattern' must be a string of M, *, "
                                    f"- and E, got {kinds!r}.")
        kinds = list(kinds)
    if kinds is None:
        kinds = ["linear_attention", "moe", "full_attention", "mlp"]
    bad = [k for k in kinds if not isinstance(k, str) or k not in _NEMOTRON_H_KINDS] \
        if isinstance(kinds, list) else [kinds]
    if bad or not kinds:
        raise InputError(where, f"field {field!r} must list the layers, each M (Mamba-2), * "
                                f"(attention), - (MLP) or E (MoE) (or mamba, attention, mlp, "
                                f"moe), got {bad[:3] if bad else kinds!r}.")
    return [_NEMOTRON_H_KINDS[k] for k in kinds]


def _nemotron_h(cfg: dict[str, Any], name: str, where: str) -> ModelArch:
    """Nemotron-H, Nemotron Nano 2 and Nemotron 3 (transformers 5.23 modeling_nemotron_h.py):
    every layer one pre-norm (RMSNorm, d) and one mixer, by its kind
    (_nemotron_h_layer_kinds):
    - "M": a Mamba-2 mixer (NemotronHMamba2Mixer) of mamba_num_heads x mamba_head_dim inner
      width (not expand x hidden), n_groups groups of ssm_state_size, conv_kernel taps (biased
      with use_conv_bias), in_proj and out_proj biased with use_bias, a gated RMSNorm;
    - "*": attention (NemotronHAttention): q, k, v, o without biases whatever attention_bias
      says, head_dim wide heads, no q/k norms, no rotary;
    - "-": a non-gated MLP (NemotronHMLP: up_proj, down_proj, biased with mlp_bias; relu2 by
      default) of intermediate_size;
    - "E": MoE (NemotronHMoE): n_routed_experts non-gated experts of moe_intermediate_size
      (3-D parameters, no biases), num_experts_per_tok a token, a router of E x d without
      bias (its e_score_correction_bias is a buffer; n_group / topk_group pick the experts,
      no parameters), and one shared expert, a NemotronHMLP of
      moe_shared_expert_intermediate_size (n_shared_experts is not read by transformers).
    An LM head untied, whatever tie_word_embeddings says. A latent MoE (moe_latent_size: the experts work in a
    narrower space between two projections, Nemotron 3 Super) is refused, not covered; the
    multi-token-prediction layers (num_nextn_predict_layers) are not built by
    transformers' NemotronHForCausalLM and not counted. relu2 keeps no more for backward than
    torch's native GELU (relu's output, which square reads, and square's output)."""
    cfg = {**_NEMOTRON_H_DEFAULTS, **{k: v for k, v in cfg.items() if v is not None}}
    for new_name, old in _NEMOTRON_H_OLD_NAMES.items():
        if cfg.get(old) is not None:
            cfg[new_name] = cfg[old]
    if cfg.get("moe_latent_size") is not None:
        raise FieldError("model", f"{where}: a nemotron_h config with moe_latent_size (a latent "
                         "MoE, as Nemotron 3 Super's) is not covered by the analytic model: the "
                         "experts' width, their FLOPs and traffic would be read wrongly.",
                         _refusal_hint())
    kinds = _nemotron_h_layer_kinds(cfg, where)
    layers = len(kinds)
    mamba, attention = kinds.count("linear_attention"), kinds.count("full_attention")
    moe = kinds.count("moe")
    top_k = cfg["num_experts_per_tok"] if moe else None
    base = _llama_like({
        **cfg, "num_hidden_layers": layers, "sliding_window": None, "num_local_experts": None,
        "num_experts": cfg["n_routed_experts"] if moe else None, "num_experts_per_tok": top_k,
        "moe_intermediate_size": cfg["moe_intermediate_size"] if moe else None,
        "shared_expert_intermediate_size": None, "attention_bias": False,
        # NemotronHForCausalLM's _tied_weights_keys is empty: transformers 5.23 builds an
        # untied head whatever tie_word_embeddings says (the released configs say false)
        "tie_word_embeddings": False}, name, where, "nemotron_h")
    heads = _positive_int(cfg["mamba_num_heads"], where, "mamba_num_heads")
    head_dim = _positive_int(cfg["mamba_head_dim"], where, "mamba_head_dim")
    bias = bool(cfg["use_bias"])
    ssm = MambaMixer(
        inner=heads * head_dim, heads=heads, head_dim=head_dim,
        state_size=_positive_int(cfg["ssm_state_size"], where, "ssm_state_size"),
        groups=_positive_int(cfg["n_groups"], where, "n_groups"),
        conv_kernel=_positive_int(cfg["conv_kernel"], where, "conv_kernel"),
        chunk_size=_positive_int(cfg["chunk_size"], where, "chunk_size"),
        in_bias=bias, out_bias=bias, conv_bias=bool(cfg["use_conv_bias"]))
    state_dtype = cfg["mamba_ssm_cache_dtype"]
    state_bytes = {"float32": 4, "bfloat16": 2, "float16": 2}.get(str(state_dtype))
    if state_bytes is None:
        raise InputError(where, f"field 'mamba_ssm_cache_dtype' must be float32, bfloat16 or "
                                f"float16, got {state_dtype!r}.")
    shared = (_positive_int(cfg["moe_shared_expert_intermediate_size"], where,
                            "moe_shared_expert_intermediate_size") if moe else 0)
    return replace(
        base, gated_mlp=False, norms_per_block=1, counted_by_blocks=True, ssm=ssm,
        ssm_layers=mamba, attention_layers=attention, mlp_free_layers=mamba + attention,
        # the layers without experts: the "-" MLP layers and the mixer-only ones
        dense_mlp_layers=layers - moe if moe else 0,
        shared_expert_intermediate_size=shared, shared_expert_gate=False,
        qkv_bias=False, out_bias=False, qk_norm=False, ssm_state_bytes=state_bytes)


#: the language model's fields a qwen3_next / qwen3_5_text / qwen3_5_moe_text config takes from
#: its config class when it leaves them out (transformers 5.23's Qwen3NextConfig,
#: Qwen3_5TextConfig, Qwen3_5MoeTextConfig; the shared ones are equal in all three)
_LINEAR_ATTENTION_DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen3_next": dict(vocab_size=151936, hidden_size=2048, intermediate_size=5632,
                       num_hidden_layers=48, num_attention_heads=16, num_key_value_heads=2,
                       num_experts=512, num_experts_per_tok=10, moe_intermediate_size=512,
                       shared_expert_intermediate_size=512),
    "qwen3_5_text": dict(vocab_size=248320, hidden_size=4096, intermediate_size=12288,
                         num_hidden_layers=32, num_attention_heads=16, num_key_value_heads=4),
    "qwen3_5_moe_text": dict(vocab_size=248320, hidden_size=2048, num_hidden_layers=40,
                             num_attention_heads=16, num_key_value_heads=2, num_experts=256,
                             num_experts_per_tok=8, moe_intermediate_size=512,
                             shared_expert_intermediate_size=512),
}
_LINEAR_ATTENTION_SHARED_DEFAULTS: dict[str, Any] = dict(
    head_dim=256, linear_conv_kernel_dim=4, linear_key_head_dim=128, linear_value_head_dim=128,
    linear_num_key_heads=16, linear_num_value_heads=32, tie_word_embeddings=False)


def _qwen3_next(cfg: dict[str, Any], name: str, where: str, model_type: str) -> ModelArch:
    """Qwen3-Next and Qwen3.5's language models (transformers 5.23 modeling_qwen3_next.py,
    modeling_qwen3_5.py, modeling_qwen3_5_moe.py): each layer a token mixer, Gated DeltaNet
    ("linear_attention" in layer_types; estimate/delta_net.py) or gated attention
    ("full_attention"), then an MLP; two RMSNorms a layer (Qwen3.5's are zero-centred, 1 + w:
    the same d parameters). layer_types defaults to every full_attention_interval-th (4) layer
    full attention, the others linear, as the config classes' __post_init__ set it.
    Gated attention (Qwen3NextAttention): q_proj hidden -> heads x head_dim x 2 (the query and
    a per-head output gate), k and v, o_proj, biased with attention_bias (q's bias 2 q_dim),
    per-head q/k RMSNorms (head_dim each); the output times sigmoid(gate) before o_proj; partial
    rotary (0.25 of head_dim by default).
    MLP: qwen3_5_text a dense gated MLP of intermediate_size; qwen3_5_moe_text routed experts of
    moe_intermediate_size in every layer; qwen3_next the experts except the layers of
    mlp_only_layers or those whose (i + 1) is not a multiple of decoder_sparse_step (a dense
    MLP of intermediate_size there); the MoE's shared expert (shared_expert_intermediate_size)
    has a d -> 1 sigmoid gate, as Qwen2-MoE's; the router is d x E without bias. Multi-token
    prediction layers (mtp_num_hidden_layers) are not built by transformers and not counted."""
    cfg = {**_LINEAR_ATTENTION_SHARED_DEFAULTS, **_LINEAR_ATTENTION_DEFAULTS[model_type],
           **{k: v for k, v in cfg.items() if v is not None}}
    layers = _positive_int(_get(cfg, where, "num_hidden_layers"), where, "num_hidden_layers")
    types = cfg.get("layer_types")
    if types is None:
        interval = _positive_int(cfg.get("full_attention_interval", 4), where,
                                 "full_attention_interval")
        types = ["linear_attention" if (i + 1) % interval else "full_attention"
                 for i in range(layers)]
    if (not isinstance(types, list) or len(types) != layers
            or not all(x in ("linear_attention", "full_attention") for x in types)):
        raise InputError(where, f"layer_types must list {layers} entries, each "
                                f"'linear_attention' or 'full_attention', got {types!r}.")
    linear = sum(1 for x in types if x == "linear_attention")
    fields: dict[str, Any] = {**cfg, "sliding_window": None, "num_local_experts": None}
    # Qwen3-Next with num_experts 0 builds a dense MLP in every layer (Qwen3NextDecoderLayer)
    if model_type == "qwen3_5_text" or cfg.get("num_experts") == 0:
        fields.update(num_experts=None, num_experts_per_tok=None,
                      shared_expert_intermediate_size=None)
    elif model_type == "qwen3_5_moe_text":  # no dense MLP: its width is the experts'
        fields["intermediate_size"] = cfg.get("moe_intermediate_size")
    base = _llama_like({**fields, "model_type": "qwen3_moe"}, name, where, "qwen3_moe")
    # qwen3_next's dense layers: mlp_only_layers, decoder_sparse_step
    next_moe = model_type == "qwen3_next" and base.is_moe
    dense = _qwen_moe_dense_layers(cfg, where, layers) if next_moe else 0
    mixer = GatedDeltaNet(
        key_heads=_positive_int(cfg["linear_num_key_heads"], where, "linear_num_key_heads"),
        value_heads=_positive_int(cfg["linear_num_value_heads"], where,
                                  "linear_num_value_heads"),
        key_head_dim=_positive_int(cfg["linear_key_head_dim"], where, "linear_key_head_dim"),
        value_head_dim=_positive_int(cfg["linear_value_head_dim"], where,
                                     "linear_value_head_dim"),
        conv_kernel=_positive_int(cfg["linear_conv_kernel_dim"], where,
                                  "linear_conv_kernel_dim"),
        fused_in_proj=model_type == "qwen3_next")
    if mixer.value_heads % mixer.key_heads:
        raise InputError(where, f"linear_num_value_heads ({mixer.value_heads}) is not a multiple "
                                f"of linear_num_key_heads ({mixer.key_heads}).")
    bias = bool(cfg.get("attention_bias", False))
    state_dtype = cfg.get("mamba_ssm_dtype")
    state_bytes = {"float32": 4, "bfloat16": 2, "float16": 2}.get(str(state_dtype))
    if state_dtype is not None and state_bytes is None:
        raise InputError(where, f"field 'mamba_ssm_dtype' must be float32, bfloat16 or "
                                f"float16, got {state_dtype!r}.")
    return replace(base, model_type=model_type, counted_by_blocks=True, ssm=mixer,
                   ssm_state_bytes=state_bytes,
                   ssm_layers=linear, attention_layers=layers - linear, qkv_bias=bias,
                   out_bias=bias, qk_norm=True, attention_output_gate=True,
                   dense_mlp_layers=dense, rotary_fraction=_rotary_fraction(cfg, where, 0.25))


def _qwen3_5_vlm(cfg: dict[str, Any], name: str, where: str) -> ModelArch:
    """A qwen3_5 / qwen3_5_moe config (Qwen3_5ForConditionalGeneration): the language model of
    its text_config (qwen3_5_text / qwen3_5_moe_text, _qwen3_next) and the vision tower of its
    vision_config (estimate/vision.py, Qwen3.5's); the LM head tied as the outer config's
    tie_word_embeddings says (Qwen3_5Config's default False when absent), whatever text_config
    says: transformers 5.23 ties by the outer config (checked by building it)."""
    outer = str(cfg["model_type"])
    text = cfg.get("text_config") or {}
    if not isinstance(text, dict):
        raise InputError(where, "field 'text_config' must be an object (the language model's "
                                f"config), got {text!r}.")
    tie = cfg.get("tie_word_embeddings", False)
    text_type = f"{outer}_text"
    arch = _qwen3_next({**text, "tie_word_embeddings": bool(tie)}, name, where, text_type)
    vision = vision_tower_from_config(cfg.get("vision_config") or {}, where, outer)
    return replace(arch, model_type=outer, vision=vision)


def _jamba(cfg: dict[str, Any], name: str, where: str, layers: int, d: int) -> ModelArch:
    """Jamba (transformers' modeling_jamba.py, JambaConfig): layer i has attention when
    i % attn_layer_period == attn_layer_offset, a Mamba-1 mixer otherwise; its MLP is the MoE
    (num_experts experts of intermediate_size, a bias-free router) when i % expert_layer_period
    == expert_layer_offset, else a dense gated MLP of intermediate_size; two RMSNorms a layer;
    attention without biases."""
    def period(key: str, default: int) -> int:
        return _positive_int(_get(cfg, where, key, default=default), where, key)

    def offset(key: str, default: int) -> int:
        value = cfg.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InputError(where, f"field {key!r} must be a non-negative integer, got "
                                    f"{value!r}.")
        return value

    attn_period, attn_offset = period("attn_layer_period", 8), offset("attn_layer_offset", 4)
    exp_period, exp_offset = period("expert_layer_period", 2), offset("expert_layer_offset", 1)
    experts = _count(cfg, where, "num_experts", "num_local_experts")
    attention = sum(1 for i in range(layers) if i % attn_period == attn_offset)
    moe = sum(1 for i in range(layers) if i % exp_period == exp_offset) if experts > 1 else 0
    base = _llama_like({**cfg, "sliding_window": None, "num_local_experts": experts
                        if experts > 1 else None, "num_experts": None,
                        "num_experts_per_tok": cfg.get("num_experts_per_tok")
                        if experts > 1 else None}, name, where, "jamba")
    inner = int(cfg.get("mamba_expand", 2) * d)
    rank = cfg.get("mamba_dt_rank", "auto")
    rank = math.ceil(d / 16) if rank == "auto" else _positive_int(rank, where, "mamba_dt_rank")
    ssm = MambaMixer(
        inner=inner, heads=inner, head_dim=1,
        state_size=_positive_int(_get(cfg, where, "mamba_d_state", default=16), where,
                                 "mamba_d_state"),
        groups=1, conv_kernel=_positive_int(_get(cfg, where, "mamba_d_conv", default=4), where,
                                            "mamba_d_conv"),
        chunk_size=1, in_bias=bool(cfg.get("mamba_proj_bias", False)),
        out_bias=bool(cfg.get("mamba_proj_bias", False)),
        conv_bias=bool(cfg.get("mamba_conv_bias", True)), gated_norm=False, version=1,
        dt_rank=rank)
    return replace(base, counted_by_blocks=True, ssm=ssm, ssm_layers=layers - attention,
                   attention_layers=attention, qkv_bias=False, out_bias=False, mlp_bias=False,
                   dense_mlp_layers=layers - moe if moe else 0)


def _mamba1(cfg: dict[str, Any], name: str, where: str, layers: int, d: int) -> ModelArch:
    """Mamba-1 LMs (Gu & Dao 2023, arXiv:2312.00752; transformers' modeling_mamba.py): every
    layer one RMSNorm and a Mamba-1 mixer (in_proj d -> 2 x inner, biased with use_bias; a
    depthwise conv over inner, biased with use_conv_bias; x_proj inner -> time_step_rank + 2 x
    state; dt_proj time_step_rank -> inner with a bias; A_log inner x state, D inner; out_proj,
    biased with use_bias), no dt/B/C norms, no attention, no MLP; the head tied by default."""
    inner = _count(cfg, where, "intermediate_size") or int(cfg.get("expand", 2) * d)
    rank = cfg.get("time_step_rank", "auto")
    rank = math.ceil(d / 16) if rank == "auto" else _positive_int(rank, where, "time_step_rank")
    bias = bool(cfg.get("use_bias", False))
    ssm = MambaMixer(
        inner=inner, heads=inner, head_dim=1,
        state_size=_positive_int(_get(cfg, where, "state_size", default=16), where,
                                 "state_size"),
        groups=1, conv_kernel=_positive_int(_get(cfg, where, "conv_kernel", default=4), where,
                                            "conv_kernel"),
        chunk_size=1, in_bias=bias, out_bias=bias,
        conv_bias=bool(cfg.get("use_conv_bias", True)), gated_norm=False, version=1,
        dt_rank=rank, dt_bc_norms=False)
    tied = cfg.get("tie_word_embeddings")
    return ModelArch(
        name=name, model_type="mamba", hidden_size=d, num_layers=layers, num_heads=1,
        num_kv_heads=1, head_dim=1, intermediate_size=inner,
        vocab_size=_positive_int(_get(cfg, where, "vocab_size"), where, "vocab_size"),
        tie_embeddings=True if tied is None else bool(tied), gated_mlp=True, norms_per_block=1,
        counted_by_blocks=True, ssm=ssm, ssm_layers=layers, attention_layers=0,
        mlp_free_layers=layers, max_positions=None)


#: extra f-wide tensors autograd keeps for transformers' composite activations (ACT2FN names)
_ACTIVATION_EXTRA_SAVED = {"gelu_new": 3, "gelu_fast": 6, "quick_gelu": 1}


def _activation_extra(cfg: dict[str, Any], default: str, *keys: str) -> int:
    name = next((cfg[k] for k in keys if isinstance(cfg.get(k), str)), default)
    return _ACTIVATION_EXTRA_SAVED.get(name, 0)


def _rotary_fraction(cfg: dict[str, Any], where: str, default: float) -> float:
    """partial_rotary_factor (or GPT-NeoX's older rotary_pct), at the top level or in
    rope_parameters as transformers 5 saves it."""
    rope = cfg.get("rope_parameters")
    rope = rope if isinstance(rope, dict) else {}
    value = cfg.get("partial_rotary_factor", cfg.get("rotary_pct", rope.get(
        "partial_rotary_factor", default)))
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise InputError(where, f"field 'partial_rotary_factor' must be in (0, 1], got {value!r}.")
    return float(value)


def _classic(cfg: dict[str, Any], name: str, where: str, model_type: str) -> ModelArch:
    """LayerNorm decoders with a non-gated GELU MLP, as transformers builds them:
    - phi (Phi-1/1.5/2, modeling_phi.py): one LayerNorm a layer before attention and MLP side by
      side (parallel block); q, k, v, dense and fc1, fc2 all biased; q/k LayerNorms over a head
      with qk_layernorm; the final LayerNorm; an untied LM head with a bias (its vocab_size
      parameters are carried in extra_params); partial rotary (0.5 by default);
    - starcoder2 (modeling_starcoder2.py): two LayerNorms (with bias) a layer, GQA, q/k/v/o
      and c_fc/c_proj biased with use_bias, a sliding window on every layer when set; tied;
    - gpt_neox (modeling_gpt_neox.py): two LayerNorms, a fused query_key_value (d -> 3d) and
      dense biased with attention_bias, dense_h_to_4h/4h_to_h always biased; parallel residual
      with use_parallel_residual; partial rotary (rotary_pct, 0.25); untied embed_out;
    - falcon (modeling_falcon.py): a fused query_key_value of (heads + 2 kv) x head_dim, where kv
      is num_kv_heads with new_decoder_architecture, 1 with multi_query, else heads; every
      linear biased with `bias`; LayerNorms: input and post-attention without parallel_attn,
      else ln_attn and ln_mlp (num_ln_in_parallel_attn 2, the new architecture's default) or
      one input_layernorm; MLP width ffn_hidden_size (4d); tied by default; ALiBi or rotary.
    """
    d = _positive_int(_get(cfg, where, "hidden_size", "n_embd"), where, "hidden_size")
    layers = _positive_int(_get(cfg, where, "num_hidden_layers", "n_layer"), where,
                           "num_hidden_layers")
    heads = _positive_int(_get(cfg, where, "num_attention_heads", "n_head"), where,
                          "num_attention_heads")
    vocab = _positive_int(_get(cfg, where, "vocab_size"), where, "vocab_size")
    head_dim = d // heads
    tied = cfg.get("tie_word_embeddings")
    tie = model_type in _TIED_BY_DEFAULT if tied is None else bool(tied)
    common: dict[str, Any] = dict(
        name=name, model_type=model_type, hidden_size=d, num_layers=layers, num_heads=heads,
        head_dim=head_dim, vocab_size=vocab, tie_embeddings=tie, gated_mlp=False,
        norm_bias=True, max_positions=_count(cfg, where, "max_position_embeddings") or None)
    if model_type == "falcon":
        new_arch = bool(cfg.get("new_decoder_architecture", False))
        kv = (_count(cfg, where, "num_kv_heads") or heads) if new_arch else (
            1 if cfg.get("multi_query", True) else heads)
        parallel = new_arch or bool(cfg.get("parallel_attn", True))
        norms = 2 if not parallel else (
            cfg.get("num_ln_in_parallel_attn") or (2 if new_arch else 1))
        bias = bool(cfg.get("bias", False))
        if heads % kv:
            raise InputError(where, f"num_attention_heads ({heads}) is not a multiple of "
                                    f"num_kv_heads ({kv}).")
        return ModelArch(**common, num_kv_heads=kv,
                         intermediate_size=_count(cfg, where, "ffn_hidden_size") or 4 * d,
                         qkv_bias=bias, out_bias=bias, mlp_bias=bias,
                         norms_per_block=_positive_int(norms, where, "num_ln_in_parallel_attn"),
                         parallel_residual=parallel,
                         activation_extra_saved=_activation_extra(cfg, "gelu", "activation"),
                         rotary_fraction=0.0 if cfg.get("alibi") else 1.0)
    ffn = _positive_int(_get(cfg, where, "intermediate_size"), where, "intermediate_size")
    if model_type == "gpt_neox":
        bias = bool(cfg.get("attention_bias", True))
        return ModelArch(**common, num_kv_heads=heads, intermediate_size=ffn, qkv_bias=bias,
                         out_bias=bias, mlp_bias=True,
                         parallel_residual=bool(cfg.get("use_parallel_residual", True)),
                         activation_extra_saved=_activation_extra(cfg, "gelu", "hidden_act"),
                         rotary_fraction=_rotary_fraction(cfg, where, 0.25))
    kv = _count(cfg, where, "num_key_value_heads") or heads
    if heads % kv:
        raise InputError(where, f"num_attention_heads ({heads}) is not a multiple of "
                                f"num_key_value_heads ({kv}).")
    if model_type == "phi":
        return ModelArch(**common, num_kv_heads=kv, intermediate_size=ffn, qkv_bias=True,
                         out_bias=True, mlp_bias=True, norms_per_block=1,
                         qk_norm=bool(cfg.get("qk_layernorm", False)),
                         extra_params=vocab,  # the LM head's bias
                         parallel_residual=True,
                         activation_extra_saved=_activation_extra(cfg, "gelu_new", "hidden_act"),
                         rotary_fraction=_rotary_fraction(cfg, where, 0.5))
    bias = bool(cfg.get("use_bias", True))  # starcoder2
    return ModelArch(**common, num_kv_heads=kv, intermediate_size=ffn, qkv_bias=bias,
                     out_bias=bias, mlp_bias=bias, **_sliding(cfg, where, model_type, layers),
                     activation_extra_saved=_activation_extra(cfg, "gelu_pytorch_tanh",
                                                              "hidden_act"))


def _chunked(cfg: dict[str, Any], where: str, layers: int) -> dict[str, Any]:
    """Llama 4's chunked-attention layers, as Llama4TextConfig sets them: `layer_types`'
    "chunked_attention" entries, else the rotary layers of `no_rope_layers` (default: all but
    every `no_rope_layer_interval`-th, 4), when attention_chunk_size is set (default 8192)."""
    chunk = cfg.get("attention_chunk_size", 8192)
    if chunk is None:
        return {}
    chunk = _positive_int(chunk, where, "attention_chunk_size")
    types = cfg.get("layer_types")
    no_rope = cfg.get("no_rope_layers")
    if isinstance(types, list) and types:
        n = sum(1 for x in types if x == "chunked_attention")
    elif isinstance(no_rope, list) and no_rope:
        n = sum(1 for x in no_rope if x)
    else:
        interval = _count(cfg, where, "no_rope_layer_interval") or 4
        n = sum(1 for i in range(layers) if (i + 1) % interval)
    return {"attention_chunk": chunk, "chunked_layers": n} if n else {}


def _sliding(cfg: dict[str, Any], where: str, model_type: str, layers: int) -> dict[str, Any]:
    """The sliding-window fields of a llama-style config, as transformers reads them:
    `layer_types` when given (its "sliding_attention" entries); otherwise per family: mistral,
    mixtral, starcoder2 and phi3 window every layer when `sliding_window` is set; gemma2 every
    even layer (Gemma2DecoderLayer: `not layer_idx % 2`), gpt_oss too (its window 128 by default);
    gemma3_text every layer but each `sliding_window_pattern`-th (default 6); qwen2/qwen3 (and
    their MoE) only with `use_sliding_window`, the layers from `max_window_layers` on. Others:
    no window. Llama 4's chunked-attention layers are read by _chunked."""
    window = cfg.get("sliding_window")
    types = cfg.get("layer_types")
    if window is None and model_type == "gpt_oss":
        window = 128  # GptOssConfig's default
    if window in (None, 0, False):  # qwen2_moe's config class writes 0 for "no window"
        return {}
    window = _positive_int(window, where, "sliding_window")
    if isinstance(types, list) and types:
        if len(types) != layers:
            raise InputError(where, f"layer_types has {len(types)} entries for {layers} layers.")
        n = sum(1 for x in types if x == "sliding_attention")
    elif model_type in ("mistral", "mixtral", "starcoder2", "phi3"):  # phi3: Phi3Attention
        n = layers
    elif model_type in ("gemma2", "gpt_oss"):  # gpt-oss: GptOssConfig's layer_types, alike
        n = (layers + 1) // 2
    elif model_type == "gemma3_text":
        pattern = _count(cfg, where, "sliding_window_pattern") or 6
        n = layers - layers // pattern
    elif model_type in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
        if not cfg.get("use_sliding_window"):
            return {}
        first = cfg.get("max_window_layers")
        first = layers if not isinstance(first, int) else first
        n = max(0, layers - first)
    else:
        return {}
    return {"sliding_window": window, "sliding_layers": n} if n else {}


def _gpt2(cfg: dict[str, Any], name: str, where: str) -> ModelArch:
    d = _positive_int(_get(cfg, where, "n_embd", "hidden_size"), where, "n_embd")
    heads = _positive_int(_get(cfg, where, "n_head", "num_attention_heads"), where, "n_head")
    return ModelArch(
        name=name,
        model_type="gpt2",
        hidden_size=d,
        num_layers=_positive_int(_get(cfg, where, "n_layer", "num_hidden_layers"), where, "n_layer"),
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=d // heads,
        intermediate_size=_count(cfg, where, "n_inner") or 4 * d,
        vocab_size=_positive_int(_get(cfg, where, "vocab_size"), where, "vocab_size"),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        gated_mlp=False,
        position_embeddings=_positive_int(_get(cfg, where, "n_positions", default=1024), where,
                                          "n_positions"),
        qkv_bias=True,
        out_bias=True,
        mlp_bias=True,
        norm_bias=True,
        max_positions=_count(cfg, where, "n_positions") or 1024,
        activation_extra_saved=_activation_extra(cfg, "gelu_new", "activation_function"),
    )


def _mpt(cfg: dict[str, Any], name: str, where: str) -> ModelArch:
    d = _positive_int(_get(cfg, where, "d_model"), where, "d_model")
    heads = _positive_int(_get(cfg, where, "n_heads"), where, "n_heads")
    attn = cfg.get("attn_config") or {}
    alibi = bool(attn.get("alibi", False))
    bias = not bool(cfg.get("no_bias", False))
    if not isinstance(attn, dict):
        raise InputError(where, f"field 'attn_config' must be an object, got {attn!r}.")
    kv = _count(attn, where, "kv_n_heads") or heads
    ratio = cfg.get("expansion_ratio", 4)
    if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 < ratio < 1e3:
        raise InputError(where, f"field 'expansion_ratio' must be a positive number, got "
                                f"{ratio!r}.")
    return ModelArch(
        name=name,
        model_type="mpt",
        hidden_size=d,
        num_layers=_positive_int(_get(cfg, where, "n_layers"), where, "n_layers"),
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=d // heads,
        intermediate_size=int(ratio * d),
        vocab_size=_positive_int(_get(cfg, where, "vocab_size"), where, "vocab_size"),
        tie_embeddings=True,
        gated_mlp=False,
        position_embeddings=0 if alibi else _count(cfg, where, "max_seq_len") or 2048,
        max_positions=_count(cfg, where, "max_seq_len") or 2048,
        qkv_bias=bias,
        out_bias=bias,
        mlp_bias=bias,
        norm_bias=bias,
    )


def _bert(cfg: dict[str, Any], name: str, where: str) -> ModelArch:
    d = _positive_int(_get(cfg, where, "hidden_size"), where, "hidden_size")
    heads = _positive_int(_get(cfg, where, "num_attention_heads"), where, "num_attention_heads")
    type_vocab = _count(cfg, where, "type_vocab_size") or 2
    # pooler (d x d + d); token-type embeddings; the embedding LayerNorm (2d).
    extra = d * d + d + type_vocab * d + 2 * d
    return ModelArch(
        name=name,
        model_type="bert",
        hidden_size=d,
        num_layers=_positive_int(_get(cfg, where, "num_hidden_layers"), where, "num_hidden_layers"),
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=d // heads,
        intermediate_size=_positive_int(_get(cfg, where, "intermediate_size"), where,
                                        "intermediate_size"),
        vocab_size=_positive_int(_get(cfg, where, "vocab_size"), where, "vocab_size"),
        tie_embeddings=True,
        gated_mlp=False,
        position_embeddings=_count(cfg, where, "max_position_embeddings") or 512,
        qkv_bias=True,
        out_bias=True,
        mlp_bias=True,
        norm_bias=True,
        encoder=True,
        extra_params=extra,
        dropout=bool(cfg.get("hidden_dropout_prob", 0.1) or cfg.get("attention_probs_dropout_prob",
                                                                     0.1)),
        max_positions=_count(cfg, where, "max_position_embeddings") or 512,
    )


# Standard shapes for a model known only by its size. Basis: the Llama family's ratios
# (head_dim 128, SwiGLU with intermediate ~ 8/3 d rounded to 256, vocab 32000, untied) and
# the depth/width pairs of Llama-2 7B/13B/70B and Llama-3; GQA (8 kv heads) from 30B up.
_STANDARD_WIDTHS: tuple[tuple[float, int, int], ...] = (
    # (params up to, hidden_size, layers)
    (0.2e9, 768, 12),
    (0.5e9, 1024, 24),
    (1.0e9, 1536, 24),
    (2.0e9, 2048, 24),
    (4.0e9, 3072, 28),
    (9.0e9, 4096, 32),
    (16e9, 5120, 40),
    (40e9, 6656, 60),
    (90e9, 8192, 80),
    (200e9, 12288, 96),
    (math.inf, 16384, 126),
)


def standard_shape(
    params: float,
    name: str = "standard",
    hidden_size: int | None = None,
    num_layers: int | None = None,
    vocab_size: int | None = None,
) -> ModelArch:
    """A Llama-shaped dense model of about `params` parameters.

    Width and depth come from a table of published Llama shapes unless given; the MLP width is
    then solved so the total matches `params`, to the nearest multiple of 256 as Llama's
    FeedForward rounds it (`multiple_of` 256, meta-llama/llama model.py), which tensor
    parallelism can split (parallel.tp_split_widths). The basis says "standard shape for the
    size".
    """
    if not math.isfinite(params) or params <= 1e6:
        raise FieldError("params", f"expected a parameter count above 1e6, got {params!r}.")
    d, layers = next((w, n) for limit, w, n in _STANDARD_WIDTHS if params <= limit)
    d = hidden_size or d
    layers = num_layers or layers
    vocab = vocab_size or 32000
    head_dim = 128 if d % 128 == 0 else 64
    heads = d // head_dim
    kv = 8 if params >= 30e9 and heads % 8 == 0 else heads
    # params = 2*V*d + L*(attn + 3*d*ffn + 2d) + d  -> solve for ffn
    attn = d * heads * head_dim * 2 + 2 * d * kv * head_dim
    per_layer_budget = (params - 2 * vocab * d - d) / layers - attn - 2 * d
    ffn = int(per_layer_budget / (3 * d))
    if ffn >= d:
        ffn = max(256, 256 * round(per_layer_budget / (3 * d) / 256))
    if ffn < d:
        embeddings = 2 * vocab * d
        # the least a layer of this shape holds: attention, two norms and an MLP (3 matrices)
        # no narrower than the hidden size
        least_layers = layers * (attn + 3 * d * d + 2 * d)
        culprit = (f"the embeddings alone take {embeddings:.3g}" if embeddings >= params else
                   f"the embeddings take {embeddings:.3g} and {layers} layers of hidden size "
                   f"{d} at least {least_layers:.3g} (attention, norms and an MLP no narrower "
                   f"than the hidden size), {embeddings + least_layers + d:.3g} in all")
        raise FieldError(
            "params",
            f"{params:.3g} parameters cannot be a transformer with hidden size {d} and "
            f"{layers} layers and vocabulary {vocab}: {culprit}.",
        )
    return ModelArch(
        name=name,
        model_type="llama",
        hidden_size=d,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=head_dim,
        intermediate_size=ffn,
        vocab_size=vocab,
        tie_embeddings=False,
        gated_mlp=True,
    )
