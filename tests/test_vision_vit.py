"""LLaVA and Gemma 3 (issue 15): the ViT tower and projector's parameters against transformers on
the meta device, tokens per image, FLOPs per image by hand and against torch's FlopCounterMode,
and the activations a trained tower keeps against the tensors autograd saves in small real
towers on CPU.
"""

from __future__ import annotations

import gc
from typing import Any

import pytest

from gpuhours.errors import FieldError
from gpuhours.estimate.arch import from_hf_config
from gpuhours.estimate.flops import images_note, training_flops
from gpuhours.estimate.memory import activation_bytes
from gpuhours.estimate.params import count_params
from gpuhours.estimate.vision import grid_for_tokens, image_grid, vision_forward_flops
from gpuhours.estimate.vit import ViTTower, vit_activation_bytes, vit_forward_flops
from gpuhours.setup import Training
from saved_storage import saved_storages

#: llava-hf/llava-1.5-7b-hf's config.json (its size fields; the rest are token ids and dtypes)
LLAVA_15_7B: dict[str, Any] = {
    "model_type": "llava", "image_token_index": 32000, "projector_hidden_act": "gelu",
    "tie_word_embeddings": False, "vision_feature_layer": -2,
    "vision_feature_select_strategy": "default", "vocab_size": 32064,
    "text_config": {"max_position_embeddings": 4096, "model_type": "llama",
                    "rms_norm_eps": 1e-05, "vocab_size": 32064},
    "vision_config": {"hidden_size": 1024, "image_size": 336, "intermediate_size": 4096,
                      "model_type": "clip_vision_model", "num_attention_heads": 16,
                      "num_hidden_layers": 24, "patch_size": 14, "projection_dim": 768,
                      "vocab_size": 32000},
}
#: google/gemma-3-4b-it's config.json (its size fields)
GEMMA3_4B: dict[str, Any] = {
    "model_type": "gemma3", "mm_tokens_per_image": 256, "boi_token_index": 255999,
    "eoi_token_index": 256000, "image_token_index": 262144,
    "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                    "num_hidden_layers": 34, "sliding_window": 1024,
                    "rope_scaling": {"factor": 8.0, "rope_type": "linear"}},
    "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
                      "model_type": "siglip_vision_model", "num_attention_heads": 16,
                      "num_hidden_layers": 27, "patch_size": 14, "vision_use_head": False},
}


def _vit(config: dict[str, Any]) -> ViTTower:
    v = from_hf_config(config, str(config["model_type"])).vision
    assert isinstance(v, ViTTower)
    return v


def _forward(v: ViTTower) -> float:
    matmul, attention = vit_forward_flops(v)
    return matmul + attention


