"""A plan phase that leaves its setup open gets the fastest setup that fits, as `gpuhours
estimate` does (issue 16: "estimate, plan and generation choose the fastest setup that fits");
a setup the plan states is kept and refused when it does not fit."""

from __future__ import annotations

import pytest

from gpuhours import catalog
from gpuhours.errors import DoesNotFit
from gpuhours.estimate.fit import chosen_setup
from gpuhours.plan.budget import evaluate
from gpuhours.plan.load import load_plan
from gpuhours.resolve import resolve_model
from gpuhours.setup import Hardware, Training

PLAN = """project: open setup
hardware:
  gpu: a100-80gb
  nodes: 8
seeds: 1
phases:
  - name: pretrain
    kind: pretrain
    runs: once
    model: llama-2-70b
    tokens: 1.0e+10
    seq_len: 4096{extra}
"""


def test_an_open_setup_that_does_not_fit_gets_the_one_estimate_chooses(tmp_path):
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN.format(extra=""))
    b = evaluate(load_plan(path))
    [phase] = b.phases
    why = [w for w in phase.warnings if w.startswith("setup chosen by gpuhours")]
    assert len(why) == 1
    # the same choice as the library's chooser for the phase's defaults on 64 GPUs
    arch, _ = resolve_model("llama-2-70b")
    found = chosen_setup(Training(arch=arch, seq_len=4096),
                         Hardware(gpu=catalog.gpu("a100-80gb"), num_gpus=64),
                         search_layouts=True, kernels_open=True)
    assert found is not None
    chosen, sentence = found
    assert why[0].startswith(sentence) and "in the plan to choose yourself" in why[0]
    assert "--batch" not in why[0]
    assert phase.setup["micro_batch"] == chosen.micro_batch
    assert phase.setup["zero_stage"] == chosen.zero_stage
    assert phase.details["memory_per_gpu_bytes"] <= catalog.gpu("a100-80gb").memory_bytes


def test_a_stated_setup_is_kept_and_refused_when_it_does_not_fit(tmp_path):
    path = tmp_path / "plan.yaml"
    # the layout stated too (tp 1): nothing is chosen
    path.write_text(PLAN.format(extra="\n    micro_batch: 1\n    checkpointing: false\n"
                                      "    zero_stage: 0\n    tp: 1"))
    with pytest.raises(DoesNotFit):
        evaluate(load_plan(path))
    # the layout left open: it is searched, the three stated kept
    path.write_text(PLAN.format(extra="\n    micro_batch: 1\n    checkpointing: false\n"
                                      "    zero_stage: 0"))
    [phase] = evaluate(load_plan(path)).phases
    assert (phase.setup["micro_batch"], phase.setup["checkpointing"],
            phase.setup["zero_stage"]) == (1, False, 0)
    assert phase.setup.get("tp", 1) * phase.setup.get("pp", 1) > 1, phase.setup


def test_a_partly_stated_setup_keeps_it_and_chooses_the_rest(tmp_path):
    """Defect 12 of the issue 16 review: micro_batch alone made the phase refuse; the rest
    (checkpointing, ZeRO stage, layout) is chosen now, micro-batch 1 kept."""
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN.format(extra="\n    micro_batch: 1"))
    [phase] = evaluate(load_plan(path)).phases
    why = [w for w in phase.warnings if w.startswith("setup chosen by gpuhours")]
    assert len(why) == 1 and "keeping the given micro-batch 1" in why[0]
    assert phase.setup["micro_batch"] == 1
    assert phase.details["memory_per_gpu_bytes"] <= catalog.gpu("a100-80gb").memory_bytes
