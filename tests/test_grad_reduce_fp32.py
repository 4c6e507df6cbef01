"""Megatron-LM's own bf16 default: the gradient buffer (Megatron-Core DDP's main_grad) in fp32,
reduced in fp32 (setup.Training.grad_reduce_in_fp32; issue 16). Memory and traffic by hand."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.errors import FieldError
from gpuhours.estimate.estimator import estimate_training
from gpuhours.estimate.parallel import data_parallel_grad_bytes
from gpuhours.setup import Hardware, Training

runner = CliRunner()

#: Llama-3.1-8B's parameters (transformers' sum(p.numel()) of its config, tests/test_params.py)
LLAMA_31_8B = 8_030_261_248
#: its RMSNorm weights, replicated on every tensor-parallel rank: 32 layers x 2 + the final one
NORMS = (32 * 2 + 1) * 4096


def _setup(fp32: bool) -> Training:
    return Training(model="llama-3.1-8b", seq_len=4096, micro_batch=1, grad_accum=8,
                    zero_stage=1, tp=2, kernels="megatron", grad_reduce_in_fp32=fp32)


def test_the_gradient_buffer_is_fp32_and_only_it_and_its_reserve_move():
    hw = Hardware(gpu="h100", num_gpus=16)
    bf16, fp32 = (estimate_training(_setup(x), hw).memory for x in (False, True))
    # each tp 2 rank holds half of every split weight and all the norms
    per_gpu = (LLAMA_31_8B - NORMS) / 2 + NORMS
    assert per_gpu == 4_015_263_744
    assert bf16.gradients_bytes.value == pytest.approx(2 * per_gpu)
    assert fp32.gradients_bytes.value == pytest.approx(4 * per_gpu)
    # the gradients are resident at the peak; the flat allocator reserve is 5% of the peak's
    # tensors (assumptions.ALLOCATOR_RESERVE_FRACTION), so it grows by 5% of the 2 bytes too
    assert fp32.total_bytes.value - bf16.total_bytes.value == pytest.approx(2 * per_gpu * 1.05)


def test_the_reduce_scatter_moves_fp32_and_the_all_gather_the_weights():
    # 1e9 parameters over 8 ranks: a ring moves 7/8 of the buffer a collective
    # DDP: an all-reduce of the fp32 buffer, 2 x 7/8 x 4 bytes
    assert data_parallel_grad_bytes(1e9, 4.0, 8, 0, gather_bytes=2.0) == pytest.approx(7e9)
    # distributed optimizer (ZeRO-1): reduce-scatter at 4 bytes + all-gather at 2
    assert data_parallel_grad_bytes(1e9, 4.0, 8, 1, gather_bytes=2.0) == pytest.approx(5.25e9)
    # ZeRO-2, 4 micro-batches: 4 reduce-scatters at 4 bytes + one all-gather at 2
    assert data_parallel_grad_bytes(1e9, 4.0, 8, 2, 4, gather_bytes=2.0) == pytest.approx(
        15.75e9)
    # unchanged where the two agree: 2 x 7/8 x 2 bytes
    assert data_parallel_grad_bytes(1e9, 2.0, 8, 1) == pytest.approx(3.5e9)


def test_the_step_pays_the_larger_reduce_scatter():
    hw = Hardware(gpu="h100", num_gpus=16)
    bf16, fp32 = (estimate_training(_setup(x), hw) for x in (False, True))
    assert fp32.step_time_s.value > bf16.step_time_s.value


@pytest.mark.parametrize("change, field", [
    ({"kernels": "eager", "tp": 1}, "kernels"),
    ({"method": "lora"}, "method"),
    ({"precision": "bf16"}, "precision"),
])
def test_it_is_refused_off_megatrons_mixed_full_training(change, field):
    base = dict(model="llama-3.1-8b", tp=2, kernels="megatron", grad_reduce_in_fp32=True)
    with pytest.raises(FieldError) as e:
        Training(**{**base, **change})
    assert field in e.value.fields and "grad_reduce_in_fp32" in e.value.fields


def test_the_cli_takes_it_and_refuses_it_off_megatron():
    args = ["estimate", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "16", "--tp",
            "2", "--batch", "1", "--zero", "1", "--grad-accum", "8", "--seq", "4096",
            "--tokens", "1e9", "--json"]
    given = runner.invoke(app, [*args, "--kernels", "megatron", "--grad-reduce-fp32"])
    assert given.exit_code == 0, given.output
    assert json.loads(given.stdout)["memory"]["gradients_bytes"]["value"] == pytest.approx(
        4 * 4_015_263_744)
    refused = runner.invoke(app, [*args, "--kernels", "eager", "--grad-reduce-fp32"])
    assert refused.exit_code == 2 and "Traceback" not in refused.output
    assert "--grad-reduce-fp32" in refused.stderr and "--kernels" in refused.stderr


def test_a_plan_phase_takes_it(tmp_path):
    from gpuhours.plan.budget import evaluate
    from gpuhours.plan.load import load_plan

    plan = ("project: t\nhardware:\n  gpu: h100\n  nodes: 2\nphases:\n"
            "  - name: pre\n    kind: pretrain\n    runs: once\n    model: llama-3.1-8b\n"
            "    tokens: 1.0e+9\n    tp: 2\n    micro_batch: 1\n    zero_stage: 1\n"
            "    grad_accum: 8\n    seq_len: 4096\n    kernels: {kernels}\n"
            "    grad_reduce_in_fp32: {fp32}\n")
    hours = []
    for fp32 in ("false", "true"):
        path = tmp_path / f"{fp32}.yaml"
        path.write_text(plan.format(kernels="megatron", fp32=fp32))
        [phase] = evaluate(load_plan(path)).phases
        hours.append(phase.gpu_hours_per_run)
    assert hours[1] > hours[0]
    path = tmp_path / "eager.yaml"
    path.write_text(plan.format(kernels="eager", fp32="true"))
    r = runner.invoke(app, ["plan", str(path), "--no-doc"], env={"COLUMNS": "200"})
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert (f"{path}, line 17, phase 'pre', field 'grad_reduce_in_fp32'"
            in " ".join(r.stderr.split())), r.stderr
