"""PEFT methods beside LoRA (setup.peft_method, estimate/peft_methods.py) without torch: the
trainable parameters of Llama-3.2-3B against the counts peft printed in its own method
comparison (huggingface/peft method_comparison/MetaMathQA results, num_trainable_params in
finetune_runs.csv rows #364-#406), a hand-worked LoKr count, and the refusals."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.errors import FieldError
from gpuhours.estimate.memory import training_memory
from gpuhours.estimate.peft_methods import lokr_shapes
from gpuhours.resolve import resolve_model
from gpuhours.setup import Training

#: (fields, num_trainable_params as the benchmark's peft counted them, row)
PUBLISHED = [
    ({"peft_method": "ia3"}, 286_720, 365),
    ({"peft_method": "ia3", "ia3_targets": "all-linear"}, 630_784, 364),
    ({"peft_method": "loha", "lora_rank": 32}, 18_350_080, 370),
    ({"peft_method": "lokr", "lora_rank": 32, "lokr_decompose_factor": 4}, 2_294_656, 371),
    ({"peft_method": "vera", "lora_rank": 256}, 129_024, 406),
    ({"peft_method": "prompt_tuning", "peft_virtual_tokens": 200}, 614_400, 390),
    ({"peft_method": "prefix_tuning", "peft_virtual_tokens": 200}, 11_468_800, 387),
    ({"peft_method": "prefix_tuning", "peft_virtual_tokens": 50}, 2_867_200, 389),
]


def _setup(**fields: Any) -> Training:
    arch, _ = resolve_model("llama-3.2-3b")
    base: dict[str, Any] = dict(arch=arch, method="lora", precision="bf16", micro_batch=4,
                                seq_len=768, lora_targets="qv")
    return Training(**{**base, **fields})


@pytest.mark.parametrize(("fields", "published", "row"), PUBLISHED)
def test_trainable_params_equal_peft_s_published_counts(fields: dict[str, Any], published: int,
                                                        row: int) -> None:
    t = _setup(**fields)
    assert training_memory(t.arch, t).trainable_params == published, f"row #{row}"


def test_lokr_shapes_worked_by_hand() -> None:
    """q_proj 3072 -> 3072, factor 4: 3072 = 4 x 768 both ways; w1 4 x 4 full, w2 768 x 768
    factored at rank 32 (32 < 768 / 2): 16 + 32 (768 + 768) = 49,168; v_proj 3072 -> 1024:
    1024 = 4 x 256, w2 256 x 768 factored: 16 + 32 (256 + 768) = 32,784; 28 layers x 81,952
    = 2,294,656."""
    assert lokr_shapes(3072, 3072, 32, 4) == ((4, 4), (768, 768), True)
    assert lokr_shapes(3072, 1024, 32, 4) == ((4, 4), (256, 768), True)
    assert 28 * (16 + 32 * 1536 + 16 + 32 * 1024) == 2_294_656


def test_prompt_tuning_lengthens_the_sequence_and_its_memory() -> None:
    """200 virtual tokens before 768 cost what 968 positions cost: the same activations and
    logits as 1 virtual token before 967."""
    prompt = _setup(peft_method="prompt_tuning", peft_virtual_tokens=200)
    longer = _setup(peft_method="prompt_tuning", peft_virtual_tokens=1, seq_len=967)
    assert prompt.llm_seq_len == longer.llm_seq_len == 968
    a, b = training_memory(prompt.arch, prompt), training_memory(longer.arch, longer)
    assert a.activations_bytes == b.activations_bytes and a.logits_bytes == b.logits_bytes
    shorter = _setup(peft_method="prompt_tuning", peft_virtual_tokens=1)
    assert a.activations_bytes > 1.2 * training_memory(shorter.arch, shorter).activations_bytes


def test_loha_keeps_its_dense_deltas() -> None:
    """LoHa on q and v keeps each layer's fp32 delta weights: 28 x 4 x 3072 x (3072 + 1024)
    bytes = 1.41 GB beyond what its per-token copies keep (estimate/peft_methods.py)."""
    loha = _setup(peft_method="loha", lora_rank=32)
    vera = _setup(peft_method="vera", lora_rank=32)
    deltas = 28 * 4 * 3072 * (3072 + 1024)
    # VeRA keeps 4 (r + o) per token and linear, LoHa 4 i: the per-token difference
    tokens = 4 * 768
    per_token = 28 * tokens * 4 * ((3072 - 32 - 3072) + (3072 - 32 - 1024))
    diff = (training_memory(loha.arch, loha).activations_bytes
            - training_memory(vera.arch, vera).activations_bytes)
    assert diff == pytest.approx(deltas + per_token, rel=1e-6)


@pytest.mark.parametrize(("fields", "match"), [
    ({"peft_method": "ia3", "method": "qlora"}, "method lora"),
    ({"peft_method": "loha", "precision": "bf16-mixed"}, "without autocast"),
    ({"peft_method": "prompt_tuning"}, "peft_virtual_tokens"),
    ({"peft_method": "loha", "peft_virtual_tokens": 10}, "prompt_tuning and prefix_tuning"),
    ({"peft_method": "vera", "dora": True}, "dora"),
    ({"peft_method": "lokr", "lora_dropout": 0.1}, "lora_dropout"),
    ({"lokr_decompose_factor": 4}, "LoKr's"),
    ({"ia3_targets": "all-linear"}, "IA3's"),
])
def test_refused(fields: dict[str, Any], match: str) -> None:
    with pytest.raises(FieldError, match=match):
        _setup(**fields)


def test_cli_flags() -> None:
    runner = CliRunner()
    base = ["estimate", "--model", "llama-3.2-3b", "--gpu", "l40s", "--method", "lora",
            "--precision", "bf16", "--batch", "4", "--seq", "768", "--json"]
    ok = runner.invoke(app, [*base, "--peft-method", "lokr", "--lora-rank", "32",
                             "--lora-targets", "qv", "--lokr-decompose-factor", "4"])
    assert ok.exit_code == 0, ok.output
    assert '"peft_method": "lokr"' in ok.output
    bad = runner.invoke(app, [*base, "--peft-method", "prefix_tuning"])
    assert bad.exit_code == 2 and "--peft-virtual-tokens" in bad.output
    assert "Traceback" not in bad.output


def test_benchmark_rows_map_to_setups_with_peft_s_counts() -> None:
    """Every IA3, prompt/prefix tuning, LoHa, LoKr and VeRA row of peft's method comparison
    maps to a setup (finetune.py) whose trainable parameters are the num_trainable_params
    the run logged: the mapping's rank, targets and virtual tokens are the run's."""
    import re

    from gpuhours_dev.validation.finetune import PEFT_METHODS, finetune_rows, map_row

    rows = finetune_rows()
    mapped = 0
    for i, r in enumerate(rows, start=1):
        if r["method"] not in PEFT_METHODS or "MetaMathQA" not in r["notes"]:
            continue
        m = map_row(i, r)
        assert m.training is not None, (i, m.skipped)
        assert m.training.peft_method == PEFT_METHODS[r["method"]]
        logged = re.search(r"num_trainable_params=(\d+)", r["notes"])
        assert logged is not None
        t = m.training
        assert training_memory(t.arch, t).trainable_params == int(logged.group(1)), i
        mapped += 1
    assert mapped == 12
