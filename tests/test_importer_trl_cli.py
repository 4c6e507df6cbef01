"""`--from` a TRL CLI config (`trl sft --config x.yaml`, open-r1's recipes): ModelConfig's
torch_dtype and attn_implementation at the top level, accelerate's num_processes, TRL's older
use_liger, the vLLM rollout keys of GRPO (issue 18). The fixtures are open-r1's own recipes,
named in their first lines. Their Qwen/Qwen2.5-1.5B-Instruct resolves to the catalog's
qwen2.5-1.5b by its repository name; a --model given on the command line replaces it."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.importers import detect_format, read_setup

DATA = Path(__file__).parent / "data" / "importers"
GRPO = DATA / "trl_grpo_open_r1_qwen2_5_1_5b.yaml"
SFT = DATA / "trl_sft_open_r1_qwen2_5_1_5b.yaml"


def test_open_r1_grpo_recipe() -> None:
    got = read_setup(GRPO)
    assert got.format == "trl-grpo"
    # torch_dtype bfloat16: TRL loads the weights in bf16 (and bf16: true autocasts); 7
    # training processes (the eighth GPU serves vLLM); 512 + 1024 tokens per sequence
    assert got.fields == {"model": "qwen2.5-1.5b", "precision": "bf16",
                          "flash_attention": True, "num_gpus": 7, "micro_batch": 16,
                          "grad_accum": 16, "checkpointing": True, "epochs": 1,
                          "seq_len": 1536}
    unused = "\n".join(got.unused)
    assert "vllm_device=auto, vllm_gpu_memory_utilization=0.7: the vLLM rollout engine's" in unused
    assert "num_generations=7" in unused and "use_vllm=True" in unused
    assert "not read by gpuhours" not in unused


def test_open_r1_sft_recipe() -> None:
    got = read_setup(SFT)
    assert got.format == "trl-sft"
    assert got.fields == {"model": "qwen2.5-1.5b", "precision": "bf16",
                          "flash_attention": True, "micro_batch": 2,
                          "grad_accum": 1, "checkpointing": True, "epochs": 15,
                          "loss_kernel": "fused-linear", "liger_kernels": "instance",
                          "seq_len": 32768, "packed": True}
    assert not [u for u in got.unused if "not read by gpuhours" in u]


def test_the_trl_docs_minimal_config_is_recognised() -> None:
    # docs/source/clis.md of huggingface/trl: sft_config.yaml
    data = {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "dataset_name": "stanfordnlp/imdb"}
    assert detect_format(data) == "trl-sft"
    assert detect_format({**data, "num_generations": 8}) == "trl-grpo"


def test_cli_from_the_grpo_recipe_equals_its_flags() -> None:
    runner = CliRunner()
    env = {"COLUMNS": "200", "NO_COLOR": "1"}
    a = runner.invoke(app, ["estimate", "--from", str(GRPO), "--model", "qwen2.5-3b",
                            "--gpu", "h100-sxm", "--json"], env=env)
    b = runner.invoke(app, ["estimate", "--model", "qwen2.5-3b", "--precision", "bf16",
                            "--flash", "--gpus", "7", "--batch", "16", "--grad-accum", "16",
                            "--checkpointing", "--seq", "1536", "--gpu", "h100-sxm", "--json"],
                      env=env)
    assert a.exit_code in (0, 1) and b.exit_code == a.exit_code, a.output + b.output
    ja, jb = json.loads(a.stdout), json.loads(b.stdout)
    warnings = ja.pop("warnings")
    jb.pop("warnings", None)
    assert ja == jb
    assert any("the command line replaces the file's model" in w for w in warnings)