def _built(config: dict[str, Any]) -> tuple[int, int]:
    """(whole model, tower + projector) of the model transformers builds on the meta device."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(
            transformers.AutoConfig.for_model(**config))
    vision = [model.model.vision_tower, model.model.multi_modal_projector]
    return (sum(p.numel() for p in model.parameters()),
            sum(p.numel() for m in vision for p in m.parameters()))


# --- parameters ------------------------------------------------------------------------------


@pytest.mark.parametrize("config", [LLAVA_15_7B, GEMMA3_4B], ids=["llava-1.5-7b", "gemma-3-4b"])
def test_hub_configs_exact_against_transformers(config: dict[str, Any]) -> None:
    total, vision = _built(config)
    counts = count_params(from_hf_config(config, "vlm"))
    assert (counts.total, counts.vision) == (total, vision)


def test_published_totals() -> None:
    """LLaVA-1.5-7B: Vicuna-7B (6,738,415,616 at vocabulary 32,000, plus 64 rows of 4,096 in
    embedding and head), CLIP ViT-L/14-336 (303,507,456: patch conv 3 x 14^2 x 1024 = 602,112,
    577 positions x 1024 = 590,848, class token and pre-LayerNorm 3 x 1024, 24 layers of
    4 (1024^2 + 1024) + 4 x 1024 + 2 x 1024 x 4096 + 4096 + 1024 = 12,596,224, post-LayerNorm
    2,048) and the projector 1024 x 4096 + 4096^2 + 2 x 4096 = 20,979,712. Gemma 3 4B:
    4,300,079,472 (the Hub page says 4.3B; transformers builds the same from this config)."""
    llava = count_params(from_hf_config(LLAVA_15_7B, "llava"))
    tower = 602_112 + 590_848 + 3 * 1024 + 24 * 12_596_224 + 2048
    assert tower == 303_507_456
    assert llava.vision == tower + 20_979_712
    assert llava.total == 6_738_415_616 + 2 * 64 * 4096 + tower + 20_979_712
    gemma = from_hf_config(GEMMA3_4B, "gemma")
    assert count_params(gemma).total == 4_300_079_472
    # the gemma3_text language model is counted analytically too (no transformers needed)
    assert gemma.model_type == "gemma3" and not gemma.params_basis


# --- tokens per image ------------------------------------------------------------------------


def test_tokens_per_image_are_fixed() -> None:
    """LLaVA-1.5: (336 / 14)^2 = 576 tokens whatever the image's size; Gemma 3: 896 / 14 = 64
    patches per side pooled 4 x 4 to 256. An image_tokens that differs is refused."""
    llava = _vit(LLAVA_15_7B)
    gemma = _vit(GEMMA3_4B)
    for pixels in (10_000, 480_000, 4_000_000):
        assert image_grid(llava, pixels).tokens == 576
        assert image_grid(gemma, pixels).tokens == 256
    assert image_grid(gemma, 1).patches == 4096
    assert grid_for_tokens(llava, 576).tokens == 576
    with pytest.raises(FieldError, match="576 tokens"):
        grid_for_tokens(llava, 300)
    full = _vit({**LLAVA_15_7B, "vision_feature_select_strategy": "full"})
    assert image_grid(full, 1).tokens == 577  # the class token is passed on too


def test_setup_adds_image_tokens_and_says_the_rule() -> None:
    t = Training(arch=from_hf_config(LLAVA_15_7B, "llava"), method="lora", seq_len=1000,
                 images_per_example=2, image_pixels=480_000)
    assert t.llm_seq_len == 1000 + 2 * 576
    note = images_note(t)
    assert note is not None and "resized by the llava processor to 336 x 336" in note
    assert "576 tokens" in note and "frozen" in note


# --- FLOPs per image -------------------------------------------------------------------------


def test_llava_forward_flops_by_hand() -> None:
    """n = 577 positions (576 patches + class token), d = 1024, f = 4096, 24 layers, h = 4096:
    conv 2 x 576 x 588 x 1024 = 693,633,024; layers 24 x 2 x 577 x (4 x 1024^2 + 2 x 1024 x 4096)
    = 348,496,330,752; projector 2 x 576 x (1024 x 4096 + 4096^2) = 24,159,191,040; attention
    24 x 4 x 577^2 x 1024 = 32,728,252,416. About 0.406 TFLOP per image."""
    v = _vit(LLAVA_15_7B)
    f = vision_forward_flops(v, image_grid(v, 1))
    assert f.matmul == 693_633_024 + 348_496_330_752 + 24_159_191_040
    assert f.attention == 32_728_252_416
    assert f.total == pytest.approx(0.4061e12, rel=1e-3)


def test_gemma3_forward_flops_by_hand() -> None:
    """n = 4096 patches, d = 1152, f = 4304, 27 layers, h = 2560: conv 2 x 4096 x 588 x 1152 =
    5,549,064,192; layers 27 x 2 x 4096 x (4 x 1152^2 + 2 x 1152 x 4304) = 3,367,489,241,088;
    projector 2 x 256 x 1152 x 2560 = 1,509,949,440; attention 27 x 4 x 4096^2 x 1152 =
    2,087,354,105,856. About 5.46 TFLOP per image: 13 times LLaVA-1.5's."""
    v = _vit(GEMMA3_4B)
    f = vision_forward_flops(v, image_grid(v, 1))
    assert f.matmul == 5_549_064_192 + 3_367_489_241_088 + 1_509_949_440
    assert f.attention == 2_087_354_105_856


