"""Vision-language models (issue 15): the Qwen2.5-VL vision tower's parameters, image tokens from
pixels, its FLOPs per image, and what images add to a training setup.

Counts are held to transformers' Qwen2_5_VLForConditionalGeneration on the meta device and to a
torchinfo summary quoted with the 3B config; image tokens and FLOPs to hand-worked numbers and to
torch's FlopCounterMode over a small real tower; what a setup adds to hand arithmetic.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuhours import catalog
from gpuhours.errors import FieldError
from gpuhours.estimate.arch import from_hf_config
from gpuhours.estimate.flops import training_flops, training_flops_per_token
from gpuhours.estimate.memory import training_memory
from gpuhours.estimate.params import count_params
from gpuhours.estimate.vision import (
    ImageGrid,
    block_params,
    image_grid,
    merger_params,
    smart_resize,
    vision_forward_flops,
    vision_params,
    vision_tower_from_config,
    window_sequence_lengths,
)
from gpuhours.setup import Training


def _tower(name: str = "qwen2.5-vl-3b") -> Any:
    _, cfg = catalog.model(name)
    return vision_tower_from_config(cfg["vision_config"], name)


# --- parameters ------------------------------------------------------------------------------


def test_tower_parts_match_the_torchinfo_summary_quoted_with_the_3b_config() -> None:
    """The summary printed with Qwen/Qwen2.5-VL-3B-Instruct's config: Conv3d 1,505,280, each
    vision block 19,702,200, the merger's norm 1,280 and MLP 36,707,328."""
    v = _tower()
    assert v.patch_values * v.hidden_size == 1_505_280
    assert block_params(v) == 19_702_200
    assert merger_params(v) == 1_280 + 36_707_328
    assert vision_params(v) == 1_505_280 + 32 * 19_702_200 + 1_280 + 36_707_328


