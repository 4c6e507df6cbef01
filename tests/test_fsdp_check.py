"""The ZeRO-3/FSDP exposure check (scripts/gpuhours_dev/validation/fsdp_check.py, issues 13 and
14): the what-if rules held to hand counts, the estimate's own rule put back after each, and the
finding docs/rl.md reports: before the vision tower's host operators were counted, even with none
of the FSDP traffic hidden EasyR1's update cost less per micro-batch than the 0.43 s its two runs
measure; with them (estimate/vision_host.py, issue 13) the estimate's own cost is 0.28 s, and
none hidden would overshoot (0.50 s), so unhidden traffic is no longer needed for the gap's
larger part."""

from __future__ import annotations

import pytest

from gpuhours.estimate import timing
from gpuhours_dev.validation.fsdp_check import (
    EASYR1_MEASURED_UPDATE_S,
    WHAT_IFS,
    easyr1_updates_s,
    per_micro_batch_s,
    what_if,
)


def test_none_hidden_is_every_byte_of_every_micro_batch() -> None:
    # 4 micro-batches x (0.1 s gather forward + 0.1 s gather backward + 0.2 s reduce-scatter)
    assert WHAT_IFS["none_hidden"](0.1, 0.2, 4, 100.0, 1 / 3, 10) == pytest.approx(1.6)


def test_forward_exposed_hides_only_the_backward_traffic() -> None:
    # backward traffic 0.3 s a micro-batch over 10 layers beside ample compute: (10 - 1) x 0.03
    # = 0.27 s could hide, capped at 0.8 x 0.3 = 0.24 s, so 0.06 s exposed; the forward gather
    # 0.1 s in full: 4 x 0.16 s
    assert WHAT_IFS["forward_exposed"](0.1, 0.2, 4, 100.0, 1 / 3, 10) == pytest.approx(0.64)


def test_what_if_restores_the_estimates_rule() -> None:
    original = timing._zero3_exposed_s
    with pytest.raises(RuntimeError), what_if("none_hidden"):
        assert timing._zero3_exposed_s is WHAT_IFS["none_hidden"]
        raise RuntimeError("leave the block")
    assert timing._zero3_exposed_s is original


def test_measured_cost_per_micro_batch() -> None:
    # docs/rl.md: 67.0 s in 64 micro-batches, 46.2 s in 16: 20.8 s / 48
    assert per_micro_batch_s(EASYR1_MEASURED_UPDATE_S) == pytest.approx(0.433, abs=1e-3)


def test_easyr1s_cost_per_micro_batch_between_the_estimate_and_none_hidden() -> None:
    now = per_micro_batch_s(easyr1_updates_s())
    bound = per_micro_batch_s(easyr1_updates_s("none_hidden"))
    measured = per_micro_batch_s(EASYR1_MEASURED_UPDATE_S)
    # the estimate's 0.13 s, 0.34 s with every byte exposed (fp32 gathers: the estimate's
    # bf16-amp bytes; EasyR1 gathers bf16, which would make it smaller), both below 0.43 s,
    # until the vision tower's host operators were counted apart from the decoder's (issue 13:
    # some 5,300 a micro-batch, 0.17 s at the assumed 32 us, hidden only behind the tower's own
    # GPU work): 0.28 s now, 0.50 s with none of the traffic hidden
    assert now < measured < bound
    assert now == pytest.approx(0.28, abs=0.03)
    assert bound == pytest.approx(0.50, abs=0.03)