def _tiny(model_type: str, use_head: bool = False) -> dict[str, Any]:
    if model_type == "llava":
        return dict(model_type="llava", image_token_index=299, vision_config=dict(
            model_type="clip_vision_model", hidden_size=64, intermediate_size=160,
            num_hidden_layers=3, num_attention_heads=4, image_size=56, patch_size=8),
            text_config=dict(model_type="llama", hidden_size=48, intermediate_size=96,
                             num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=4,
                             vocab_size=300))
    return dict(model_type="gemma3", mm_tokens_per_image=16, image_token_index=299,
                boi_token_index=297, eoi_token_index=298, vision_config=dict(
                    model_type="siglip_vision_model", hidden_size=64, intermediate_size=160,
                    num_hidden_layers=3, num_attention_heads=4, image_size=64, patch_size=8,
                    vision_use_head=use_head),
                text_config=dict(model_type="gemma3_text", hidden_size=48, intermediate_size=96,
                                 num_hidden_layers=1, num_attention_heads=4,
                                 num_key_value_heads=4, head_dim=16, vocab_size=300))


def _real_model(config: dict[str, Any], attention: str) -> Any:
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = transformers.AutoModelForImageTextToText.from_config(
        transformers.AutoConfig.for_model(**config), attn_implementation=attention)
    return model.train()


@pytest.mark.parametrize("model_type,use_head", [("llava", False), ("gemma3", False),
                                                 ("gemma3", True)])
def test_forward_flops_equal_torchs_count_of_a_real_small_tower(model_type: str,
                                                                use_head: bool) -> None:
    """Two images through get_image_features with eager attention: conv, addmm/mm and the
    attention bmm's that FlopCounterMode counts equal the analytic count exactly (the class
    token, every layer past LLaVA's feature layer and SigLIP's pooling head included)."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    config = _tiny(model_type, use_head)
    model = _real_model(config, "eager")
    v = _vit(config)
    pixels = torch.randn(2, 3, v.image_size, v.image_size)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model.model.get_image_features(pixel_values=pixels)
    assert counter.get_total_flops() == 2 * _forward(v)


# --- activations when trained ----------------------------------------------------------------


@pytest.mark.parametrize("model_type", ["llava", "gemma3"])
def test_trained_tower_activations_match_what_autograd_keeps(model_type: str) -> None:
    """Tensors autograd saves while two images go through get_image_features (sdpa attention,
    fp32), still alive with its output held (LlavaModel.forward keeps it through the language
    model): the analytic count within 1%."""
    torch = pytest.importorskip("torch")
    config = _tiny(model_type)
    model = _real_model(config, "sdpa")
    v = _vit(config)
    pixels = torch.randn(2, 3, v.image_size, v.image_size)
    with saved_storages(model.parameters()) as saved:
        out = model.model.get_image_features(pixel_values=pixels)
    gc.collect()
    real = sum(s.nbytes for s in saved.values() if s.ref() is not None)
    assert out is not None
    assert 2 * vit_activation_bytes(v, 4) == pytest.approx(real, rel=0.01)


def test_a_frozen_tower_keeps_no_activations_and_no_backward() -> None:
    """The default: the tower runs forward only; --train-vision adds 2x its forward in backward
    and its activations (per image, as vit_activation_bytes)."""
    arch = from_hf_config(LLAVA_15_7B, "llava")
    common: dict[str, Any] = dict(arch=arch, method="full", seq_len=512, images_per_example=1,
                                  image_pixels=200_000, precision="bf16", micro_batch=2)
    frozen, trained = Training(**common), Training(**common, train_vision=True)
    assert training_flops(frozen).vision_backward == 0.0
    v = _vit(LLAVA_15_7B)
    per_token = _forward(v)
    assert training_flops(trained).vision_backward + training_flops(
        trained).vision_attention_backward == pytest.approx(2 * per_token / (512 + 576))
    gap = activation_bytes(arch, trained).saved_all_layers - activation_bytes(
        arch, frozen).saved_all_layers
    assert gap == pytest.approx(2 * vit_activation_bytes(v, 2))


# --- Llama 4 ---------------------------------------------------------------------------------

#: meta-llama/Llama-4-Scout-17B-16E's vision_config (its size fields), with a small text model:
#: the tower and projector do not depend on the language model but for its width (5,120)
LLAMA4_SCOUT_VISION: dict[str, Any] = {
    "model_type": "llama4", "image_token_index": 200092, "boi_token_index": 200080,
    "eoi_token_index": 200081,
    "vision_config": {"model_type": "llama4_vision_model", "hidden_size": 1408,
                      "intermediate_size": 5632, "num_hidden_layers": 34,
                      "num_attention_heads": 16, "image_size": 336, "patch_size": 14,
                      "pixel_shuffle_ratio": 0.5, "projector_input_dim": 4096,
                      "projector_output_dim": 4096, "vision_output_dim": 4096},
    "text_config": {"model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 256,
                    "intermediate_size_mlp": 256, "num_hidden_layers": 1,
                    "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
                    "vocab_size": 1000, "num_local_experts": 2, "num_experts_per_tok": 1},
}


def _llama4_built(config: dict[str, Any]) -> tuple[int, int]:
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    with torch.device("meta"):
        model = transformers.Llama4ForConditionalGeneration(
            transformers.AutoConfig.for_model(**config))
    return (sum(p.numel() for p in model.parameters()),
            sum(p.numel() for m in (model.vision_model, model.multi_modal_projector)
                for p in m.parameters()))


def test_llama4_scout_tower_exact_against_transformers() -> None:
    counts = count_params(from_hf_config(LLAMA4_SCOUT_VISION, "scout"))
    assert (counts.total, counts.vision) == _llama4_built(LLAMA4_SCOUT_VISION)


def test_llama4_tiles_and_tokens_by_hand() -> None:
    """336-px tiles, (24 x 0.5)^2 = 144 tokens each: a 300-px image is one tile (144 tokens); a
    480,000-pixel one (693 px a side) 3 x 3 tiles and the global one (1,440 tokens); a
    2,000-px one is capped at 4 x 4 + 1 (2,448 tokens). Given tokens must be whole tiles."""
    v = _vit(LLAMA4_SCOUT_VISION)
    assert [image_grid(v, p).tokens for p in (300 * 300, 480_000, 2000 * 2000)] == [
        144, 1440, 2448]
    assert grid_for_tokens(v, 288).patches == 2 * 576
    with pytest.raises(FieldError, match="144 tokens a tile"):
        grid_for_tokens(v, 200)


def test_llama4_forward_flops_by_hand() -> None:
    """Per tile: n = 577 (576 patches + class token), d = 1408, f = 5632, 34 layers: patch
    embedding 2 x 576 x 588 x 1408 = 953,745,408; layers 34 x 2 x 577 x (4 d^2 + 2 d f) =
    933,407,490,048; attention 34 x 4 x 577^2 x 1408 = 63,751,908,352; adapter 2 x 144 x (5632 x
    4096 + 4096^2) = 11,475,615,744; projector 2 x 144 x 4096 x 5120 = 6,039,797,760. A
    480,000-pixel image's 10 tiles: 10.16 TFLOP."""
    v = _vit(LLAMA4_SCOUT_VISION)
    f = vision_forward_flops(v, image_grid(v, 480_000))
    assert f.attention == 10 * 63_751_908_352
    assert f.matmul == 10 * (953_745_408 + 933_407_490_048 + 11_475_615_744 + 6_039_797_760)


