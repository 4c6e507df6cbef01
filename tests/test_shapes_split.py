"""Shapes that cannot run are refused, not estimated (a reviewer's findings): a config.json
whose hidden size the heads do not divide where transformers refuses it (per model_type), and
an explicit tensor-parallel size that Megatron-Core cannot split the model by; the layout
search skips such sizes instead."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.errors import FieldError, InputError
from gpuhours.estimate import parallel as P
from gpuhours.estimate.arch import from_hf_config
from gpuhours.estimate.fit import candidate_layouts
from gpuhours.resolve import check_overrides, resolve_model
from gpuhours.setup import Hardware, Training

runner = CliRunner()
ENV = {"COLUMNS": "200", "NO_COLOR": "1"}
BASE = dict(num_hidden_layers=2, intermediate_size=11008, vocab_size=32000,
            hidden_size=4096, num_attention_heads=30, num_key_value_heads=30)


def _estimate(*args: str) -> tuple[int, str]:
    r = runner.invoke(app, ["estimate", "--gpu", "h100", "--batch", "1", "--seq", "1024",
                            "--tokens", "1e8", "--no-calibrate", *args], env=ENV)
    return r.exit_code, " ".join(r.output.split())


@pytest.mark.parametrize("model_type", ["llama", "gemma2", "gpt_neox", "bert", "olmoe"])
def test_hidden_not_split_by_heads_is_refused_where_transformers_refuses(model_type: str):
    # LlamaConfig.validate_architecture: 4096 % 30 = 16 -> ValueError (transformers 5.23)
    with pytest.raises(InputError, match=r"hidden_size \(4096\) is not a multiple of "
                                         r"num_attention_heads \(30\)"):
        from_hf_config({**BASE, "model_type": model_type}, name="x")


def test_a_head_dim_does_not_lift_llamas_check():
    # LlamaConfig checks hidden % heads whatever head_dim says
    with pytest.raises(InputError, match="a head_dim given or not"):
        from_hf_config({**BASE, "model_type": "llama", "head_dim": 128}, name="x")


@pytest.mark.parametrize("model_type", ["qwen2", "mistral", "qwen3", "gemma"])
def test_types_that_run_such_a_config_are_read(model_type: str):
    # Qwen2Attention: head_dim = 4096 // 30 = 136, q_proj 4096 -> 30 x 136 = 4080 (it runs)
    arch = from_hf_config({**BASE, "model_type": model_type}, name="x")
    assert (arch.num_heads, arch.head_dim, arch.q_dim) == (30, 136, 4080)


def test_gemma2_with_head_dim_that_differs_from_hidden_over_heads_is_read():
    # Gemma 2 27B: hidden 4608, 32 heads of 128 (32 x 128 = 4096 != 4608), legal: 4608 % 32 = 0
    arch = resolve_model("gemma-2-27b")[0]
    assert (arch.hidden_size, arch.num_heads, arch.head_dim) == (4608, 32, 128)


def test_cli_config_json_with_30_heads_exits_2(tmp_path: Path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**BASE, "model_type": "llama"}))
    code, out = _estimate("--model", str(path), "--method", "lora")
    assert code == 2, out
    assert "is not a multiple of num_attention_heads (30)" in out and "Traceback" not in out


def test_set_head_dim_on_a_llama_is_refused():
    # 4004 % 32 = 4: LlamaConfig refuses it, head_dim or not
    with pytest.raises(FieldError, match=r"hidden_size \(4004\) is not a multiple"):
        check_overrides({**BASE, "model_type": "llama", "num_attention_heads": 32,
                         "num_key_value_heads": 8}, {"hidden_size": 4004, "head_dim": 128}, "m")
    # a Qwen2 runs it with the head_dim given (no error)
    check_overrides({**BASE, "model_type": "qwen2", "num_attention_heads": 32,
                     "num_key_value_heads": 8}, {"hidden_size": 4004, "head_dim": 128}, "m")


def test_tp_split_widths_hand_counted():
    # Qwen2.5-7B: 28 heads, 4 KV heads, FFN 18944 = 2^8 x 74
    arch = resolve_model("qwen2.5-7b")[0]
    assert P.tp_split_widths(arch) == [("attention heads", 28),
                                       ("key-value heads (query groups)", 4),
                                       ("MLP width (intermediate_size)", 18944)]
    assert P.tp_sizes_that_split(arch, 8) == [1, 2, 4]
    assert "key-value heads (query groups), 4, is not a multiple of tp 7" in \
        P.tp_split_problem(arch, 7)


@pytest.mark.parametrize("model, tp, what", [
    ("qwen2.5-7b", "7", "key-value heads (query groups), 4, is not a multiple of tp 7"),
    ("llama-3-8b", "16", "key-value heads (query groups), 8, is not a multiple of tp 16"),
])
def test_cli_refuses_a_tp_that_cannot_split_the_model(model: str, tp: str, what: str):
    code, out = _estimate("--model", model, "--method", "full", "--tp", tp, "--gpus", tp)
    assert code == 2, out
    assert out.startswith("error --tp:") and what in out and "Sizes that split it" in out


def test_the_mlp_width_is_checked_too():
    # 32 heads and 32 KV heads split 8 ways; an MLP of 11000 = 8 x 1375 does, 11004 does not
    cfg = {**BASE, "num_attention_heads": 32, "num_key_value_heads": 32,
           "intermediate_size": 11004, "model_type": "llama"}
    arch = from_hf_config(cfg, name="x")
    assert P.tp_split_problem(arch, 8) == ("its MLP width (intermediate_size), 11004, is not a "
                                           "multiple of tp 8")
    assert P.tp_split_problem(arch, 4) == ""


def test_layout_search_skips_sizes_that_cannot_split():
    # 32 heads (tp 8 divides them) but 4 KV heads: on 16 GPUs of 8 a node the chooser used to
    # try tp 1, 2, 4, 8 (heads only); tp 8 cannot split the KV heads, so 1, 2, 4
    arch = from_hf_config({**BASE, "num_attention_heads": 32, "num_key_value_heads": 4,
                           "model_type": "llama"}, name="x")
    t = Training(arch=arch, seq_len=4096)
    tps = {x["tp"] for x in candidate_layouts(t, Hardware(gpu="h100", num_gpus=16))}
    assert tps == {1, 2, 4}


@pytest.mark.parametrize("params", [7e9, 13e9, 34e9])
def test_standard_shapes_round_the_mlp_so_tensor_parallelism_splits_them(params: float):
    # Llama's FeedForward rounds its width to a multiple of 256; the solved width used not to
    # be (7e9: 11673), so no tp could split a --params model
    from gpuhours.estimate.arch import standard_shape

    arch = standard_shape(params)
    assert arch.intermediate_size % 256 == 0
    # 34e9: d 6656 = 52 heads of 128, so tp 8 stays out (heads), as before
    assert P.tp_sizes_that_split(arch, 8) == ([1, 2, 4] if params == 34e9 else [1, 2, 4, 8])
    code, out = _estimate("--params", f"{params:g}", "--method", "full", "--tp", "4",
                          "--gpus", "4", "--ignore-memory")
    assert code == 0, out


def test_a_plan_with_a_tp_that_cannot_split_is_refused(tmp_path: Path):
    plan = tmp_path / "plan.yaml"
    plan.write_text("project: tp\nhardware:\n  gpu: h100-sxm\n  gpus_per_node: 8\ndefaults:\n"
                    "  model: qwen2.5-7b\n  method: full\n  micro_batch: 1\n  seq_len: 1024\n"
                    "  gpus: 7\n  tp: 7\nphases:\n  - name: train\n    kind: pretrain\n"
                    "    tokens: 1e8\n")
    r = runner.invoke(app, ["plan", str(plan)], env=ENV)
    assert r.exit_code == 2, r.output
    assert "field 'tp'" in r.output and "Sizes that split it: 1, 2, 4" in " ".join(
        r.output.split())
