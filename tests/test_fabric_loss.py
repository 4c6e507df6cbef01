"""loss_kernel="chunked-fabric": litgpt's loss as its scripts run it under Lightning Fabric, whose
precision plugin casts the model's output to fp32 (lightning/fabric/wrappers.py
_FabricModule.forward -> HalfPrecision.convert_output, Lightning @ 71aed751 and 2.4.0), by hand
and counted on real CPU tensors: the LoRA scripts' head by chunks of 128 positions
(finetune/lora.py @ 00af8b0d, lit-gpt @ 8641822), full.py's whole head with its logits split
by 128 rows (utils.chunked_cross_entropy)."""

from __future__ import annotations

import dataclasses

import pytest

from gpuhours.errors import FieldError
from gpuhours.estimate.fabric_loss import fabric_cast_bytes
from gpuhours.estimate.memory import held_previous_logits_bytes, logits_bytes, loss_backward_bytes
from gpuhours.setup import Training

SEQ, VOCAB, HIDDEN = 512, 4096, 64


def _t(tiny, batch: int, method: str = "lora", **kw: object) -> Training:
    arch = dataclasses.replace(tiny, vocab_size=VOCAB)
    return Training.model_validate({"arch": arch, "micro_batch": batch, "seq_len": SEQ,
                                    "precision": "bf16", "loss_kernel": "chunked-fabric",
                                    "method": method, **kw})


def test_fabric_loss_by_hand(tiny) -> None:
    # LoRA scripts, 2 x 512 = 1024 tokens: the held fp32 logits and the fp32 log-softmax
    # outputs (4 + 4 bytes each of 1024 x 4096), and the last chunk's reshape copy (2 x 127
    # positions, 4 bytes); in backward one chunk (2 x 128 positions) of two fp32 gradients
    t = _t(tiny, 2)
    assert logits_bytes(t.arch, t) == (1024 * 8 + 2 * 127 * 4) * VOCAB
    assert loss_backward_bytes(t.arch, t) == (1024 * 8 + 256 * 8) * VOCAB
    # one sequence: the shifted last chunk is contiguous, no copy
    one = _t(tiny, 1)
    assert logits_bytes(one.arch, one) == 512 * 8 * VOCAB
    # full.py: the whole shifted logits copied above one sequence (4 more), and in backward the
    # split's concatenated gradient beside the chunks' and the held logits: 12 bytes a logit
    full = _t(tiny, 2, "full")
    assert logits_bytes(full.arch, full) == 1024 * 12 * VOCAB
    assert loss_backward_bytes(full.arch, full) == 1024 * 12 * VOCAB
    # the cast: the head's bf16 output and its fp32 copy
    assert fabric_cast_bytes(1024, VOCAB, 2) == 1024 * 6 * VOCAB


def test_fabric_loss_is_refused_under_autocast(tiny) -> None:
    with pytest.raises(FieldError, match="half-precision loss"):
        _t(tiny, 1, precision="bf16-amp")


def test_the_previous_logits_a_held_loop_keeps_are_fabric_s_fp32_ones(tiny) -> None:
    # litgpt @ 00af8b0d's loop holds `logits`, the plugin's fp32 cast, until the next forward
    # returns (with a bitsandbytes base: bnb_saved_input held-output)
    t = _t(tiny, 2, "qlora", bnb_saved_input="held-output", kbit_upcast=False)
    assert held_previous_logits_bytes(t.arch, t) == 1024 * 4 * VOCAB


@pytest.mark.parametrize(("method", "batch"), [("lora", 1), ("lora", 2), ("full", 1),
                                               ("full", 2)])
def test_fabric_loss_matches_a_live_storage_count(tiny, method: str, batch: int) -> None:
    """litgpt's code path on bf16 CPU tensors (hidden 64, vocabulary 4096, 512 positions): the
    head's bf16 output cast to fp32 as Fabric's convert_output does (the bf16 list alive until
    the cast returns), the last position dropped, per-chunk cross-entropy with reduction
    "none", the loop holding the fp32 logits through backward."""
    torch = pytest.importorskip("torch")
    from gpuhours.torchkit.storage import LiveStorageTracker

    t = _t(tiny, batch, method)
    F = torch.nn.functional
    torch.manual_seed(0)
    h = torch.randn(batch, SEQ, HIDDEN, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(VOCAB, HIDDEN, dtype=torch.bfloat16)
    y = torch.randint(0, VOCAB, (batch, SEQ))
    tracker = LiveStorageTracker("cpu")
    with tracker:
        for x in (h, w, y):
            tracker.track(x, preexisting=True)
        targets = y[..., 1:]
        if method == "lora":  # model(input_ids, lm_head_chunk_size=128)
            head = [x_i @ w.T for x_i in h.split(128, dim=1)]
            logits = [c.to(torch.float32) for c in head]
            del head
            cast = tracker.peak_bytes
            logits[-1] = logits[-1][..., :-1, :]
            chunks = [c.reshape(-1, VOCAB) for c in logits]
            target_chunks = [c.reshape(-1) for c in targets.split(128, dim=1)]
        else:  # full.py: model(input_ids), then chunked_cross_entropy(logits[..., :-1, :], ...)
            logits = (h @ w.T).to(torch.float32)
            cast = tracker.peak_bytes
            chunks = list(logits[..., :-1, :].reshape(-1, VOCAB).split(128))
            target_chunks = list(targets.reshape(-1).split(128))
        losses = [F.cross_entropy(c, tc, reduction="none")
                  for c, tc in zip(chunks, target_chunks, strict=True)]
        del chunks
        loss = torch.cat(losses).sum() / targets.numel()
        del losses
        forward = tracker.peak_bytes
        tracker.peak_bytes = 0
        loss.backward()  # `logits` still held, as in litgpt's loop
        backward = tracker.peak_bytes
        del logits
    before = h.nbytes + w.nbytes + y.nbytes
    tokens = batch * SEQ
    assert cast - before == pytest.approx(fabric_cast_bytes(tokens, VOCAB, 2), rel=0.01)
    # within 1% (the per-token losses and the 511 shifted positions of 512 aside)
    assert forward - before == pytest.approx(logits_bytes(t.arch, t), rel=0.01)
    assert backward - before == pytest.approx(loss_backward_bytes(t.arch, t), rel=0.01)
