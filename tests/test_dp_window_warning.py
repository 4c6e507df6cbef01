"""The data-parallel reduction counted hidden beyond the backward it can run beside is said
(estimator.reduction_window_warning; docs/parallelism.md: the window is not wired in)."""

from __future__ import annotations

from gpuhours import catalog
from gpuhours.api import estimate_training
from gpuhours.resolve import resolve_model
from gpuhours.setup import Hardware, Training


def _estimate(accum: int, network: float):
    arch, _ = resolve_model("qwen2.5-7b")
    t = Training(arch=arch, method="full", micro_batch=8, grad_accum=accum, seq_len=2048,
                 checkpointing=True, zero_stage=1)
    hw = Hardware(gpu=catalog.gpu("a100-80gb"), num_gpus=16, gpus_per_node=8,
                  inter_node_gb_per_s_one_way=network)
    return estimate_training(t, hw, tokens=1e10)


def test_a_reduction_hidden_past_the_last_backward_is_warned_with_its_figures():
    e = _estimate(32, 1.25)
    b = e.step_time_breakdown_s
    comm, exposed = b["communication_s"].value, b["communication_exposed_s"].value
    compute = b["matmul_s"].value + b["attention_s"].value + b["memory_bound_s"].value
    hidden, window = comm - exposed, compute * 2 / 3 / 32
    assert hidden > window  # 0.8 of the reduction, behind 2/3 of one micro-batch's compute
    text = next(w for w in e.warnings if "data-parallel gradient reduction" in w)
    assert f"counted {hidden:.3g} s hidden" in text and f"about {window:.3g} s" in text
    assert f"up to {hidden - window:.3g} s more" in text
    step = e.step_time_s.value
    assert f"({step:.3g} -> {step + hidden - window:.3g} s)" in text


def test_no_warning_when_the_hidden_part_fits_the_window():
    # one micro-batch a step on the default network: its whole backward is the window
    e = _estimate(1, 25.0)
    assert not any("data-parallel gradient reduction" in w for w in e.warnings)
