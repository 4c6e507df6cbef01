"""Measure the host's time per operator of Megatron-Core's plain tensor code against
transformers' eager decoder layer, on one CPU: the data behind
assumptions.MEGATRON_MOE_HOST_OP_RATIO (a benchmark, not a test).

Usage (a Megatron-Core checkout at d98e8a64 on the path, this repo's src beside it):

    git -C <Megatron-LM> archive d98e8a64 megatron/core | tar -x -C /tmp/mcore
    PYTHONPATH=/tmp/mcore:src python scripts/bench_megatron_host_ops.py OUT.json

What runs, each forward and backward at sizes small enough that the kernels are trivial and the
time is the host's (Python, module calls, the dispatcher, autograd):

- ``eager``: transformers' Qwen2DecoderLayer and LlamaDecoderLayer (sdpa attention) with fp32
  weights under CPU autocast to bf16: the kind of layer assumptions.HOST_S_PER_OP was fitted on
  (bench's trainer, bf16-mixed, assumptions.OPS_PER_LAYER["autocast"]).
- ``router_dispatch``: Megatron-Core's TopKRouter and MoEAlltoAllTokenDispatcher (unfused
  permute, EP 1 on a one-rank gloo group, 4 experts, top-2) as
  scripts/megatron_moe_dispatch_count.py runs them: the router and the dispatcher's steps, with
  the experts replaced by one product. EP 1 keeps gloo's collectives (a CPU all-to-all, nothing
  like NCCL's launch) out of the timing. The router in fp64 (NeMo-RL's setting) and in the
  input's dtype (Megatron-Core's default), frozen as NeMo-RL freezes it.
- ``mcore_layer``: Megatron-Core's TransformerLayer with the local (non-Transformer-Engine) spec
  (gpt_layer_specs.get_gpt_layer_local_spec: ColumnParallelLinear/RowParallelLinear at TP 1,
  DotProductAttention, torch RMSNorm, unfused rotary and SwiGLU), bf16 weights as
  Float16Module holds them. Its torch.rms_norm runs ATen's composite on CPU (six operators per
  call where CUDA has one fused kernel), so this row holds more cheap operators per Python call
  than a GPU run would: read it as a lower bound on its per-operator time.

Each is timed over repeated calls (one thread; after warm-up; the fastest of several repeats
and of ROUNDS interleaved rounds, the machine being shared) and its operators counted once
with gpuhours.torchkit.ops.count_ops, as the fitted count was. A ``floor`` row times a bare
torch.add from Python (about 2 us here): what every operator pays for Python to C++, the
dispatcher and a trivial CPU kernel. The per-operator time on this CPU includes each trivial
CPU kernel and no CUDA launch; on a GPU host each operator adds a cudaLaunchKernel-class call
that is the same for both kinds of code: assumptions.MEGATRON_MOE_HOST_OP_RATIO applies the
measured ratio to the host-side part only (estimate/host.py megatron_moe_host_op_weight, with
assumptions.CUDA_LAUNCH_HOST_S).

Why not subtract an ATen-level replay of the same operators (to keep only the Python above
them): calling an OpOverload from Python costs about as much per call here as the whole eager
operator, a crossing the live code pays once per torch function, not once per operator; the
subtraction is biased low (the eager layer came out at about 2 us per operator above
ATen) and was dropped.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
import types
from collections.abc import Callable
from typing import Any

import torch

#: timed calls per repeat, repeats, warm-up calls
CALLS, REPEATS, WARMUP = 40, 15, 10
#: (tokens, hidden) sizes; two, to show how much of the time is the CPU kernels' own
SIZES = [(8, 16), (16, 32)]
#: rounds of the whole set, interleaved (the machine is shared: the minimum over rounds)
ROUNDS = 3


def _time(step: Callable[[], object]) -> dict[str, float]:
    for _ in range(WARMUP):
        step()
    per_call = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(CALLS):
            step()
        per_call.append((time.perf_counter() - start) / CALLS)
    return {"min_s": min(per_call), "median_s": statistics.median(per_call)}


def _row(step: Callable[[], object], **info: Any) -> dict[str, Any]:
    from gpuhours.torchkit.ops import count_dispatched, count_ops

    ops = count_ops(step)
    n = sum(ops.values())
    timed = _time(step)
    return {**info, "ops": n, "dispatched": count_dispatched(step), "by_op": dict(ops),
            **timed, "us_per_op_min": timed["min_s"] / n * 1e6,
            "us_per_op_median": timed["median_s"] / n * 1e6}


def floor_row(tokens: int, hidden: int, dtype: torch.dtype) -> dict[str, Any]:
    """The floor every operator pays on this host: one torch.add of two small tensors from
    Python, no module, no autograd (Python to C++, the dispatcher, the tiny CPU kernel)."""
    x = torch.randn(tokens, hidden).to(dtype)
    y = torch.randn(tokens, hidden).to(dtype)

    def step() -> None:
        for _ in range(100):
            torch.add(x, y)

    return _row(step, kind="floor", tokens=tokens, hidden=hidden, dtype=str(dtype))


def eager_rows(tokens: int, hidden: int, bf16: bool) -> list[dict[str, Any]]:
    from transformers import LlamaConfig, Qwen2Config
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding
    from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer, Qwen2RotaryEmbedding

    rows = []
    for name, cfg_cls, layer_cls, rope_cls in (
            ("qwen2", Qwen2Config, Qwen2DecoderLayer, Qwen2RotaryEmbedding),
            ("llama", LlamaConfig, LlamaDecoderLayer, LlamaRotaryEmbedding)):
        cfg = cfg_cls(hidden_size=hidden, intermediate_size=2 * hidden, num_attention_heads=4,
                      num_key_value_heads=2, num_hidden_layers=1, vocab_size=128,
                      attn_implementation="sdpa")
        torch.manual_seed(0)
        layer = layer_cls(cfg, layer_idx=0)
        layer.train()
        x = torch.randn(1, tokens, hidden, requires_grad=True)
        pos = torch.arange(tokens)[None]
        pe = rope_cls(cfg)(x, pos)

        def step(layer: Any = layer, x: Any = x, pe: Any = pe) -> None:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                out = layer(x, position_embeddings=pe, attention_mask=None)
            out = out[0] if isinstance(out, tuple) else out
            out.backward(torch.ones_like(out))

        rows.append(_row(step, kind="eager", model=name, tokens=tokens, hidden=hidden,
                         precision="bf16 autocast" if bf16 else "fp32"))
    return rows


def _megatron_setup() -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29831")
    # paged_stash.py imports triton at module level; nothing here runs it
    stub = types.ModuleType("megatron.core.transformer.moe.ops.paged_stash")
    stub.GLOBAL_BLOCK_SIZE = 1024  # type: ignore[attr-defined]
    stub.paged_stash_copy_kernel = stub.paged_stash_pop_kernel = None  # type: ignore[attr-defined]
    sys.modules[stub.__name__] = stub
    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment,return-value]
    import torch.distributed as dist
    dist.init_process_group("gloo", rank=0, world_size=1)
    from megatron.core import parallel_state

    parallel_state.initialize_model_parallel(1, 1)
    # the model-parallel RNG tracker forks CUDA's generator around attention dropout: the CPU
    # generator's state stands in (the same get, set and check per fork)
    import megatron.core.tensor_parallel.random as rng

    rng._get_cuda_rng_state = lambda *a, **k: torch.get_rng_state()
    rng._set_cuda_rng_state = lambda state, *a, **k: torch.set_rng_state(state)
    rng.get_cuda_rng_tracker().states_["model-parallel-rng"] = torch.get_rng_state()


def router_dispatch_rows(tokens: int, hidden: int, bf16: bool) -> list[dict[str, Any]]:
    import megatron.core.transformer.moe.token_dispatcher as td
    import torch.distributed as dist
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.transformer.moe.router import TopKRouter
    from megatron.core.transformer.transformer_config import TransformerConfig

    from megatron_moe_dispatch_count import CpuStream, CpuStreamContext, route_dispatch_combine

    stream = CpuStream()
    torch.cuda.Stream = lambda *a, **k: stream  # type: ignore[assignment,misc]
    torch.cuda.current_stream = lambda *a, **k: stream  # type: ignore[assignment]
    torch.cuda.stream = CpuStreamContext  # type: ignore[assignment]

    def to_host(tensor: Any, as_numpy: bool = False, record_stream: bool = False) -> Any:
        if torch.is_tensor(tensor):  # a non-blocking copy to the host on CUDA
            return tensor.numpy() if as_numpy else tensor
        return tensor

    td.maybe_move_tensor_to_cpu = to_host
    pgc = ProcessGroupCollection()
    for name in ("tp", "cp", "tp_cp", "expt_tp", "ep", "tp_ep", "tp_dp_cp"):
        setattr(pgc, name, dist.group.WORLD)
    dtype_ = torch.bfloat16 if bf16 else torch.float32
    rows = []
    for dtype in ("fp64", None):
        config = TransformerConfig(
            num_layers=1, hidden_size=hidden, num_attention_heads=4, num_moe_experts=4,
            moe_router_topk=2, moe_token_dispatcher_type="alltoall", moe_router_dtype=dtype,
            moe_permute_fusion=False, moe_router_load_balancing_type="none",
            moe_aux_loss_coeff=0.0, expert_model_parallel_size=1, params_dtype=dtype_,
            bf16=bf16, add_bias_linear=False, moe_grouped_gemm=True,
            use_cpu_initialization=True)
        torch.manual_seed(1234)
        router = TopKRouter(config=config, pg_collection=pgc)
        router.weight.requires_grad_(False)  # NeMo-RL's freeze_moe_router
        router.set_layer_number(1)
        dispatcher = td.MoEAlltoAllTokenDispatcher(4, [0, 1, 2, 3], config=config,
                                                   pg_collection=pgc)
        x = torch.randn(tokens, 1, hidden, dtype=dtype_, requires_grad=True)

        def step(router: Any = router, dispatcher: Any = dispatcher, x: Any = x) -> None:
            y = route_dispatch_combine(router, dispatcher, x * 1)
            y.backward(torch.ones_like(y))

        rows.append(_row(step, kind="router_dispatch", router_dtype=dtype or ("bf16" if bf16 else "fp32"),
                         precision="bf16" if bf16 else "fp32",
                         tokens=tokens, hidden=hidden, experts=4, topk=2, ep=1))
    return rows


def mcore_layer_rows(tokens: int, hidden: int, bf16: bool) -> list[dict[str, Any]]:
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.spec_utils import build_module
    from megatron.core.transformer.transformer_config import TransformerConfig

    dtype_ = torch.bfloat16 if bf16 else torch.float32
    config = TransformerConfig(
        num_layers=1, hidden_size=hidden, num_attention_heads=4, num_query_groups=2,
        ffn_hidden_size=2 * hidden, gated_linear_unit=True,
        activation_func=torch.nn.functional.silu, normalization="RMSNorm",
        add_bias_linear=False, params_dtype=dtype_, bf16=bf16,
        use_cpu_initialization=True, hidden_dropout=0.0, attention_dropout=0.0,
        bias_dropout_fusion=False, apply_rope_fusion=False, bias_activation_fusion=False,
        gradient_accumulation_fusion=False)
    torch.manual_seed(0)
    layer = build_module(get_gpt_layer_local_spec(normalization="RMSNorm"), config=config,
                         layer_number=1)
    pe = RotaryEmbedding(kv_channels=hidden // 4, rotary_percent=1.0,
                         use_cpu_initialization=True)(tokens)
    # the causal mask as a tensor: get_default_causal_mask builds it on "cuda"
    mask = torch.triu(torch.ones(tokens, tokens), diagonal=1).bool()[None, None]
    x = torch.randn(tokens, 1, hidden, dtype=dtype_, requires_grad=True)

    def step() -> None:
        out = layer(x, attention_mask=mask, rotary_pos_emb=pe)
        out = out[0] if isinstance(out, tuple) else out
        out.backward(torch.ones_like(out))

    return [_row(step, kind="mcore_layer", spec="local", tokens=tokens, hidden=hidden,
                 precision="bf16 weights" if bf16 else "fp32")]


def main(out: str) -> None:
    import warnings

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    _megatron_setup()
    rows: list[dict[str, Any]] = []
    for round_ in range(ROUNDS):
        for tokens, hidden in SIZES:
            for bf16 in (True, False):
                batch = [floor_row(tokens, hidden, torch.bfloat16 if bf16 else torch.float32)]
                batch += eager_rows(tokens, hidden, bf16)
                batch += router_dispatch_rows(tokens, hidden, bf16)
                batch += mcore_layer_rows(tokens, hidden, bf16)
                for r in batch:
                    r["round"] = round_
                    print(f"{r['kind']:16s} {_label(r):22s} {r['tokens']:3d}x{r['hidden']:3d} "
                          f"ops {r['ops']:4d} {r['us_per_op_min']:6.2f} us/op (min) "
                          f"{r['us_per_op_median']:6.2f} (median)", flush=True)
                rows += batch
    import transformers

    result = {
        "source": "scripts/bench_megatron_host_ops.py; NVIDIA/Megatron-LM@d98e8a64 "
                  "megatron/core (router.py, token_dispatcher.py, moe_utils.py, "
                  "transformer_layer.py, gpt_layer_specs.py local spec); transformers "
                  f"{transformers.__version__} Qwen2/Llama decoder layers",
        "machine": f"{platform.processor() or platform.machine()}, "
                   f"{_cpu_model()}, {os.cpu_count()} cores (shared), 1 torch thread",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "torch": torch.__version__, "python": platform.python_version(),
        "timing": f"{REPEATS} repeats of {CALLS} forward+backward calls after {WARMUP} "
                  "warm-up calls; min and median per call",
        "rows": rows}
    with open(out, "w") as fh:
        json.dump(result, fh, indent=1, sort_keys=True)
        fh.write("\n")
    import torch.distributed as dist
    dist.destroy_process_group()


def _label(r: dict[str, Any]) -> str:
    return " ".join(str(r[k]) for k in ("model", "router_dtype", "spec", "precision", "dtype")
                    if k in r)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


if __name__ == "__main__":
    main(sys.argv[1])
