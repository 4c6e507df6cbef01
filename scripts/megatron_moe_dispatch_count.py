"""Count the device operators of Megatron-Core's TopKRouter and MoEAlltoAllTokenDispatcher
(unfused permute) by running them on CPU: the data behind host.py's MEGATRON_MOE_ALLTOALL_*.

Usage (a Megatron-Core checkout at d98e8a64 on the path, this repo's src beside it):

    git -C <Megatron-LM> archive d98e8a64 megatron/core | tar -x -C /tmp/mcore
    PYTHONPATH=/tmp/mcore:src python scripts/megatron_moe_dispatch_count.py OUT.json

Each configuration runs the router and the dispatcher's seven steps (dispatch_preprocess,
token_dispatch, dispatch_postprocess, combine_preprocess, token_combine, combine_postprocess)
on expert-parallel ranks of a gloo group (EP 2, or 1), in bf16 with the router's dtype as
given, and counts forward and backward with gpuhours.torchkit.ops.count_ops. CUDA's streams
and events are replaced by stand-ins that do nothing but count the event synchronisations;
maybe_move_tensor_to_cpu (its non-blocking device-to-host copies, one operator each on CUDA)
is replaced by a counter, since the tensors already sit on the CPU. The experts are replaced
by one stand-in (the tokens times the permuted probs, cast to the tokens' dtype) and the
normed input by `x * 1`: their operators are in the counts and are listed in the output
("stand_in") for the reader to take off. Transformer Engine is not installed, so the router's
gating takes RouterGatingLinearFunction's torch.mm path (its path in fp64 on a GPU too) and
the permute its unfused path; the fused ones are counted by hand in host.py.
"""

from __future__ import annotations

import json
import os
import sys
import types
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

#: (name, EP ranks, experts, top-k, moe_router_dtype)
CONFIGS = [
    ("ep2_local4_fp64", 2, 8, 2, "fp64"),
    ("ep2_local1_fp64", 2, 2, 2, "fp64"),
    ("ep1_local4_fp64", 1, 4, 2, "fp64"),
    ("ep2_local4_fp32", 2, 8, 2, "fp32"),
    ("ep2_local4_none", 2, 8, 2, None),
]
#: operators of the stand-ins inside the counted forward and backward: x * 1 (mul; backward
#: mul), the experts' cast and product (forward _to_copy, mul; backward two muls, the
#: broadcast's sum, the cast's _to_copy)
STAND_IN = {"forward": {"aten.mul": 2, "aten._to_copy": 1},
            "backward": {"aten.mul": 3, "aten.sum": 1, "aten._to_copy": 1}}


# CUDA's stream, event and stream context as Megatron-Core's dispatcher uses them, stood in on
# the CPU (scripts/bench_megatron_host_ops.py uses them too); an event counts its waits
class CpuStream:
    def wait_stream(self, other: Any) -> None:
        pass

    def record_event(self) -> CpuEvent:
        return CpuEvent()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CpuStream)

    def __hash__(self) -> int:
        return 0


class CpuEvent:
    synchronized = 0

    def synchronize(self) -> None:
        CpuEvent.synchronized += 1


class CpuStreamContext:
    def __init__(self, stream: Any) -> None:
        pass

    def __enter__(self) -> CpuStreamContext:
        return self

    def __exit__(self, *exc: Any) -> bool:
        return False


def route_dispatch_combine(router: Any, dispatcher: Any, h: Any) -> Any:
    """A MoE layer's routing around its experts, as Megatron-Core's MoELayer calls it (the
    experts stood in by the probabilities' scale): the router, the dispatcher's three dispatch
    steps and its three combine steps; returns the combined output."""
    probs, routing_map = router(h)
    tokens, p = dispatcher.dispatch_preprocess(h, routing_map, probs)
    tokens, p = dispatcher.token_dispatch(tokens, p)
    tokens, _, p = dispatcher.dispatch_postprocess(tokens, p)
    y = tokens * p.unsqueeze(-1).to(tokens.dtype)
    y = dispatcher.combine_preprocess(y)
    y = dispatcher.token_combine(y)
    return dispatcher.combine_postprocess(y)


