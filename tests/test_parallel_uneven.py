"""Uneven pipeline stages (issue 16): a pipeline size that does not divide the layers, as
Megatron-Core's --decoder-first/last-pipeline-num-layers run it. Stage sizes, memory and step
time worked by hand."""

from __future__ import annotations

import dataclasses

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.estimate import parallel as P
from gpuhours.estimate.fit import candidate_layouts
from gpuhours.estimate.flops import training_flops
from gpuhours.estimate.memory import training_memory
from gpuhours.estimate.timing import training_step_time
from gpuhours.resolve import resolve_model
from gpuhours.setup import Hardware, Training

runner = CliRunner()

# Llama 2 7B's layer: attention 4 d^2 = 67,108,864, MLP 3 d f = 3 x 4096 x 11008 = 135,266,304,
# two RMSNorms 8,192: 202,383,360 weights; LM head 32000 x 4096 = 131,072,000
LAYER = 4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096
HEAD = 32000 * 4096


def _arch(layers: int, vocab: int = 32000):
    arch, _ = resolve_model("llama-2-7b")
    return dataclasses.replace(arch, name=f"llama-2-7b-{layers}l", num_layers=layers,
                               vocab_size=vocab)


def test_head_in_layers_by_hand():
    assert LAYER == 202_383_360
    assert P.head_layer_equivalents(_arch(61)) == pytest.approx(HEAD / LAYER)  # 0.648


def test_61_layers_on_16_stages_by_hand():
    # ceil(61/16) = 4 layers a stage is 64: three too many. The last stage (4 + 0.65 for the
    # head) gives one (3.65); then every other stage has 4, and on a tie the earlier gives:
    # the first, then the second
    assert P.stage_layers(_arch(61), 16) == (3, 3) + (4,) * 13 + (3,)
    # a 129,280-token vocabulary (DeepSeek-V3's): head 129280 x 4096 / LAYER = 2.62 layers;
    # the last stage gives three layers (6.62 -> 3.62), down to one layer and the head
    assert P.stage_layers(_arch(61, vocab=129280), 16) == (4,) * 15 + (1,)
    # a pp that divides the layers keeps the even split, head or not
    assert P.stage_layers(_arch(64), 16) == (4,) * 16


def test_a_stage_per_layer_at_most():
    with pytest.raises(Exception, match="without a layer"):
        P.stage_layers(_arch(61), 62)


def test_uneven_stages_memory_by_hand():
    arch = _arch(61)
    lay = P.layout_of(1, 16, 1, 1, 1, 16, arch)
    assert lay.stages == (3, 3) + (4,) * 13 + (3,)
    # stage sizes: first 3 layers + embedding = 738.2M, middle 4 layers = 809.5M, last 3 layers
    # + head + final norm = 738.2M: a middle stage is the fullest
    from gpuhours.estimate.params import count_params
    local = P.local_params(arch, count_params(arch), lay)
    assert local.total == pytest.approx(4 * LAYER)
    # 1F1B with 32 micro-batches: stage i holds min(32, 16 - i) micro-batches of its layers:
    # 16 x 3 = 48, 15 x 3 = 45, 14 x 4 = 56 (the third stage), ... ; the last one of its 3
    first, last = P.activation_micro_batches_in_flight(lay, 32)
    assert first == pytest.approx(56 / 61)
    assert last == pytest.approx(3 / 61)
    # the same through training_memory: bf16 weights of the fullest stage, no ZeRO
    t = Training(arch=arch, pp=16, grad_accum=32)
    assert training_memory(arch, t, 16).weights_bytes == pytest.approx(2 * 4 * LAYER)


def test_the_slowest_stage_sets_the_step():
    # one micro-batch of 61 layers on one GPU against 16 stages: a middle stage runs 4/61 of
    # the layers' matmuls (4 > 3 + 0.65, the last stage with the head), and no LM head
    arch = _arch(61)
    one = Training(arch=arch, grad_accum=16)
    hw1 = Hardware(gpu="a100-80gb", num_gpus=1)
    st1 = training_step_time(arch, one, hw1, training_flops(one), 0)
    staged = one.model_copy(update={"pp": 16})
    hw16 = Hardware(gpu="a100-80gb", num_gpus=16)
    st16 = training_step_time(arch, staged, hw16, training_flops(staged), 0)
    head_share = 6 * HEAD / training_flops(one).matmul_flops_per_token
    assert st16.matmul_s == pytest.approx(st1.matmul_s * (1 - head_share) * 4 / 61)
    assert st16.attention_s == pytest.approx(st1.attention_s * 4 / 61)


def test_the_chooser_tries_pipeline_sizes_that_do_not_divide_the_layers():
    t = Training(arch=_arch(61), seq_len=2048)
    pps = {x["pp"] for x in candidate_layouts(t, Hardware(gpu="a100-80gb", num_gpus=64))}
    assert {16, 32} <= pps  # neither divides 61


def test_cli_prints_the_uneven_stages():
    r = runner.invoke(app, ["estimate", "--model", "deepseek-v3", "--gpu", "h800", "--gpus",
                            "2048", "--seq", "4096", "--pp", "16", "--ep", "64", "--zero", "1",
                            "--batch", "1", "--grad-accum", "32", "--checkpointing",
                            "--no-calibrate", "--precision", "fp8-mixed"],
                      env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "uneven stages, layers: 3, 4 x 14 stages, 2" in r.output