@pytest.mark.parametrize("name", ["qwen2.5-vl-3b", "qwen2.5-vl-7b", "qwen2.5-vl-32b"])
def test_catalog_vl_models_exact_against_transformers(name: str) -> None:
    """Whole model and vision tower: sum(p.numel()) of Qwen2_5_VLForConditionalGeneration built
    from the catalog config on the meta device (tied weights once)."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    _, cfg = catalog.model(name)
    counts = count_params(from_hf_config(cfg, name))
    hf_config = transformers.AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        model = transformers.Qwen2_5_VLForConditionalGeneration(hf_config)
    assert counts.total == sum(p.numel() for p in model.parameters())
    assert counts.vision == sum(p.numel() for p in model.model.visual.parameters())


def test_7b_total_is_the_language_model_plus_its_tower() -> None:
    """Qwen2.5-VL-7B's language model has Qwen2.5-7B's shape (7,615,616,512 parameters, the
    catalog's exact count) and a tower whose merger projects to 3584 instead of 2048: 1,280 x 5120
    x (3584 - 2048) + (3584 - 2048) more than the 3B's tower (668,684,288)."""
    counts = count_params(from_hf_config(catalog.model("qwen2.5-vl-7b")[1], "vl7"))
    tower = 668_684_288 + 5120 * 1536 + 1536
    assert counts.vision == tower == 676_550_144
    assert counts.total == 7_615_616_512 + tower


def test_32b_total_is_qwen25_32b_plus_a_wider_tower() -> None:
    """Qwen2.5-VL-32B's language model has Qwen2.5-32B's shape (32,763,876,352 parameters, the
    catalog's exact count); its tower is the 3B's (668,684,288) with an FFN of 3456 instead of
    3420 (per block gate and up 2 x (1,280 x 36 + 36), down 36 x 1,280: 138,312, x 32 blocks) and
    a merger projecting to 5120 instead of 2048 (1,280 x 4 x 3,072 + 3,072)."""
    counts = count_params(from_hf_config(catalog.model("qwen2.5-vl-32b")[1], "vl32"))
    tower = 668_684_288 + 32 * (2 * (1280 * 36 + 36) + 36 * 1280) + 5120 * 3072 + 3072
    assert counts.vision == tower == 688_841_984
    assert counts.total == 32_763_876_352 + tower


# --- image tokens ----------------------------------------------------------------------------


def test_smart_resize_by_hand() -> None:
    """One 28-pixel token per side step: a 693 x 693 square (480,249 px) rounds to 700 x 700
    (490,000 px), over a 480,000 cap, so it is scaled by sqrt(480249/480000) and floored to 24 x 28
    = 672; under the default cap (1,003,520) it stays 700 x 700. A 1080 x 1920 frame rounds to
    1092 x 1932 (2,109,744 px > 1,003,520): beta = sqrt(1080 x 1920 / 1,003,520) = 1.43747,
    floor(1080 / 1.43747 / 28) = 26 -> 728, floor(1920 / 1.43747 / 28) = 47 -> 1316. A 20 x 20
    image rounds to 28 x 28 (784 px), under min_pixels 3136: scaled by sqrt(3136 / 400) = 2.8 and
    ceiled to 56 x 56."""
    assert smart_resize(693, 693, max_pixels=480_000) == (672, 672)
    assert smart_resize(693, 693) == (700, 700)
    assert smart_resize(1080, 1920) == (728, 1316)
    assert smart_resize(20, 20) == (56, 56)


def test_pixelis_image_is_576_tokens() -> None:
    """Seed 001's 480,000-pixel cap: 672 x 672 -> 48 x 48 patches of 14 -> 2,304 patches, 2 x 2
    merged -> 576 tokens (the issue's ~612 is 480,000 / 784 before the rounding to 28)."""
    grid = image_grid(_tower(), 480_000, max_pixels=480_000)
    assert (grid.grid_h, grid.grid_w, grid.patches, grid.tokens) == (48, 48, 2304, 576)


def test_tokens_given_directly() -> None:
    t = Training(model="qwen2.5-vl-7b", method="lora", seq_len=1000, images_per_example=2,
                 image_tokens=300)
    assert t.image_tokens_per_image == 300
    assert t.llm_seq_len == 1000 + 2 * 300
    assert t.tokens_per_micro_batch == 1600


# --- FLOPs per image ---------------------------------------------------------------------------


def test_windows_by_hand() -> None:
    """window_size 112 px / patch 14 / merge 2 = 4 merged tokens per side: a 48 x 48 patch grid
    (24 x 24 merged) is 6 x 6 windows of 16 merged tokens = 64 patches; a 12 x 20 grid (6 x 10
    merged) is spans (4, 2) x (4, 4, 2)."""
    v = _tower()
    assert window_sequence_lengths(v, ImageGrid(48, 48, 2)) == [64] * 36
    assert sorted(window_sequence_lengths(v, ImageGrid(12, 20, 2))) == sorted(
        [64, 64, 32, 32, 32, 16])


def test_forward_flops_of_a_pixelis_image_by_hand() -> None:
    """N = 2,304 patches, T = 576 tokens, d = 1280, f = 3420, out 3584 (the 7B):
    patch embedding 2 N 1176 d = 6,936,330,240; blocks 32 x 2 N (4 d^2 + 3 d f) = 32 x 2 x 2304 x
    19,686,400 = 2,902,867,968,000 (rounded in the product below); merger 2 T (5120^2 + 5120 x
    3584) = 51,338,280,960; attention 4 d (28 x 36 x 64^2 + 4 x 2304^2) = 5120 x 25,362,432 =
    129,855,651,840."""
    f = vision_forward_flops(_tower("qwen2.5-vl-7b"), ImageGrid(48, 48, 2))
    assert f.matmul == 6_936_330_240 + 32 * 2 * 2304 * 19_686_400 + 51_338_280_960
    assert f.attention == 129_855_651_840
    assert f.total == pytest.approx(3.0910e12, rel=1e-4)


def test_forward_flops_equal_torchs_count_of_a_real_small_tower() -> None:
    """A 4-block tower (hidden 64, full attention in block 1) run for real on a 12 x 20 patch grid
    (uneven windows) with eager attention, counted by torch's FlopCounterMode: conv, addmm and the
    attention bmm's equal the analytic count exactly."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from torch.utils.flop_counter import FlopCounterMode
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import (
        Qwen2_5_VisionTransformerPretrainedModel,
    )

    vc = dict(depth=4, hidden_size=64, intermediate_size=96, num_heads=4, out_hidden_size=48,
              patch_size=14, spatial_merge_size=2, temporal_patch_size=2, in_channels=3,
              window_size=112, fullatt_block_indexes=[1])
    cfg = transformers.Qwen2_5_VLVisionConfig(**vc)
    cfg._attn_implementation = "eager"
    tower = Qwen2_5_VisionTransformerPretrainedModel._from_config(cfg).eval()
    gh, gw = 12, 20
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        tower(torch.randn(gh * gw, 3 * 2 * 14 * 14), grid_thw=torch.tensor([[1, gh, gw]]))
    ours = vision_forward_flops(vision_tower_from_config(vc, "small"), ImageGrid(gh, gw, 2))
    assert counter.get_total_flops() == ours.total


# --- what images add to a training setup -------------------------------------------------------


def _vl(**kw: Any) -> Training:
    base: dict[str, Any] = dict(model="qwen2.5-vl-7b", method="lora", seq_len=1024)
    return Training(**{**base, **kw})


def test_images_add_tokens_and_a_frozen_forward() -> None:
    """2 images of 576 tokens on 1,024 text tokens: the decoder runs over 2,176 tokens; the frozen
    tower adds 2 x its forward per example, spread over the 2,176 tokens, and no backward."""
    t = _vl(images_per_example=2, image_pixels=480_000, image_max_pixels=480_000)
    assert t.llm_seq_len == 1024 + 2 * 576
    f = training_flops(t)
    text_only = training_flops_per_token(t.arch, 2176, "lora")
    per_image = vision_forward_flops(t.arch.vision, ImageGrid(48, 48, 2))
    assert f.matmul_forward == text_only.matmul_forward
    assert f.vision_forward == pytest.approx(2 * per_image.matmul / 2176)
    assert f.vision_attention_forward == pytest.approx(2 * per_image.attention / 2176)
    assert f.vision_backward == f.vision_attention_backward == 0
    assert f.model_flops_per_token == pytest.approx(
        text_only.model_flops_per_token + 2 * per_image.total / 2176)


def test_trained_tower_has_backward_and_recompute() -> None:
    t = _vl(method="full", images_per_example=1, image_tokens=256, train_vision=True,
            checkpointing=True)
    f = training_flops(t)
    assert f.vision_backward == 2 * f.vision_forward > 0
    assert f.recompute_matmul - training_flops_per_token(
        t.arch, t.llm_seq_len, "full", checkpointing=True).recompute_matmul == pytest.approx(
        f.vision_forward)


def test_frozen_tower_has_weights_only_in_full_fine_tuning() -> None:
    """Full fine-tuning with the tower frozen (default): its 676,550,144 parameters keep their
    bf16 weights only, so 14 bytes each (2 grad + 4 master + 8 moments, bf16-mixed) less than
    training it; activations: the trained tower adds its saved tensors."""
    frozen = _vl(method="full", images_per_example=1, image_tokens=256)
    trained = _vl(method="full", images_per_example=1, image_tokens=256, train_vision=True)
    m_f, m_t = training_memory(frozen.arch, frozen), training_memory(trained.arch, trained)
    tower = 676_550_144
    assert m_t.trainable_params - m_f.trainable_params == tower
    assert m_f.weights_bytes == m_t.weights_bytes
    states = (m_t.gradients_bytes + m_t.master_weights_bytes + m_t.optimizer_bytes) - (
        m_f.gradients_bytes + m_f.master_weights_bytes + m_f.optimizer_bytes)
    assert states == 14 * tower
    assert m_t.activations_bytes > m_f.activations_bytes


def test_text_model_setups_unchanged_without_images() -> None:
    t = Training(model="qwen2.5-7b", method="lora", seq_len=2048)
    assert t.llm_seq_len == 2048 and t.image_grid is None
    assert training_flops(t) == training_flops_per_token(t.arch, 2048, "lora")


@pytest.mark.parametrize(("kw", "field"), [
    (dict(model="qwen2.5-7b", images_per_example=1, image_pixels=480_000), "images_per_example"),
    (dict(images_per_example=1), "image_pixels"),
    (dict(images_per_example=1, image_pixels=480_000, image_tokens=576), "image_pixels"),
    (dict(image_pixels=480_000), "images_per_example"),
    (dict(images_per_example=1, image_tokens=64, train_vision=True), "train_vision"),
])
def test_image_settings_refused(kw: dict[str, Any], field: str) -> None:
    with pytest.raises(FieldError) as e:
        _vl(**kw)
    assert field in e.value.fields


def test_cli_estimate_with_images_and_its_refusal() -> None:
    """The options reach the setup (576 tokens in the assumptions); no image size is exit 2
    naming the option, without a traceback."""
    from typer.testing import CliRunner

    import gpuhours.cli

    run = ["estimate", "--model", "qwen2.5-vl-7b", "--gpu", "a100-80gb", "--method", "lora",
           "--seq", "1024", "--images-per-example", "1", "--json"]
    ok = CliRunner().invoke(gpuhours.cli.app, [*run, "--image-pixels", "480000",
                                               "--image-max-pixels", "480000"])
    assert ok.exit_code == 0, ok.output
    assert '"images_per_example": 1' in ok.output and "576 tokens" in ok.output
    bad = CliRunner().invoke(gpuhours.cli.app, run)
    assert bad.exit_code == 2
    assert "--image-pixels" in bad.output and "Traceback" not in bad.output


def test_trace_and_bench_refuse_a_vision_language_model() -> None:
    """They build a causal LM in torch: a VL model is refused, naming what to do instead."""
    from gpuhours.setup import check_runs_in_torch

    with pytest.raises(FieldError, match="vision-language") as e:
        check_runs_in_torch(_vl(images_per_example=1, image_tokens=64), "the trace")
    assert e.value.fields == ("images_per_example",)
