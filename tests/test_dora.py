"""DoRA (setup.dora; estimate/dora.py): hand-worked figures for a small shape, the setup's
checks, and the option reaching the estimate through the CLI and the importers."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.errors import FieldError
from gpuhours.estimate.arch import from_hf_config
from gpuhours.estimate.dora import (
    dora_dtypes,
    dora_elementwise_bytes_per_fan_out,
    dora_flops_per_micro_batch,
    dora_flops_per_token,
    dora_magnitude_params,
    dora_norm_transient_bytes,
    dora_saved_bytes_per_layer,
    dora_saved_bytes_per_token_layer,
)
from gpuhours.estimate.memory import training_memory
from gpuhours.importers import read_setup
from gpuhours.setup import Training

# a Llama of d 256, 4 heads of 64 (q 256), 2 kv heads (kv 128), f 688, 2 layers
CONFIG = dict(model_type="llama", hidden_size=256, intermediate_size=688, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
              max_position_embeddings=512, tie_word_embeddings=False)
ARCH = from_hf_config(CONFIG, "tiny")


def _t(**kw) -> Training:
    base = dict(arch=ARCH, method="lora", precision="bf16", micro_batch=2, seq_len=64,
                lora_rank=8, lora_targets="qv", dora=True)
    return Training(**{**base, **kw})


def test_hand_worked_q_and_v_in_pure_bf16() -> None:
    """q_proj 256 -> 256 and v_proj 256 -> 128 in each of 2 layers; pure bf16 with peft's
    fp32 adapters: the base output in bf16 (a = 2), the adapters' input, LoRA output and
    scale in fp32 (e = o = 4)."""
    t = _t()
    dt = dora_dtypes(t, 2)
    assert (dt.a, dt.e, dt.o, dt.w, dt.autocast) == (2, 4, 4, 2, False)
    # magnitudes: one per output feature, 2 x (256 + 128)
    assert dora_magnitude_params(ARCH, "qv") == 768
    # reuse: base_result (2 bytes) and lora_result (4 bytes) per output feature and token
    assert dora_saved_bytes_per_token_layer(ARCH, t, 2) == 384 * (2 + 4)
    # the norm, m - 1 and m: three fp32 vectors per adapted linear
    assert dora_saved_bytes_per_layer(ARCH, t, 2) == 3 * 4 * 384
    # the largest linear (q): the 256 x 256 fp32 identity kept by lora_A's graph, and over its
    # 256 x 256 weight B A, the weight's fp32 copy, scaling x B A and the sum (4 x 4 bytes)
    assert dora_norm_transient_bytes(ARCH, t, 2) == 256 * 256 * 4 + 256 * 256 * 16
    # B A through the identity: 2 r i (i + o) per linear, q 2*8*256*512, v 2*8*256*384, 2 layers
    assert dora_flops_per_micro_batch(ARCH, t) == 2 * (2 * 8 * 256 * 512 + 2 * 8 * 256 * 384)
    assert dora_flops_per_token(ARCH, t) == 0.0  # the base output is reused
    # forward: (a+s) + (o+s) + 2s + 3s + (a+2s) + (s+a) - 5a = 6 + 8 + 8 + 12 + 10 + 6 - 10
    # backward: 2(s+a) + 2s + 2s + (s+o) + 2s + (s+a) + (s+a) + 2o + 3a - 4a
    #         = 12 + 8 + 8 + 8 + 8 + 6 + 6 + 8 + 6 - 8
    assert dora_elementwise_bytes_per_fan_out(dt) == (40.0, 62.0)


def test_hand_worked_recompute_with_dropout() -> None:
    """lora_dropout above 0: the base matmul runs again on the dropped fp32 input with the
    weight cast to fp32, which autograd keeps (4 bytes x 256 x (256 + 128) a layer); its
    output in fp32; 4 i o FLOPs per token (forward, input gradient)."""
    t = _t(lora_dropout=0.1)
    assert dora_saved_bytes_per_token_layer(ARCH, t, 2) == 384 * (4 + 4)
    assert dora_saved_bytes_per_layer(ARCH, t, 2) == 4 * 256 * 384 + 3 * 4 * 384
    assert dora_flops_per_token(ARCH, t) == 2 * 4 * 256 * 384
    # autocast: the outputs in bf16, the weight's half copy (autocast's cast of the fp32 copy)
    m = _t(lora_dropout=0.1, precision="bf16-mixed")
    assert dora_saved_bytes_per_token_layer(ARCH, m, 2) == 384 * (2 + 2)
    assert dora_saved_bytes_per_layer(ARCH, m, 2) == 2 * 256 * 384 + 3 * 4 * 384
    # half adapters in a pure bf16 step: the weight is handed over as it is, no copy
    h = _t(lora_dropout=0.1, lora_adapter_dtype="half")
    assert dora_saved_bytes_per_layer(ARCH, h, 2) == 3 * 2 * 384


def test_qlora_under_autocast_keeps_the_input_half() -> None:
    """peft's bitsandbytes Linear4bit casts the adapters' input only outside autocast: under
    bf16-mixed the norm runs in bf16 on the dequantised weight (e = 2), the magnitude and the
    scale stay fp32 (s = 4); the weight is dequantised into a new tensor every forward."""
    t = _t(method="qlora", precision="bf16-mixed")
    dt = dora_dtypes(t, 2)
    assert (dt.e, dt.s, dt.o, dt.quantised) == (2, 4, 2, True)
    # q: autocast's bf16 copy of the identity (256 x 256 x 2), then over the weight B A, the
    # dequantised copy, scaling x B A and the sum, all bf16 (4 x 2 bytes)
    assert dora_norm_transient_bytes(ARCH, t, 2) == 256 * 256 * 2 + 256 * 256 * 8
    # vectors: the bf16 norm and two fp32 scales per output feature
    assert dora_saved_bytes_per_layer(ARCH, t, 2) == (2 + 2 * 4) * 384


def test_memory_and_trainable_params_add_doras_terms() -> None:
    lora = _t(dora=False)
    dora = _t()
    m0, m1 = training_memory(ARCH, lora), training_memory(ARCH, dora)
    assert m1.trainable_params - m0.trainable_params == 768
    tokens = 2 * 64
    saved = 2 * (tokens * 384 * 6 + 3 * 4 * 384)
    assert m1.activations_bytes - m0.activations_bytes == pytest.approx(saved)
    assert any(line.startswith("dora_saved_bytes") for line in m1.setup_terms)


@pytest.mark.parametrize(("kw", "field"), [
    ({"method": "full"}, "dora"),
    ({"dora": False, "dora_base_matmul": "reuse"}, "dora_base_matmul"),
    ({"dora_base_matmul": "reuse", "lora_dropout": 0.1}, "dora_base_matmul"),
    ({"lora_lm_head": True}, "lora_lm_head"),
])
def test_setups_dora_cannot_have(kw: dict, field: str) -> None:
    with pytest.raises(FieldError, match=field):
        _t(**kw)


def test_fused_experts_refuse_dora() -> None:
    """peft's ParamWrapper (fused 3-D experts) refuses DoRA, so 'all-linear' on a Qwen3-MoE."""
    t = Training(model="qwen3-30b-a3b", method="lora", lora_targets="all-linear", dora=True)
    with pytest.raises(FieldError, match="DoRA"):
        training_memory(t.arch, t)