def _worker(rank: int, world: int, cfg: dict[str, Any], out: str) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(cfg["port"])
    # paged_stash.py imports triton at module level; nothing here runs it
    stub = types.ModuleType("megatron.core.transformer.moe.ops.paged_stash")
    stub.GLOBAL_BLOCK_SIZE = 1024  # type: ignore[attr-defined]
    stub.paged_stash_copy_kernel = stub.paged_stash_pop_kernel = None  # type: ignore[attr-defined]
    sys.modules[stub.__name__] = stub
    dist.init_process_group("gloo", rank=rank, world_size=world)
    import megatron.core.transformer.moe.token_dispatcher as td
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.transformer.moe.router import TopKRouter
    from megatron.core.transformer.transformer_config import TransformerConfig

    from gpuhours.torchkit.ops import count_ops

    stream = CpuStream()
    torch.cuda.Stream = lambda *a, **k: stream  # type: ignore[assignment,misc]
    torch.cuda.current_stream = lambda *a, **k: stream  # type: ignore[assignment]
    torch.cuda.stream = CpuStreamContext  # type: ignore[assignment]
    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment,return-value]
    moved = [0]

    def to_host(tensor: Any, as_numpy: bool = False, record_stream: bool = False) -> Any:
        if torch.is_tensor(tensor):  # one non-blocking copy to the host on CUDA
            moved[0] += 1
            return tensor.numpy() if as_numpy else tensor
        return tensor

    td.maybe_move_tensor_to_cpu = to_host
    singles = [dist.new_group([r]) for r in range(world)]
    pgc = ProcessGroupCollection()
    for name in ("tp", "cp", "tp_cp", "expt_tp"):
        setattr(pgc, name, singles[rank])
    for name in ("ep", "tp_ep", "tp_dp_cp"):
        setattr(pgc, name, dist.group.WORLD)
    experts, topk = cfg["experts"], cfg["topk"]
    config = TransformerConfig(
        num_layers=1, hidden_size=64, num_attention_heads=4, num_moe_experts=experts,
        moe_router_topk=topk, moe_token_dispatcher_type="alltoall",
        moe_router_dtype=cfg["router_dtype"], moe_permute_fusion=False,
        moe_router_load_balancing_type="none", moe_aux_loss_coeff=0.0,
        expert_model_parallel_size=world, params_dtype=torch.bfloat16, bf16=True,
        add_bias_linear=False, moe_grouped_gemm=True, use_cpu_initialization=True)
    torch.manual_seed(1234 + rank)
    router = TopKRouter(config=config, pg_collection=pgc)
    router.weight.requires_grad_(False)  # NeMo-RL's freeze_moe_router
    router.set_layer_number(1)
    local = experts // world
    dispatcher = td.MoEAlltoAllTokenDispatcher(
        local, list(range(rank * local, (rank + 1) * local)), config=config, pg_collection=pgc)
    x = torch.randn(32, 1, 64, dtype=torch.bfloat16, requires_grad=True)
    held: dict[str, torch.Tensor] = {}

    def forward() -> None:
        held["y"] = route_dispatch_combine(router, dispatcher, x * 1)

    fwd = count_ops(forward)
    synced = CpuEvent.synchronized
    grad = torch.ones_like(held["y"])
    bwd = count_ops(lambda: held["y"].backward(grad))
    if rank == 0:
        with open(out, "w") as fh:
            json.dump({"forward": dict(fwd), "backward": dict(bwd), "dtoh_copies": moved[0],
                       "event_synchronize": synced, "sync_point": dispatcher.cuda_sync_point},
                      fh, sort_keys=True)
    dist.destroy_process_group()


def main(out: str) -> None:
    results: dict[str, Any] = {
        "source": "NVIDIA/Megatron-LM@d98e8a64 megatron/core/transformer/moe/{router,"
                  f"token_dispatcher,moe_utils}}.py on CPU (torch {torch.__version__}, gloo), "
                  "scripts/megatron_moe_dispatch_count.py",
        "stand_in": STAND_IN, "configs": {}}
    for i, (name, ep, experts, topk, dtype) in enumerate(CONFIGS):
        cfg = {"ep": ep, "experts": experts, "topk": topk, "router_dtype": dtype,
               "port": 29700 + i}
        part = f"{out}.{name}"
        mp.spawn(_worker, args=(ep, cfg, part), nprocs=ep, join=True)
        with open(part) as fh:
            results["configs"][name] = {**cfg, **json.load(fh)}
        os.remove(part)
        results["configs"][name].pop("port")
    with open(out, "w") as fh:
        json.dump(results, fh, indent=1, sort_keys=True)
        fh.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
