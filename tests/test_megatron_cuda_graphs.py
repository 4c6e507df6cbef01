"""CUDA graphs on the megatron kernel path (Training.cuda_graph_scope, estimate/host.py): the
host's operators per micro-batch counted by hand for each Megatron-Core scope, and the setups
refused. Kernel counts per layer part are host.py's (MEGATRON_ATTN_OPS 7 + 11, MEGATRON_MLP_OPS
5 + 8); each graphed layer replays one forward and one backward graph."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.errors import FieldError
from gpuhours.estimate.host import host_ops_per_micro_batch
from gpuhours.resolve import resolve_model
from gpuhours.setup import Training


def _training(model: str, **kw: object) -> Training:
    arch, _ = resolve_model(model)
    return Training.model_validate(dict(arch=arch, model=model, kernels="megatron", **kw))


def _ops(t: Training) -> float:
    return host_ops_per_micro_batch(t.arch, t)


def test_the_layer_parts_hold_every_kernel_of_the_layer() -> None:
    # the two parts were counted kernel by kernel apart from the layer's total (host.py)
    from gpuhours.estimate import host

    assert (host.MEGATRON_ATTN_OPS[0] + host.MEGATRON_MLP_OPS[0],
            host.MEGATRON_ATTN_OPS[1] + host.MEGATRON_MLP_OPS[1]) == host.MEGATRON_LAYER_OPS
    assert (host.MEGATRON_FP8_ATTN_OPS[0] + host.MEGATRON_FP8_MLP_OPS[0],
            host.MEGATRON_FP8_ATTN_OPS[1] + host.MEGATRON_FP8_MLP_OPS[1]
            ) == host.MEGATRON_FP8_EXTRA_OPS


def test_dense_scopes_by_hand() -> None:
    # Llama-2-7B (32 layers, no q/k norms), full, bf16. No graphs: 32 x 31 + 32 + 24 = 1048.
    plain = _training("llama-2-7b", precision="bf16")
    assert _ops(plain) == pytest.approx(1048.0)
    # mlp: the MLP's 5 forward and 8 backward kernels become 1 + 1 replays: 32 x (31 - 13 + 2)
    # + 56 = 696
    mlp = plain.model_copy(update={"cuda_graph_scope": ("mlp",)})
    assert _ops(mlp) == pytest.approx(696.0)
    # attn and mlp: the whole layer in one graph each way: 32 x 2 + 56 = 120; "full" the same
    both = plain.model_copy(update={"cuda_graph_scope": ("attn", "mlp")})
    assert _ops(both) == pytest.approx(120.0)
    whole = plain.model_copy(update={"cuda_graph_scope": ("full",)})
    assert _ops(whole) == pytest.approx(120.0)
    # attn alone: 32 x (31 - 18 + 2) + 56 = 536
    attn = plain.model_copy(update={"cuda_graph_scope": ("attn",)})
    assert _ops(attn) == pytest.approx(536.0)


def test_fp8_casts_go_with_their_part() -> None:
    # fp8: per layer 14 + 23 = 37; the MLP graphs 5 + 1 forward (fc2's input cast) and 8 + 2
    # backward (fc1's and fc2's output-gradient casts): 32 x (37 - 16 + 2) + 56 = 792
    t = _training("llama-2-7b", precision="fp8-mixed", cuda_graph_scope="mlp")
    assert _ops(t) == pytest.approx(792.0)


def test_checkpointing_recomputes_the_graphed_forward() -> None:
    # scope mlp, checkpointing: forward 12 - 5 + 1 = 8, backward 19 - 8 + 1 = 12 and the
    # forward again, 8: 32 x 28 + 56 = 952
    t = _training("llama-2-7b", precision="bf16", checkpointing=True, cuda_graph_scope="mlp")
    assert _ops(t) == pytest.approx(952.0)


def test_megatron_bridge_70b_lora_recipe_by_hand() -> None:
    # Llama-3-70B (80 layers), LoRA on linear_qkv and linear_proj (4 + 5 kernels each), bf16,
    # no graphs: per layer 12 + 8 = 20 and 19 + 10 = 29; 80 x 49 + 32 (no head backward) = 3952
    t = _training("llama-3-70b", method="lora", precision="bf16", lora_targets="attention")
    assert _ops(t) == pytest.approx(3952.0)
    # the recipe's scope mlp (llama3_70b_peft_config's gb200 recipe): 80 x (49 - 13 + 2) + 32
    graphed = t.model_copy(update={"cuda_graph_scope": ("mlp",)})
    assert _ops(graphed) == pytest.approx(3072.0)
    # all four targets: fc1's and fc2's adapters (2 x (4 + 5)) go into the MLP's graph:
    # per layer 28 + 39 = 67, less 13 + 18 = 31, plus 2: 80 x 38 + 32 = 3072
    every = graphed.model_copy(update={"lora_targets": "all-linear"})
    assert _ops(every) == pytest.approx(3072.0)


def test_moe_scopes_by_hand() -> None:
    # Qwen3-30B-A3B (48 MoE layers, q and k norms), fused dispatch (EP 1, bf16 router): the
    # dense count 37 a layer and the router and dispatcher's 22 + 14 = 36 (test_host.py's
    # fused case): no graphs, 48 x 73 + 56 = 3560. attn + moe_router + moe_preprocess (the
    # DeepSeek recipes'): attention 7 + 2 norms and 11 + 4, the router's pre-MLP norm 1 and 2
    # and the bf16 router's 11 and 8: 21 and 25 graphed: 48 x (73 - 46 + 2) + 56 = 1448
    t = _training("qwen3-30b-a3b", precision="bf16")
    assert _ops(t) == pytest.approx(3560.0)
    router = t.model_copy(update={"cuda_graph_scope": ("attn", "moe_router", "moe_preprocess")})
    assert _ops(router) == pytest.approx(1448.0)
    # "mlp" is a dense layer's: a model of MoE layers only graphs nothing
    mlp = t.model_copy(update={"cuda_graph_scope": ("mlp",)})
    assert _ops(mlp) == pytest.approx(3560.0)
    # "moe": each MoE layer's MLP (5 + 8) with its router and dispatcher (36):
    # 48 x (73 - 49 + 2) + 56 = 1304
    moe = t.model_copy(update={"cuda_graph_scope": ("moe",)})
    assert _ops(moe) == pytest.approx(1304.0)
    # allgather-unfused (NeMo-RL): per layer 53 + 49 = 102; the router's 15 and 12 join the
    # graph: 9 + 1 + 15 = 25 and 15 + 2 + 12 = 29: 48 x (102 - 54 + 2) + 56 = 2456
    nemo_rl = router.model_copy(update={"moe_dispatch": "allgather-unfused"})
    assert _ops(nemo_rl) == pytest.approx(2456.0)


def test_a_full_iteration_graph_leaves_the_static_copies() -> None:
    # one replay a step over its 4 micro-batches, and 5 input copies each: 5 + 1/4
    t = _training("llama-3-8b", precision="bf16", grad_accum=4,
                  cuda_graph_scope=["full_iteration"])
    assert _ops(t) == pytest.approx(5.25)


def test_cli_scope_reaches_the_host_time() -> None:
    # Llama-2-7B, bf16, one micro-batch, scope mlp: 696 operators x 32 us (an x86 host)
    args = ["estimate", "--model", "llama-2-7b", "--gpu", "h100-sxm", "--batch", "1", "--seq",
            "512", "--precision", "bf16", "--kernels", "megatron", "--cuda-graph-scope", "mlp",
            "--json", "--ignore-memory"]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    host = json.loads(out.output)["step_time_breakdown_s"]["host_s"]["value"]
    assert float(host) == pytest.approx(696 * 32e-6)


@pytest.mark.parametrize(("scope", "says"), [
    ("mlp,full", "full graphs each whole layer"),
    ("full_iteration,attn", "the whole step"),
    ("moe_preprocess", "moe_router"),
    ("moe,moe_router", "moe graphs"),
    ("mlp,mlp", "named twice"),
    ("bogus", "Input should be")])
def test_scopes_megatron_refuses_are_refused(scope: str, says: str) -> None:
    out = CliRunner().invoke(app, ["estimate", "--model", "qwen3-30b-a3b", "--gpu", "h100-sxm",
                                   "--kernels", "megatron", "--cuda-graph-scope", scope])
    assert out.exit_code == 2, out.output
    assert says in out.output and "--cuda-graph-scope" in out.output
    assert "Traceback" not in out.output


def test_graphs_need_the_megatron_path() -> None:
    arch, _ = resolve_model("llama-2-7b")
    with pytest.raises(FieldError) as err:
        Training(arch=arch, cuda_graph_scope=("mlp",))
    assert set(err.value.fields) == {"cuda_graph_scope", "kernels"}
    out = CliRunner().invoke(app, ["estimate", "--model", "llama-2-7b", "--gpu", "h100-sxm",
                                   "--cuda-graph-scope", "mlp"])
    assert out.exit_code == 2, out.output
    assert "--cuda-graph-scope" in out.output and "--kernels" in out.output
    # none named is no graphs
    assert _training("llama-2-7b", cuda_graph_scope="").cuda_graph_scope is None
    assert _training("llama-2-7b", cuda_graph_scope=[]).cuda_graph_scope is None


PLAN = """
project: t
hardware: {{gpu: h100-sxm}}
phases:
  - name: pt
    kind: finetune
    model: qwen-1.8b
    method: full
    precision: bf16
    gpus: 1
    tokens: 1.0e+8
    seq_len: 256
    micro_batch: 1
    grad_accum: 8
    kernels: megatron
{scope}"""


def test_a_plan_phase_sets_the_scope() -> None:
    from gpuhours.plan.budget import evaluate
    from gpuhours.plan.load import parse_plan

    def hours(scope: str) -> float:
        return evaluate(parse_plan(PLAN.format(scope=scope), "t.yaml")).phases[
            0].gpu_hours_per_run

    # host-bound at 256 tokens a micro-batch: a whole-layer graph takes most of the host's work
    assert hours("    cuda_graph_scope: [attn, mlp]\n") < 0.8 * hours("")
