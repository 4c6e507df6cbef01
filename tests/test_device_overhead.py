"""estimate/device_overhead.py: what a device-level reading holds beyond torch's reserved
memory, by stated stack (issue 14). Hand counts from the sources named in the module and in
scripts/gpuhours_dev/validation/data/device_overhead_sources.csv."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from gpuhours.estimate import assumptions as A
from gpuhours.estimate.device_overhead import (
    CUBLAS_DEFAULT_POOL_BYTES,
    DEFAULT_STACK,
    EAGER_CONTEXT_A100_BYTES,
    EAGER_CONTEXT_BYTES,
    LAZY_CONTEXT_BYTES,
    NCCL_LL128_BYTES,
    NCCL_LL_BYTES,
    NCCL_SIMPLE_BYTES,
    SoftwareStack,
    device_level_bytes,
    device_overhead,
    module_loading,
    nccl_buffer_bytes,
)

MiB = 2**20
SOURCES = (Path(__file__).parents[1] / "scripts" / "gpuhours_dev" / "validation" / "data"
           / "device_overhead_sources.csv")


def _stack(torch: tuple[int, int], cuda: tuple[int, int], **kw: object) -> SoftwareStack:
    return SoftwareStack("test", torch, cuda, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("torch", "cuda", "loading"), [
    ((2, 0), (11, 8), "lazy"),   # Qwen's README stack: torch sets LAZY from 1.13, CUDA 11.7+
    ((1, 13), (11, 7), "lazy"),  # the first release with the default (pytorch#86509)
    ((1, 12), (11, 7), "eager"),  # CUDA supports it, torch does not set it, 11.7's default eager
    ((1, 12), (12, 2), "lazy"),  # CUDA 12.2+: lazy by default whoever sets nothing
    ((2, 0), (11, 6), "eager"),  # before 11.7 there is no lazy loading
    ((1, 10), (11, 3), "eager"),  # the transformers guide's era (V100, January 2022)
])
def test_module_loading_by_stack(torch, cuda, loading) -> None:
    assert module_loading(_stack(torch, cuda))[0] == loading


def test_a_driver_before_lazy_loading_loads_eagerly() -> None:
    """CUDA 11's minor version compatibility runs an 11.8 runtime on R450+ drivers; lazy
    loading came with 11.7 (R515): on R470 the stack loads eagerly, 1343 MiB."""
    s = _stack((2, 0), (11, 8), driver_branch=470)
    assert module_loading(s)[0] == "eager"
    assert device_level_bytes(s) == EAGER_CONTEXT_BYTES
    assert module_loading(_stack((2, 0), (11, 8), driver_branch=525))[0] == "lazy"


def test_a_stated_environment_variable_wins() -> None:
    s = _stack((2, 4), (12, 4), module_loading="eager")
    assert module_loading(s)[0] == "eager"
    assert device_level_bytes(s) == EAGER_CONTEXT_BYTES == 1343 * MiB


def test_default_stack_is_the_estimators_context_assumption() -> None:
    """The default (a lazily loading CUDA 12 stack, one rank) keeps the 0.5 GiB the estimate
    has printed as the CUDA context: nothing else outside the allocator."""
    d = device_overhead(DEFAULT_STACK)
    assert d.module_loading == "lazy"
    assert d.total_bytes == A.CUDA_CONTEXT_BYTES.value == 2**29
    assert d.cublas_workspace_bytes == 0 and d.nccl_buffer_bytes == 0


def test_training_memory_takes_the_default_stacks_figure(tiny) -> None:
    from gpuhours.estimate.memory import training_memory
    from gpuhours.setup import Training

    m = training_memory(tiny, Training(arch=tiny))
    assert m.cuda_context_bytes == device_level_bytes(DEFAULT_STACK)
    assert m.total_bytes - m.reserved_bytes == pytest.approx(0.5 * 2**30)


def test_old_torch_adds_cublas_pool_outside_the_allocator() -> None:
    """torch before 2.0: cuBLAS's own 4 MiB pool per handle, two handles (the forward's thread
    and autograd's device thread); from 2.0 the workspace is in memory_reserved."""
    old = device_overhead(_stack((1, 10), (11, 3)))
    assert old.cublas_workspace_bytes == 2 * 4 * MiB
    assert old.total_bytes == 1343 * MiB + 8 * MiB
    assert device_overhead(_stack((2, 0), (11, 8))).cublas_workspace_bytes == 0


def test_nccl_buffers_hand_count() -> None:
    """Per connection LL 8x512x8x16 = 524,288, LL128 120x640x8x8 = 4,915,200, Simple 4 MiB
    (NCCL 2.14.3 init.cc): 9,633,792 bytes; 24 channels on a ring (one receive peer each)
    = 231,211,008 bytes; one rank connects nothing."""
    assert NCCL_LL_BYTES + NCCL_LL128_BYTES + NCCL_SIMPLE_BYTES == 9_633_792
    assert nccl_buffer_bytes(8, 24) == 231_211_008
    assert nccl_buffer_bytes(8, 24, recv_peers=2) == 2 * 231_211_008
    assert nccl_buffer_bytes(1, 24) == 0.0
    with pytest.raises(ValueError, match="channel count"):
        nccl_buffer_bytes(2, None)
    many = _stack((2, 1), (12, 1), distributed="nccl", world_size=8, nccl_channels=24)
    assert device_level_bytes(many) == LAZY_CONTEXT_BYTES + 231_211_008
    one = _stack((2, 0), (11, 8), distributed="nccl", world_size=1)
    assert device_level_bytes(one) == LAZY_CONTEXT_BYTES
    assert any("one rank connects no channels" in line for line in device_overhead(one).basis)


def test_constants_match_their_published_rows() -> None:
    """Each constant equals the figure of the source row that set it; the lazy figure sits
    above every published lazy context (they are taken before a training step's kernels load)."""
    with SOURCES.open() as f:
        rows = list(csv.DictReader(f))
    by_use = {r["used_for"]: r for r in rows}
    assert int(by_use["EAGER_CONTEXT_BYTES"]["value"]) * MiB == EAGER_CONTEXT_BYTES
    assert int(by_use["EAGER_CONTEXT_A100_BYTES"]["value"]) * MiB == EAGER_CONTEXT_A100_BYTES
    assert int(by_use["CUBLAS_DEFAULT_POOL_BYTES"]["value"]) * MiB == CUBLAS_DEFAULT_POOL_BYTES
    assert int(by_use["NCCL_LL_BYTES"]["value"]) == NCCL_LL_BYTES
    assert int(by_use["NCCL_LL128_BYTES"]["value"]) == NCCL_LL128_BYTES
    assert int(by_use["NCCL_SIMPLE_BYTES"]["value"]) == NCCL_SIMPLE_BYTES
    unit = {"bytes": 1, "MiB": MiB, "MB (approximate)": 10**6}
    lazy = [int(r["value"]) * unit[r["unit"]] for r in rows if r["quantity"] == "lazy_context"]
    assert len(lazy) == 4 and max(lazy) < LAZY_CONTEXT_BYTES
    assert all(r["source"] for r in rows)
