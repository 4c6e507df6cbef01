"""Qwen2-VL (model_type qwen2_vl, issue 15): its vision tower (LayerNorms, a non-gated
QuickGELU MLP, full attention in every block, the LayerNorm patch merger) and image tokens,
held to transformers: the default config's parameters, a small real tower's FLOPs
(FlopCounterMode) and the storage autograd keeps when it trains."""

from __future__ import annotations

from typing import Any

import pytest

from gpuhours.estimate.arch import from_hf_config
from gpuhours.estimate.params import count_params
from gpuhours.estimate.vision import (
    ImageGrid,
    block_params,
    image_grid,
    merger_params,
    vision_activation_bytes,
    vision_forward_flops,
    vision_params,
    vision_tower_from_config,
)
from vision_tower import GRID_H, GRID_W, forward_flops_and_params, saved_bytes

SMALL: dict[str, Any] = dict(depth=3, embed_dim=64, hidden_size=48, mlp_ratio=4, num_heads=4,
                             patch_size=14, spatial_merge_size=2, temporal_patch_size=2,
                             in_channels=3)


def test_default_config_equals_transformers() -> None:
    """Qwen2VLConfig's defaults (Qwen2-VL-7B's shape: a 1280-wide, 32-block tower merging into
    3,584): the whole model and the tower alone."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    config = transformers.AutoConfig.for_model("qwen2_vl")
    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(config)
    arch = from_hf_config(config.to_dict(), "qwen2-vl")
    assert count_params(arch).total == sum(p.numel() for p in model.parameters())
    assert arch.vision is not None
    tower = sum(p.numel() for n, p in model.named_parameters() if ".visual." in n)
    assert vision_params(arch.vision) == tower == 675_759_104


def test_tower_by_hand() -> None:
    """d 1280, f 5120: a block is 4d (two LayerNorms) + 3d^2 + 3d + d^2 + d + 2 d f + f + d;
    the merger 2d + (5120^2 + 5120) + (5120 x 3584 + 3584); the patch conv 1,176 x 1280."""
    v = vision_tower_from_config({}, "defaults", "qwen2_vl")
    d, f = 1280, 5120
    assert block_params(v) == 4 * d + 3 * d * d + 3 * d + d * d + d + 2 * d * f + f + d
    assert merger_params(v) == 2 * d + 5120 * 5120 + 5120 + 5120 * 3584 + 3584
    assert vision_params(v) == 1176 * d + 32 * block_params(v) + merger_params(v)


def test_image_tokens_are_qwen25vls() -> None:
    """The same processor (smart_resize, 28 px a token): a 480,000-pixel square image (693 px
    a side) rounds to 700 x 700, under the default max_pixels: 50 x 50 patches, 625 tokens
    (576 under Pixelis' 480,000-pixel max_pixels); with full attention in all 32 blocks its
    FLOPs have no windows: 4 d N^2 per block."""
    arch = from_hf_config({"model_type": "qwen2_vl", "vision_config": {}, "hidden_size": 3584,
                           "num_hidden_layers": 28, "num_attention_heads": 28,
                           "num_key_value_heads": 4, "intermediate_size": 18944,
                           "vocab_size": 152064}, "q2vl")
    assert arch.vision is not None
    grid = image_grid(arch.vision, 480_000)
    assert (grid.patches, grid.tokens) == (2500, 625)
    assert image_grid(arch.vision, 480_000, max_pixels=480_000).tokens == 576
    flops = vision_forward_flops(arch.vision, grid)
    assert flops.attention == 4.0 * 1280 * 32 * 2500 ** 2


def _small_tower(torch: Any, transformers: Any) -> Any:
    from transformers.models.qwen2_vl.modeling_qwen2_vl import (
        Qwen2VisionTransformerPretrainedModel,
    )
    cfg = transformers.Qwen2VLVisionConfig(**SMALL)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    return Qwen2VisionTransformerPretrainedModel._from_config(cfg)


def test_forward_flops_equal_torchs_count_of_a_real_small_tower() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    flops, params = forward_flops_and_params(torch, _small_tower(torch, transformers),
                                             3 * 2 * 14 * 14)
    v = vision_tower_from_config(SMALL, "small", "qwen2_vl")
    assert flops == vision_forward_flops(v, ImageGrid(GRID_H, GRID_W, 2)).total
    assert vision_params(v) == params


def test_trained_tower_activations_match_what_autograd_keeps() -> None:
    """fp32, SDPA: the storage autograd keeps in one forward of a small real tower (parameters
    and the pixels excluded), within 5%."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    real = saved_bytes(torch, _small_tower(torch, transformers), 3 * 2 * 14 * 14)
    v = vision_tower_from_config(SMALL, "small", "qwen2_vl")
    assert vision_activation_bytes(v, ImageGrid(GRID_H, GRID_W, 2), 4) == pytest.approx(
        real, rel=0.05)
