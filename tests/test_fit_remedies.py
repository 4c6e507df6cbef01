"""fit's remedies (estimate/remedies.py) and its verdict: checkpointing and ZeRO on the GPUs
given before more GPUs, LoRA/QLoRA with the sharding the ranks allow, every change named, one
meaning of "fits" in estimate, plan and fit, and exit code 1 only when no setup of the model
and method fits on the GPUs given (a reviewer's findings, using fit as a user would)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gpuhours import catalog
from gpuhours.cli import app
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.fit import fit
from gpuhours.estimate.lora_traffic import lora_branch_of
from gpuhours.estimate.remedies import changes_text
from gpuhours.resolve import resolve_model
from gpuhours.setup import Hardware, Training

GIB = 2**30


def _training(model: str, **kw: object) -> Training:
    arch, _ = resolve_model(model)
    return Training(arch=arch, **kw)


def _names_every_change(t: Training, hw: Hardware, c) -> None:  # type: ignore[no-untyped-def]
    """A row's label names each way it differs from the setup as given."""
    if c.method != t.method:
        assert ("QLoRA" if c.method == "qlora" else "LoRA") in c.change
    if c.checkpointing != t.checkpointing:
        assert "gradient checkpointing" in c.change
    if c.num_gpus != hw.num_gpus:
        assert f"{c.num_gpus} GPUs" in c.change
    elif c.zero_stage != t.zero_stage:
        assert f"ZeRO-{c.zero_stage} over the {hw.num_gpus} GPUs" in c.change
    if c.gpu != hw.gpu.name:
        assert c.gpu in c.change
    if c.offload != t.offload:
        assert "CPU offload" in c.change
    if c.method != "full":
        row = t.model_copy(update={"method": c.method, "zero_stage": c.zero_stage})
        given = t.model_copy(update={"method": c.method})
        assert (lora_branch_of(row) != lora_branch_of(given)) == ("LoRA branch" in c.change)


def test_zero3_on_the_gpus_given_tries_checkpointing_before_more_gpus():
    """Llama 2 70B, full, 64 x A100 80GB at 4,096 tokens: ZeRO-3 alone keeps the activations
    of 80 layers (157 GiB, no); with checkpointing it fits (as `estimate --zero 3
    --checkpointing --batch 1` says), so no row of 128 GPUs is needed."""
    t = _training("llama-2-70b", seq_len=4096)
    hw = Hardware(gpu=catalog.gpu("a100-80gb"), num_gpus=64)
    r = fit(t, hw, bigger_gpus=catalog.gpus())
    [z3] = [c for c in r.alternatives if c.zero_stage == 3 and c.method == "full"
            and c.offload == "none"]
    assert z3.num_gpus == 64 and z3.checkpointing and z3.fits
    assert z3.change == "ZeRO-3 over the 64 GPUs + gradient checkpointing"
    assert not any(c.num_gpus > 64 for c in r.alternatives)
    for c in r.alternatives:
        _names_every_change(t, hw, c)
    est = CliRunner().invoke(app, ["estimate", "--model", "llama-2-70b", "--gpu", "a100-80gb",
                                   "--gpus", "64", "--seq", "4096", "--zero", "3",
                                   "--checkpointing", "--batch", "1", "--json"])
    assert est.exit_code == 0, est.output
    assert json.loads(est.stdout)["memory"]["total_bytes"]["value"] == pytest.approx(
        z3.memory_total_bytes)


def test_lora_takes_the_sharding_the_gpus_allow():
    """Mixtral 8x7B on 8 H100s: its 46.7B frozen bf16 weights alone are 87 GiB, above the
    71.7 GiB limit, so LoRA fits only with the weights sharded (ZeRO-3 over the 8 GPUs: 10.9
    GiB each); the LoRA row was ZeRO 0 always (98.9 GiB, no)."""
    t = _training("mixtral-8x7b", seq_len=4096)
    hw = Hardware(gpu=catalog.gpu("h100-sxm"), num_gpus=8)
    assert 46e9 * 2 / GIB > hw.gpu.memory_bytes * 0.9 / GIB  # the hand count above
    r = fit(t, hw, bigger_gpus=catalog.gpus())
    [lora] = [c for c in r.alternatives if c.method == "lora"]
    assert lora.fits and lora.zero_stage == 3 and lora.num_gpus == 8
    assert "ZeRO-3 over the 8 GPUs" in lora.change and "LoRA branch peft-half" in lora.change
    for c in r.alternatives:
        _names_every_change(t, hw, c)
    # full training fits on none of the 8: more GPUs are offered, after the GPUs given
    more = [c for c in r.alternatives if c.num_gpus > 8]
    assert more and more[-1].fits and r.alternatives.index(more[0]) > r.alternatives.index(lora)


