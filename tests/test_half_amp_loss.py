"""loss_kernel="half-amp": a model's own cross-entropy on its half-precision logits inside
accelerate's autocast-wrapped forward (Qwen-1's modeling_qwen.py under transformers' Trainer with
bf16), worked by hand, counted on real CPU tensors with the live-storage tracker bench uses, and
its allocator sequence (fragmentation.half_amp_loss_program) held to the same count."""

from __future__ import annotations

import dataclasses

import pytest

from gpuhours.errors import FieldError
from gpuhours.estimate.fragmentation import half_amp_loss_program, replay_sizes
from gpuhours.estimate.memory import logits_bytes, loss_backward_bytes
from gpuhours.setup import Training
from loss_replay import replay_loss_program

TOKENS, VOCAB = 1024, 4096


def _t(tiny, **kw: object) -> Training:
    arch = dataclasses.replace(tiny, vocab_size=VOCAB)
    return Training.model_validate({"arch": arch, "micro_batch": 1, "seq_len": TOKENS,
                                    "precision": "bf16", "loss_kernel": "half-amp", **kw})


def test_half_amp_loss_by_hand(tiny) -> None:
    # at accelerate's fp32 copy: the held bf16 logits 2, log-softmax's bf16 output 2, nll_loss's
    # fp32 cast 4, the fp32 copy 4; nll_loss's backward: its saved fp32 input 4 and fp32
    # gradient 4 beside log-softmax's saved bf16 output 2. hf holds 2 + 4 + 4 and 12.
    t = _t(tiny)
    assert logits_bytes(t.arch, t) == TOKENS * VOCAB * 12
    assert loss_backward_bytes(t.arch, t) == TOKENS * VOCAB * 10


def test_half_amp_loss_is_refused_without_half_logits(tiny) -> None:
    with pytest.raises(FieldError, match="half-amp") as e:
        _t(tiny, precision="fp32")
    assert e.value.fields == ("loss_kernel", "precision")


def _program_peaks(program: tuple[int, ...], backward_from: int) -> tuple[int, int]:
    """(largest live bytes before, from) the program's entry `backward_from`."""
    live: list[int] = []
    alive = 0
    peaks = [0, 0]
    for i, op in enumerate(program):
        if op > 0:
            live.append(op)
            alive += op
        else:
            alive -= live[-op - 1]
            live[-op - 1] = 0
        peaks[i >= backward_from] = max(peaks[i >= backward_from], alive)
    return peaks[0], peaks[1]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_amp_loss_matches_a_live_storage_count(tiny, dtype) -> None:
    """The operators CUDA autocast dispatches for Qwen-1's loss, run on CPU one by one (CPU
    autocast keeps other lists): cross_entropy's log_softmax with the input's own dtype
    (LossNLL.cpp passes self.scalar_type(); autocast's fp32_set_opt_dtype respects it), then
    nll_loss on an fp32 cast of it (autocast's fp32 list); the forward returns and accelerate's
    convert_outputs_to_fp32 copies the logits to fp32, the half-precision output is dropped,
    then compute_loss returns and the copy goes (1 x 1024 tokens, hidden 64, vocabulary 4096;
    the hidden states, head and labels left out)."""
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
        shift = logits[0][..., :-1, :].contiguous()  # contiguous already at one sequence
        log_probs = torch.nn.functional.log_softmax(shift.view(-1, VOCAB), 1, dtype=half)
        loss = torch.nn.functional.nll_loss(log_probs.float(), y[..., 1:].reshape(-1))
        del shift, log_probs  # locals of the model's forward
        copy = [logits[0].float()]  # accelerate's convert_outputs_to_fp32
        del logits  # the model's own output object, replaced by the converted one
        forward = tracker.peak_bytes
        del copy  # compute_loss returns the loss only
        tracker.peak_bytes = 0
        loss.backward()
        backward = tracker.peak_bytes
    before = h.nbytes + w.nbytes + y.nbytes
    assert forward - before == pytest.approx(logits_bytes(t.arch, t), rel=2e-3)
    assert backward - before == pytest.approx(loss_backward_bytes(t.arch, t), rel=2e-3)
    # the allocator sequence the replay runs holds the same two peaks (its backward begins
    # with nll_loss's gradient, after the copy is freed)
    a = 2
    program = half_amp_loss_program(TOKENS, 1, VOCAB, a)
    first_backward = program.index((TOKENS - 1) * VOCAB * 4, 4)
    fwd, bwd = _program_peaks(program, first_backward)
    assert fwd == pytest.approx(logits_bytes(t.arch, t), rel=2e-3)
    assert bwd == pytest.approx(loss_backward_bytes(t.arch, t), rel=2e-3)


def test_half_amp_program_copies_the_shifted_logits_only_for_several_sequences() -> None:
    one, two = half_amp_loss_program(8, 1, 16, 2), half_amp_loss_program(8, 2, 16, 2)
    assert sum(op > 0 for op in two) == sum(op > 0 for op in one) + 1
    # every block the program makes is freed at most once, and only the LM head's incoming
    # gradient (N V a) is left for the replay to free with `head`
    for program, tokens in ((one, 8), (two, 8)):
        sizes = [op for op in program if op > 0]
        freed = [-op - 1 for op in program if op < 0]
        assert len(freed) == len(set(freed))
        left = [sizes[i] for i in range(len(sizes)) if i not in freed]
        assert left == [tokens * 16 * 2]


def test_half_amp_replay_at_a_fixed_length_reserves_its_live_peak(tiny) -> None:
    """At one length the program's blocks are reused step after step: the allocator's reserve
    is the program's live peak, no more. A vocabulary of 16384 makes every block larger than
    10 MiB (each its own segment: smaller requests share 20 MiB ones, trace/allocator.py)."""
    vocab = 16384
    t = Training.model_validate({"arch": dataclasses.replace(tiny, vocab_size=vocab),
                                 "micro_batch": 1, "seq_len": TOKENS, "precision": "bf16",
                                 "loss_kernel": "half-amp"})
    s = replay_sizes(t, TOKENS)
    assert s.loss_program == half_amp_loss_program(TOKENS, 1, vocab, 2)
    al = replay_loss_program(s.loss_program)
    assert al.peak_allocated == pytest.approx(logits_bytes(t.arch, t), rel=2e-3)
    assert al.peak_reserved == al.peak_allocated
