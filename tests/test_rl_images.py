"""A vision-language RL step's images outside the trainer's passes (plan/rl_images.py; issue
13): the engine's vision tower at prefill, once a prompt, and the workers preparing each image
on their hosts inside the step (`image_prep_by_workers`, EasyR1's); worked by hand, the
distinct prompts a rank holds checked by enumeration, and a bad setting named by field."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from gpuhours.errors import InputError
from gpuhours.estimate import assumptions as A
from gpuhours.plan import rl_images as I
from rl_plan import grpo_plan, run_rl_phase

#: Qwen2.5-VL-7B's tower forward over one 504 x 504 image (1,296 patches), counted by hand in
#: tests/test_rl_scoring.py test_the_vision_tower_runs_in_each_scoring_pass
TOWER_FLOPS = (2 * 1296 * 1176 * 1280 + 32 * 2 * 1296 * (4 * 1280**2 + 3 * 1280 * 3420)
               + 2 * 324 * (5120**2 + 5120 * 3584) + 4 * 1280 * (28 * 73_984 + 4 * 1296**2))

BASE: dict[str, Any] = grpo_plan("rl-images")
VLM = dict(model="qwen2.5-vl-7b", images_per_example=1, image_pixels=262_144)


def run(tmp_path: Path, **phase: Any) -> Any:
    return run_rl_phase(tmp_path, BASE, **phase).details


def test_distinct_prompts_per_rank_by_enumeration():
    """2 prompts x 2 responses over 2 ranks, every one of the 16 placements alike: count the
    prompts rank 0 holds in each and average (each prompt misses rank 0 with chance 1/4:
    2 x 3/4 = 1.5). Then EasyR1's 512 x 5 over 8 ranks by hand: 512 x (1 - (7/8)^5)."""
    counts = [len({p for p, r in zip((0, 0, 1, 1), placement, strict=True) if r == 0})
              for placement in itertools.product((0, 1), repeat=4)]
    assert I.distinct_prompts_per_rank(2, 2, 2) == pytest.approx(sum(counts) / len(counts))
    assert sum(counts) / len(counts) == 1.5
    assert I.distinct_prompts_per_rank(512, 5, 8) == pytest.approx(512 * (1 - 0.512908935546875))
    assert I.distinct_prompts_per_rank(512, 1, 8) == pytest.approx(64)  # one response: a share
    assert I.distinct_prompts_per_rank(512, 5, 1) == pytest.approx(512)  # one rank: all
    with pytest.raises(ValueError, match="ranks"):
        I.distinct_prompts_per_rank(512, 5, 0)


def test_prep_and_tower_by_hand():
    # 100 images of 262,144 pixels at 0.05 s a megapixel: 100 x 0.262144 x 0.05 = 1.31072 s
    assert I.image_prep_s(100, 262_144, 0.05) == pytest.approx(1.31072)
    # 64 prompts, one image each, a 1.7e12-FLOP tower over an engine of 2 GPUs at 2e14 FLOP/s
    assert I.engine_tower_s(64, 1, 1.7e12, 2, 2e14) == pytest.approx(64 * 1.7e12 / 4e14)
    with pytest.raises(ValueError, match="tensor_parallel"):
        I.engine_tower_s(64, 1, 1.7e12, 0, 2e14)


