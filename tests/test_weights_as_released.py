"""Weights as a model is released (walk finding F5): gpt-oss's checkpoint holds its routed
experts in MXFP4 (4.25 bits a weight) and the rest in bf16; `generation` sizes that release by
default, and the rl phase's rollouts keep the bf16 policy. Counts worked from the config:
gpt-oss-120b, 36 layers x 128 experts x (2,880 x 5,760 + 5,760 gate/up, 2,880 x 2,880 + 2,880
down) = 114,701,598,720 expert parameters of 116,829,156,672 (the card's 116.83B)."""

from __future__ import annotations

import json

import yaml
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.estimate.generation import stored_weight_bytes
from gpuhours.plan.budget import evaluate
from gpuhours.plan.load import load_plan
from gpuhours.resolve import resolve_model

runner = CliRunner()
EXPERTS = 36 * 128 * (2_880 * 5_760 + 5_760 + 2_880 * 2_880 + 2_880)
REST = 116_829_156_672 - EXPERTS
VOCAB = 201_088 * 2_880  # the embedding table; the LM head (untied) the same again


def test_the_released_checkpoint_is_sized_as_its_card_says():
    arch, _ = resolve_model("gpt-oss-120b")
    want = EXPERTS * 4.25 / 8 + REST * 2  # 65,190,340,224 bytes
    assert stored_weight_bytes(arch, 4.25 / 8, "mxfp4") == want
    # the card's Table 1: 60.8 GiB (biases counted with the experts: 60.71)
    assert abs(want / 2**30 - 60.8) < 0.1
    # every linear layer at 4.25 bits (GPTQ-like) would be less: attention stays bf16 here
    assert stored_weight_bytes(arch, 4.25 / 8) < want


def _generation(*args: str) -> tuple[int, dict]:
    r = runner.invoke(app, ["generation", "--gpu", "h100-sxm", "--json", *args])
    return r.exit_code, json.loads(r.stdout) if r.stdout.strip() else {}


def test_generation_takes_the_release_and_says_so():
    code, data = _generation("--model", "gpt-oss-120b", "--batch", "1")
    assert code == 0 and data["fits"] is True
    assert data["setup"]["weight_bytes_per_param"] == 0.53125
    assert data["setup"]["released_format"] == "mxfp4"
    assert "weights as released: MXFP4 routed experts, 4.25 bits" in data["basis"]
    assert data["weights_bytes"]["value"] == EXPERTS * 0.53125 + REST * 2
    # one sequence's decode step reads 4 of each layer's 128 experts (4.25 bits), everything
    # else but the input embedding in bf16 (the attention, router and LM head)
    read = (REST - VOCAB) * 2 + EXPERTS * 0.53125 * 4 / 128
    assert abs(data["weights_read_bytes_per_step"]["value"] / read - 1) < 1e-9


def test_the_weights_given_override_the_release():
    # on one GPU (left out, generation chooses the tensor parallelism that holds them)
    code, data = _generation("--model", "gpt-oss-120b", "--weight-bytes-per-param", "2",
                             "--tensor-parallel", "1")
    assert code == 1 and "233.7 GB" in data["reason"]
    # a model released in bf16 is unchanged
    code, data = _generation("--model", "qwen2.5-7b")
    assert code == 0 and data["setup"]["weight_bytes_per_param"] == 2.0
    assert data["setup"]["released_format"] is None and "as released" not in data["basis"]


def test_rl_rollouts_keep_the_bf16_policy_and_say_why(tmp_path):
    plan = {"project": "oss", "hardware": {"gpu": "h100-sxm", "gpus_per_node": 8, "nodes": 1},
            "phases": [{"name": "grpo", "kind": "rl", "model": "gpt-oss-20b", "method": "lora",
                        "checkpointing": True, "steps": 10, "prompts_per_step": 16,
                        "generations_per_prompt": 4, "prompt_tokens": 256,
                        "response_tokens": 512, "reward": {"kind": "rule"},
                        # bf16, 41.8 GB: two GPUs an engine in the colocated 0.5 share
                        "rollout_tensor_parallel": 2}]}
    f = tmp_path / "plan.yaml"
    f.write_text(yaml.safe_dump(plan, sort_keys=False))
    r = evaluate(load_plan(f)).phases[0]
    assert any("released with MXFP4 routed experts" in w and "bf16 policy" in w
               for w in r.warnings)
