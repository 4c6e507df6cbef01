"""The vision tower's host operators (estimate/vision_host.py, issue 13): hand-worked counts from
the per-block tables, a re-count on CPU of the real transformers tower, and the tower's host time
combined apart from the decoder's (timing.host_gpu_combined_s)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuhours.estimate import assumptions as A
from gpuhours.estimate.timing import host_gpu_combined_s
from gpuhours.estimate.vision_host import (
    QWEN2_5_VL_BLOCK_OPS,
    QWEN2_5_VL_OUTSIDE_OPS,
    vision_host_ops_per_micro_batch,
)
from gpuhours.setup import Training


def _vl(**kw: Any) -> Training:
    base: dict[str, Any] = dict(model="qwen2.5-vl-3b", method="full", seq_len=400,
                                micro_batch=6, images_per_example=1, image_pixels=262_144)
    return Training(**{**base, **kw})


def test_trained_checkpointed_tower_by_hand() -> None:
    # 32 blocks x (42 forward + 78 backward + 40 recomputed) = 5,120; outside the blocks
    # 36 + 20 x 6 images forward, 32 backward = 188: 5,308 a micro-batch
    t = _vl(train_vision=True, checkpointing=True)
    assert vision_host_ops_per_micro_batch(t) == pytest.approx(5308.0)
    # without checkpointing the recomputed forward goes: 5,308 - 32 x 40 = 4,028
    assert vision_host_ops_per_micro_batch(
        t.model_copy(update={"checkpointing": False})) == pytest.approx(4028.0)


def test_frozen_tower_runs_forward_only() -> None:
    # 32 x 42 + 36 + 20 x 6 = 1,500, checkpointing or not (nothing of it is recomputed)
    assert vision_host_ops_per_micro_batch(_vl(checkpointing=True)) == pytest.approx(1500.0)
    assert vision_host_ops_per_micro_batch(_vl()) == pytest.approx(1500.0)


def test_no_images_no_tower_ops() -> None:
    for model in ("qwen2.5-vl-3b", "qwen2.5-0.5b"):
        t = Training(**dict(model=model, seq_len=400))
        assert vision_host_ops_per_micro_batch(t) == 0.0


def test_tower_apart_by_hand() -> None:
    p = A.HOST_GPU_OVERLAP_P.value
    assert p == 1.5  # the hand numbers below are worked at it
    # decoder: host 3 s, GPU 4 s: (3^1.5 + 4^1.5)^(2/3) = 13.196^(2/3) = 5.5843 s
    assert host_gpu_combined_s(3.0, 4.0) == pytest.approx(5.5843, abs=1e-3)
    # + the tower, host 2 s over 0.5 s of GPU: (2^1.5 + 0.5^1.5)^(2/3) = 3.182^(2/3) = 2.1633 s
    assert host_gpu_combined_s(3.0, 4.0, 2.0, 0.5) == pytest.approx(5.5843 + 2.1633, abs=1e-3)
    # in one p-norm the tower's host time would hide behind the decoder's GPU work:
    # (5^1.5 + 4.5^1.5)^(2/3) = 20.726^(2/3) = 7.5454 s
    assert host_gpu_combined_s(3.0, 4.0, 2.0, 0.5, tower_apart=False) == pytest.approx(
        7.5454, abs=1e-3)


def test_step_time_grows_by_the_tower_host_time() -> None:
    """The estimate's exposed host time of a trained VL setup holds the tower's part: with the
    tower's operators counted the step is longer than its GPU work plus the decoder's exposed
    host time alone, and a frozen tower adds less than a trained one."""
    from gpuhours import catalog
    from gpuhours.estimate.flops import training_flops
    from gpuhours.estimate.timing import training_step_time
    from gpuhours.setup import Hardware

    hw = Hardware(gpu=catalog.gpu("h100-sxm"))

    def step(t: Training) -> Any:
        return training_step_time(t.arch, t, hw, training_flops(t), 3_000_000_000)

    st = step(_vl(train_vision=True, checkpointing=True, micro_batch=2))
    frozen = step(_vl(checkpointing=True, micro_batch=2))
    tower_host = vision_host_ops_per_micro_batch(
        _vl(train_vision=True, checkpointing=True, micro_batch=2)) * A.HOST_S_PER_OP.value
    assert st.host_s >= tower_host
    assert st.host_exposed_s > frozen.host_exposed_s


def test_recount_on_cpu() -> None:
    """The per-block table against a fresh count of transformers' Qwen2.5-VL tower (2 and 4
    blocks, one image, one training step under count_ops)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import Qwen2_5_VLVisionConfig
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import (
        Qwen2_5_VisionTransformerPretrainedModel,
    )

    from gpuhours.torchkit.ops import count_ops

    def counts(depth: int) -> tuple[int, int]:
        cfg = Qwen2_5_VLVisionConfig(depth=depth, hidden_size=64, intermediate_size=128,
                                     num_heads=4, out_hidden_size=64,
                                     fullatt_block_indexes=[depth - 1])
        cfg._attn_implementation = "sdpa"
        m = Qwen2_5_VisionTransformerPretrainedModel(cfg).to(torch.bfloat16).train()
        px = torch.randn(64, 1176, dtype=torch.bfloat16)
        grid = torch.tensor([[1, 8, 8]])
        out: dict[str, Any] = {}

        def fwd() -> None:
            out["y"] = m(hidden_states=px, grid_thw=grid)

        def bwd() -> None:
            y = out["y"]
            for name in ("pooler_output", "last_hidden_state"):
                if getattr(y, name, None) is not None:
                    y = getattr(y, name)
                    break
            y.float().sum().backward()

        return sum(count_ops(fwd).values()), sum(count_ops(bwd).values())

    (f2, b2), (f4, b4) = counts(2), counts(4)
    fwd_block, bwd_block = (f4 - f2) / 2, (b4 - b2) / 2
    assert (fwd_block, bwd_block) == QWEN2_5_VL_BLOCK_OPS[:2]
    fixed, per_image, outside_bwd = QWEN2_5_VL_OUTSIDE_OPS
    assert f2 - 2 * fwd_block == fixed + per_image
    assert b2 - 2 * bwd_block == outside_bwd