runner = CliRunner()


def _estimate(*args: str) -> dict:
    result = runner.invoke(app, ["estimate", "--model", "llama-3.2-3b", "--gpu", "l40s",
                                 "--method", "lora", "--precision", "bf16", "--batch", "4",
                                 "--seq", "768", "--lora-rank", "32", "--lora-targets", "qv",
                                 "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_cli_dora_reaches_the_estimate() -> None:
    plain, dora = _estimate(), _estimate("--dora")
    assert dora["setup"]["dora"] is True and plain["setup"]["dora"] is False
    assert dora["memory"]["total_bytes"]["value"] > plain["memory"]["total_bytes"]["value"]
    assert dora["step_time_s"]["value"] > plain["step_time_s"]["value"]
    recompute = _estimate("--dora", "--dora-base-matmul", "recompute")
    # the recomputed matmul keeps an fp32 copy of each adapted weight: more memory still
    assert (recompute["memory"]["total_bytes"]["value"]
            > dora["memory"]["total_bytes"]["value"])


def test_cli_refuses_dora_base_matmul_without_dora() -> None:
    result = runner.invoke(app, ["estimate", "--model", "llama-3.2-3b", "--gpu", "l40s",
                                 "--method", "lora", "--dora-base-matmul", "reuse"])
    assert result.exit_code == 2
    assert "--dora-base-matmul" in result.output and "Traceback" not in result.output


def test_importers_read_dora(tmp_path) -> None:
    factory = tmp_path / "llama_factory.yaml"
    factory.write_text("model_name_or_path: meta-llama/Llama-3.2-3B\nstage: sft\n"
                       "finetuning_type: lora\nuse_dora: true\nlora_rank: 8\n"
                       "per_device_train_batch_size: 2\ncutoff_len: 1024\n")
    assert read_setup(str(factory)).fields.get("dora") is True
    axolotl = tmp_path / "axolotl.yaml"
    axolotl.write_text("base_model: meta-llama/Llama-3.2-3B\nadapter: lora\nlora_r: 8\n"
                       "peft_use_dora: true\nsequence_len: 1024\nmicro_batch_size: 2\n")
    assert read_setup(str(axolotl)).fields.get("dora") is True


def test_a_plan_file_sets_it(tmp_path) -> None:
    from gpuhours.plan.budget import evaluate
    from gpuhours.plan.load import load_plan

    plan = """project: dora
hardware:
  gpu: l40s
seeds: 1
phases:
  - name: sft
    kind: finetune
    runs: once
    model: llama-3.2-3b
    method: lora
    precision: bf16
    lora_rank: 32
    lora_targets: qv
    micro_batch: 4
    seq_len: 768
    tokens: 1.0e+7{extra}
"""
    memory, hours = {}, {}
    for extra in ("", "\n    dora: true"):
        path = tmp_path / "plan.yaml"
        path.write_text(plan.format(extra=extra))
        [phase] = evaluate(load_plan(path)).phases
        memory[extra] = phase.details["memory_per_gpu_bytes"]
        hours[extra] = phase.gpu_hours_per_run_base
    assert memory["\n    dora: true"] > memory[""]
    assert hours["\n    dora: true"] > hours[""]
