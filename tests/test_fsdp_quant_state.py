"""bitsandbytes' quantisation state under FSDP (estimate/quant.py bnb_quant_state_bytes): the
absmax of each 4-bit linear is a tensor attribute of the module and of its Params4bit
(bitsandbytes 0.43 nn/modules.py: Params4bit._quantize sets `module.quant_state`), not a
parameter or a buffer, so FSDP1's flattening and sharding leave it whole on every rank.

Shown on a real FSDP1 wrap on CPU (torch's fake process group, world size 2, rank 0) with a
stand-in for Linear4bit: a module whose weight is the packed 4-bit data in a 16-bit storage
(quant_storage bf16, as Answer.AI's train.py sets it: 4 weights per element) and whose
`quant_state` is the 8-bit absmax per block of 64 weights. No bitsandbytes here (its 0.43
kernels are CUDA-only); the premise is FSDP's, which this runs."""

from __future__ import annotations

from typing import Any

import pytest

from gpuhours.estimate.quant import bnb_quant_state_bytes


def _wrap(in_features: int, out_features: int) -> tuple[Any, Any, int]:
    torch = pytest.importorskip("torch")
    import torch.distributed as dist
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import ShardingStrategy
    from torch.testing._internal.distributed.fake_pg import FakeStore

    class Packed4bit(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            weights = in_features * out_features
            # 4-bit data, two weights a byte, in a bf16 storage: 4 weights per element
            self.weight = torch.nn.Parameter(
                torch.zeros(weights // 4, 1, dtype=torch.bfloat16), requires_grad=False)
            # the absmax per block of 64 (uint8 under double quantisation)
            self.quant_state = torch.zeros(weights // 64, dtype=torch.uint8)

    model = torch.nn.Sequential(Packed4bit(), Packed4bit())
    states = [m.quant_state for m in model]
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        fsdp = FSDP(model, sharding_strategy=ShardingStrategy.FULL_SHARD,
                    use_orig_params=False, device_id=torch.device("cpu"))
        handle = fsdp._handle
        assert handle is not None
        shard = handle.flat_param.numel()  # after shard(): this rank's chunk
        after = [m.quant_state for m in fsdp.module]
        return states, after, shard
    finally:
        dist.destroy_process_group()


def test_fsdp1_shards_the_packed_weight_not_the_quant_state() -> None:
    in_features, out_features = 256, 512
    before, after, shard = _wrap(in_features, out_features)
    weights = in_features * out_features
    # two linears' packed data, 4 weights per bf16 element, halved over two ranks
    assert shard == 2 * (weights // 4) // 2
    # the absmax is untouched: the same tensors, whole, on this rank
    assert all(a is b for a, b in zip(after, before, strict=True))
    assert [a.numel() for a in after] == [weights // 64] * 2
    # what the estimate counts per rank for them: 1 byte per 64 weights (+ the fp32 constant
    # per 256 blocks that double quantisation adds, not in this stand-in)
    state = bnb_quant_state_bytes(2 * weights, "nf4")
    assert state == pytest.approx(sum(a.numel() for a in after) * (1 + 4 / 256))
