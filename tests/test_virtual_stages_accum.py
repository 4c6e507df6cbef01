"""--virtual-stages with no accumulation given (issue 16, defect 5): the interleaved schedule
runs the micro-batches in groups of pp, so a setup that gives no accumulation takes pp (the
fewest it runs), and fit and the chooser pick a multiple of pp; an accumulation the user gives
is kept and checked. Hand-worked: pp 4 -> accumulation 4; 18 sequences on 2 ranks of tp 8 x
pp 4 (64 GPUs) in groups of 4 -> steps of 2 x 4 = 8 sequences at micro-batch 1: 16 or 24."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gpuhours import catalog
from gpuhours.api import fit_training
from gpuhours.cli import app
from gpuhours.errors import FieldError
from gpuhours.plan.budget import evaluate
from gpuhours.plan.load import load_plan
from gpuhours.resolve import resolve_model
from gpuhours.setup import Hardware, Training

LAYOUT = ["--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--gpus", "64", "--seq", "4096",
          "--tp", "8", "--pp", "4", "--virtual-stages", "2"]


def test_no_accumulation_given_takes_one_group_of_pp() -> None:
    arch, _ = resolve_model("llama-3.1-70b")
    assert Training(arch=arch, tp=8, pp=4, virtual_stages=2).grad_accum == 4
    assert Training(arch=arch, tp=8, pp=4).grad_accum == 1  # plain 1F1B: 1 as before
    with pytest.raises(FieldError) as err:  # given: kept, and checked
        Training(arch=arch, tp=8, pp=4, virtual_stages=2, grad_accum=6)
    assert "grad_accum" in err.value.fields


def test_estimate_with_virtual_stages_and_no_accumulation_runs() -> None:
    # once exit 2: "1 micro-batches per step are not a multiple of pp"
    # the micro-batch given, so the batch is not left to the chooser: pp's one group
    r = CliRunner().invoke(app, ["estimate", *LAYOUT, "--batch", "1", "--tokens", "1e10"])
    assert r.exit_code == 0, r.output
    out = " ".join(r.output.split())
    assert "accumulation 4" in out and "--grad-accum not given" in out
    # nothing of the batch given: the chooser's accumulation for the default global batch,
    # groups of pp (1,024 sequences of 4,096 on 2 replicas)
    chosen = CliRunner().invoke(app, ["estimate", *LAYOUT, "--tokens", "1e10", "--json"])
    assert chosen.exit_code == 0, chosen.output
    import json

    setup = json.loads(chosen.stdout)["setup"]
    assert setup["grad_accum"] % 4 == 0
    assert setup["micro_batch"] * setup["grad_accum"] * 2 == 1024
    given = CliRunner().invoke(app, ["estimate", *LAYOUT, "--grad-accum", "3", "--batch", "1",
                                     "--tokens", "1e10"])
    assert given.exit_code == 2 and "--grad-accum" in given.stderr


def test_fit_with_virtual_stages_reaches_a_multiple_of_pp_groups() -> None:
    r = CliRunner().invoke(app, ["fit", *LAYOUT])
    assert r.exit_code == 0, r.output  # once always refused, naming --grad-accum
    arch, _ = resolve_model("llama-3.1-70b")
    t = Training(arch=arch, seq_len=4096, tp=8, pp=4, virtual_stages=2)
    hw = Hardware(gpu=catalog.gpu("h100-sxm"), num_gpus=64)
    res = fit_training(t, hw, effective_batch=18)
    assert "nearest: 16 or 24" in res.effective_batch_note
    f = res.fastest
    assert f is not None and f.virtual_stages == 2 and f.grad_accum % 4 == 0
    assert f.micro_batch * f.grad_accum * f.data_parallel in (16, 24)
    exact = fit_training(t, hw, effective_batch=16)
    assert exact.effective_batch_note == ""
    assert exact.grad_accum_for_effective_batch is not None
    assert exact.grad_accum_for_effective_batch % 4 == 0


def test_a_plan_that_leaves_the_accumulation_out_runs(tmp_path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text("project: v\nhardware: {gpu: h100-sxm, gpus_per_node: 8, nodes: 8}\n"
                    "phases:\n  - name: pt\n    kind: pretrain\n    model: llama-3.1-70b\n"
                    "    tokens: 1e10\n    seq_len: 4096\n    tp: 8\n    pp: 4\n"
                    "    virtual_stages: 2\n    micro_batch: 1\n")
    [phase] = evaluate(load_plan(path)).phases
    assert phase.setup["grad_accum"] == 4, phase.setup
