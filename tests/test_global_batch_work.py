"""--global-batch against the work (issue 16, defect 13): a global batch whose one step holds
more than the whole run is refused naming --global-batch (not --interruptions-per-gpu-hour),
and whole steps that add more than 10% to the work asked are said.

Hand-worked: 1e9 tokens / 4,096 = 244,140.6 sequences: at most 244,140. 10,000,000 x 4,096 =
4.096e10 tokens a step, 40.96x 1e9 (41x). 25,000 micro-batches of 1 x 4,096 on 8 GPUs = 8.192e8
tokens a step: ceil(1e9 / 8.192e8) = 2 steps = 1.6384e9 tokens, 1.64x. 100 padded examples at
64 a step: 2 steps, 128 sequences, 1.28x; 120 examples: 128 / 120 = 1.067x, within 10%."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gpuhours import catalog
from gpuhours.api import estimate_training
from gpuhours.cli import app
from gpuhours.errors import FieldError
from gpuhours.estimate.goodput import expected_downtime
from gpuhours.resolve import resolve_model
from gpuhours.setup import Hardware, Training

BASE = ["estimate", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--gpus", "8",
        "--seq", "4096", "--tokens", "1e9"]


def test_a_global_batch_beyond_the_work_is_refused_naming_it() -> None:
    for batch, times in (("99999999999", "4.1e+05x"), ("10000000", "41x")):
        r = CliRunner().invoke(app, [*BASE, "--global-batch", batch])
        assert r.exit_code == 2, r.output
        assert r.stderr.startswith("error --global-batch:"), r.stderr
        assert "interruptions" not in r.stderr
        assert times in r.stderr and "at most 244,140 sequences" in r.stderr


def test_whole_steps_far_beyond_the_work_are_said() -> None:
    arch, _ = resolve_model("llama-3-8b")
    hw = Hardware(gpu=catalog.gpu("h100-sxm"), num_gpus=8)
    t = Training(arch=arch, seq_len=4096, grad_accum=25_000, zero_stage=3)
    e = estimate_training(t, hw, tokens=1e9)
    [w] = [w for w in e.warnings if w.startswith("whole optimizer steps")]
    assert "2 steps of 819,200,000 tokens make 1.638e+09 tokens, 1.64x" in w
    one = Hardware(gpu=catalog.gpu("h100-sxm"))
    small, _ = resolve_model("qwen2-0.5b")
    padded = Training(arch=small, seq_len=512, micro_batch=8, grad_accum=8)
    e = estimate_training(padded, one, examples=100)
    assert any("make 128 sequences, 1.28x the 100 asked" in w for w in e.warnings)
    e = estimate_training(padded, one, examples=120)
    assert not any(w.startswith("whole optimizer steps") for w in e.warnings)


def test_a_step_longer_than_the_interruptions_is_said_as_the_cause() -> None:
    # 1 interruption per GPU-hour on 1 GPU: one every 60 min; a 100-min step: the checkpoint
    # interval is that step, and 15 + 50 min > 60 min. Once "every X minutes, less than a
    # restart (15 min)" with X far above 15
    with pytest.raises(FieldError) as err:
        expected_downtime(3600.0, 1, 0.0, 1.0, 6000.0)
    text = err.value.message
    assert "every 60.0 minutes, no more than a restart (15 min) plus half a checkpoint " \
           "interval (50.0 min: the interval is one optimizer step at least, 100.0 min)" in text
    assert "smaller global batch" in text
