"""Overlap of tensor-parallel and expert all-to-all traffic with compute as setup choices
(issue 16): Megatron-Core's --tp-comm-overlap and --overlap-moe-expert-parallel-comm, worked by
hand."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.errors import FieldError
from gpuhours.estimate import assumptions as A
from gpuhours.estimate import parallel as P
from gpuhours.estimate.fit import chosen_setup
from gpuhours.estimate.flops import training_flops
from gpuhours.estimate.timing import training_step_time
from gpuhours.setup import Hardware, Training

runner = CliRunner()


@pytest.mark.parametrize(("pp", "v", "m", "expected"), [
    (1, 1, 8, 1 / 8),           # the first forward and the last backward run alone
    (1, 1, 1, 1.0),             # one micro-batch: nothing to pair with
    (4, 2, 8, 10 / 16),         # 2 (4 - 1) + (2 - 1) 4 = 10 warm-up chunks of 2 x 8
    (4, 2, 64, 10 / 128),
])
def test_unpaired_all_to_all_by_hand(pp, v, m, expected):
    assert P.a2a_unpaired_share(pp, v, m) == pytest.approx(expected)


def test_overlapped_exposed_by_hand():
    # 10 s of traffic, a quarter unpaired (2.5 s exposed); 7.5 s paired beside 4 x 0.75 = 3 s
    # of compute: 3 s hidden, 4.5 s left; the hidden 3 s slow compute by 15%: 0.45 s
    assert P.overlapped_exposed_s(10.0, 0.25, 4.0, 0.15) == pytest.approx(2.5 + 4.5 + 0.45)
    # compute to spare: only the unpaired share and the SM cost remain
    assert P.overlapped_exposed_s(10.0, 0.25, 100.0, 0.15) == pytest.approx(2.5 + 7.5 * 0.15)


def _tp(overlap: bool):
    t = Training(model="llama-2-70b", seq_len=4096, tp=8, grad_accum=4, zero_stage=1,
                 tp_comm_overlap=overlap)
    hw = Hardware(gpu="h100-sxm", num_gpus=64)
    st = training_step_time(t.arch, t, hw, training_flops(t), 0)
    return next(c for c in st.collectives if c.name == "tensor-parallel collectives"), st


def test_tp_overlap_hides_all_but_the_first_chunk():
    off, _ = _tp(False)
    on, st = _tp(True)
    assert off.exposed_s == pytest.approx(off.seconds)  # on the critical path by default
    assert on.seconds == pytest.approx(off.seconds)     # the same traffic
    # 1/8 of it has no GEMM chunk beside it; the GEMMs (st.matmul_s) outlast the other 7/8
    hidden = off.seconds * 7 / 8
    assert st.matmul_s * 7 / 8 > hidden
    sm = A.OVERLAP_COMM_SM_SHARE.value
    assert on.exposed_s == pytest.approx(off.seconds / 8 + hidden * sm)


def test_a2a_overlap_holds_one_more_micro_batch():
    lay = P.Layout(ep=8, dp=8, a2a_overlap=True)
    assert P.activation_micro_batches_in_flight(lay, 4) == (2.0, 1.0)
    assert P.activation_micro_batches_in_flight(lay, 1) == (1.0, 1.0)


@pytest.mark.parametrize(("update", "fields"), [
    ({"moe_a2a_overlap": True}, ("moe_a2a_overlap", "ep")),
    ({"moe_a2a_overlap": True, "ep": 8, "checkpointing": True},
     ("moe_a2a_overlap", "checkpointing")),
    ({"moe_a2a_overlap": True, "ep": 8, "pp": 2}, ("moe_a2a_overlap", "virtual_stages")),
    ({"tp_comm_overlap": True}, ("tp_comm_overlap", "tp")),
])
def test_overlaps_refused_where_megatron_does_not_run_them(update, fields):
    with pytest.raises(FieldError) as e:
        Training(model="mixtral-8x7b", **update)
    assert e.value.fields == fields


def test_tp_overlap_on_an_a100_is_exit_2():
    r = runner.invoke(app, ["estimate", "--model", "llama-2-70b", "--gpu", "a100-80gb",
                            "--gpus", "64", "--tp", "8", "--grad-accum", "4", "--zero", "1",
                            "--tp-comm-overlap", "--no-calibrate", "--ignore-memory"])
    assert r.exit_code == 2, r.output
    assert "--tp-comm-overlap" in r.output and "multicast" in r.output


def test_the_chooser_turns_them_on_and_says_so():
    t = Training(model="mixtral-8x7b", seq_len=4096)
    hw = Hardware(gpu="h100-sxm", num_gpus=1024, inter_node_gb_per_s_one_way=50)
    chosen, why = chosen_setup(t, hw, search_layouts=True)
    assert chosen.moe_a2a_overlap and "--overlap-moe-expert-parallel-comm" in why
    assert chosen.tp == 1 or (chosen.tp_comm_overlap and "--tp-comm-overlap" in why)
    # on A100s tensor-parallel overlap is not offered (no CUDA multicast)
    chosen, why = chosen_setup(t, hw.model_copy(update={"gpu": Hardware(
        gpu="a100-80gb").gpu}), search_layouts=True)
    assert not chosen.tp_comm_overlap and "--tp-comm-overlap" not in why



def test_an_overlap_given_alone_keeps_the_layout_search():
    # "search layouts, but no all-to-all overlap": the search still runs (expert parallelism
    # chosen), with the overlap kept off
    t = Training(model="mixtral-8x7b", seq_len=4096)
    hw = Hardware(gpu="h100-sxm", num_gpus=1024, inter_node_gb_per_s_one_way=50)
    off, why = chosen_setup(t, hw, search_layouts=True, fixed_overlaps=("moe_a2a_overlap",))
    assert off.ep > 1 and not off.moe_a2a_overlap
    assert "--overlap-moe-expert-parallel-comm" not in why
    # the CLI: --no-moe-a2a-overlap alone leaves --tp/--pp/--cp/--ep to the search
    r = CliRunner().invoke(app, ["estimate", "--model", "mixtral-8x7b", "--gpu", "h100-sxm",
                                 "--gpus", "1024", "--seq", "4096", "--tokens", "1e11",
                                 "--inter-node-gb-per-s", "50", "--no-moe-a2a-overlap",
                                 "--json"])
    assert r.exit_code == 0, r.output
    setup = json.loads(r.stdout)["setup"]
    assert setup["ep"] > 1 and not setup["moe_a2a_overlap"]
    # turned on alone, it needs the layout it runs in: exit 2 saying what to give
    r = CliRunner().invoke(app, ["estimate", "--model", "mixtral-8x7b", "--gpu", "h100-sxm",
                                 "--gpus", "1024", "--seq", "4096", "--tokens", "1e11",
                                 "--moe-a2a-overlap"], env={"COLUMNS": "200"})
    assert r.exit_code == 2 and "--moe-a2a-overlap/--ep" in r.output
    assert "leave the overlap out" in " ".join(r.output.split())

PLAN = """
project: t
hardware: {{gpu: h100-sxm, gpus_per_node: 8}}
phases:
  - name: pretrain
    kind: finetune
    model: llama-2-70b
    gpus: 64
    tokens: 1.0e+9
    seq_len: 4096
    micro_batch: 1
    grad_accum: 4
    zero_stage: 1
    tp: 8
    tp_comm_overlap: {overlap}
"""


def test_a_plan_phase_sets_the_overlap():
    from gpuhours.plan.budget import evaluate
    from gpuhours.plan.load import parse_plan

    def hours(overlap: str) -> float:
        return evaluate(parse_plan(PLAN.format(overlap=overlap), "t.yaml")).phases[
            0].gpu_hours_per_run

    # the same phase with the tensor-parallel traffic pipelined with its GEMMs is faster
    assert hours("true") < hours("false")


def test_the_exposed_time_says_how_it_was_counted():
    from gpuhours.estimate.estimator import estimate_training

    t = Training(model="llama-2-70b", seq_len=4096, tp=8, grad_accum=4, zero_stage=1,
                 tp_comm_overlap=True)
    e = estimate_training(t, Hardware(gpu="h100-sxm", num_gpus=64))
    basis = e.step_time_breakdown_s["tensor_parallel_collectives_exposed_s"].source
    assert "--tp-comm-overlap" in basis and "overlapped_exposed_s" in basis
    assert any(a.startswith("overlap_comm_sm_share") for a in e.assumptions)
