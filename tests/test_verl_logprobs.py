"""loss_kernel="verl-logprobs": verl's actor takes log-probs itself (volcengine/verl@df340d70
dp_actor.py _forward_micro_batch: logits.div_(temperature), then
utils/torch_functional.logprobs_from_logits -> flash-attn's Triton cross_entropy_loss with
inplace_backward). Worked by hand, counted on real CPU tensors, and mapped from verl's config
(walk p9 F20, issue 13)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from gpuhours.estimate.memory import logits_bytes, loss_backward_bytes
from gpuhours.importers import read_setup
from gpuhours.setup import Training
from saved_storage import tracked_head

TOKENS, VOCAB, HIDDEN = 1024, 4096, 64
#: rows per block of the stand-in kernel; its fp32 block (ROWS x VOCAB x 4 bytes) is on chip in
#: the Triton kernel, not in memory, and is taken off the count below
ROWS = 64
GRPO_LORA = Path(__file__).parent / "data" / "importers" / "verl_grpo_qwen2_5_3b_lora.yaml"


def _t(tiny, kernel: str = "verl-logprobs") -> Training:
    arch = dataclasses.replace(tiny, vocab_size=VOCAB)
    return Training.model_validate({"arch": arch, "micro_batch": 1, "seq_len": TOKENS,
                                    "precision": "bf16-mixed", "loss_kernel": kernel})


def test_verl_logprobs_by_hand(tiny) -> None:
    t = _t(tiny)
    # forward: the bf16 logits (2 bytes) and fp32 losses, lse, z_losses per token (12)
    assert logits_bytes(t.arch, t) == TOKENS * VOCAB * 2 + 12 * TOKENS
    # backward: the gradient written into the logits (2), the temperature's new gradient (2),
    # the fp32 lse and incoming gradient per token (8); hf holds 12 bytes per logit here
    assert loss_backward_bytes(t.arch, t) == TOKENS * VOCAB * 4 + 8 * TOKENS
    hf = _t(tiny, "hf")
    assert loss_backward_bytes(hf.arch, hf) == TOKENS * VOCAB * 12


def _stand_in():
    """flash-attn's CrossEntropyLoss (flash_attn/ops/triton/cross_entropy.py) as it allocates:
    forward makes fp32 losses, lse and z_losses (one per row) and saves the logits; backward
    with inplace_backward writes the gradient into the saved logits and returns them. The
    Triton kernels work a row at a time on chip: here, ROWS rows in memory."""
    import torch

    class CrossEntropyInplace(torch.autograd.Function):
        @staticmethod
        def forward(ctx, logits, labels):  # type: ignore[override]
            rows = logits.shape[0]
            losses = torch.empty(rows, dtype=torch.float32)
            lse = torch.empty(rows, dtype=torch.float32)
            z_losses = torch.empty(rows, dtype=torch.float32)
            for i in range(0, rows, ROWS):
                block = logits[i:i + ROWS].float()
                lse[i:i + ROWS] = torch.logsumexp(block, dim=-1)
                picked = block.gather(-1, labels[i:i + ROWS, None]).squeeze(-1)
                losses[i:i + ROWS] = lse[i:i + ROWS] - picked
                del block
            z_losses.zero_()
            ctx.save_for_backward(logits, lse, labels)
            ctx.mark_non_differentiable(z_losses)
            return losses, z_losses

        @staticmethod
        def backward(ctx, grad_losses, grad_z):  # type: ignore[override]
            logits, lse, labels = ctx.saved_tensors
            for i in range(0, logits.shape[0], ROWS):
                block = (logits[i:i + ROWS].float() - lse[i:i + ROWS, None]).exp()
                block.scatter_add_(-1, labels[i:i + ROWS, None],
                                   -torch.ones_like(block[:, :1]))
                logits[i:i + ROWS] = block * grad_losses[i:i + ROWS, None]
                del block
            return logits, None

    return CrossEntropyInplace


def test_verl_logprobs_matches_a_live_storage_count(tiny) -> None:
    """The actor's head and log-probs as dp_actor.py runs them (remove-padding path: a
    (tokens, vocabulary) logits tensor), 1024 tokens, hidden 64, vocabulary 4096, bf16; the
    LoRA base's head takes no gradient. Counted by the live-storage tracker bench uses."""
    pytest.importorskip("torch")
    t = _t(tiny)
    ce = _stand_in()
    with tracked_head(TOKENS, HIDDEN, VOCAB) as (h, w, y, tracker):
        logits = h @ w.T
        logits.div_(0.7)
        log_probs = -ce.apply(logits, y)[0]
        loss = log_probs.mean()
        del logits, log_probs
        forward = tracker.peak_bytes
        tracker.peak_bytes = 0
        loss.backward()
        backward = tracker.peak_bytes
    before = h.nbytes + w.nbytes + y.nbytes
    on_chip = ROWS * VOCAB * 4  # the stand-in's block, at the forward's peak
    assert forward - before - on_chip == pytest.approx(logits_bytes(t.arch, t), rel=2e-3)
    # backward's peak is the temperature's gradient beside the in-place one (2 N V a), above
    # the stand-in's block beside the logits (N V a + the block)
    assert backward - before == pytest.approx(loss_backward_bytes(t.arch, t), rel=2e-3)


