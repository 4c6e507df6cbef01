"""head_weight_cast: an LM head stored in fp16 under bf16 autocast (ms-swift's bitsandbytes Qwen
rows of Jan 2024, loaded by transformers in the fp16 it forces). What autograd keeps is checked on
real CPU tensors (CPU autocast casts and saves as CUDA's does for a linear), then the estimate's
term and its place in the allocator replay by hand."""

from __future__ import annotations

import dataclasses

import pytest

from gpuhours.errors import FieldError
from gpuhours.estimate.fragmentation import replay_micro_batch, replay_sizes
from gpuhours.estimate.memory import head_weight_cast_bytes, training_memory
from gpuhours.setup import Training
from gpuhours.trace.allocator import Allocator

VOCAB, TOKENS = 4096, 256


def _saved_new_bytes(weight_dtype: object) -> tuple[int, int]:
    """(bytes of the tensors F.linear saves for backward that are not the weight or the input,
    the weight's bytes) for a frozen head under bf16 autocast."""
    torch = pytest.importorskip("torch")
    weight = torch.randn(VOCAB, 64, dtype=weight_dtype)
    x = torch.randn(TOKENS, 64, dtype=torch.float16, requires_grad=True)
    saved: list[object] = []
    with (torch.autograd.graph.saved_tensors_hooks(lambda s: saved.append(s) or s, lambda s: s),
          torch.autocast("cpu", dtype=torch.bfloat16)):
        logits = torch.nn.functional.linear(x, weight)
    assert logits.dtype == torch.bfloat16
    own = {weight.untyped_storage().data_ptr(), x.untyped_storage().data_ptr()}
    new = sum(s.untyped_storage().nbytes() for s in saved  # type: ignore[attr-defined]
              if s.untyped_storage().data_ptr() not in own)  # type: ignore[attr-defined]
    return new, weight.numel() * weight.element_size()


def test_an_fp16_head_under_bf16_autocast_keeps_a_bf16_copy_for_backward() -> None:
    torch = pytest.importorskip("torch")
    new, weight_bytes = _saved_new_bytes(torch.float16)
    assert new == VOCAB * 64 * 2 == weight_bytes  # the bf16 copy, as large as the fp16 head


def test_a_bf16_head_under_bf16_autocast_keeps_no_copy() -> None:
    torch = pytest.importorskip("torch")
    new, _ = _saved_new_bytes(torch.bfloat16)
    assert new == 0


def _t(tiny, **kw: object) -> Training:
    arch = dataclasses.replace(tiny, vocab_size=VOCAB)
    return Training.model_validate({"arch": arch, "micro_batch": 1, "seq_len": TOKENS,
                                    "precision": "bf16", "method": "qlora",
                                    "loss_kernel": "half-amp", **kw})


def test_head_weight_cast_adds_the_head_at_the_loss(tiny) -> None:
    t = _t(tiny, head_weight_cast=True)
    cast = VOCAB * tiny.hidden_size * 2
    assert head_weight_cast_bytes(t.arch, t) == cast
    assert head_weight_cast_bytes(t.arch, _t(tiny)) == 0
    on, off = training_memory(t.arch, t), training_memory(t.arch, _t(tiny))
    assert on.logits_bytes - off.logits_bytes == cast
    if on.peak_phase.startswith("start of backward"):
        assert on.tensors_bytes - off.tensors_bytes == pytest.approx(cast)


def test_the_replay_holds_the_copy_from_the_head_to_its_backward(tiny) -> None:
    t = _t(tiny, head_weight_cast=True)
    s = replay_sizes(t, TOKENS)
    assert s.head_cast == VOCAB * tiny.hidden_size * 2
    assert replay_sizes(_t(tiny), TOKENS).head_cast == 0
    # one micro-batch on an empty cache: its allocated peak grows by the copy, which is alive
    # at the loss (the program's peak), and nothing is left allocated at its end
    peaks = []
    for sizes in (s, replay_sizes(_t(tiny), TOKENS)):
        al = Allocator()
        replay_micro_batch(al, sizes, t.arch.num_layers, checkpointing=True)
        assert al.allocated == 0
        peaks.append(al.peak_allocated)
    assert peaks[0] - peaks[1] == s.head_cast


def test_head_weight_cast_needs_half_precision_and_a_half_head(tiny) -> None:
    with pytest.raises(FieldError, match="head_weight_cast") as e:
        _t(tiny, head_weight_cast=True, precision="fp32", loss_kernel="hf")
    assert e.value.fields == ("head_weight_cast", "precision")
    with pytest.raises(FieldError, match="4-bit head"):
        _t(tiny, head_weight_cast=True, lm_head_4bit=True)
