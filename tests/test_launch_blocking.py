"""CUDA_LAUNCH_BLOCKING=1 (Training.cuda_launch_blocking): each launch returns only when its
kernel has run, so the host's issuing and the GPU's running of the operators add up and no
collective runs beside compute."""

from __future__ import annotations

import pytest

from gpuhours.estimate.flops import training_flops
from gpuhours.estimate.memory import training_memory
from gpuhours.estimate.timing import training_step_time
from gpuhours.setup import Hardware, Training


def _step(blocking: bool, tp: int = 1, micro_batch: int = 1):
    t = Training(model="llama-2-7b", seq_len=512, micro_batch=micro_batch, grad_accum=2,
                 zero_stage=1, tp=tp, cuda_launch_blocking=blocking)
    hw = Hardware(gpu="a100-80gb", num_gpus=16)
    mem = training_memory(t.arch, t, 16)
    return training_step_time(t.arch, t, hw, training_flops(t), mem.trainable_params)


def test_the_host_and_the_gpu_add_up_and_nothing_is_hidden():
    plain, blocking = _step(False), _step(True)
    # the same operators and traffic; only what overlapped changes
    assert blocking.host_s == plain.host_s > 0
    assert blocking.communication_s == plain.communication_s > 0
    # the host's time in full, beside 512 tokens a micro-batch the eager host is partly hidden
    assert blocking.host_exposed_s == blocking.host_s
    assert plain.host_exposed_s < plain.host_s
    assert blocking.communication_exposed_s == blocking.communication_s
    assert plain.communication_exposed_s < plain.communication_s
    added = ((blocking.host_exposed_s - plain.host_exposed_s)
             + (blocking.communication_exposed_s - plain.communication_exposed_s)
             + (blocking.optimizer_s - plain.optimizer_s))
    assert blocking.step_time_s - plain.step_time_s == pytest.approx(added)
    assert blocking.optimizer_s >= plain.optimizer_s


def test_with_tensor_parallelism_every_collective_is_exposed():
    st = _step(True, tp=2)
    assert st.collectives, "a tensor-parallel layout has collectives"
    for c in st.collectives:
        assert c.exposed_s == c.seconds, c.name
