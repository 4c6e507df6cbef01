"""A fixed-resolution ViT vision tower with its projector, as LLaVA and Gemma 3 build it:
parameters, tokens, FLOPs and activations per image. Sizes in elements, FLOPs per image.

- LLaVA (Liu et al. 2023, "Improved Baselines with Visual Instruction Tuning", arXiv:2310.03744;
  transformers' modeling_llava.py, modeling_clip.py): a CLIP ViT (Conv2d patch embedding without
  bias, a class token, learned positions for patches + 1, pre-LayerNorm, `depth` pre-norm blocks
  with biased q/k/v/o and a 2-layer MLP, a post-LayerNorm applied to the class token only).
  The hidden states of `vision_feature_layer` (-2: the layer before the last) are taken, the
  class token dropped ("default" strategy) and a 2-layer MLP (Linear, GELU, Linear) projects
  each patch to one language-model token: (image_size / patch_size)^2, 576 at 336 px, patch 14.
  A SigLIP tower in a llava config is read the same way (no class token).
- LLaVA-NeXT (`llava_next`; Liu et al. 2024, "LLaVA-NeXT: Improved reasoning, OCR, and world
  knowledge"; modeling_llava_next.py): the same tower and projector run on a base 336-px image
  and on the tiles of the `image_grid_pinpoints` resolution that fits the image best
  (select_best_resolution); the tiles' features are unpadded to the image's aspect ratio and a
  newline embedding (`image_newline`, h parameters) ends each row of features (llava_next_layout).
- Gemma 3 (Gemma Team 2025, arXiv:2503.19786 sec. 2.1; modeling_gemma3.py, modeling_siglip.py):
  a SigLIP ViT (biased Conv2d, learned positions, no class token, post-LayerNorm over every
  patch; its attention-pooling head exists when `vision_use_head`), then Gemma3MultiModalProjector:
  a k x k average pool down to mm_tokens_per_image (896 / 14 = 64 patches per side, pooled 4 x 4
  to 16 x 16 = 256), an RMSNorm and one bias-free vision x text matrix.

- Llama 4 (transformers' modeling_llama4.py Llama4VisionModel; Meta's model card): each 336-px
  tile goes through a ViT (bias-free linear patch embedding, a class token, learned positions,
  pre- and post-LayerNorm, 2D rotary attention with biased q/k/v/o, a biased GELU MLP), then a
  pixel shuffle (ratio 0.5: 2 x 2 patches into one vector of 4 d), the adapter MLP (fc1
  intermediate -> projector_input_dim, fc2 projector_output_dim squared, no biases) and the
  projector (vision_output_dim -> text hidden, no bias): (336 / 14 x 0.5)^2 = 144 tokens a tile.
  A square image of side s is cut into k x k tiles, k = ceil(s / 336) up to 4 (the processor's
  max_patches 16; get_best_fit picks the smallest canvas that fits without downscaling), plus a
  global tile of the whole image when k > 1 (its tile separators and image markers, a few
  tokens, are left out).

Attention in the tower is bidirectional over all its positions. No torch here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gpuhours.errors import InputError

#: fields of transformers' CLIPVisionConfig / SiglipVisionConfig defaults (5.23), taken when a
#: vision_config leaves them out, so the count stays that of the model transformers builds
_CLIP_DEFAULTS = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                      num_attention_heads=12, num_channels=3, image_size=224, patch_size=32)
_SIGLIP_DEFAULTS = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                        num_attention_heads=12, num_channels=3, image_size=224, patch_size=16)
#: Llama4VisionConfig's defaults (5.23)
_LLAMA4_DEFAULTS = dict(hidden_size=768, intermediate_size=5632, num_hidden_layers=34,
                        num_attention_heads=16, num_channels=3, image_size=448, patch_size=14,
                        vision_output_dim=7680, projector_input_dim=4096,
                        projector_output_dim=4096)
#: Llama4ImageProcessor's max_patches: tiles per image (the global tile not counted)
LLAMA4_MAX_TILES = 16


@dataclass(frozen=True)
class ViTTower:
    """A CLIP or SigLIP tower and the projector that turns its patches into language-model
    tokens. `depth` and `hidden_size` are named as in VisionTower (memory.py reads them)."""

    #: the VLM's model_type: "llava" or "llava_next" (2-layer MLP projector), "gemma3" (pool, norm, matrix) or
    #: "llama4" (pixel shuffle, adapter MLP, projector; images in tiles)
    model_type: str
    #: "clip" (class token, pre-LayerNorm, bias-free patch conv), "siglip" or "llama4" (class
    #: token, pre- and post-LayerNorm, bias-free linear patch embedding)
    tower: str
    depth: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    patch_size: int
    image_size: int
    in_channels: int
    #: SigLIP's attention-pooling head is built (vision_use_head); its output is not used
    use_head: bool
    #: CLIP's quick_gelu (x * sigmoid(1.702 x)) keeps the sigmoid's output for backward too
    quick_gelu: bool
    #: the language model's width (the projector's output)
    text_hidden: int
    #: LLaVA: the projector's input width (hidden x number of feature layers) and bias
    projector_in: int
    projector_bias: bool
    #: language-model tokens per side of the image: patches per side (LLaVA), or
    #: sqrt(mm_tokens_per_image) after Gemma 3's pooling
    tokens_per_side: int
    #: LLaVA's "full" feature strategy passes the class token on as a token too
    class_token_out: bool = False
    #: Llama 4's adapter: fc1 (intermediate -> projector_input_dim), fc2 (projector_output_dim
    #: squared) and the projector's input (vision_output_dim)
    adapter_in: int = 0
    adapter_out: int = 0
    vision_output_dim: int = 0
    #: LLaVA-NeXT's image_grid_pinpoints, (height, width) in pixels
    pinpoints: tuple[tuple[int, int], ...] = ()

    @property
    def patches_per_side(self) -> int:
        return self.image_size // self.patch_size

    @property
    def patches(self) -> int:
        return self.patches_per_side ** 2

    @property
    def positions(self) -> int:
        """Positions every block attends over (in Llama 4: per tile): the patches, plus the
        class token in CLIP and Llama 4."""
        return self.patches + (0 if self.tower == "siglip" else 1)

    @property
    def pool(self) -> int:
        """Patches per side pooled into one token (Gemma 3: 64 / 16 = 4; LLaVA: 1); 0 when the
        grid does not pool evenly."""
        side, out = self.patches_per_side, self.tokens_per_side
        return side // out if side % out == 0 else 0

    @property
    def tokens(self) -> int:
        """Language-model tokens of one image."""
        return self.tokens_per_side ** 2 + (1 if self.class_token_out else 0)


def _field(vc: dict[str, Any], where: str, key: str, defaults: dict[str, int]) -> int:
    value = vc.get(key, defaults[key])
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(where, f"vision_config field {key!r} must be a whole number >= 1, got "
                                f"{value!r}.")
    return value


def vit_tower_from_config(cfg: dict[str, Any], where: str, text_hidden: int) -> ViTTower:
    """A ViTTower from a llava or gemma3 config.json dict (its vision_config and the projector's
    fields at the top level); `text_hidden` is the language model's hidden size. Missing fields
    take transformers' defaults (LlavaConfig: a CLIP ViT-L/14 at 336 px; Gemma3Config: a
    default SigLIP, whose head is built)."""
    model_type = str(cfg.get("model_type"))
    vc = cfg.get("vision_config")
    if vc is None:  # the config classes build their default tower
        vc = ({"model_type": "clip_vision_model", "hidden_size": 1024, "intermediate_size": 4096,
               "num_hidden_layers": 24, "num_attention_heads": 16, "image_size": 336,
               "patch_size": 14, "hidden_act": "quick_gelu"} if model_type.startswith("llava") else
              {"model_type": "llama4_vision_model"} if model_type == "llama4" else
              {"model_type": "siglip_vision_model"})
    if not isinstance(vc, dict):
        raise InputError(where, f"field 'vision_config' must be an object, got {vc!r}.")
    vtype = str(vc.get("model_type", "clip_vision_model" if model_type.startswith("llava")
                       else "siglip_vision_model"))
    if vtype not in ("clip_vision_model", "siglip_vision_model") and model_type != "llama4":
        raise InputError(where, f"{model_type}'s vision_config has model_type {vtype!r}; "
                                "gpuhours reads clip_vision_model and siglip_vision_model towers.")
    tower = "clip" if vtype == "clip_vision_model" else "siglip"
    defaults = _CLIP_DEFAULTS if tower == "clip" else _SIGLIP_DEFAULTS
    if model_type == "llama4":
        return _llama4_tower(vc, where, text_hidden)
    d = _field(vc, where, "hidden_size", defaults)
    depth = _field(vc, where, "num_hidden_layers", defaults)
    image_size = _field(vc, where, "image_size", defaults)
    patch = _field(vc, where, "patch_size", defaults)
    side = image_size // patch
    act = str(vc.get("hidden_act", "quick_gelu" if tower == "clip" else "gelu_pytorch_tanh"))
    projector_in, class_out = d, False
    pinpoints: tuple[tuple[int, int], ...] = ()
    if model_type == "llava_next":
        raw = cfg.get("image_grid_pinpoints", [[336, 672], [672, 336], [672, 672], [1008, 336],
                                               [336, 1008]])  # LlavaNextConfig's default
        if not isinstance(raw, list) or not raw or not all(
                isinstance(r, list | tuple) and len(r) == 2 and all(
                    isinstance(x, int) and not isinstance(x, bool) and x >= image_size
                    and x % image_size == 0 for x in r) for r in raw):
            raise InputError(where, "field 'image_grid_pinpoints' must be a list of [height, "
                                    f"width] multiples of image_size {image_size}, got {raw!r}.")
        pinpoints = tuple((int(r[0]), int(r[1])) for r in raw)
    if model_type in ("llava", "llava_next"):
        layer = cfg.get("vision_feature_layer", -2)
        layers = layer if isinstance(layer, list) else [layer]
        if not layers or not all(isinstance(k, int) and not isinstance(k, bool) for k in layers):
            raise InputError(where, f"field 'vision_feature_layer' must be a layer number or a "
                                    f"list of them, got {layer!r}.")
        projector_in = d * len(layers)
        strategy = cfg.get("vision_feature_select_strategy", "default")
        if strategy not in ("default", "full"):
            raise InputError(where, "field 'vision_feature_select_strategy' must be 'default' "
                                    f"or 'full', got {strategy!r}.")
        class_out = strategy == "full" and tower == "clip"
        tokens_side = side
    else:
        mm = cfg.get("mm_tokens_per_image", 256)
        if isinstance(mm, bool) or not isinstance(mm, int) or math.isqrt(mm) ** 2 != mm:
            raise InputError(where, f"field 'mm_tokens_per_image' must be a square number, got "
                                    f"{mm!r}.")
        # a grid that does not pool evenly (Gemma3Config's default SigLIP: 14 patches per side
        # for 16 tokens) is still counted; images cannot be fed to it (vision.py _vit_grid)
        tokens_side = math.isqrt(mm)
    return ViTTower(
        model_type=model_type, tower=tower, depth=depth, hidden_size=d,
        intermediate_size=_field(vc, where, "intermediate_size", defaults),
        num_heads=_field(vc, where, "num_attention_heads", defaults), patch_size=patch,
        image_size=image_size, in_channels=_field(vc, where, "num_channels", defaults),
        use_head=tower == "siglip" and bool(vc.get("vision_use_head", True)),
        quick_gelu=act == "quick_gelu", text_hidden=text_hidden, projector_in=projector_in,
        projector_bias=bool(cfg.get("multimodal_projector_bias", True)),
        tokens_per_side=tokens_side,
        class_token_out=class_out, pinpoints=pinpoints)


def _llama4_tower(vc: dict[str, Any], where: str, text_hidden: int) -> ViTTower:
    """A Llama 4 vision_config (Llama4VisionConfig's defaults for missing fields)."""
    dflt = _LLAMA4_DEFAULTS
    d = _field(vc, where, "hidden_size", dflt)
    side = _field(vc, where, "image_size", dflt) // _field(vc, where, "patch_size", dflt)
    ratio = vc.get("pixel_shuffle_ratio", 0.5)
    if (isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 < ratio <= 1
            or (side * ratio) % 1 or (1 / ratio) % 1):
        raise InputError(where, f"vision_config field 'pixel_shuffle_ratio' must divide the "
                                f"{side} patches per side evenly (0.5), got {ratio!r}.")
    return ViTTower(
        model_type="llama4", tower="llama4", depth=_field(vc, where, "num_hidden_layers", dflt),
        hidden_size=d, intermediate_size=_field(vc, where, "intermediate_size", dflt),
        num_heads=_field(vc, where, "num_attention_heads", dflt),
        patch_size=_field(vc, where, "patch_size", dflt),
        image_size=_field(vc, where, "image_size", dflt),
        in_channels=_field(vc, where, "num_channels", dflt), use_head=False,
        quick_gelu=False, text_hidden=text_hidden, projector_in=0, projector_bias=False,
        tokens_per_side=int(side * ratio),
        adapter_in=_field(vc, where, "projector_input_dim", dflt),
        adapter_out=_field(vc, where, "projector_output_dim", dflt),
        vision_output_dim=_field(vc, where, "vision_output_dim", dflt))


def llama4_tiles(v: ViTTower, side_px: int) -> int:
    """Tiles of a square image of side `side_px` in Llama 4's processor: k x k with k =
    ceil(side / image_size) up to sqrt(max_patches) = 4, plus the global tile when k > 1."""
    k = min(math.isqrt(LLAMA4_MAX_TILES), max(1, -(-side_px // v.image_size)))
    return k * k + (1 if k > 1 else 0)


def llava_next_layout(v: ViTTower, height_px: int, width_px: int) -> tuple[int, int]:
    """(tiles through the tower, language-model tokens) of an image in LLaVA-NeXT, as
    transformers' select_best_resolution, get_anyres_image_grid_shape, unpad_image and
    LlavaNextModel.pack_image_features compute them: the pinpoint with the largest effective
    resolution (then the least waste); its tiles plus the base image go through the tower; the
    tiles' feature grid is cropped to the image's aspect ratio, one newline token a row, and
    the base image's patches come first."""
    best, best_eff, best_waste = v.pinpoints[0], -1, 0
    for ph, pw in v.pinpoints:
        scale = min(pw / width_px, ph / height_px)
        eff = min(int(width_px * scale) * int(height_px * scale), width_px * height_px)
        waste = ph * pw - eff
        if eff > best_eff or (eff == best_eff and waste < best_waste):
            best, best_eff, best_waste = (ph, pw), eff, waste
    rows_t, cols_t = best[0] // v.image_size, best[1] // v.image_size
    side = v.patches_per_side
    rows, cols = rows_t * side, cols_t * side
    if width_px / height_px > cols / rows:
        new = int(round(height_px * (cols / width_px), 7))
        rows -= 2 * ((rows - new) // 2)
    else:
        new = int(round(width_px * (rows / height_px), 7))
        cols -= 2 * ((cols - new) // 2)
    return rows_t * cols_t + 1, rows * (cols + 1) + v.tokens


# Parameters ---------------------------------------------------------------------------------
def vit_layer_params(v: ViTTower) -> int:
    """One encoder layer: q, k, v, o with biases (4 (d^2 + d)), two LayerNorms (4d), fc1 and fc2
    with biases (2 d f + f + d)."""
    d, f = v.hidden_size, v.intermediate_size
    return 4 * (d * d + d) + 4 * d + 2 * d * f + f + d


def vit_projector_params(v: ViTTower) -> int:
    """LLaVA: Linear(in, h) and Linear(h, h), biased by multimodal_projector_bias. Gemma 3: the
    RMSNorm's weight (d) and the d x h projection matrix (no bias)."""
    h = v.text_hidden
    if v.model_type == "llama4":
        return v.intermediate_size * v.adapter_in + v.adapter_out ** 2 + v.vision_output_dim * h
    if v.model_type in ("llava", "llava_next"):
        b = 1 if v.projector_bias else 0
        newline = h if v.model_type == "llava_next" else 0  # image_newline
        return v.projector_in * h + h * h + 2 * b * h + newline
    return v.hidden_size + v.hidden_size * h


def vit_params(v: ViTTower) -> int:
    """The tower and its projector. Embeddings: the patch conv (C p^2 d, + d bias in SigLIP),
    positions (patches (+1) x d), CLIP's class token (d) and pre-LayerNorm (2d); the layers; the
    post-LayerNorm (2d); SigLIP's pooling head when built: probe d, in_proj 3d^2 + 3d, out_proj
    d^2 + d, LayerNorm 2d, MLP 2 d f + f + d. Llama 4: a bias-free linear patch embedding,
    class token, positions, pre- and post-LayerNorm; adapter and projector without biases."""
    d, f = v.hidden_size, v.intermediate_size
    embed = v.in_channels * v.patch_size ** 2 * d + (d if v.tower == "siglip" else 0)
    # class token and pre-LayerNorm (CLIP, Llama 4)
    embed += v.positions * d + (0 if v.tower == "siglip" else 3 * d)
    head = (d + 4 * d * d + 4 * d + 2 * d + 2 * d * f + f + d) if v.use_head else 0
    return embed + v.depth * vit_layer_params(v) + 2 * d + head + vit_projector_params(v)


def vit_linear_params(v: ViTTower) -> int:
    """Weights of nn.Linear layers (what bitsandbytes would quantise): the layers' q, k, v, o,
    fc1, fc2, the head's out_proj and MLP, LLaVA's projector (Gemma 3's is a bare matrix)."""
    d, f, h = v.hidden_size, v.intermediate_size, v.text_hidden
    head = (d * d + 2 * d * f) if v.use_head else 0
    proj = v.projector_in * h + h * h if v.model_type in ("llava", "llava_next") else 0
    if v.model_type == "llama4":
        proj = vit_projector_params(v) + v.in_channels * v.patch_size ** 2 * d
    return v.depth * (4 * d * d + 2 * d * f) + head + proj


# FLOPs and activations per image --------------------------------------------------------------
def vit_forward_flops(v: ViTTower, tiles: int = 1) -> tuple[float, float]:
    """(matmul, attention) forward FLOPs of one image of `tiles` tiles (Llama 4; one tile
    elsewhere), each tile independent (one multiply-add = 2 FLOPs). Per tile: N patches,
    n positions (N + 1 with CLIP's class token), T tokens, d hidden, f MLP width, h text width:
    patch conv 2 N (C p^2) d; per layer 2 n (4 d^2 + 2 d f) and attention 4 n^2 d (QK^T and AV,
    bidirectional: no causal half; Kaplan et al. 2020 counting); every layer runs, even past
    LLaVA's feature layer. SigLIP's head: one probe query, k and v over n positions:
    2 (d^2 + 2 n d^2 + d^2 + 2 d f) and 4 n d. Projector: LLaVA 2 T (in h + h^2), Gemma 3
    2 T d h, Llama 4 2 T (f P_in + P_out^2 + V_out h) (adapter fc1, fc2, projector). Norms,
    activations, the rotary embedding, the pool and the pixel shuffle are left out (no
    matmul)."""
    d, f, h, n = v.hidden_size, v.intermediate_size, v.text_hidden, v.positions
    matmul = 2.0 * v.patches * v.in_channels * v.patch_size ** 2 * d
    matmul += v.depth * 2.0 * n * (4 * d * d + 2 * d * f)
    attention = v.depth * 4.0 * n * n * d
    if v.use_head:
        matmul += 2.0 * (d * d + 2 * n * d * d + d * d + 2 * d * f)
        attention += 4.0 * n * d
    t = v.tokens
    if v.model_type in ("llava", "llava_next"):
        matmul += 2.0 * t * (v.projector_in * h + h * h)
    elif v.model_type == "llama4":
        matmul += 2.0 * t * (f * v.adapter_in + v.adapter_out ** 2 + v.vision_output_dim * h)
    else:
        matmul += 2.0 * t * d * h
    return tiles * matmul, tiles * attention


def vit_activation_bytes(v: ViTTower, activation_bytes: int, tiles: int = 1) -> float:
    """Bytes a trained tower keeps for backward per image at the end of the forward pass (a
    frozen one: none). Per position and layer, as autograd keeps them in a CLIP/SigLIP encoder
    layer with a flash-style attention kernel (no score matrix): LayerNorm 1's input and output,
    q, k, v, the attention output (out_proj reads it as a view), LayerNorm 2's input and output
    (8 a d), fc1's output and the activation's output (2 a f; quick_gelu's sigmoid output one
    more a f), each LayerNorm's fp32 mean and rstd (16 bytes) and the kernel's fp32 log-sum-exp
    per head (4 heads). Every layer counts, past LLaVA's feature layer too: transformers 5 keeps
    the tower's outputs (mm_encoder_outputs) through the language model's forward. Outside: the
    patch conv's input pixels (a C p^2 per patch); CLIP's pre-LayerNorm input (a d + 8 per
    position); SigLIP's post-LayerNorm input and Gemma 3's pool input (2 a d + 8 per position),
    its RMSNorm's fp32 input and output and the matrix's input (8 d + a d per token); LLaVA's
    projector input (a x its input width) and GELU's input and output (2 a h) per token;
    Llama 4 (per tile): pre- and post-LayerNorm inputs (2 (a d + 8) per position), per token
    the adapter's fc1 input (a f), its two GELUs' inputs and fc2's input (a (P_in + 2 P_out))
    and the projector's input (a V_out); its rotary embedding keeps only the shared frequencies.
    Checked against the tensors autograd saves in small real towers (tests/test_vision_vit.py)."""
    a = activation_bytes
    d, f, n = v.hidden_size, v.intermediate_size, v.positions
    per_position_layer = a * (8 * d + (3 if v.quick_gelu else 2) * f) + 16 + 4 * v.num_heads
    total = v.depth * n * per_position_layer
    total += v.patches * a * v.in_channels * v.patch_size ** 2
    if v.tower != "siglip":  # the pre-LayerNorm's input
        total += n * (a * d + 8)
    if v.model_type == "gemma3":
        total += n * (2 * a * d + 8) + v.tokens * (8 * d + a * d)
    elif v.model_type in ("llava", "llava_next"):
        total += v.tokens * a * (v.projector_in + 2 * v.text_hidden)
    else:  # llama4: the post-LayerNorm's input; adapter and projector inputs, GELUs' inputs
        total += n * (a * d + 8) + v.tokens * a * (
            f + v.adapter_in + 2 * v.adapter_out + v.vision_output_dim)
    return float(tiles * total)
