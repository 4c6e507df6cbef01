"""Importers report what gpuhours models, and refuse what they cannot read (a reviewer's
findings): `lora_dropout` was listed among keys that "change neither memory nor time" though
--lora-dropout moves the step, `lora_modules_to_save: [embed_tokens, lm_head]` was "not
modelled" though --lora-trainable-embeddings is, and `micro_batch_size: two` only warned and
estimated micro-batch 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.errors import InputError
from gpuhours.importers import read_setup

runner = CliRunner()

#: the reviewer's axolotl file
AXO = """base_model: meta-llama/Llama-3.1-8B
adapter: lora
lora_r: 16
lora_dropout: 0.1
lora_target_linear: true
lora_modules_to_save: [embed_tokens, lm_head]
sequence_len: 2048
micro_batch_size: 2
gradient_accumulation_steps: 4
bf16: true
gradient_checkpointing: true
"""
#: the same setup as flags
FLAGS = ["--model", "llama-3.1-8b", "--method", "lora", "--lora-rank", "16", "--lora-targets",
         "all-linear", "--seq", "2048", "--batch", "2", "--grad-accum", "4", "--precision",
         "bf16", "--checkpointing"]


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def _json(*args: str) -> dict:
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_axolotl_dropout_and_embeddings_are_read(tmp_path: Path) -> None:
    got = read_setup(_write(tmp_path, "axo2.yml", AXO))
    assert got.fields["lora_dropout"] == 0.1
    assert got.fields["lora_trainable_embeddings"] is True
    assert not any("lora_dropout" in u or "lora_modules_to_save" in u for u in got.unused)


def test_axolotl_file_estimates_as_its_flags(tmp_path: Path) -> None:
    """The file's estimate is the flags' with --lora-dropout 0.1 --lora-trainable-embeddings,
    not the one without them (which the importer gave before: 5.49 s and 24.14 GiB where the
    setup takes more)."""
    f = str(_write(tmp_path, "axo2.yml", AXO))
    base = ["--gpu", "a100-80gb", "--examples", "50000"]
    from_file = _json("estimate", "--from", f, *base)
    flags = _json("estimate", *FLAGS, *base, "--lora-dropout", "0.1",
                  "--lora-trainable-embeddings")
    without = _json("estimate", *FLAGS, *base)
    for key in ("step_time_s", "tokens_per_s_per_gpu"):
        assert from_file[key] == flags[key]
    assert from_file["memory"]["total_bytes"] == flags["memory"]["total_bytes"]
    assert from_file["step_time_s"]["value"] > without["step_time_s"]["value"]
    assert (from_file["memory"]["total_bytes"]["value"]
            > without["memory"]["total_bytes"]["value"] + 4 * 2**30)


def test_llama_factory_dropout_and_additional_target(tmp_path: Path) -> None:
    text = ("model_name_or_path: meta-llama/Meta-Llama-3-8B\nstage: sft\nfinetuning_type: lora\n"
            "lora_target: all\nlora_dropout: 0.05\nadditional_target: embed_tokens,lm_head\n")
    got = read_setup(_write(tmp_path, "lf.yaml", text))
    assert got.fields["lora_dropout"] == 0.05
    assert got.fields["lora_trainable_embeddings"] is True


def test_torchtune_dropout(tmp_path: Path) -> None:
    text = ("model:\n  _component_: torchtune.models.llama3_1.lora_llama3_1_8b\n"
            "  lora_attn_modules: ['q_proj', 'v_proj']\n  lora_rank: 8\n  lora_dropout: 0.1\n"
            "batch_size: 2\n")
    assert read_setup(_write(tmp_path, "tt.yaml", text)).fields["lora_dropout"] == 0.1


def test_trl_model_config_peft(tmp_path: Path) -> None:
    """TRL's `trl sft --config` file: use_peft builds a LoraConfig; lora_dropout absent is
    ModelConfig's default 0.05 (trl/trainer/model_config.py)."""
    text = ("model_name_or_path: meta-llama/Meta-Llama-3-8B\nmax_length: 2048\npacking: false\n"
            "use_peft: true\nlora_r: 8\nlora_target_modules: [q_proj, v_proj]\n"
            "lora_modules_to_save: [embed_tokens, lm_head]\nper_device_train_batch_size: 2\n")
    got = read_setup(_write(tmp_path, "sft.yaml", text))
    assert got.format == "trl-sft"
    f = got.fields
    assert (f["method"], f["lora_rank"], f["lora_targets"]) == ("lora", 8, "qv")
    assert f["lora_dropout"] == 0.05 and f["lora_trainable_embeddings"] is True
    assert any("TRL ModelConfig's default" in u for u in got.used)


def test_a_head_alone_is_said_not_modelled(tmp_path: Path) -> None:
    got = read_setup(_write(tmp_path, "a.yml", AXO.replace("[embed_tokens, lm_head]",
                                                           "[lm_head]")))
    assert "lora_trainable_embeddings" not in got.fields
    note = next(u for u in got.unused if u.startswith("lora_modules_to_save"))
    assert "--lora-trainable-embeddings" in note