def _tiny_llama4() -> dict[str, Any]:
    return dict(model_type="llama4", image_token_index=299, boi_token_index=297,
                eoi_token_index=298, vision_config=dict(
                    model_type="llama4_vision_model", hidden_size=64, intermediate_size=256,
                    num_hidden_layers=3, num_attention_heads=4, image_size=64, patch_size=8,
                    pixel_shuffle_ratio=0.5, projector_input_dim=96, projector_output_dim=96,
                    vision_output_dim=96),
                text_config=dict(model_type="llama4_text", hidden_size=48, intermediate_size=96,
                                 intermediate_size_mlp=96, num_hidden_layers=1,
                                 num_attention_heads=4, num_key_value_heads=4, head_dim=12,
                                 vocab_size=300, num_local_experts=2, num_experts_per_tok=1))


def _llama4_real(attention: str) -> Any:
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = transformers.Llama4ForConditionalGeneration._from_config(
        transformers.AutoConfig.for_model(**_tiny_llama4()), attn_implementation=attention)
    return model.train()


def test_llama4_small_tower_flops_and_activations_match_torch() -> None:
    """Three 64-px tiles through the tower and projector: the params equal, FlopCounterMode's
    count (eager attention) equals the analytic one, and the tensors autograd keeps (sdpa, fp32)
    are within 1% of the analytic activations."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    config = _tiny_llama4()
    v = _vit(config)
    counts = count_params(from_hf_config(config, "tiny"))
    assert (counts.total, counts.vision) == _llama4_built(config)
    pixels = torch.randn(3, 3, v.image_size, v.image_size)
    model = _llama4_real("eager")
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model.multi_modal_projector(model.get_image_features(pixel_values=pixels).last_hidden_state)
    matmul, attention = vit_forward_flops(v, 3)
    assert counter.get_total_flops() == matmul + attention

    model = _llama4_real("sdpa")
    with saved_storages(model.parameters()) as saved:
        out = model.multi_modal_projector(
            model.get_image_features(pixel_values=pixels).last_hidden_state)
    gc.collect()
    real = sum(s.nbytes for s in saved.values() if s.ref() is not None)
    assert out is not None
    assert vit_activation_bytes(v, 4, 3) == pytest.approx(real, rel=0.01)


def test_llama4_note_says_the_tiles() -> None:
    t = Training(arch=from_hf_config(LLAMA4_SCOUT_VISION, "scout"), method="lora", seq_len=500,
                 images_per_example=1, image_pixels=480_000)
    assert t.llm_seq_len == 500 + 1440
    note = images_note(t)
    assert note is not None and "10 tiles of 336 px" in note


# --- LLaVA-NeXT --------------------------------------------------------------------------------


def _tiny_llava_next() -> dict[str, Any]:
    return dict(model_type="llava_next", image_token_index=299,
                image_grid_pinpoints=[[56, 112], [112, 56], [112, 112], [168, 56], [56, 168]],
                vision_config=dict(model_type="clip_vision_model", hidden_size=64,
                                   intermediate_size=160, num_hidden_layers=2,
                                   num_attention_heads=4, image_size=56, patch_size=8),
                text_config=dict(model_type="llama", hidden_size=48, intermediate_size=96,
                                 num_hidden_layers=1, num_attention_heads=4,
                                 num_key_value_heads=4, vocab_size=300))


@pytest.mark.parametrize("size", [(40, 40), (56, 56), (100, 100), (200, 200), (60, 130),
                                  (130, 60), (300, 90)])
def test_llava_next_tiles_and_tokens_equal_transformers(size: tuple[int, int]) -> None:
    """Tiles and tokens of an image of each size against transformers' own
    get_anyres_image_grid_shape and LlavaNextModel.pack_image_features (unpadding, newlines)
    in a small real model, whose parameters are held to the analytic count too."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.llava_next.modeling_llava_next import get_anyres_image_grid_shape

    from gpuhours.estimate.vit import llava_next_layout

    config = _tiny_llava_next()
    model = transformers.AutoModelForImageTextToText.from_config(
        transformers.AutoConfig.for_model(**config))
    assert count_params(from_hf_config(config, "next")).total == sum(
        p.numel() for p in model.parameters())
    v = _vit(config)
    rows, cols = get_anyres_image_grid_shape(size, config["image_grid_pinpoints"], 56)
    features = [torch.zeros(rows * cols + 1, v.patches, 48)]
    _, lengths = model.model.pack_image_features(features, torch.tensor([size]), "default",
                                                 model.model.image_newline)
    assert llava_next_layout(v, *size) == (rows * cols + 1, int(lengths[0]))


