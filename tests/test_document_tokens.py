"""Packed documents that attend only within themselves (Training.document_tokens): the attention
is counted per document, held to hand-worked FLOPs; bad input names the field (issue 14)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.errors import FieldError
from gpuhours.estimate.flops import training_flops
from gpuhours.setup import Training

runner = CliRunner()


def test_attention_counts_one_document_not_the_sequence():
    whole = training_flops(Training(model="llama-2-7b", seq_len=4096))
    docs = training_flops(Training(model="llama-2-7b", seq_len=4096, document_tokens=1024))
    # Llama-2-7B: QK^T and AV cost 4 x 32 layers x 4096 = 524,288 FLOPs per attended key; a
    # causal token attends to (S + 1) / 2 keys on average: 2048.5 over the sequence, 512.5
    # within a 1,024-token document
    assert whole.attention_forward == pytest.approx(524_288 * 2048.5)
    assert docs.attention_forward == pytest.approx(524_288 * 512.5)
    # the matmuls are the same tokens through the same weights
    assert docs.matmul_forward == whole.matmul_forward
    # forward + backward (2x) of the attention: 3 x 524,288 x 1,536 FLOPs per token less
    assert whole.model_flops_per_token - docs.model_flops_per_token == pytest.approx(
        3 * 524_288 * 1536)


def test_a_document_the_length_of_the_sequence_changes_nothing():
    whole = training_flops(Training(model="llama-2-7b", seq_len=2048))
    same = training_flops(Training(model="llama-2-7b", seq_len=2048, document_tokens=2048))
    assert same == whole


def test_documents_longer_than_the_sequence_are_refused():
    with pytest.raises(FieldError) as err:
        Training(model="llama-2-7b", seq_len=2048, document_tokens=4096)
    assert err.value.fields == ("document_tokens", "seq_len")
    with pytest.raises(FieldError):
        Training(model="llama-2-7b", seq_len=2048, document_tokens=512, seq_len_mean=800)


def test_the_option_reaches_the_estimate_and_its_basis():
    args = ["estimate", "--model", "llama-2-7b", "--gpu", "a100-80gb", "--method", "lora",
            "--seq", "4096", "--checkpointing", "--json"]
    whole = json.loads(runner.invoke(app, args).stdout)
    docs = json.loads(runner.invoke(app, [*args, "--document-tokens", "1024"]).stdout)
    assert whole["model_flops_per_token"]["value"] - docs["model_flops_per_token"]["value"] \
        == pytest.approx(3 * 524_288 * 1536)
    assert "packed documents of 1,024 tokens" in docs["model_flops_per_token"]["source"]
    attention = [d["step_time_breakdown_s"]["attention_s"]["value"] for d in (whole, docs)]
    assert attention[1] < attention[0] / 3  # 512.5 / 2048.5 of the work, same efficiency


def test_bad_input_names_the_option_and_exits_2():
    result = runner.invoke(app, ["estimate", "--model", "llama-2-7b", "--gpu", "a100-80gb",
                                 "--method", "lora", "--seq", "2048", "--document-tokens", "4096"])
    assert result.exit_code == 2
    assert "--document-tokens" in result.output and "Give at most 2048" in result.output
    assert "Traceback" not in result.output


def test_a_plan_phase_takes_it_and_a_bad_value_names_its_line(tmp_path: Path):
    plan = tmp_path / "plan.yaml"
    body = ("project: packed\nhardware:\n  gpu: a100-80gb\n  gpus_per_node: 1\nphases:\n"
            "  - name: sft\n    kind: finetune\n    model: llama-2-7b\n    method: lora\n"
            "    seq_len: 4096\n    micro_batch: 1\n    checkpointing: true\n    gpus: 1\n"
            "    tokens: 1.0e8\n    document_tokens: {}\n")
    plan.write_text(body.format(1024))
    good = runner.invoke(app, ["plan", str(plan), "--no-doc", "--json"])
    assert good.exit_code == 0, good.output
    plan.write_text(body.format("many"))
    bad = runner.invoke(app, ["plan", str(plan), "--no-doc"])
    assert bad.exit_code == 2
    assert "document_tokens" in bad.output and "line 15" in bad.output
