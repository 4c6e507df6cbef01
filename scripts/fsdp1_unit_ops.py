"""Count the device operators PyTorch FSDP1 adds per unit per micro-batch (issue 13).

Runs on CPU with gloo and 2 ranks (`torchrun --nproc_per_node 2 scripts/fsdp1_unit_ops.py`):
a stack of small pre-norm layers, each its own FullyShardedDataParallel unit (FULL_SHARD,
MixedPrecision bf16 params / fp32 reduce, use_orig_params False, forward_prefetch False: EasyR1
@8460e817 verl/workers/fsdp_workers.py), each layer checkpointed (non-reentrant), one
micro-batch after two warm ones (so gradients accumulate). It prints the operators the wrapped
model dispatches beyond the plain one (gpuhours.torchkit.ops.count_ops) for L and L + 4 layers:
their difference / 4 is FSDP1's per unit. A count, not a timing.
"""

from __future__ import annotations

import os
from collections import Counter

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel, MixedPrecision, ShardingStrategy
from torch.distributed.fsdp.wrap import ModuleWrapPolicy
from torch.utils.checkpoint import checkpoint

from gpuhours.torchkit.ops import count_ops

WIDTH = 64


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.q, self.o = nn.Linear(WIDTH, WIDTH), nn.Linear(WIDTH, WIDTH, bias=False)
        self.up = nn.Linear(WIDTH, 2 * WIDTH, bias=False)
        self.down = nn.Linear(2 * WIDTH, WIDTH, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.o(self.q(self.n1(x)))
        return x + self.down(self.up(self.n2(x)).relu())


class Net(nn.Module):
    def __init__(self, layers: int) -> None:
        super().__init__()
        self.emb = nn.Linear(WIDTH, WIDTH)
        self.layers = nn.ModuleList(Layer() for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.emb(x)
        for layer in self.layers:
            x = checkpoint(layer.__call__, x, use_reentrant=False)
        return x


def ops(layers: int, wrapped: bool) -> Counter[str]:
    torch.manual_seed(0)
    net: nn.Module = Net(layers)
    if wrapped:
        net = FullyShardedDataParallel(
            net, sharding_strategy=ShardingStrategy.FULL_SHARD,
            auto_wrap_policy=ModuleWrapPolicy({Layer}),
            mixed_precision=MixedPrecision(param_dtype=torch.bfloat16,
                                           reduce_dtype=torch.float32,
                                           buffer_dtype=torch.float32),
            device_id=torch.device("cpu"), forward_prefetch=False, use_orig_params=False)
    x = torch.randn(2, 8, WIDTH)

    def step() -> None:
        net(x).float().sum().backward()

    step()
    step()
    return count_ops(step)


def main() -> None:
    dist.init_process_group("gloo")
    base = int(os.environ.get("LAYERS", "2"))
    extra = {n: ops(n, True) - ops(n, False) for n in (base, base + 4)}
    fewer = {n: ops(n, False) - ops(n, True) for n in (base, base + 4)}
    if dist.get_rank() == 0:
        per_unit = Counter({k: (extra[base + 4][k] - extra[base][k]) / 4
                            for k in extra[base + 4]})
        removed = Counter({k: (fewer[base + 4][k] - fewer[base][k]) / 4
                           for k in fewer[base + 4]})
        print("added per unit per micro-batch:", dict(per_unit))
        print("removed per unit per micro-batch:", dict(removed))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
