"""loss_kernel="half": a model's own cross-entropy on half-precision logits without autocast
(Qwen-1's modeling_qwen.py under DeepSpeed's fp16/bf16 engine), worked by hand and counted on
real CPU tensors with the live-storage tracker bench uses."""

from __future__ import annotations

import dataclasses

import pytest

from gpuhours.errors import FieldError
from gpuhours.estimate.memory import logits_bytes, loss_backward_bytes
from gpuhours.setup import Training
from loss_replay import replay_loss_program

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


def _grouped(events: list[int]) -> list[tuple[int, frozenset[int]]]:
    """Allocation events (+k: the k-th block made, -k: it freed) as (k, the blocks freed since
    the block before k was made): the order of frees between two allocations does not matter
    to the caching allocator."""
    out: list[tuple[int, frozenset[int]]] = []
    freed: set[int] = set()
    for e in events:
        if e > 0:
            out.append((e, frozenset(freed)))
            freed = set()
        else:
            freed.add(-e)
    out.append((0, frozenset(freed)))
    return out


def _program_events(program: tuple[int, ...]) -> tuple[list[int], list[int]]:
    """(sizes of the program's blocks in order, its events as +k / -k)."""
    sizes = [op for op in program if op > 0]
    events, made = [], 0
    for op in program:
        if op > 0:
            made += 1
            events.append(made)
        else:
            events.append(op)
    return sizes, events


@pytest.mark.parametrize("micro_batch", [1, 2])
def test_half_loss_program_is_the_real_allocation_sequence(micro_batch) -> None:
    """fragmentation.half_loss_program against the allocations and frees of Qwen-1's loss run
    on real CPU bf16 tensors (tests/alloc_sequence.py records them at the dispatcher), the
    vocabulary-wide blocks only (N' V a and up), with compute_loss dropping the logits before
    backward. The replay used to hold the slice's gradient beside all three of the backward's
    tensors: one N V a above this program's backward peak."""
    torch = pytest.importorskip("torch")
    from alloc_sequence import SequenceRecorder
    from gpuhours.estimate.fragmentation import half_loss_program

    seq = TOKENS // micro_batch
    torch.manual_seed(0)
    h = torch.randn(TOKENS, 64, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(VOCAB, 64, dtype=torch.bfloat16, requires_grad=True)
    y = torch.randint(0, VOCAB, (micro_batch, seq))
    rec = SequenceRecorder()
    with rec:
        logits = [(h @ w.T).view(micro_batch, seq, VOCAB)]
        shift = logits[0][..., :-1, :].contiguous()
        loss = torch.nn.functional.cross_entropy(shift.view(-1, VOCAB),
                                                 y[..., 1:].contiguous().view(-1))
        del shift  # the model's forward returns
        del logits  # compute_loss returns the loss alone
        loss.backward()
    floor = (TOKENS - micro_batch) * VOCAB * 2
    kept = [uid for uid in rec.sizes if rec.sizes[uid] >= floor]
    index = {uid: i + 1 for i, uid in enumerate(kept)}
    real = [index[e] if e > 0 else -index[-e] for e in rec.events if abs(e) in index]
    sizes, events = _program_events(half_loss_program(TOKENS, micro_batch, VOCAB, 2))
    assert [rec.sizes[uid] for uid in kept] == sizes
    # the program leaves the LM head's incoming gradient (its last block) for the replay to
    # free with `head`; the real run frees it at the end of backward
    assert _grouped(real)[:-1] == _grouped(events)[:-1]


def test_half_replay_at_a_fixed_length_reserves_the_loss_peak(tiny) -> None:
    """Through the caching allocator at one length, step after step: the allocated peak of the
    replayed loss is memory.py's backward working set (C + D + E), not one N V a above it. A
    vocabulary of 16384 makes every block its own segment (trace/allocator.py)."""
    from gpuhours.estimate.fragmentation import half_loss_program, replay_sizes

    vocab = 16384
    t = Training.model_validate({"arch": dataclasses.replace(tiny, vocab_size=vocab),
                                 "micro_batch": 1, "seq_len": TOKENS, "precision": "bf16",
                                 "loss_kernel": "half"})
    s = replay_sizes(t, TOKENS)
    assert s.loss_program == half_loss_program(TOKENS, 1, vocab, 2)
    al = replay_loss_program(s.loss_program)
    # (N - 1) V 2 x 3 (each rounded up to the allocator's 2 MiB): log-softmax's saved output,
    # nll_loss's gradient, log-softmax's input gradient
    assert al.peak_allocated == 3 * 32 * 2**20
    assert al.peak_allocated == pytest.approx(loss_backward_bytes(t.arch, t), rel=2e-3)
