"""loss_kernel="megatron" (Megatron-Core's vocab-parallel cross-entropy, megatron/core/
tensor_parallel/cross_entropy.py) and "te" (Transformer Engine's Triton parallel_cross_entropy):
worked by hand, and the megatron one counted on real CPU tensors, written here step by step as
Megatron-Core's forward and backward run (one tensor-parallel rank)."""

from __future__ import annotations

import dataclasses

import pytest

from gpuhours.estimate.memory import logits_bytes, loss_backward_bytes
from gpuhours.setup import Training
from saved_storage import tracked_head

TOKENS, VOCAB, HIDDEN = 1024, 4096, 64


def _t(tiny, kernel: str, precision: str = "bf16-mixed") -> Training:
    arch = dataclasses.replace(tiny, vocab_size=VOCAB)
    return Training.model_validate({"arch": arch, "micro_batch": 1, "seq_len": TOKENS,
                                    "precision": precision, "loss_kernel": kernel})


def test_megatron_loss_by_hand(tiny) -> None:
    t = _t(tiny, "megatron")
    # forward: the head's bf16 logits (2) and their one fp32 copy (4), softmax in place on it
    assert logits_bytes(t.arch, t) == TOKENS * VOCAB * 6
    # backward: the saved fp32 softmax turned gradient in place (4) and its cast to bf16 (2)
    assert loss_backward_bytes(t.arch, t) == TOKENS * VOCAB * 6
    # fp32 logits: `.float()` returns the same tensor: 4 in both
    f = _t(tiny, "megatron", "fp32")
    assert logits_bytes(f.arch, f) == loss_backward_bytes(f.arch, f) == TOKENS * VOCAB * 4
    # transformers' loss holds 2 + 4 + 4 in the forward and 12 at the start of backward
    hf = _t(tiny, "hf")
    assert logits_bytes(hf.arch, hf) == TOKENS * VOCAB * 10
    assert loss_backward_bytes(hf.arch, hf) == TOKENS * VOCAB * 12


def test_te_loss_by_hand(tiny) -> None:
    t = _t(tiny, "te")
    # forward: the bf16 logits, the gradient written into them; fp32 loss + (max, sum,
    # target logit) per token: 16 bytes
    assert logits_bytes(t.arch, t) == TOKENS * VOCAB * 2 + 16 * TOKENS
    # backward: scaled in place
    assert loss_backward_bytes(t.arch, t) == TOKENS * VOCAB * 2


def _vocab_parallel_ce():
    """Megatron-Core's _VocabParallelCrossEntropy on one rank, operation by operation as
    cross_entropy.py (NVIDIA/Megatron-LM@d98e8a64) runs them: the fp32 copy, the in-place
    subtract of the max, the target logit picked, exp in place, the sum, the in-place divide;
    the softmax saved; backward subtracts 1 at the targets and scales in place."""
    import torch

    class VocabParallelCE(torch.autograd.Function):
        @staticmethod
        def forward(ctx, logits, target):  # type: ignore[override]
            x = logits.float()
            x_max = torch.max(x, dim=-1)[0]
            x -= x_max.unsqueeze(-1)
            rows = torch.arange(x.shape[0])
            picked = x[rows, target].clone()
            torch.exp(x, out=x)
            total = x.sum(dim=-1)
            loss = torch.log(total) - picked
            x.div_(total.unsqueeze(-1))
            ctx.save_for_backward(x, target)
            return loss

        @staticmethod
        def backward(ctx, grad_output):  # type: ignore[override]
            softmax, target = ctx.saved_tensors
            rows = torch.arange(softmax.shape[0])
            softmax[rows, target] -= 1.0
            softmax.mul_(grad_output.unsqueeze(-1))
            return softmax, None

    return VocabParallelCE


def test_megatron_loss_matches_a_live_storage_count(tiny) -> None:
    """The head and loss as GPTModel runs them (the logits freed when forward returns the
    loss), 1024 tokens, hidden 64, vocabulary 4096, bf16; counted by bench's live-storage
    tracker. Autograd casts the fp32 gradient to the bf16 input's dtype."""
    torch = pytest.importorskip("torch")
    t = _t(tiny, "megatron")
    ce = _vocab_parallel_ce()
    with tracked_head(TOKENS, HIDDEN, VOCAB) as (h, w, y, tracker):
        logits = h @ w.T
        loss = ce.apply(logits, y).mean()
        del logits
        forward = tracker.peak_bytes
        tracker.peak_bytes = 0
        loss.backward()
        backward = tracker.peak_bytes
    assert h.grad is not None and h.grad.dtype == torch.bfloat16
    before = h.nbytes + w.nbytes + y.nbytes
    assert forward - before == pytest.approx(logits_bytes(t.arch, t), rel=5e-3)
    assert backward - before == pytest.approx(loss_backward_bytes(t.arch, t), rel=5e-3)