def test_llava_next_480k_pixel_image_by_hand() -> None:
    """LLaVA-NeXT's default pinpoints, a 693 x 693 image: 672 x 672 keeps the most resolution
    (451,584 effective pixels), so 2 x 2 tiles and the base image go through the tower (5 x 576
    patches, 5 x 0.406 TFLOP) and the language model gets 48 rows of 48 features and a newline
    plus the base image's 576: 2,928 tokens."""
    config = {**LLAVA_15_7B, "model_type": "llava_next"}
    v = _vit(config)
    grid = image_grid(v, 480_000)
    assert (grid.patches, grid.tokens) == (5 * 576, 48 * 49 + 576)
    llava = _vit(LLAVA_15_7B)
    assert vision_forward_flops(v, grid).total == 5 * vision_forward_flops(
        llava, image_grid(llava, 1)).total
    with pytest.raises(FieldError, match="image_pixels"):
        grid_for_tokens(v, 2928)


def test_max_pixels_is_refused_where_the_processor_has_none() -> None:
    with pytest.raises(FieldError, match="max_pixels is Qwen2-VL's and Qwen2.5-VL's"):
        Training(arch=from_hf_config(LLAVA_15_7B, "llava"), method="lora", seq_len=100,
                 images_per_example=1, image_pixels=480_000, image_max_pixels=100_000)
