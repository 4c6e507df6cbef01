"""The vision tower of a vision-language model (Qwen2.5-VL, LLaVA, Gemma 3): its parameters,
image tokens from pixels, and FLOPs and activations per image.

Qwen2.5-VL (Bai et al. 2025, arXiv:2502.13923, sec. 2.1; transformers' modeling_qwen2_5_vl.py):
an image is resized so both sides are multiples of patch x merge (28 pixels), cut into 14 x 14
patches (each patch twice in time: temporal_patch_size 2, a 3 x 2 x 14 x 14 = 1,176-value
vector), embedded by a bias-free Conv3d, passed through `depth` blocks (RMSNorm, fused qkv and
proj with biases, a gated SiLU MLP with biases) whose attention is bidirectional inside windows
of window_size pixels except in `fullatt_block_indexes`, and merged 2 x 2 into one LLM token by
an MLP (RMSNorm, Linear(4d, 4d), GELU, Linear(4d, out_hidden_size)). One token per 28 x 28
pixels.

LLaVA (Liu et al. 2023, arXiv:2310.03744; transformers' modeling_llava.py) and Gemma 3 (Gemma
Team 2025, arXiv:2503.19786 sec. 2.1; modeling_gemma3.py) use a plain ViT at a fixed resolution
(ViTTower): every image is resized to image_size x image_size, so its tokens do not depend on
its pixels. LLaVA: a CLIP tower (class token, pre-LayerNorm) whose patches (one token per
patch, (336 / 14)^2 = 576 for LLaVA-1.5) go through a 2-layer MLP projector. Gemma 3: a SigLIP
tower (896 px, patch 14: 4,096 patches) average-pooled to mm_tokens_per_image (256), RMS-normed
and projected by one bias-free matrix. No torch here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from gpuhours.errors import FieldError, InputError
from gpuhours.estimate.vit import (
    ViTTower,
    llama4_tiles,
    llava_next_layout,
    vit_activation_bytes,
    vit_forward_flops,
    vit_linear_params,
    vit_params,
)

#: model_types whose vision tower this module reads
VISION_MODEL_TYPES = frozenset({"qwen2_vl", "qwen2_5_vl", "llava", "llava_next", "gemma3",
                                "llama4"})
#: the processor's default pixel bounds (transformers' Qwen2VLImageProcessor, which
#: Qwen2.5-VL uses: size = {"shortest_edge": 56 * 56, "longest_edge": 28 * 28 * 1280})
DEFAULT_MIN_PIXELS = 56 * 56
DEFAULT_MAX_PIXELS = 28 * 28 * 1280
#: Qwen3.5's processor bounds: its checkpoints' preprocessor_config.json sets size
#: {"shortest_edge": 65536, "longest_edge": 16777216} (Qwen/Qwen3.5-2B-Base's as a public agent
#: log prints it, and Qwen3.6's alike; the 9B's not read)
QWEN3_5_MIN_PIXELS = 65_536
QWEN3_5_MAX_PIXELS = 16_777_216


@dataclass(frozen=True)
class VisionTower:
    """Shape of a Qwen2.5-VL or Qwen2-VL vision tower (its config's vision_config). Sizes in
    elements.

    Qwen2-VL (Wang et al. 2024, arXiv:2409.12191 sec. 2.1; transformers' modeling_qwen2_vl.py
    Qwen2VisionTransformerPretrainedModel) differs from Qwen2.5-VL: LayerNorms with bias in
    place of the RMSNorms (blocks and merger), a non-gated MLP (fc1, QuickGELU, fc2, biased,
    mlp_ratio x embed_dim wide), and full attention in every block (no windows). Its
    vision_config names the tower's width embed_dim and the merger's output hidden_size."""

    depth: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    patch_size: int
    temporal_patch_size: int
    in_channels: int
    spatial_merge_size: int
    out_hidden_size: int
    #: pixels per side of an attention window; blocks not in fullatt_block_indexes attend only
    #: within their window
    window_size: int
    fullatt_block_indexes: tuple[int, ...]
    #: Qwen2-VL's tower (LayerNorm, non-gated QuickGELU MLP, full attention everywhere)
    qwen2_vl: bool = False
    #: Qwen3.5's tower (transformers' Qwen3_5VisionModel, Qwen3-VL's without DeepStack): as
    #: Qwen2-VL's (LayerNorms with bias, a non-gated biased MLP, full attention in every block,
    #: the same merger) but a tanh-GELU MLP of intermediate_size, a biased patch Conv3d and a
    #: learned position table of num_position_embeddings rows (bilinearly resampled to each
    #: image's grid)
    qwen3_5: bool = False
    position_embeddings: int = 0
    #: the processor's pixel bounds (its preprocessor_config size shortest_edge / longest_edge):
    #: Qwen2VLImageProcessor's defaults for Qwen2-VL and Qwen2.5-VL; Qwen3.5's checkpoints ship
    #: 65,536 and 16,777,216 (QWEN3_5_MIN_PIXELS)
    min_pixels: int = DEFAULT_MIN_PIXELS
    max_pixels: int = DEFAULT_MAX_PIXELS

    @property
    def layer_norm(self) -> bool:
        """LayerNorms with bias and a two-matrix MLP (Qwen2-VL, Qwen3.5) rather than Qwen2.5-VL's
        RMSNorms and gated MLP."""
        return self.qwen2_vl or self.qwen3_5

    @property
    def pixels_per_token_side(self) -> int:
        """Side in pixels of the square one LLM token covers: patch x merge (28)."""
        return self.patch_size * self.spatial_merge_size

    @property
    def patch_values(self) -> int:
        """Values in one patch vector: channels x temporal patch x patch^2 (1,176)."""
        return self.in_channels * self.temporal_patch_size * self.patch_size ** 2

    @property
    def merger_width(self) -> int:
        """Width of the merger's input: hidden x merge^2 (5,120)."""
        return self.hidden_size * self.spatial_merge_size ** 2


def _int(cfg: dict[str, Any], where: str, key: str, *others: str, default: int | None = None
         ) -> int:
    for k in (key, *others):
        value = cfg.get(k)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(where, f"vision_config field {k!r} must be a whole number "
                                        f">= 1, got {value!r}.")
            return value
    if default is None:
        raise InputError(where, f"vision_config has no {key!r}.")  # pragma: no cover
    return default


def vision_tower_from_config(vc: Any, where: str, model_type: str = "qwen2_5_vl"
                             ) -> VisionTower:
    """A VisionTower from a Qwen2.5-VL `vision_config` dict; a missing field takes the default of
    transformers' Qwen2_5_VLVisionConfig (5.23), so that the count stays that of the model
    transformers builds (its hidden_size default is 3584; the checkpoints state 1280). A
    Qwen2-VL one (model_type qwen2_vl) takes Qwen2VLVisionConfig's defaults (embed_dim 1280,
    mlp_ratio 4, hidden_size 3584: the merger's output)."""
    if not isinstance(vc, dict):
        raise InputError(where, f"field 'vision_config' must be an object, got {vc!r}.")
    if model_type in ("qwen3_5", "qwen3_5_moe"):
        depth = _int(vc, where, "depth", default=27)
        return VisionTower(  # Qwen3_5VisionConfig's (and Qwen3_5MoeVisionConfig's) defaults
            depth=depth, hidden_size=_int(vc, where, "hidden_size", default=1152),
            intermediate_size=_int(vc, where, "intermediate_size", default=4304),
            num_heads=_int(vc, where, "num_heads", default=16),
            patch_size=_int(vc, where, "patch_size", default=16),
            temporal_patch_size=_int(vc, where, "temporal_patch_size", default=2),
            in_channels=_int(vc, where, "in_channels", default=3),
            spatial_merge_size=_int(vc, where, "spatial_merge_size", default=2),
            out_hidden_size=_int(vc, where, "out_hidden_size", default=3584),
            window_size=0, fullatt_block_indexes=tuple(range(depth)), qwen3_5=True,
            position_embeddings=_int(vc, where, "num_position_embeddings", default=2304),
            min_pixels=QWEN3_5_MIN_PIXELS, max_pixels=QWEN3_5_MAX_PIXELS)
    if model_type == "qwen2_vl":
        depth = _int(vc, where, "depth", default=32)
        width = _int(vc, where, "embed_dim", default=1280)
        ratio = vc.get("mlp_ratio", 4)
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or ratio <= 0:
            raise InputError(where, f"vision_config field 'mlp_ratio' must be a positive "
                                    f"number, got {ratio!r}.")
        return VisionTower(
            depth=depth, hidden_size=width, intermediate_size=int(width * ratio),
            num_heads=_int(vc, where, "num_heads", default=16),
            patch_size=_int(vc, where, "patch_size", "spatial_patch_size", default=14),
            temporal_patch_size=_int(vc, where, "temporal_patch_size", default=2),
            in_channels=_int(vc, where, "in_channels", "in_chans", default=3),
            spatial_merge_size=_int(vc, where, "spatial_merge_size", default=2),
            out_hidden_size=_int(vc, where, "hidden_size", default=3584),
            window_size=0, fullatt_block_indexes=tuple(range(depth)), qwen2_vl=True)
    full = vc.get("fullatt_block_indexes", (7, 15, 23, 31))
    if not isinstance(full, list | tuple) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in full):
        raise InputError(where, f"vision_config field 'fullatt_block_indexes' must be a list of "
                                f"layer numbers, got {full!r}.")
    return VisionTower(
        depth=_int(vc, where, "depth", default=32),
        hidden_size=_int(vc, where, "hidden_size", "embed_dim", default=3584),
        intermediate_size=_int(vc, where, "intermediate_size", default=3420),
        num_heads=_int(vc, where, "num_heads", default=16),
        patch_size=_int(vc, where, "patch_size", "spatial_patch_size", default=14),
        temporal_patch_size=_int(vc, where, "temporal_patch_size", default=2),
        in_channels=_int(vc, where, "in_channels", "in_chans", default=3),
        spatial_merge_size=_int(vc, where, "spatial_merge_size", default=2),
        out_hidden_size=_int(vc, where, "out_hidden_size", default=3584),
        window_size=_int(vc, where, "window_size", default=112),
        fullatt_block_indexes=tuple(full),
    )