def test_lora_dropout_is_not_called_costless_by_a_reader_that_does_not_take_it(
        tmp_path: Path) -> None:
    """A TrainingArguments JSON has no LoRA; a lora_dropout key there is "not read", not one
    of the keys that change neither memory nor time."""
    got = read_setup(_write(tmp_path, "training_args.json", json.dumps(
        {"per_device_train_batch_size": 2, "lora_dropout": 0.1, "learning_rate": 1e-4})))
    assert "lora_dropout=0.1: not read by gpuhours" in got.unused
    assert not any("lora_dropout" in u for u in got.unused if "neither" in u)


@pytest.mark.parametrize(("text", "line", "key", "expected"), [
    (AXO.replace("micro_batch_size: 2", "micro_batch_size: two"), 8, "micro_batch_size",
     "a whole number >= 1, got 'two'"),
    (AXO.replace("lora_dropout: 0.1", "lora_dropout: 1.5"), 4, "lora_dropout",
     "a dropout probability in [0, 1), got '1.5'"),
    (AXO + "num_epochs: three\n", 12, "num_epochs", "a number, got 'three'"),
])
def test_a_value_that_cannot_be_read_is_bad_input(tmp_path: Path, text: str, line: int,
                                                  key: str, expected: str) -> None:
    f = _write(tmp_path, "bad.yml", text)
    with pytest.raises(InputError) as caught:
        read_setup(f)
    assert caught.value.where == f"{f}, line {line}, key {key!r}"
    assert f"expected {expected}" in caught.value.message
    r = runner.invoke(app, ["estimate", "--from", str(f), "--gpu", "a100-80gb"])
    assert r.exit_code == 2
    assert f"line {line}, key '{key}'" in r.stderr and r.stdout == ""
    assert r.exception is None or isinstance(r.exception, SystemExit)


def test_a_json_setup_names_the_line_too(tmp_path: Path) -> None:
    f = _write(tmp_path, "args.json", '{\n  "per_device_train_batch_size": 8,\n'
                                       '  "gradient_accumulation_steps": "4"\n}')
    with pytest.raises(InputError) as caught:
        read_setup(f)
    assert caught.value.where == f"{f}, line 3, key 'gradient_accumulation_steps'"
    assert "expected a whole number >= 1, got '4'" in caught.value.message


def test_a_plan_from_file_keeps_the_file_line(tmp_path: Path) -> None:
    _write(tmp_path, "bad.yml", AXO.replace("micro_batch_size: 2", "micro_batch_size: two"))
    plan = _write(tmp_path, "p.yaml", "project: p\nhardware: {gpu: a100-80gb}\nphases:\n"
                                      "  - {name: sft, kind: finetune, from: bad.yml,\n"
                                      "     tokens: 1.0e+8}\n")
    r = runner.invoke(app, ["plan", str(plan), "--no-doc"])
    assert r.exit_code == 2, r.output
    assert "field 'from'" in r.stderr and "line 8, key 'micro_batch_size'" in r.stderr


def test_a_verl_count_that_cannot_be_read_is_bad_input(tmp_path: Path) -> None:
    """verl's counts were dropped silently (`_whole` gave None) and the estimate went on at the
    default micro-batch; now the key is named, with its section's line."""
    text = ("data:\n  train_batch_size: 64\n  max_prompt_length: 512\n"
            "  max_response_length: 512\nactor_rollout_ref:\n"
            "  model: {path: Qwen/Qwen2.5-7B-Instruct, lora_rank: 0}\n"
            "  actor: {ppo_mini_batch_size: 32, ppo_micro_batch_size_per_gpu: two}\n"
            "trainer: {n_gpus_per_node: 8, nnodes: 1}\n")
    f = _write(tmp_path, "verl.yaml", text)
    with pytest.raises(InputError) as caught:
        read_setup(f)
    key = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"
    assert caught.value.where == (f"{f}, section 'actor_rollout_ref' at line 5, key {key!r}")
    assert "expected a whole number, got 'two'" in caught.value.message
    # the same file with a number reads
    ok = read_setup(_write(tmp_path, "ok.yaml", text.replace("two", "4")))
    assert ok.fields["micro_batch"] == 4 and ok.fields["method"] == "full"


def test_lora_keys_of_a_full_fine_tune_are_ignored_as_the_tool_does(tmp_path: Path) -> None:
    """A template's leftover lora_dropout under full fine-tuning is not applied (the setup
    refuses LoRA dropout without adapters; axolotl ignores it): said, not an error."""
    got = read_setup(_write(tmp_path, "full.yml", AXO.replace("adapter: lora\n", "")))
    assert got.fields["method"] == "full"
    assert "lora_dropout" not in got.fields and "lora_trainable_embeddings" not in got.fields
    assert any(u.startswith("lora_dropout=0.1: a LoRA setting") for u in got.unused)
    r = runner.invoke(app, ["estimate", "--from", str(tmp_path / "full.yml"), "--gpu",
                            "h100", "--gpus", "8", "--zero", "3"])
    assert r.exit_code == 0, r.output
