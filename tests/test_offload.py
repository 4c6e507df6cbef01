"""CPU offload (DeepSpeed ZeRO-Offload / FSDP CPUOffload): memory and time, worked by hand.

Llama-2-7B's counts, from its config (hidden 4096, MLP 11008, 32 layers, vocabulary 32000,
untied head): P = 6,738,415,616 parameters; a layer holds 4 x 4096^2 + 3 x 4096 x 11008 +
2 x 4096 = 202,383,360; embeddings, head and final norm 2 x 32000 x 4096 + 4096 = 262,148,096.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.errors import FieldError
from gpuhours.estimate.estimator import estimate_training
from gpuhours.estimate.flops import training_flops
from gpuhours.estimate.memory import training_memory
from gpuhours.estimate.offload import (
    offload_time,
    zero3_offload_grad_bytes_per_param,
    zero12_offload_grad_bytes_per_param,
)
from gpuhours.estimate.timing import training_step_time
from gpuhours.setup import Hardware, Training, deepspeed_overlap_comm_of

P = 6_738_415_616
LAYER = 202_383_360
ROOT = 262_148_096
ARCH = Training.model_validate({"model": "llama-2-7b"}).arch


def _setup(**kw: object) -> Training:
    return Training.model_validate({"model": "llama-2-7b", "seq_len": 2048, **kw})


def test_optimizer_offload_memory_by_hand() -> None:
    t = _setup(zero_stage=2, offload="optimizer")
    m = training_memory(t.arch, t, num_gpus=8)
    assert m.total_params == P
    assert m.master_weights_bytes == 0 and m.optimizer_bytes == 0
    assert m.optimizer_temporaries_bytes == 0
    assert m.weights_bytes == pytest.approx(2 * P)  # ZeRO-2 keeps the bf16 weights whole
    # one reduce bucket of 5e8 bf16 gradients stays (the 1.68 GB partition is larger)
    assert m.gradients_bytes == pytest.approx(5e8 * 2)
    # host per GPU: master 4 + moments 8 + fp32 gradient buffer 4 = 16 B of P/8 = 2 P
    assert m.host_bytes == pytest.approx(2 * P)
    plain = training_memory(t.arch, _setup(zero_stage=2), num_gpus=8)
    assert plain.host_bytes == 0
    assert plain.master_weights_bytes + plain.optimizer_bytes == pytest.approx(12 * P / 8)


def test_deepspeeds_host_accumulation_buffer_by_hand() -> None:
    # ZeRO-2 accumulating over 4 micro-batches keeps the bf16 gradient partition on the host
    # too (stage_1_and_2.py accumulated_grads_in_cpu): 16 B + 2 B of P/8
    t = _setup(zero_stage=2, offload="optimizer", grad_accum=4)
    assert training_memory(t.arch, t, num_gpus=8).host_bytes == pytest.approx(18 * P / 8)
    # DeepSpeed's ZeRO-3 always does (grad_partitions_flat_buffer): 16 + 2 (weights) + 2 B
    t = _setup(zero_stage=3, offload="optimizer+params", zero3_engine="deepspeed")
    assert training_memory(t.arch, t, num_gpus=8).host_bytes == pytest.approx(20 * P / 8)


def test_params_offload_keeps_the_gathered_working_set_only() -> None:
    t = _setup(zero_stage=3, offload="optimizer+params")
    m = training_memory(t.arch, t, num_gpus=8)
    assert m.weights_bytes == 0
    # root unit and two layers in bf16, and two layers' bf16 gradients
    assert m.gathered_bytes == pytest.approx(2 * ROOT + 2 * 2 * LAYER + 2 * 2 * LAYER)
    # host: the optimizer partition (16 B x P/8) and the bf16 weight partition (2 B x P/8)
    assert m.host_bytes == pytest.approx(18 * P / 8)


def test_zero12_gradient_round_trips_by_hand() -> None:
    # stage_1_and_2.py @v0.13.2: one micro-batch sends the fp32 gradient down (4 B); with 4,
    # micro-batches 2-4 bring the bf16 sum up (3 x 2 B), micro-batches 1-3 send it down in bf16
    # (3 x 2 B) and the 4th in fp32 (4 B)
    assert zero12_offload_grad_bytes_per_param(micro_batches=1, grad_bytes=2) == (4, 0)
    assert zero12_offload_grad_bytes_per_param(micro_batches=4, grad_bytes=2) == (10, 6)
    # fp32 gradients (peft's adapters), 8 micro-batches: 7 x 4 + 4 down, 7 x 4 up
    assert zero12_offload_grad_bytes_per_param(micro_batches=8, grad_bytes=4) == (32, 28)


def test_zero3_gradient_round_trips_by_hand() -> None:
    # stage3.py partition_grads @v0.13.2, host buffer in bf16: one micro-batch copies down,
    # reads back, and sends the sum down to the fp32 buffer once more (2 + 2 down, 2 up); with 8,
    # every micro-batch goes down and back up (8 x 2 each) and the last once more down (2)
    assert zero3_offload_grad_bytes_per_param(micro_batches=1, grad_bytes=2) == (4, 2)
    assert zero3_offload_grad_bytes_per_param(micro_batches=8, grad_bytes=2) == (18, 16)


def test_deepspeed_zero3_offload_gradients_by_hand() -> None:
    # Llama-2-7B on 8 A100, ZeRO-3 optimizer offload, 4 micro-batches of 1: DeepSpeed's engine
    # moves (5 + 4) x 2 B per partition parameter, FSDP's CPUOffload 4 x 2 B; both overlap
    # backward, so the difference is in the PCIe traffic beside compute only
    hw = Hardware(gpu="a100-80gb", num_gpus=8)
    kw = dict(zero_stage=3, offload="optimizer", micro_batch=1, grad_accum=4)
    ds = training_step_time(ARCH, _setup(zero3_engine="deepspeed", **kw), hw,
                            training_flops(_setup(**kw)), P).offload
    fsdp = training_step_time(ARCH, _setup(**kw), hw, training_flops(_setup(**kw)), P).offload
    assert ds is not None and fsdp is not None
    assert ds.pcie_overlapped_s == pytest.approx(P / 8 * 18 / 25.2e9)
    assert fsdp.pcie_overlapped_s == pytest.approx(P / 8 * 8 / 25.2e9)


def test_offload_time_by_hand() -> None:
    # gradients 1 GB per micro-batch x 4, weights 2 GB per pass x 3 passes x 4, over 25.2 GB/s
    # (PCIe 4.0 x16 x 0.8): (4 + 24) / 25.2 = 1.111 s beside 0.5 s of compute
    o = offload_time(offload="optimizer+params", grad_bytes_per_step=4e9, grads_overlap=True,
                     weight_bytes_per_pass=2e9, weight_passes_per_micro_batch=3, micro_batches=4,
                     params_up_bytes=1e9, trainable_params_on_node=9e9,
                     link_bytes_per_s=25.2e9, compute_s=0.5)
    assert o.pcie_overlapped_s == pytest.approx(28 / 25.2)
    assert o.pcie_exposed_s == pytest.approx(28 / 25.2 - 0.5)
    assert o.cpu_adam_s == pytest.approx(5.0)  # 9e9 parameters at 1.8e9 a second
    assert o.params_up_s == 0  # the next forward fetches the weights
    # ZeRO-2, 1e9 partition parameters, 4 micro-batches of bf16 gradients: 16 GB (10 down, 6
    # up), 0.635 s, beside 0.5 s of compute
    kw = dict(offload="optimizer", grad_bytes_per_step=16e9, weight_bytes_per_pass=2e9,
              weight_passes_per_micro_batch=3, micro_batches=4, params_up_bytes=2e9,
              trainable_params_on_node=8e9, link_bytes_per_s=25.2e9, compute_s=0.5)
    o = offload_time(grads_overlap=True, **kw)  # type: ignore[arg-type]
    assert o.pcie_overlapped_s == pytest.approx(16 / 25.2)
    assert o.pcie_exposed_s == pytest.approx(16 / 25.2 - 0.5)  # overlap_comm: the rest hides
    assert o.params_up_s == pytest.approx(2 / 25.2)
    # without overlap_comm the copies run on the compute stream: all of it adds
    o = offload_time(grads_overlap=False, **kw)  # type: ignore[arg-type]
    assert o.pcie_exposed_s == pytest.approx(16 / 25.2)


def test_pageable_offload_copies_by_hand() -> None:
    # the ZeRO-2 case above (16 GB of gradients, 2 GB up, overlap_comm on) through pageable
    # memory: 4.5x the time a copy, none of it beside compute
    kw = dict(offload="optimizer", grad_bytes_per_step=16e9, grads_overlap=True,
              weight_bytes_per_pass=2e9, weight_passes_per_micro_batch=3, micro_batches=4,
              params_up_bytes=2e9, trainable_params_on_node=8e9, link_bytes_per_s=25.2e9,
              compute_s=10.0)
    o = offload_time(copies="pageable", **kw)  # type: ignore[arg-type]
    assert o.pcie_overlapped_s == pytest.approx(16 * 4.5 / 25.2)
    assert o.pcie_exposed_s == pytest.approx(16 * 4.5 / 25.2)  # 2.86 s, though compute is 10
    assert o.params_up_s == pytest.approx(2 * 4.5 / 25.2)
    # DeepSpeed before 0.14.1 with pinned buffers: only the step's copy up is pageable
    o = offload_time(copies="pageable-step", **kw)  # type: ignore[arg-type]
    assert o.pcie_exposed_s == 0  # 0.635 s of gradients hide behind 10 s of compute
    assert o.params_up_s == pytest.approx(2 * 4.5 / 25.2)
    # weights fetched (ZeRO-3 offload_param) through pageable memory: exposed with the gradients
    o = offload_time(**{**kw, "offload": "optimizer+params", "grad_bytes_per_step": 4e9},
                     copies="pageable")  # type: ignore[arg-type]
    assert o.pcie_exposed_s == pytest.approx((4 + 24) * 4.5 / 25.2)
    assert o.params_up_s == 0


def test_offload_copies_need_offload() -> None:
    with pytest.raises(FieldError, match="offload_copies"):
        _setup(zero_stage=2, offload_copies="pageable")
    runner = CliRunner()
    bad = runner.invoke(app, ["estimate", "--model", "llama-2-7b", "--gpu", "a100-80gb",
                              "--offload-copies", "pageable"])
    assert bad.exit_code == 2
    assert "--offload-copies" in bad.output and "Traceback" not in bad.output


def test_optimizer_offload_step_time_by_hand() -> None:
    hw = Hardware(gpu="a100-80gb", num_gpus=8)
    off = estimate_training(_setup(zero_stage=2, offload="optimizer", micro_batch=4,
                                   deepspeed_overlap_comm=True), hw)
    plain = estimate_training(_setup(zero_stage=2, micro_batch=4), hw)
    # CPU Adam over the node's 8 partitions = all of P at 1.8e9 parameters/s: 3.74 s; the bf16
    # partition up: P/8 x 2 B / 25.2 GB/s = 0.0668 s; the fp32 gradients down (P/8 x 4 B,
    # 0.134 s) hide behind backward (overlap_comm on, as the config states it)
    cpu_adam = P / 1.8e9
    up = P / 8 * 2 / 25.2e9
    br, pb = off.step_time_breakdown_s, plain.step_time_breakdown_s
    assert br["optimizer_s"].value == pytest.approx(cpu_adam + up)
    assert br["matmul_s"].value == pytest.approx(pb["matmul_s"].value)
    assert off.step_time_s.value - plain.step_time_s.value == pytest.approx(
        cpu_adam + up - pb["optimizer_s"].value, rel=1e-6)
    assert off.memory.host_bytes is not None
    assert off.memory.host_bytes.value == pytest.approx(2 * P)
    assert plain.memory.host_bytes is None
    assert any("host_adam_params_per_s_per_node" in a for a in off.assumptions)
    # DeepSpeed's ZeRO-2 default (no overlap_comm), 4 micro-batches: the gradients' 16 B per
    # partition parameter (zero12_offload_grad_bytes_per_param) add in full; not stated is
    # DeepSpeed's default at ZeRO-2, the same
    slow = estimate_training(_setup(zero_stage=2, offload="optimizer", micro_batch=4,
                                    grad_accum=4, deepspeed_overlap_comm=False), hw)
    assert slow.step_time_breakdown_s["optimizer_s"].value == pytest.approx(
        cpu_adam + up + P / 8 * 16 / 25.2e9)
    unstated = estimate_training(_setup(zero_stage=2, offload="optimizer", micro_batch=4,
                                        grad_accum=4), hw)
    assert unstated.step_time_s.value == pytest.approx(slow.step_time_s.value)
    # and at ZeRO-3 DeepSpeed's default is on
    assert deepspeed_overlap_comm_of(_setup(zero_stage=3, zero3_engine="deepspeed"))
    assert not deepspeed_overlap_comm_of(_setup(zero_stage=1))
    # and with pin_memory off (DeepSpeed's default then), every copy 4.5x slower
    staged = estimate_training(_setup(zero_stage=2, offload="optimizer", micro_batch=4,
                                      grad_accum=4, deepspeed_overlap_comm=False,
                                      offload_copies="pageable"), hw)
    assert staged.step_time_breakdown_s["optimizer_s"].value == pytest.approx(
        cpu_adam + 4.5 * (up + P / 8 * 16 / 25.2e9))
    assert any("pageable_copy_slowdown" in a for a in staged.assumptions)


@pytest.mark.parametrize(("kw", "match"), [
    ({"offload": "optimizer"}, "needs ZeRO stage 1-3"),
    ({"offload": "optimizer+params", "zero_stage": 2}, "ZeRO stage 3"),
    ({"offload": "optimizer", "zero_stage": 2, "optimizer": "adamw-8bit"}, "CPUAdam"),
])
def test_offload_refused_where_deepspeed_does_not_run_it(kw: dict[str, object], match: str
                                                         ) -> None:
    with pytest.raises(FieldError, match=match):
        _setup(**kw)


def test_offload_on_a_gpu_without_a_host_link_figure() -> None:
    hw = Hardware(gpu="gb200", num_gpus=8)
    with pytest.raises(FieldError, match="no PCIe host link"):
        estimate_training(_setup(zero_stage=3, offload="optimizer"), hw)


def test_cli_offload_option_and_its_error() -> None:
    runner = CliRunner()
    ok = runner.invoke(app, ["estimate", "--model", "llama-2-70b", "--gpu", "a100-80gb",
                             "--gpus", "16", "--zero", "3", "--offload", "optimizer",
                             "--checkpointing", "--json"])
    assert ok.exit_code == 0, ok.output
    assert '"host_bytes"' in ok.output
    bad = runner.invoke(app, ["estimate", "--model", "llama-2-7b", "--gpu", "a100-80gb",
                              "--offload", "optimizer"])
    assert bad.exit_code == 2
    assert "--offload" in bad.output and "Traceback" not in bad.output


def _finetune_row(line: int) -> dict[str, str]:
    """A row of the fine-tuning validation data by its line in the CSV (header = line 1)."""
    import csv
    from pathlib import Path

    data = (Path(__file__).resolve().parents[1] / "scripts" / "gpuhours_dev" / "validation"
            / "data" / "finetune_runs.csv")
    with data.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))[line - 2]


@pytest.mark.parametrize(("line", "model", "method", "batch"), [
    (424, "llama-2-7b", "lora", 10), (427, "llama-2-7b", "qlora", 12),
    (430, "llama-2-70b", "qlora", 2), (431, "mistral-7b", "qlora", 12)])
def test_answer_ai_fsdp_cpu_offload_throughput(line: int, model: str, method: str, batch: int
                                               ) -> None:
    """Answer.AI's FSDP (full shard, CPUOffload of params) LoRA/QLoRA runs on two RTX 4090s
    (fsdp_qlora benchmarks_03_2024.md; train.py: rank 64, checkpointing): measured tokens/s
    within 20% (set from nothing here). The 4-bit or bf16 weights fetched over PCIe 4.0 for
    every forward, backward and recomputation hide behind compute at these batches; peft's
    o_proj adapter, which their 'all' targets leave out, is counted (all-linear)."""
    r = _finetune_row(line)
    assert r["gpu"].startswith("2x RTX 4090") and "CPU offload of params" in r["parallelism"]
    t = _setup(model=model, method=method, micro_batch=batch, checkpointing=True, lora_rank=64,
               zero_stage=3, offload="optimizer+params")
    e = estimate_training(t, Hardware(gpu="rtx-4090", num_gpus=2))
    measured = float(r["tokens_per_s_total"])
    assert e.tokens_per_s.value == pytest.approx(measured, rel=0.20)


def test_the_estimate_header_says_what_is_offloaded() -> None:
    """A user reading the first line sees the offload, beside the ZeRO stage it rides on."""
    out = CliRunner().invoke(app, ["estimate", "--model", "llama-2-7b", "--gpu", "a100-80gb",
                                   "--gpus", "8", "--zero", "2", "--offload", "optimizer"])
    assert out.exit_code == 0, out.output
    assert "ZeRO 2, offload optimizer, adamw" in " ".join(out.output.split())
    plain = CliRunner().invoke(app, ["estimate", "--model", "llama-2-7b", "--gpu", "a100-80gb",
                                     "--gpus", "8", "--zero", "2", "--ignore-memory"])
    header = " ".join(plain.output.splitlines()[:2])  # the first line, wrapped at 80 columns
    assert "ZeRO 2, adamw" in " ".join(header.split()) and "offload" not in header