# Parameters ---------------------------------------------------------------------------------
def block_params(v: VisionTower) -> int:
    """One vision block: two RMSNorms (2d), qkv (d x 3d + 3d), proj (d x d + d), gate and up
    (d x f + f each), down (f x d + d). Qwen2-VL and Qwen3.5: two LayerNorms (4d), qkv, proj,
    fc1 (d x f + f) and fc2 (f x d + d)."""
    d, f = v.hidden_size, v.intermediate_size
    attention = (3 * d * d + 3 * d) + (d * d + d)
    if v.layer_norm:
        return 4 * d + attention + (d * f + f) + (f * d + d)
    return 2 * d + attention + 2 * (d * f + f) + (f * d + d)


def merger_params(v: VisionTower) -> int:
    """The patch merger: RMSNorm (d; Qwen2-VL's LayerNorm 2d), Linear(4d, 4d) and
    Linear(4d, out), with biases."""
    m = v.merger_width
    norm = 2 * v.hidden_size if v.layer_norm else v.hidden_size
    return norm + (m * m + m) + (m * v.out_hidden_size + v.out_hidden_size)


def vision_params(v: VisionTower | ViTTower) -> int:
    """All parameters of the tower: patch embedding (Conv3d without bias), blocks, merger.
    The rotary embedding has no parameters (its inv_freq is a buffer). A LLaVA or Gemma 3
    tower with its projector: estimate/vit.py."""
    if isinstance(v, ViTTower):
        return vit_params(v)
    # Qwen3.5: the patch Conv3d's bias (d) and the learned position table (rows x d)
    extra = (1 + v.position_embeddings) * v.hidden_size if v.qwen3_5 else 0
    return (v.patch_values * v.hidden_size + v.depth * block_params(v) + merger_params(v)
            + extra)


