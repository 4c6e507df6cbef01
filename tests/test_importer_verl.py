"""`--from` a verl PPO/GRPO trainer config: the policy update's setup, sized as verl sizes it
(gpuhours.importer_verl).

tests/data/importers/verl_grpo_qwen2_5_3b_lora.yaml is the composed config of verl's
examples/grpo_trainer/run_qwen2_5-3b_gsm8k_grpo_lora.sh (its overrides over
verl/trainer/config/ppo_trainer.yaml, in the shape of _generated_ppo_trainer.yaml), with
lora_rank 64 of our choosing. The second config is run_qwen2-7b.sh's, with its deprecated global
ppo_micro_batch_size, on Qwen2.5-7B-Instruct (Qwen2-7B is not in the catalog).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.importers import detect_format, read_setup

GRPO_LORA = Path(__file__).parent / "data" / "importers" / "verl_grpo_qwen2_5_3b_lora.yaml"

# examples/grpo_trainer/run_qwen2-7b.sh (an older verl): the global micro-batch of 128 sequences
QWEN2_7B = {
    "data": {"train_batch_size": 1024, "val_batch_size": 1312, "max_prompt_length": 512,
             "max_response_length": 512},
    "actor_rollout_ref": {
        "model": {"path": "Qwen/Qwen2.5-7B-Instruct", "enable_gradient_checkpointing": True,
                  "lora_rank": 0, "lora_alpha": 16, "target_modules": "all-linear"},
        "actor": {"strategy": "fsdp", "optim": {"lr": 1e-6}, "ppo_mini_batch_size": 256,
                  "ppo_micro_batch_size": 128, "use_kl_loss": True,
                  "fsdp_config": {"param_offload": False, "grad_offload": False,
                                  "optimizer_offload": False}},
        "rollout": {"log_prob_micro_batch_size": 128, "tensor_model_parallel_size": 2,
                    "name": "vllm", "gpu_memory_utilization": 0.6, "n": 5},
        "ref": {"log_prob_micro_batch_size": 128, "fsdp_config": {"param_offload": True}}},
    "algorithm": {"kl_ctrl": {"kl_coef": 0.001}},
    "trainer": {"critic_warmup": 0, "logger": ["console", "wandb"],
                "project_name": "verl_grpo_example_gsm8k", "n_gpus_per_node": 8, "nnodes": 1,
                "save_freq": -1, "total_epochs": 15, "total_training_steps": 100},
}


def _write(tmp_path: Path, data: dict) -> Path:
    p = tmp_path / "config.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


def test_grpo_lora_config_as_verl_sizes_it() -> None:
    got = read_setup(GRPO_LORA)
    assert got.format == "verl"
    # by hand: 256 prompts x 5 responses over 8 GPUs = 160 sequences per GPU per optimizer
    # step, in micro-batches of 40: 4; sequences of 512 + 1024 tokens
    assert got.fields == {
        "model": "qwen2.5-3b", "checkpointing": True, "flash_attention": True,
        "seq_len": 1536, "method": "lora", "lora_rank": 64, "lora_targets": "all-linear",
        "zero_stage": 3, "precision": "bf16-mixed", "num_gpus": 8, "micro_batch": 40,
        "loss_kernel": "verl-logprobs",
        "grad_accum": 4, "epochs": 15}
    unused = "\n".join(got.unused)
    assert "model.use_remove_padding=true: padding removal" in unused
    assert "actor.use_torch_compile=true" in unused
    assert "keys of the rollout, reference, critic, reward model and algorithm sections " \
           "(rollout.name=vllm, rollout.tensor_model_parallel_size=2, " \
           "algorithm.adv_estimator=grpo)" in unused
    # nothing left unexplained: every other key is a loss coefficient, an optimizer setting,
    # run control or data
    assert "not read by gpuhours" not in unused


def test_deprecated_global_micro_batch_and_training_steps(tmp_path: Path) -> None:
    got = read_setup(_write(tmp_path, QWEN2_7B))
    f = got.fields
    # 128 // 8 ranks = 16 per GPU; 256 x 5 // 8 = 160 per GPU per step: 10 micro-batches
    assert (f["micro_batch"], f["grad_accum"], f["seq_len"]) == (16, 10, 1024)
    assert (f["method"], f["model"], f["zero_stage"]) == ("full", "qwen2.5-7b", 3)
    # 100 RL steps x 1024 // 256 mini-batches x 1 PPO epoch = 400 optimizer steps
    assert f["steps"] == 400 and "epochs" not in f
    # the reference model's offload is not the actor's: reported with the rollout's keys
    assert not any("param_offload" in u and "actor" in u for u in got.unused)


@pytest.mark.parametrize(("change", "message"), [
    ({"actor": {"use_dynamic_bsz": True}}, "actor.use_dynamic_bsz=true: micro-batches made by "
                                           "a token budget"),
    ({"actor": {"strategy": "megatron"}}, "actor.strategy=megatron: only the FSDP actor"),
    ({"actor": {"fsdp_config": {"fsdp_size": 4}}}, "fsdp_size=4: hybrid sharding"),
    ({"actor": {"fsdp_config": {"param_offload": True}}}, "actor.fsdp_config.param_offload="
                                                          "true: CPU offload is not modelled"),
    ({"actor": {"ulysses_sequence_parallel_size": 2}}, "Ulysses sequence parallelism"),
])
def test_what_is_not_modelled_is_said(tmp_path: Path, change: dict, message: str) -> None:
    data = json.loads(json.dumps(QWEN2_7B))
    for key, value in change["actor"].items():
        if isinstance(value, dict):
            data["actor_rollout_ref"]["actor"][key].update(value)
        else:
            data["actor_rollout_ref"]["actor"][key] = value
    got = read_setup(_write(tmp_path, data))
    assert any(message in u for u in got.unused), got.unused


def test_hydra_interpolations_are_not_values_and_defaults_are_said(tmp_path: Path) -> None:
    data = {"defaults": ["actor@actor_rollout_ref.actor: dp_actor", "_self_"],
            "actor_rollout_ref": {"model": {"path": "Qwen/Qwen2.5-7B-Instruct"},
                                  "ref": {"strategy": "${actor_rollout_ref.actor.strategy}"},
                                  "rollout": {"name": "???"}}}
    assert detect_format(data) == "verl"
    got = read_setup(_write(tmp_path, data))
    assert any(u.startswith("defaults: Hydra's defaults list") for u in got.unused)
    assert not any("${" in u or "???" in u for u in got.unused + got.used)


def test_cli_from_verl_equals_the_same_flags() -> None:
    runner = CliRunner()
    env = {"COLUMNS": "200", "NO_COLOR": "1"}
    a = runner.invoke(app, ["estimate", "--from", str(GRPO_LORA), "--gpu", "h100-sxm",
                            "--batch", "4", "--json"], env=env)
    b = runner.invoke(app, ["estimate", "--model", "qwen2.5-3b", "--method", "lora",
                            "--lora-rank", "64", "--lora-targets", "all-linear", "--seq", "1536",
                            "--batch", "4", "--grad-accum", "4", "--precision", "bf16-mixed",
                            "--checkpointing", "--flash", "--zero", "3", "--gpus", "8",
                            "--loss-kernel", "verl-logprobs",
                            "--gpu", "h100-sxm", "--json"], env=env)
    assert a.exit_code == 0, a.output
    assert b.exit_code == 0, b.output
    ja, jb = json.loads(a.stdout), json.loads(b.stdout)
    warnings = ja.pop("warnings")
    jb.pop("warnings", None)
    assert ja == jb
    assert warnings[0].startswith(f"setup read from {GRPO_LORA} (verl): ")
    assert any("replaces the file's micro_batch" in w for w in warnings)