def test_a_zero3_row_says_it_switches_the_lora_branch():
    """ZeRO-3 (FSDP's flat parameters, DeepSpeed's engine) casts peft's fp32 adapters to half:
    the row says so instead of looking faster for a reason it does not name."""
    t = _training("qwen2.5-7b", method="lora", seq_len=4096)
    hw = Hardware(gpu=catalog.gpu("a100-40gb"), num_gpus=2)
    z3 = t.model_copy(update={"zero_stage": 3, "checkpointing": True, "micro_batch": 1})
    assert changes_text(t, hw, z3, hw) == (
        "ZeRO-3 over the 2 GPUs + gradient checkpointing + LoRA branch peft-half (a ZeRO-3/FSDP "
        "engine casts the adapters to half; peft-fp32 as given)")
    four = hw.model_copy(update={"num_gpus": 4})
    assert changes_text(t, hw, z3.model_copy(update={"checkpointing": False}), four).startswith(
        "ZeRO-3 over 4 GPUs + LoRA branch peft-half")


def test_readme_example_exits_0_when_its_method_fits_with_checkpointing():
    """README's example: LoRA of Qwen2.5 7B at 4,096 tokens on one A100 40GB does not fit as
    given (no checkpointing) but does with it: a setup of the same model, method and GPU, so
    exit 0 (README: 1 means nothing fits); no more or larger GPUs are offered."""
    r = CliRunner().invoke(app, ["fit", "--model", "qwen2.5-7b", "--gpu", "a100-40gb",
                                 "--method", "lora", "--seq", "4096", "--effective-batch", "32",
                                 "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["largest_micro_batch"] is None and data["fastest"]["checkpointing"] is True
    assert data["fits"] is True
    assert all(a["num_gpus"] == 1 and a["gpu"] == "a100-40gb" for a in data["alternatives"])


def test_a_remedy_that_changes_the_method_does_not_make_fit_exit_0():
    """Llama 2 70B full on one A100 80GB: 16 bytes of state per parameter is over 1 TiB, so
    nothing of full training fits; QLoRA does (4-bit base ~35 GiB), but it is another run."""
    r = CliRunner().invoke(app, ["fit", "--model", "llama-2-70b", "--gpu", "a100-80gb",
                                 "--seq", "1024", "--json"])
    assert r.exit_code == 1, r.output
    data = json.loads(r.stdout)
    assert data["fits"] is False and data["fastest"] is None
    assert any(a["fits"] and a["method"] == "qlora" for a in data["alternatives"])


#: LoRA of Llama 3.1 8B, bf16, 5 x 1,152 tokens on an H100: 76.7 GiB (the allocator reserve
#: replayed: estimate/step_replay.py), between fit's limit (81,559 MiB x 0.9 = 71.68 GiB) and
#: the device's 79.65 GiB; 4 x 1,152 is 64.6 GiB
EDGE = ["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--method", "lora", "--precision",
        "bf16", "--seq", "1152", "--batch", "5"]


def test_estimate_fit_and_plan_agree_on_a_setup_inside_fits_headroom(tmp_path):
    device = catalog.gpu("h100-sxm").memory_bytes
    assert device / 2**20 == 81559
    limit = device * (1 - A.FIT_HEADROOM_FRACTION.value)
    est = CliRunner().invoke(app, ["estimate", *EDGE, "--json"])
    assert est.exit_code == 0, est.output
    e = json.loads(est.stdout)
    total = e["memory"]["total_bytes"]["value"]
    assert limit < total <= device and e["memory"]["fits"] is True
    [warn] = [w for w in e["warnings"] if "headroom" in w]
    assert warn.startswith(f"fits with less than fit's 10% headroom: {total / GIB:.2f} GiB of "
                           f"79.65 GiB, above 71.68 GiB.")
    f = CliRunner().invoke(app, ["fit", *EDGE, "--json"])
    assert f.exit_code == 0, f.output
    r = json.loads(f.stdout)
    assert r["requested_fits_device"] is True and r["requested"]["fits"] is False
    assert r["largest_micro_batch"] == 4 and r["fits"] is True
    text = CliRunner().invoke(app, ["fit", *EDGE]).stdout
    assert "fits in 79.65 GiB" in text and "with less than the 10.0% headroom" in text
    plan = tmp_path / "p.yaml"
    plan.write_text("project: p\nhardware: {gpu: h100-sxm}\nphases:\n"
                    "  - {name: sft, kind: finetune, model: llama-3.1-8b, method: lora,\n"
                    "     precision: bf16, tokens: 1.0e+8, seq_len: 1152, micro_batch: 5}\n")
    p = CliRunner().invoke(app, ["plan", str(plan), "--no-doc", "--json"])
    assert p.exit_code == 0, p.output
    assert "fits with less than fit's 10% headroom" in p.stdout


def test_qlora_is_swept_with_zero3_where_plain_data_parallelism_does_not_fit():
    """Llama 3.1 405B in NF4 is ~0.5 bytes per weight, about 190 GiB: more than one H100, so
    QLoRA on 8 fits only sharded (FSDP-QLoRA): the sweep once tried ZeRO 0 alone."""
    t = _training("llama-3.1-405b", method="qlora", seq_len=2048, checkpointing=True)
    assert 405e9 * 0.5 / GIB > catalog.gpu("h100-sxm").memory_bytes / GIB
    r = fit(t, Hardware(gpu=catalog.gpu("h100-sxm"), num_gpus=8))
    assert r.fastest is not None and r.fastest.zero_stage == 3


def test_cpu_offload_is_offered_on_the_gpus_given_before_more_gpus():
    """Llama 3 70B, full, 8 x A100 80GB at 4,096 tokens: ZeRO-3 with checkpointing needs 173
    GiB per GPU, but DeepSpeed's ZeRO-3 with the optimizer (and weights) in host memory fits on
    the 8 GPUs given, as `estimate --zero 3 --offload ... --checkpointing` says; fit offered 32
    GPUs or LoRA instead. The more-GPU rows stay (offload is slow), and a LoRA setup or a TPU
    gets no offload row."""
    t = _training("llama-3-70b", seq_len=4096, tp=1, pp=1)
    hw = Hardware(gpu=catalog.gpu("a100-80gb"), num_gpus=8)
    r = fit(t, hw, bigger_gpus=catalog.gpus())
    [off] = [c for c in r.alternatives if c.offload != "none"]
    assert off.fits and off.num_gpus == 8 and off.method == "full" and off.zero_stage >= 1
    assert "CPU offload" in off.change
    assert any(c.num_gpus > 8 and c.fits for c in r.alternatives)
    for c in r.alternatives:
        _names_every_change(t, hw, c)
    est = CliRunner().invoke(app, ["estimate", "--model", "llama-3-70b", "--gpu", "a100-80gb",
                                   "--gpus", "8", "--seq", "4096", "--zero", str(off.zero_stage),
                                   "--offload", off.offload, "--checkpointing", "--batch", "1",
                                   "--json"])
    assert est.exit_code == 0, est.output
    assert json.loads(est.stdout)["memory"]["total_bytes"]["value"] == pytest.approx(
        off.memory_total_bytes)
    lora = fit(t.model_copy(update={"method": "lora"}), hw, bigger_gpus=catalog.gpus())
    assert all(c.offload == "none" for c in lora.alternatives)


def test_the_mi250x_is_the_device_software_sees_not_its_two_die_package():
    """An MI250X package is two GCDs, each a separate 64 GB device to PyTorch/ROCm (the
    catalog's own source: shared/reference/gpu_specs.yaml, torchtitan's 191.5 TFLOPS per GCD).
    As a 128 GB "GPU" it was offered to Mixtral 8x7B LoRA at 98.9 GiB per process, which no
    GCD holds."""
    gcd = catalog.gpu("mi250x")
    assert gcd.memory_gb == 64 and gcd.dense_tflops.bf16 == pytest.approx(191.5)
    assert gcd.memory_bw_gb_per_s == pytest.approx(1600)
    t = _training("mixtral-8x7b", method="lora", seq_len=4096)
    hw = Hardware(gpu=catalog.gpu("a100-80gb"))
    r = fit(t, hw, bigger_gpus=catalog.gpus())
    assert not any(c.gpu == "mi250x" for c in r.alternatives)


@pytest.mark.parametrize("method", ["lora", "qlora"])
def test_a_remedy_row_is_the_fastest_variant_that_fits_of_all_evaluated(method, monkeypatch):
    """remedies._row evaluates the variants' memory fastest first and stops at the first that
    fits: the same row and count as every variant evaluated and the fastest that fits taken
    (max keeps the first of equals), having evaluated only the variants at least as fast. A
    70B on 64 A100s: four ZeRO stages x checkpointing off and on, of which only some fit
    (for LoRA only the slowest, for QLoRA faster ones too)."""
    import gpuhours.estimate.remedies as R
    from gpuhours.estimate.candidate import evaluate

    t = Training(model="llama-2-70b", seq_len=4096)
    hw = Hardware(gpu="a100-80gb", num_gpus=64)
    variants = R._combined(t, hw, [0, 1, 2, 3], method=method)
    every = [evaluate(s, h, 0.1, "") for s, h in variants]  # speeds of all, fitting or not
    fitting = [c for c in every if c.fits]
    assert 0 < len(fitting) < len(every)
    expected = max(fitting, key=lambda c: c.tokens_per_s_per_gpu)
    at_least_as_fast = [c for i, c in enumerate(every)
                        if c.tokens_per_s_per_gpu > expected.tokens_per_s_per_gpu
                        or (c.tokens_per_s_per_gpu == expected.tokens_per_s_per_gpu
                            and i <= every.index(expected))]
    calls = []
    monkeypatch.setattr(R, "evaluate", lambda *a, **k: calls.append(a) or evaluate(*a, **k))
    row, n = R._row(t, hw, 0.1, variants)
    assert row is not None and n == len(variants)
    assert row.model_copy(update={"change": ""}) == expected
    assert len(calls) == len(at_least_as_fast)
    if method == "qlora":
        assert len(calls) < len(variants)
