"""vLLM's async scheduling (Generation.async_scheduling; its default from vLLM 0.14.0,
vllm#27614): the engine's host step beside the GPU's, so a decode step takes the longer of the
two where it took their sum."""

from __future__ import annotations

import pytest

from gpuhours import catalog
from gpuhours.errors import InputError
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.generation import estimate_generation
from gpuhours.setup import Generation


def _decode_step_s(gpu: str, **fields) -> tuple[float, float]:
    g = Generation.model_validate({"model": "qwen3-30b-a3b", "prompt_tokens": 128,
                                   "output_tokens": 256, "batch": 64, **fields})
    e = estimate_generation(g, catalog.gpu(gpu))
    return e.decode_step_s_first, e.host_step_s


def test_the_host_step_overlaps_the_gpu_by_hand():
    for gpu in ("h100-sxm", "gb200"):
        serial, host = _decode_step_s(gpu)
        overlapped, host_again = _decode_step_s(gpu, async_scheduling=True)
        assert host_again == host
        # serial: host + device; overlapped: max(host, device), the device's part the same
        device = serial - host
        assert overlapped == pytest.approx(max(host, device))
    # the Grace host's engine step is 2.75x the x86 one (catalog gb200 host_op_time_ratio)
    assert _decode_step_s("gb200")[1] == pytest.approx(2.75 * A.DECODE_HOST_STEP_S["vllm"].value)


def test_async_scheduling_is_vllm_v1s():
    with pytest.raises(InputError, match="async scheduling"):
        Generation.model_validate({"model": "qwen3-30b-a3b", "prompt_tokens": 128,
                                   "output_tokens": 256, "engine": "sglang",
                                   "async_scheduling": True})
