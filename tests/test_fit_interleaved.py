"""The chooser tries Megatron-LM's interleaved pipeline schedule (virtual stages): where it
may run (layers per stage divisible by v, accumulation in groups of pp), and that it is kept
only where the estimate says it is faster."""

from __future__ import annotations

import pytest

from gpuhours import catalog
from gpuhours.estimate.estimator import estimate_training
from gpuhours.estimate.fit import _interleaved, fit, interleave_options
from gpuhours.resolve import resolve_model
from gpuhours.setup import Hardware, Training


@pytest.fixture(scope="module")
def llama70() -> Training:
    arch, _ = resolve_model("llama-2-70b")
    return Training(arch=arch, seq_len=4096)


def test_the_virtual_stages_megatron_allows(llama70):
    # 80 layers: pp 2 -> 40 a stage, divisible by 2, 4, 5, 8 (up to MAX_VIRTUAL_STAGES 8);
    # pp 16 -> 5 a stage: 5; pp 3 does not divide 80 (uneven stages: plain 1F1B only)
    assert interleave_options(llama70.arch, 2) == [2, 4, 5, 8]
    assert interleave_options(llama70.arch, 16) == [5]
    assert interleave_options(llama70.arch, 3) == []
    assert interleave_options(llama70.arch, 1) == []


def test_the_chooser_interleaves_a_pipeline_when_it_is_faster(llama70):
    # 256 sequences a step on 64 GPUs: 64 micro-batches of a 4-stage pipeline leave a bubble
    # worth interleaving (at 1,024, 256 micro-batches, the plain 1F1B bubble is 3/259 of the
    # step and ZeRO-1 without interleaving is fastest since ZeRO-2 reduce-scatters every
    # micro-batch, issue 16)
    hw = Hardware(gpu=catalog.gpu("a100-80gb"), num_gpus=64)
    best = fit(llama70, hw, effective_batch=256, search_layouts=True).fastest
    assert best is not None and best.pp > 1
    assert best.virtual_stages in interleave_options(llama70.arch, best.pp)
    assert best.grad_accum % best.pp == 0  # micro-batches in groups of pp
    assert best.micro_batch * best.grad_accum * best.data_parallel == 256
    assert "virtual stages a rank" in best.change
    # the same setup on plain 1F1B: the bubble is v times larger (stage x (p - 1) / (v m),
    # Narayanan et al. 2021 sec. 2.2.2) and the step slower
    chosen = llama70.model_copy(update={
        "micro_batch": best.micro_batch, "grad_accum": best.grad_accum, "tp": best.tp,
        "pp": best.pp, "zero_stage": best.zero_stage, "checkpointing": best.checkpointing,
        "virtual_stages": best.virtual_stages, "tp_comm_overlap": best.tp_comm_overlap})
    plain = chosen.model_copy(update={"virtual_stages": 1})
    e_v, e_1 = estimate_training(chosen, hw), estimate_training(plain, hw)
    bubble_v = e_v.step_time_breakdown_s["pipeline_bubble_s"].value
    bubble_1 = e_1.step_time_breakdown_s["pipeline_bubble_s"].value
    assert bubble_v == pytest.approx(bubble_1 / best.virtual_stages, rel=0.05)
    assert e_v.step_time_s.value < e_1.step_time_s.value


def test_no_interleaving_when_the_accumulation_is_not_whole_groups(llama70):
    hw = Hardware(gpu=catalog.gpu("a100-80gb"), num_gpus=64)
    best = fit(llama70, hw, effective_batch=1024, search_layouts=True).fastest
    assert best is not None
    odd = best.model_copy(update={"grad_accum": best.pp * 3 + 1, "virtual_stages": 1})
    layout = {"tp": best.tp, "pp": best.pp, "cp": best.cp, "ep": best.ep, "virtual_stages": 1}
    assert _interleaved(llama70, hw, 0.05, layout, odd, ()) == []
    even = odd.model_copy(update={"grad_accum": best.pp * 3})
    tried = _interleaved(llama70, hw, 0.05, layout, even, ())
    assert tried and {c.virtual_stages for c in tried} <= set(
        interleave_options(llama70.arch, best.pp))
    assert all(c.grad_accum == best.pp * 3 for c in tried)


def test_every_interleaved_trial_is_counted_not_only_those_that_fit(llama70, monkeypatch):
    """On 40 GB some interleaved trials do not fit (more micro-batches in flight); fit's
    count of configurations holds them all (issue 16 review)."""
    from gpuhours.estimate import fit as F

    hw = Hardware(gpu=catalog.gpu("a100-40gb"), num_gpus=64)
    trials: list = []
    real = F._interleaved

    def recording(*args, **kwargs):
        out = real(*args, **kwargs)
        trials.extend(out)
        return out

    monkeypatch.setattr(F, "_interleaved", recording)
    counted = fit(llama70, hw, effective_batch=1024, search_layouts=True).candidates_evaluated
    monkeypatch.setattr(F, "_interleaved", lambda *args, **kwargs: [])
    without = fit(llama70, hw, effective_batch=1024, search_layouts=True).candidates_evaluated
    assert any(not c.fits for c in trials) and any(c.fits for c in trials)
    assert counted - without == len(trials)
