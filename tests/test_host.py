"""The host's operators per micro-batch by kernel path (estimate/host.py, issue 14): counts worked
by hand from the per-layer tables, the fused-qkv adapters peft really creates, the quantised
base's extra operators, and the option on the command line."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.estimate.host import adapters_per_layer, host_ops_per_micro_batch, linears_per_layer
from gpuhours.resolve import resolve_model
from gpuhours.setup import Training


def _training(model: str, **kw: object) -> Training:
    arch, _ = resolve_model(model)
    return Training.model_validate(dict(arch=arch, model=model, **kw))


def test_default_path_is_eager() -> None:
    assert _training("llama-3.2-3b").kernels == "eager"


def test_eager_lora_by_hand() -> None:
    # Llama-3.2-3B, 28 layers, LoRA on all 7 linears under autocast, no checkpointing:
    # forward 55 + 7 x 8.6 = 115.2; backward 89 + 7 x (7.1 - 1) = 131.7 (the frozen base drops
    # its weight-gradient matmul); 28 x 246.9 = 6913.2, + 32 outside the layers (no LoRA
    # backward there) = 6945.2
    t = _training("llama-3.2-3b", method="lora", precision="bf16-mixed")
    assert host_ops_per_micro_batch(t.arch, t) == pytest.approx(6945.2)


def test_qwen1_linears_and_adapters() -> None:
    qwen = resolve_model("qwen-1.8b")[0]
    llama = resolve_model("llama-3.2-3b")[0]
    # Qwen-1: c_attn (q, k, v fused), attn.c_proj, w1, w2, mlp.c_proj; peft's suffix match on
    # "c_attn, c_proj, w1, w2" adapts all five
    assert linears_per_layer(qwen) == 5
    assert linears_per_layer(llama) == 7
    assert adapters_per_layer(qwen, _training("qwen-1.8b", method="lora")) == 5
    assert adapters_per_layer(qwen, _training("qwen-1.8b", method="lora", lora_targets="qv")) == 1
    assert adapters_per_layer(llama, _training("llama-3.2-3b", method="lora")) == 7


def test_flash_attn_lora_checkpointed_by_hand() -> None:
    # Qwen-1.8B (24 layers), Qwen's README setup: LoRA on the 5 linears, pure bf16, checkpointing.
    # forward: 17 non-linear + 5 linears x 1 + 5 adapters x 8.0 = 62
    # backward: 23 + 5 x 2 (input and weight gradients) + 5 x (8.4 - 1) = 70, + the recomputed
    # forward 62 = 132; 24 x (62 + 132) = 4656, + 32 outside = 4688
    t = _training("qwen-1.8b", method="lora", precision="bf16", checkpointing=True,
                  kernels="flash-attn")
    assert host_ops_per_micro_batch(t.arch, t) == pytest.approx(4688.0)
    eager = t.model_copy(update={"kernels": "eager"})
    # the eager (transformers Llama-shaped) count: 24 x (45 + 7 x 8 + 73 + 7 x 7.4 + 101) + 32
    assert host_ops_per_micro_batch(eager.arch, eager) == pytest.approx(24 * 326.8 + 32)


def test_flash_attn_full_autocast_by_hand() -> None:
    # full fine-tuning under autocast, no checkpointing: forward 17 + 5 x 2 = 27; backward
    # 23 + 5 x 3 = 38, + c_attn's bias gradient (one bias for the fused q, k, v: 2) = 40;
    # 24 x 67 = 1608, + 32 + 24 outside (embedding and head train) = 1664
    t = _training("qwen-1.8b", precision="bf16-mixed", kernels="flash-attn")
    assert host_ops_per_micro_batch(t.arch, t) == pytest.approx(1664.0)


def test_gptq_base_adds_its_unpacking() -> None:
    # auto-gptq's torch path: 9 more forward operators per quantised linear, none in backward;
    # 5 linears a layer, forward twice under checkpointing: 24 x 9 x 5 x 2 = 2160 more
    lora = _training("qwen-1.8b", method="lora", precision="fp16", checkpointing=True,
                     kernels="flash-attn")
    gptq = lora.model_copy(update={"method": "qlora", "base_quant": "gptq-int4"})
    assert host_ops_per_micro_batch(gptq.arch, gptq) - host_ops_per_micro_batch(
        lora.arch, lora) == pytest.approx(2160.0)


def test_cli_kernels_option() -> None:
    args = ["estimate", "--model", "qwen-1.8b", "--gpu", "a100-80gb", "--method", "lora",
            "--batch", "1", "--seq", "256", "--grad-accum", "8", "--checkpointing", "--precision",
            "bf16", "--json"]
    runner = CliRunner()
    eager = runner.invoke(app, args)
    fused = runner.invoke(app, [*args, "--kernels", "flash-attn"])
    assert eager.exit_code == 0 and fused.exit_code == 0, eager.output + fused.output
    def host_s(out: str) -> float:
        return float(json.loads(out)["step_time_breakdown_s"]["host_s"]["value"])

    # 8 micro-batches x 4688 operators x 32 us = 1.200 s (the flash-attn path); eager's more
    assert host_s(fused.output) == pytest.approx(8 * 4688 * 32e-6)
    assert host_s(eager.output) > 1.5 * host_s(fused.output)
    bad = runner.invoke(app, [*args, "--kernels", "triton"])
    assert bad.exit_code == 2
    assert "--kernels" in bad.output and "flash-attn" in bad.output


PLAN = """
project: t
hardware: {{gpu: a100-80gb}}
phases:
  - name: sft
    kind: finetune
    model: qwen-1.8b
    method: lora
    precision: bf16
    gpus: 1
    tokens: 1.0e+8
    seq_len: 256
    micro_batch: 1
    grad_accum: 8
    checkpointing: true
    kernels: {kernels}
"""


def test_a_plan_phase_sets_the_kernel_path() -> None:
    from gpuhours.plan.budget import evaluate
    from gpuhours.plan.load import parse_plan

    def hours(kernels: str) -> float:
        return evaluate(parse_plan(PLAN.format(kernels=kernels), "t.yaml")).phases[
            0].gpu_hours_per_run

    # host-bound at 256 tokens a micro-batch: fewer operators, fewer hours
    assert hours("flash-attn") < 0.7 * hours("eager")


def test_trace_and_bench_run_the_eager_path_only() -> None:
    from gpuhours.errors import FieldError
    from gpuhours.setup import check_runs_in_torch

    check_runs_in_torch(_training("qwen2.5-0.5b"), "the bench")  # eager: runs
    with pytest.raises(FieldError) as e:
        check_runs_in_torch(_training("qwen2.5-0.5b", kernels="flash-attn"), "the bench")
    assert e.value.fields == ("kernels",) and "eager" in str(e.value)