def vision_linear_params(v: VisionTower | ViTTower) -> int:
    """Weights of the tower's nn.Linear layers (what bitsandbytes would quantise)."""
    if isinstance(v, ViTTower):
        return vit_linear_params(v)
    d, f, m = v.hidden_size, v.intermediate_size, v.merger_width
    return v.depth * (4 * d * d + _mlp_mats(v) * d * f) + m * m + m * v.out_hidden_size


def _mlp_mats(v: VisionTower) -> int:
    """The block MLP's matrices: gate, up, down (Qwen2.5-VL) or fc1, fc2 (Qwen2-VL, Qwen3.5)."""
    return 2 if v.layer_norm else 3


# Image tokens -------------------------------------------------------------------------------
def smart_resize(height: int, width: int, factor: int = 28, min_pixels: int = DEFAULT_MIN_PIXELS,
                 max_pixels: int = DEFAULT_MAX_PIXELS) -> tuple[int, int]:
    """(height, width) in pixels the Qwen2-VL/2.5-VL processor resizes an image to: both sides
    multiples of `factor` (patch x merge), the area within [min_pixels, max_pixels], the aspect
    ratio kept as closely as possible. The rule of transformers'
    models/qwen2_vl/image_processing_qwen2_vl.py `smart_resize` (also qwen-vl-utils): round each
    side to the factor; if that exceeds max_pixels, scale by sqrt(h w / max_pixels) and floor;
    if below min_pixels, scale by sqrt(min_pixels / (h w)) and ceil."""
    if height < 1 or width < 1:
        raise FieldError("image_pixels", f"an image needs a positive size, got {height} x {width}.")
    if max(height, width) / min(height, width) > 200:
        raise FieldError("image_pixels", "the processor refuses an aspect ratio above 200.")
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def square_side_px(pixels: int) -> int:
    """Side of the square image of `pixels` pixels (an image given by its pixel count alone is
    assumed square), rounded to the nearest pixel."""
    return max(1, round(math.sqrt(pixels)))


