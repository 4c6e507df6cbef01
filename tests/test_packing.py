"""`--examples` with a mean example length and packing (seed 002: 600K examples x 3 epochs of a
few hundred tokens each were costed as 1.8M full 2,048-token sequences, 6.8x the work)."""

from __future__ import annotations

import math

import pytest

from gpuhours.errors import FieldError
from gpuhours.estimate.estimator import training_amount
from gpuhours.setup import Hardware, Training


@pytest.fixture()
def setup(toy_gpu):
    t = Training(params=13e9, method="lora", micro_batch=8, grad_accum=4, seq_len=2048)
    return t, Hardware(gpu=toy_gpu)


def test_padded_examples_take_one_sequence_each(setup) -> None:
    t, hw = setup
    tokens, steps, basis = training_amount(t, hw, examples=600_000, epochs=3)
    assert steps == 56_250  # 1.8M sequences / (8 x 4) per step, by hand
    assert tokens == 56_250 * 8 * 4 * 2048
    assert "padded" in basis


def test_packed_examples_take_their_mean_length(setup) -> None:
    t, hw = setup
    tokens, steps, basis = training_amount(t, hw, examples=600_000, epochs=3,
                                           tokens_per_example=300, packed=True)
    # 600K x 3 x 300 = 540M tokens; 65,536 tokens per step -> 8,239.7 -> 8,240 steps
    assert steps == math.ceil(540e6 / 65_536) == 8_240
    assert "packed" in basis
    padded_steps = training_amount(t, hw, examples=600_000, epochs=3)[1]
    assert padded_steps / steps == pytest.approx(6.83, abs=0.01)


def test_a_short_mean_length_says_how_much_is_padding(setup) -> None:
    t, hw = setup
    _, _, basis = training_amount(t, hw, examples=1000, tokens_per_example=512)
    assert "75% of it padding" in basis


def test_packing_needs_examples(setup) -> None:
    t, hw = setup
    with pytest.raises(FieldError, match="give the number of examples"):
        training_amount(t, hw, tokens=1e9, packed=True)


def test_packed_without_a_mean_length_is_an_assumption_said_as_one(toy_gpu) -> None:
    # 1,000 examples packed into 512-token sequences with no mean given: each is taken as a
    # full sequence (512,000 tokens, 1,000 steps of micro-batch 1), which the output must call
    # assumed, with a warning; a given mean is a formula, and --tokens rounded up to whole steps
    # (1,000 tokens -> 2 steps of 512 = 1,024) is a formula too, not the input
    from gpuhours.estimate.estimator import estimate_training

    t = Training(params=1e8, method="full", micro_batch=1, seq_len=512)
    hw = Hardware(gpu=toy_gpu)
    e = estimate_training(t, hw, examples=1000, packed=True)
    assert e.totals is not None and e.totals.tokens.value == 512_000
    assert e.totals.tokens.basis == "assumed"
    assert any("packed examples without a mean length" in w for w in e.warnings)
    given = estimate_training(t, hw, examples=1000, packed=True, tokens_per_example=128)
    assert given.totals is not None and given.totals.tokens.value == 1000 * 128
    assert given.totals.tokens.basis == "formula"
    assert not any("without a mean length" in w for w in given.warnings)
    rounded = estimate_training(t, hw, tokens=1000)
    assert rounded.totals is not None and rounded.totals.tokens.value == 1024
    assert rounded.totals.tokens.basis == "formula"
    exact = estimate_training(t, hw, tokens=2048)
    assert exact.totals is not None and exact.totals.tokens.basis == "input"
