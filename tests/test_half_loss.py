"""loss_kernel="half": a model's own cross-entropy on half-precision logits without autocast
(Qwen-1's modeling_qwen.py under DeepSpeed's fp16/bf16 engine), worked by hand and counted on
real CPU tensors with the live-storage tracker bench uses."""

from __future__ import annotations

import dataclasses

import pytest

from gpuhours.errors import FieldError
from gpuhours.estimate.memory import logits_bytes, loss_backward_bytes
from gpuhours.setup import Training

TOKENS, VOCAB = 1024, 4096


def _t(tiny, **kw: object) -> Training:
    arch = dataclasses.replace(tiny, vocab_size=VOCAB)
    return Training.model_validate({"arch": arch, "micro_batch": 1, "seq_len": TOKENS,
                                    "precision": "fp16", "loss_kernel": "half", **kw})


def test_half_loss_by_hand(tiny) -> None:
    # forward: fp16 logits 2 + log-softmax output 2; backward: saved output, its gradient and
    # the input gradient, 2 each. hf would hold 2 + 4 + 4 and 12.
    t = _t(tiny)
    assert logits_bytes(t.arch, t) == TOKENS * VOCAB * 4
    assert loss_backward_bytes(t.arch, t) == TOKENS * VOCAB * 6
    # two sequences: the shifted logits are no longer contiguous and are copied
    t2 = _t(tiny, micro_batch=2, seq_len=TOKENS // 2)
    assert logits_bytes(t2.arch, t2) == TOKENS * VOCAB * 6


@pytest.mark.parametrize("precision", ["fp32", "bf16-amp"])
def test_half_loss_is_refused_where_log_softmax_runs_in_fp32(tiny, precision) -> None:
    with pytest.raises(FieldError, match="half-precision loss") as e:
        _t(tiny, precision=precision)
    assert e.value.fields == ("loss_kernel", "precision")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_loss_matches_a_live_storage_count(tiny, dtype) -> None:
    """Qwen-1's loss as modeling_qwen.py writes it: lm_logits[..., :-1, :].contiguous(), then
    CrossEntropyLoss on the half-precision logits, with no autocast (1 x 1024 tokens, hidden 64,
    vocabulary 4096); the hidden states, head and labels left out."""
    torch = pytest.importorskip("torch")
    from gpuhours.torchkit.storage import LiveStorageTracker

    t = _t(tiny)
    half = getattr(torch, dtype)
    torch.manual_seed(0)
    h = torch.randn(TOKENS, 64, dtype=half, requires_grad=True)
    w = torch.randn(VOCAB, 64, dtype=half, requires_grad=True)
    y = torch.randint(0, VOCAB, (1, TOKENS))
    tracker = LiveStorageTracker("cpu")
    with tracker:
        for x in (h, w, y):
            tracker.track(x, preexisting=True)
        logits = [(h @ w.T).view(1, TOKENS, VOCAB)]
        shift = logits[0][..., :-1, :].contiguous()
        loss = torch.nn.functional.cross_entropy(shift.view(-1, VOCAB),
                                                 y[..., 1:].contiguous().view(-1))
        del shift
        forward = tracker.peak_bytes
        del logits  # the training loop keeps only the loss
        tracker.peak_bytes = 0
        loss.backward()
        backward = tracker.peak_bytes
    before = h.nbytes + w.nbytes + y.nbytes
    assert forward - before == pytest.approx(logits_bytes(t.arch, t), rel=2e-3)
    assert backward - before == pytest.approx(loss_backward_bytes(t.arch, t), rel=2e-3)