def test_verl_config_maps_to_the_kernel_it_runs(tmp_path: Path) -> None:
    assert read_setup(GRPO_LORA).fields["loss_kernel"] == "verl-logprobs"
    data = yaml.safe_load(GRPO_LORA.read_text())
    data["actor_rollout_ref"]["model"]["use_fused_kernels"] = True
    fused = tmp_path / "fused.yaml"
    fused.write_text(yaml.safe_dump(data))
    got = read_setup(fused)
    assert got.fields["loss_kernel"] == "cut-ce"
    assert any("use_fused_kernels=true -> loss_kernel cut-ce" in u for u in got.used)
    data["actor_rollout_ref"]["model"]["use_fused_kernels"] = False
    data["actor_rollout_ref"]["actor"]["entropy_coeff"] = 0.001
    entropy = tmp_path / "entropy.yaml"
    entropy.write_text(yaml.safe_dump(data))
    got = read_setup(entropy)
    assert "loss_kernel" not in got.fields
    assert any(u.startswith("actor.entropy_coeff=0.001: the entropy") for u in got.unused)


def test_verl_grpo_lora_example_fits_its_own_gpus(tmp_path: Path) -> None:
    """verl's run_qwen2_5-3b_gsm8k_grpo_lora.sh runs on 8 x 80 GB: its update fits (121.6 GiB
    with transformers' fp32 loss before)."""
    from typer.testing import CliRunner

    from gpuhours.cli import app

    r = CliRunner().invoke(app, ["estimate", "--from", str(GRPO_LORA), "--gpu", "h100-sxm",
                                 "--json"])
    assert r.exit_code == 0, r.output
    import json

    out = json.loads(r.output)
    total = out["memory"]["total_bytes"]
    total = total["value"] if isinstance(total, dict) else total
    assert 30 * 2**30 < total < 79 * 2**30


def test_plan_rl_phase_from_the_verl_example_fits(tmp_path: Path) -> None:
    """The walk's plan (an rl phase `from:` the example) was refused: 121.6 GiB per GPU."""
    from typer.testing import CliRunner

    from gpuhours.cli import app

    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({
        "project": "from-verl", "hardware": {"gpu": "h100-sxm", "gpus_per_node": 8, "nodes": 1},
        "phases": [{"name": "grpo", "kind": "rl", "from": str(GRPO_LORA), "steps": 5,
                    "prompts_per_step": 32, "generations_per_prompt": 5, "prompt_tokens": 512,
                    "response_tokens": 1024, "reward": {"kind": "rule"}}]}))
    r = CliRunner().invoke(app, ["plan", str(plan)], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "loss_kernel verl-logprobs" in r.output