@dataclass(frozen=True)
class ImageGrid:
    """One image as the tower sees it: its patch grid after resizing."""

    grid_h: int
    grid_w: int
    merge: int
    #: tokens the tower adds to every image beyond its patches (a CLIP class token: LLaVA's
    #: "full" feature strategy passes it to the language model; LLaVA-NeXT's newline tokens
    #: less the padded features it drops, which can be negative)
    extra_tokens: int = 0

    @property
    def patches(self) -> int:
        return self.grid_h * self.grid_w

    @property
    def tokens(self) -> int:
        """LLM tokens of the image: patches / merge^2 (+ extra_tokens)."""
        return self.patches // self.merge ** 2 + self.extra_tokens


def image_grid(v: VisionTower | ViTTower, pixels: int, min_pixels: int | None = None,
               max_pixels: int | None = None) -> ImageGrid:
    """The patch grid of a square image of `pixels` pixels after the processor's smart resize.
    A LLaVA or Gemma 3 processor resizes every image to image_size x image_size (Gemma 3's
    optional pan-and-scan crops are not modelled), so the grid is fixed whatever `pixels`;
    Llama 4's cuts it into tiles of that size (vit.py llama4_tiles)."""
    if isinstance(v, ViTTower):
        if v.model_type == "llama4":
            return _vit_grid(v, llama4_tiles(v, square_side_px(pixels)))
        if v.model_type == "llava_next":
            side_px = square_side_px(pixels)
            tiles, tokens = llava_next_layout(v, side_px, side_px)
            grid = _vit_grid(v, tiles)
            # the tiles' features are unpadded and take newline tokens (vit.py)
            return replace(grid, extra_tokens=tokens - grid.tokens)
        return _vit_grid(v)
    side = square_side_px(pixels)
    h, w = smart_resize(side, side, v.pixels_per_token_side,
                        v.min_pixels if min_pixels is None else min_pixels,
                        v.max_pixels if max_pixels is None else max_pixels)
    return ImageGrid(h // v.patch_size, w // v.patch_size, v.spatial_merge_size)


def _vit_grid(v: ViTTower, tiles: int = 1) -> ImageGrid:
    """The patch grid of one image: `tiles` tiles side by side (Llama 4), one elsewhere."""
    side = v.patches_per_side
    if not v.pool:
        raise FieldError("images_per_example", f"this {v.model_type} config's {side} x {side} "
                         f"patches do not pool evenly into {v.tokens} tokens per image "
                         "(vision_config image_size / patch_size and mm_tokens_per_image).")
    return ImageGrid(side, side * tiles, v.pool, 1 if v.class_token_out else 0)


def grid_for_tokens(v: VisionTower | ViTTower, tokens: int) -> ImageGrid:
    """A patch grid that gives `tokens` LLM tokens (image tokens given directly): as square as
    the number allows (the largest divisor up to its square root as the short side). A LLaVA or
    Gemma 3 tower gives a fixed number; another is refused."""
    if isinstance(v, ViTTower):
        if v.model_type == "llama4":
            if tokens % v.tokens:
                raise FieldError("image_tokens", f"a llama4 image is {v.tokens} tokens a tile "
                                 f"(estimate/vit.py); {tokens} is not a whole number of tiles.")
            return _vit_grid(v, tokens // v.tokens)
        if v.model_type == "llava_next":
            raise FieldError("image_tokens", "a llava_next image's tokens follow from its size "
                             "(tiles of image_grid_pinpoints, unpadded, a newline a row).",
                             "Give image_pixels instead.")
        if tokens != v.tokens:
            raise FieldError("image_tokens", f"a {v.model_type} tower gives {v.tokens} tokens "
                             f"per image, whatever its size (estimate/vit.py), not {tokens}.",
                             "Leave image_tokens out and give image_pixels, or give "
                             f"{v.tokens}.")
        return _vit_grid(v)
    short = max(k for k in range(1, math.isqrt(tokens) + 1) if tokens % k == 0)
    m = v.spatial_merge_size
    return ImageGrid(short * m, tokens // short * m, m)


# FLOPs and activations per image ------------------------------------------------------------
def window_sequence_lengths(v: VisionTower, grid: ImageGrid) -> list[int]:
    """Patches in each attention window of a windowed block: the merged grid is cut into
    windows of (window_size / patch / merge) merged tokens per side, the last ones in each
    direction smaller (transformers' Qwen2_5_VisionTransformerPretrainedModel.get_window_index:
    vit_merger_window_size = window_size // spatial_merge_size // patch_size, no padding kept)."""
    m = v.spatial_merge_size
    win = max(1, v.window_size // m // v.patch_size)
    gh, gw = grid.grid_h // m, grid.grid_w // m

    def spans(n: int) -> list[int]:
        return [min(win, n - s) for s in range(0, n, win)]

    return [a * b * m * m for a in spans(gh) for b in spans(gw)]


@dataclass(frozen=True)
class VisionFlops:
    """Forward FLOPs of the tower for one image (one multiply-add = 2 FLOPs)."""

    #: patch embedding, the blocks' linears and the merger
    matmul: float
    #: QK^T and AV of every block: 4 x d x (sum over its attention windows of length^2)
    attention: float

    @property
    def total(self) -> float:
        return self.matmul + self.attention


def vision_forward_flops(v: VisionTower | ViTTower, grid: ImageGrid) -> VisionFlops:
    """Forward FLOPs of one image. N patches, T = N / merge^2 tokens, d hidden, f MLP width:
    patch embedding 2 N (values x d); per block 2 N (4 d^2 + 3 d f) for qkv, proj, gate, up
    and down; merger 2 T (4d x 4d + 4d x out). Attention is bidirectional (no causal half):
    per block 4 d sum(n_w^2) over its windows (one window of all N patches in the full-attention
    blocks; all of Qwen2-VL's: 2 N (4 d^2 + 2 d f) for its two-matrix MLP). Norms,
    SiLU/GELU and the rotary embedding are left out (no matmul). A LLaVA or
    Gemma 3 tower: estimate/vit.py vit_forward_flops (its grid is fixed)."""
    if isinstance(v, ViTTower):
        vit_mm, vit_attn = vit_forward_flops(v, grid.patches // v.patches)
        return VisionFlops(matmul=vit_mm, attention=vit_attn)
    d, f = v.hidden_size, v.intermediate_size
    n = grid.patches
    matmul = 2.0 * n * v.patch_values * d
    matmul += v.depth * 2.0 * n * (4 * d * d + _mlp_mats(v) * d * f)
    m = v.merger_width
    matmul += 2.0 * grid.tokens * (m * m + m * v.out_hidden_size)
    windowed = sum(s * s for s in window_sequence_lengths(v, grid))
    full_blocks = sum(1 for i in v.fullatt_block_indexes if 0 <= i < v.depth)
    attention = 4.0 * d * ((v.depth - full_blocks) * windowed + full_blocks * n * n)
    return VisionFlops(matmul=matmul, attention=attention)


def vision_activation_bytes(v: VisionTower | ViTTower, grid: ImageGrid, activation_bytes: int
                            ) -> float:
    """Bytes a trained tower keeps for backward per image (frozen: none, its inputs need no
    gradient). Per patch and block, as autograd keeps them in transformers' vision block:
    two RMSNorms' fp32 inputs and their normalised outputs (2 (4d + a d)), the qkv input
    (a d), q, k, v after the rotary embedding (3 a d), the attention output and proj's input
    (2 a d), the MLP input (a d), gate, up and the activation's output (3 a f), down's input
    (a f); with a flash kernel no score matrix. Plus the merger per token: its norm (4d' + a d'
    with d' = 4d over the merged token), the first linear's input (a 4d), GELU's input and
    output (2 a 4d). A LLaVA or Gemma 3 tower: estimate/vit.py vit_activation_bytes."""
    if isinstance(v, ViTTower):
        return vit_activation_bytes(v, activation_bytes, grid.patches // v.patches)
    a = activation_bytes
    d, f = v.hidden_size, v.intermediate_size
    m = v.merger_width
    if v.layer_norm:
        # as autograd keeps them in transformers' Qwen2VLVisionBlock (listed with
        # saved_tensors_hooks): two LayerNorms' inputs and fp32 mean and rstd (8 B a row), qkv's
        # input and output (a d + 3 a d; v is a view of it), q and k after the rotary embedding
        # (2 a d), the log-sum-exp (4 B a head), the attention output and proj's input (2 a d),
        # fc1's input (a d), its output, the QuickGELU sigmoid and fc2's input (3 a f); once per
        # patch the rotary cos and sin (fp32, head_dim each); the merger's LayerNorm on its 4
        # patches, then its linear's input and GELU's input and output (3 a 4d)
        # Qwen3.5's block is the same but for its MLP's activation: torch's native tanh GELU
        # keeps only its input, so fc1's output and fc2's input (2 a f; a small real tower
        # within 5%: tests/test_qwen3_next.py)
        heads, head_dim = v.num_heads, d // v.num_heads
        mlp_f = 2 * a * f if v.qwen3_5 else 3 * a * f
        per_patch_block = (2 * (a * d + 8) + a * d + 3 * a * d + 2 * a * d + 4 * heads
                           + 2 * a * d + a * d + mlp_f)
        per_token_merger = (a * m + 4 * 8) + a * m + 2 * a * m
        rotary = grid.patches * 2 * head_dim * 4
        return (grid.patches * v.depth * per_patch_block + grid.tokens * per_token_merger
                + rotary)
    else:
        per_patch_block = (2 * (4 * d + a * d) + a * d + 3 * a * d + 2 * a * d + a * d
                           + 4 * a * f)
        per_token_merger = (4 * m + a * m) + a * m + 2 * a * m
    return grid.patches * v.depth * per_patch_block + grid.tokens * per_token_merger


def image_size_note(v: VisionTower | ViTTower, grid: ImageGrid, pixels: int, max_pixels: int
                    ) -> str:
    """How an image of `pixels` pixels (assumed square) becomes tokens, for the estimate's
    images line."""
    if isinstance(v, ViTTower) and v.model_type == "llama4":
        tiles = grid.patches // v.patches
        return (f"{pixels:,} pixels each (assumed square), cut by the Llama 4 processor into "
                f"{tiles} tile{'s' if tiles > 1 else ''} of {v.image_size} px (k x k up to 16, "
                f"plus a global tile when k > 1), {v.tokens} tokens a tile after the pixel "
                f"shuffle: {grid.tokens} tokens")
    if isinstance(v, ViTTower) and v.model_type == "llava_next":
        tiles = grid.patches // v.patches
        return (f"{pixels:,} pixels each (assumed square): the base {v.image_size}-px image and "
                f"{tiles - 1} tile{'s' if tiles > 2 else ''} of the best image_grid_pinpoints "
                f"resolution, {tiles} x {v.patches} patches through the tower; the tiles' "
                f"features unpadded, a newline token a row: {grid.tokens} tokens")
    if isinstance(v, ViTTower):
        rule = (f"pooled {v.pool} x {v.pool} (mm_tokens_per_image)"
                if v.model_type == "gemma3" else
                f"one token per patch{' plus the class token' if v.class_token_out else ''}")
        return (f"{pixels:,} pixels each, resized by the {v.model_type} processor to "
                f"{v.image_size} x {v.image_size} whatever their size: {grid.patches:,} "
                f"patches of {v.patch_size} px, {rule}: {grid.tokens} tokens")
    side = grid.grid_h * v.patch_size
    return (f"{pixels:,} pixels each (assumed square), resized to {side} x "
            f"{grid.grid_w * v.patch_size} by the Qwen2-VL processor's smart_resize "
            f"(multiples of {v.pixels_per_token_side}, max_pixels {max_pixels:,}): "
            f"{grid.patches:,} patches of {v.patch_size} px, {grid.tokens} tokens")
