"""The host's part of an RL step's scoring forwards (plan/rl_scoring_host.py, issue 13): a pass of
EasyR1's shape worked by hand, the forward-only operator counts, and the GPU-only devices."""

from __future__ import annotations

from typing import Any

import pytest

from gpuhours import catalog
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.host import host_forward_ops_per_micro_batch, host_ops_per_micro_batch
from gpuhours.estimate.vision_host import vision_forward_host_ops
from gpuhours.plan.rl_scoring_host import scoring_pass_s
from gpuhours.setup import Hardware, Training


def _vl(**kw: Any) -> Training:
    # 351 text tokens + 324 image tokens (a 512 x 512 image) = 675 a sequence
    base: dict[str, Any] = dict(model="qwen2.5-vl-3b", method="full", seq_len=351,
                                precision="bf16-amp", images_per_example=1,
                                image_pixels=262_144, train_vision=True, checkpointing=True)
    return Training(**{**base, **kw})


def test_forward_ops_by_hand() -> None:
    t = _vl()
    assert t.llm_seq_len == 675
    # Qwen2.5-VL-3B's 36 layers x 55 (autocast's forward) + 32 outside = 2,012
    assert host_forward_ops_per_micro_batch(t.arch, t) == pytest.approx(2012.0)
    # the tower over 12 images: 32 x 42 + 36 + 20 x 12 = 1,620
    assert vision_forward_host_ops(t, 12) == pytest.approx(1620.0)
    # the forward is part of a training micro-batch's operators, less than all of them
    assert host_forward_ops_per_micro_batch(t.arch, t) < host_ops_per_micro_batch(t.arch, t)


def test_megatron_forward_ops_by_hand() -> None:
    t = Training(**dict(model="llama-3.1-8b", seq_len=1024, kernels="megatron"))
    # 32 layers x 12 kernels + 32 outside = 416
    assert host_forward_ops_per_micro_batch(t.arch, t) == pytest.approx(416.0)


def test_easyr1_shaped_pass_by_hand() -> None:
    assert A.HOST_GPU_OVERLAP_P.value == 1.5 and A.HOST_S_PER_OP.value == 32e-6
    t = _vl()
    hw = Hardware(gpu=catalog.gpu("h100-sxm"))
    # 2,560 sequences over 8 ranks: 320 a GPU, 12 a micro-batch of 8,192 tokens (8,192 // 675),
    # 27 micro-batches. Host: 27 x 2,012 x 32 us = 1.7384 s beside the decoder's 2 s of GPU
    # work, (1.7384^1.5 + 2^1.5)^(2/3) = 2.9708 s; the tower's 27 x 1,620 x 32 us = 1.3997 s
    # beside its 1 s, (1.3997^1.5 + 1)^(2/3) = 1.9178 s; 4.8886 s in all
    s = scoring_pass_s(t, t.arch, hw, 2.0, 1.0, 2560, 8, 8192)
    assert s == pytest.approx(4.8886, abs=1e-3)
    # another scoring model (a reward model) gets no tower: the decoder's p-norm alone
    assert scoring_pass_s(t, t.arch, hw, 2.0, 0.0, 2560, 8, 8192) == pytest.approx(
        2.9708, abs=1e-3)


def test_no_host_time_where_the_host_does_not_issue_operators() -> None:
    t = _vl()
    tpu = next(g for g in catalog.gpus() if g.stack == "xla")  # XLA: one compiled program
    assert scoring_pass_s(t, t.arch, Hardware(gpu=tpu), 2.0, 1.0, 2560, 8, 8192) == 3.0