# Qwen2.5-0.5B's config (catalog qwen2.5-0.5b.json): vocabulary 151936, hidden 896
QWEN_VOCAB = 151936


def test_the_megatron_kernel_path_defaults_to_megatron_cores_loss() -> None:
    """Megatron-Core's models compute its vocab-parallel cross-entropy, never transformers'
    loss (setup.loss_kernel_of): with kernels megatron and no loss kernel given, the logits
    term is the megatron kernel's 6 bytes a logit (bf16 logits 2 + their fp32 copy 4), not
    hf's 10 forward and 12 backward. 1024 tokens x 151936 = 155,582,464 logits."""
    from gpuhours.setup import loss_kernel_of

    t = Training(model="qwen2.5-0.5b", micro_batch=1, seq_len=1024, kernels="megatron")
    assert t.loss_kernel is None and loss_kernel_of(t) == "megatron"
    assert logits_bytes(t.arch, t) == loss_backward_bytes(t.arch, t) == 933_494_784
    assert "loss:megatron" in t.label() and t.choices()["loss_kernel"] == "megatron"
    # an explicit choice is kept: transformers' loss on the megatron path
    hf = Training(model="qwen2.5-0.5b", micro_batch=1, seq_len=1024, kernels="megatron",
                  loss_kernel="hf")
    assert loss_kernel_of(hf) == "hf" and "loss:" not in hf.label()
    assert logits_bytes(hf.arch, hf) == 1_555_824_640  # 10 bytes a logit
    assert loss_backward_bytes(hf.arch, hf) == 1_866_989_568  # 12
    te = Training(model="qwen2.5-0.5b", micro_batch=1, seq_len=1024, kernels="megatron",
                  loss_kernel="te")
    assert logits_bytes(te.arch, te) == 1024 * QWEN_VOCAB * 2 + 16 * 1024
    # every other kernel path keeps transformers' loss by default
    for kernels in ("eager", "flash-attn"):
        other = Training(model="qwen2.5-0.5b", micro_batch=1, seq_len=1024, kernels=kernels)
        assert loss_kernel_of(other) == "hf"
        assert logits_bytes(other.arch, other) == 1_555_824_640


def test_the_cli_resolves_the_loss_with_the_kernel_path() -> None:
    """--kernels megatron alone estimates Megatron-Core's loss, and says so in the JSON's
    setup; --loss-kernel hf beside it is kept; --kernels eager keeps hf."""
    import json

    from typer.testing import CliRunner

    from gpuhours.cli import app

    def run(*args: str) -> dict:
        result = CliRunner().invoke(app, ["estimate", "--model", "qwen2.5-0.5b", "--gpu",
                                          "h100-sxm", "--seq", "1024", "--json",
                                          "--no-calibrate", *args])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    default = run("--kernels", "megatron")
    given = run("--kernels", "megatron", "--loss-kernel", "megatron")
    kept = run("--kernels", "megatron", "--loss-kernel", "hf")
    eager = run()
    assert default["setup"]["loss_kernel"] == "megatron"
    assert kept["setup"]["loss_kernel"] == eager["setup"]["loss_kernel"] == "hf"
    # the logits term is the larger of forward and backward: 6 and 12 bytes a logit
    assert default["memory"]["logits_bytes"]["value"] == 933_494_784
    assert kept["memory"]["logits_bytes"]["value"] == 1_866_989_568
    assert default["memory"] == given["memory"] and default["step_time_s"] == given["step_time_s"]


def test_a_bad_loss_stays_refused_on_the_megatron_path() -> None:
    """The half-precision losses under fp32 are refused whatever the kernel path; the default
    loss of the megatron path is not blamed when a real run refuses the path."""
    from gpuhours.errors import FieldError
    from gpuhours.setup import check_runs_in_torch

    with pytest.raises(FieldError, match="half-precision loss"):
        Training(model="qwen2.5-0.5b", kernels="megatron", precision="fp32",
                 loss_kernel="chunked-half")
    fp32 = Training(model="qwen2.5-0.5b", kernels="megatron", precision="fp32")
    assert logits_bytes(fp32.arch, fp32) == 2048 * QWEN_VOCAB * 4  # `.float()`: no copy
    with pytest.raises(FieldError) as e:
        check_runs_in_torch(Training(model="qwen2.5-0.5b", kernels="megatron"), "the bench")
    assert e.value.fields == ("kernels",)