def test_images_in_a_plan_by_hand(tmp_path):
    """Qwen2.5-VL-7B, 32 prompts x 8 responses on 8 A100s, engines of one GPU: each engine's 4
    prompts through the tower once (not 32 responses), and with image_prep_by_workers each of
    the 4 images prepared on the engine's host and each actor rank's 32 x (1 - (7/8)^8) =
    21.0045 distinct prompts before the old-log-prob pass, at the measured cost a megapixel.
    The step grows by exactly the two preparations."""
    from gpuhours.catalog import gpu as catalog_gpu
    from gpuhours.estimate.timing import gemm_efficiency, peak_flops

    gpu = catalog_gpu("a100-80gb")
    rate = peak_flops(gpu, "bf16") * gemm_efficiency(gpu, 1280)
    off = run(tmp_path, **VLM)
    on = run(tmp_path, **VLM, image_prep_by_workers=True)
    assert TOWER_FLOPS == pytest.approx(1.7107e12, rel=1e-4)
    assert off["rollout_vision_tower_s"] == pytest.approx(4 * TOWER_FLOPS / rate, rel=1e-6)
    assert on["rollout_vision_tower_s"] == off["rollout_vision_tower_s"]
    per_image = 0.262144 * A.RL_IMAGE_PREP_S_PER_MEGAPIXEL.value
    assert off["rollout_image_prep_s"] == 0.0 and off["actor_image_prep_s"] == 0.0
    assert on["rollout_image_prep_s"] == pytest.approx(4 * per_image, rel=1e-9)
    assert on["actor_image_prep_s"] == pytest.approx(32 * (1 - (7 / 8) ** 8) * per_image,
                                                     rel=1e-9)
    assert on["old_policy_log_probs_s"] == pytest.approx(
        off["old_policy_log_probs_s"] + on["actor_image_prep_s"], rel=1e-9)
    assert on["step_time_s"] == pytest.approx(
        off["step_time_s"] + on["rollout_image_prep_s"] + on["actor_image_prep_s"], rel=1e-9)
    # engines of 2 GPUs: each GPU runs half the tower over its engine's 8 prompts, and its host
    # prepares all 8 (every GPU of the engine runs the engine's whole batch)
    tp2 = run(tmp_path, **VLM, image_prep_by_workers=True, rollout_tensor_parallel=2)
    assert tp2["rollout_vision_tower_s"] == pytest.approx(off["rollout_vision_tower_s"],
                                                          rel=1e-9)
    assert tp2["rollout_image_prep_s"] == pytest.approx(8 * per_image, rel=1e-9)


def test_a_text_model_has_no_images(tmp_path):
    d = run(tmp_path)
    assert d["rollout_vision_tower_s"] == 0.0 and d["actor_image_prep_s"] == 0.0
    with pytest.raises(InputError, match="has none") as caught:
        run(tmp_path, image_prep_by_workers=True)
    assert "image_prep_by_workers" in caught.value.where


def test_a_validation_pass_waits_for_its_dataset_images(tmp_path):
    """256 validation prompts, one response each: the same rollout shape as the step's 32 x 8
    (tests/test_rl_scoring.py test_a_validation_pass_inside_the_step), but each engine's
    tower runs over 32 prompts' images, not 4, its host prepares those 32, and one dataloader
    worker prepares all 256 images first. Every 4 steps:
    (rollout - tower(4) - prep(4) + tower(32) + prep(32) + 256 images + sync) / 4.
    Without image_prep_by_workers neither preparation is counted."""
    per_image = 0.262144 * A.RL_IMAGE_PREP_S_PER_MEGAPIXEL.value
    kw = dict(**VLM, max_response_tokens=1024)
    val = dict(validation_every_steps=4, validation_prompts=256)
    off = run(tmp_path, **kw, image_prep_by_workers=True)
    on = run(tmp_path, **kw, image_prep_by_workers=True, **val)
    tower_4 = off["rollout_vision_tower_s"]
    expected = (off["rollout_generation_s"] - tower_4 - 4 * per_image + 8 * tower_4
                + 32 * per_image + 256 * per_image + off["weight_sync_s"]) / 4
    assert on["validation_s"] == pytest.approx(expected, rel=1e-9)
    bare_off = run(tmp_path, **kw)
    bare = run(tmp_path, **kw, **val)
    assert bare["validation_s"] == pytest.approx(
        (bare_off["rollout_generation_s"] + 7 * tower_4 + bare_off["weight_sync_s"]) / 4,
        rel=1e-9)


def test_hf_generate_runs_the_tower_for_every_sequence(tmp_path):
    """transformers' generate expands pixel_values with num_return_sequences: each engine's 4
    prompts x 8 responses through the tower (32 forwards), where vLLM runs 4; the images are
    still prepared once a prompt."""
    vllm = run(tmp_path, **VLM, image_prep_by_workers=True)
    hf = run(tmp_path, **VLM, image_prep_by_workers=True, engine="hf-generate")
    assert hf["rollout_vision_tower_s"] == pytest.approx(8 * vllm["rollout_vision_tower_s"],
                                                         rel=1e-9)
    assert hf["rollout_image_prep_s"] == pytest.approx(vllm["rollout_image_prep_s"], rel=1e-9)
