"""Parallel layouts (issue 16): tensor, pipeline, context and expert parallelism, by hand-worked
numbers, the published Megatron-LM throughput, and errors that name the option."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.errors import FieldError
from gpuhours.estimate import parallel as P
from gpuhours.estimate.estimator import estimate_training
from gpuhours.estimate.memory import training_memory
from gpuhours.estimate.params import count_params
from gpuhours.setup import Hardware, Training

runner = CliRunner()


@pytest.mark.parametrize(("pp", "m", "v", "expected"), [
    (1, 8, 1, 0.0),
    (4, 8, 1, 3 / 11),     # (p - 1)/(m + p - 1)
    (4, 8, 2, 3 / 19),     # (p - 1)/(v m + p - 1)
    (8, 1, 1, 7 / 8),      # one micro-batch: every stage but one idles
    (12, 96, 1, 11 / 107),
])
def test_pipeline_bubble_fraction_by_hand(pp, m, v, expected):
    assert P.pipeline_bubble_fraction(pp, m, v) == pytest.approx(expected)


def test_tensor_and_pipeline_parameters_per_gpu_by_hand():
    # Llama 2 70B: d 8192, 80 layers, 64 heads of 128, 8 KV heads, MLP 28672, vocab 32000
    t = Training(model="llama-2-70b", tp=8, pp=4, grad_accum=8)
    d, kv, f, v = 8192, 1024, 28672, 32000
    attention = d * (d + 2 * kv) + d * d
    mlp = 3 * d * f
    per_layer = (attention + mlp) / 8 + 2 * d        # the two RMSNorms stay whole
    last_stage = 20 * per_layer + v * d / 8 + d      # LM head split by vocabulary, final norm
    lay = P.layout_of(8, 4, 1, 1, 1, 64)
    assert lay.dp == 2
    local = P.local_params(t.arch, count_params(t.arch), lay)
    assert local.total == pytest.approx(last_stage)
    # bf16 weights, nothing sharded (ZeRO 0): 2 bytes per parameter this GPU holds
    mem = training_memory(t.arch, t, 64)
    assert mem.weights_bytes == pytest.approx(2 * last_stage)
    assert mem.total_params == count_params(t.arch).total  # the model's count is still reported


def test_zero_shards_over_data_parallel_ranks_only():
    t = Training(model="llama-2-70b", tp=8, pp=2, zero_stage=1, grad_accum=4)
    held = P.local_params(t.arch, count_params(t.arch), P.layout_of(8, 2, 1, 1, 1, 64)).total
    mem = training_memory(t.arch, t, 64)
    # 64 GPUs / (8 x 2) = 4 data-parallel ranks share the AdamW moments (2 x 4 bytes) and the
    # fp32 master weights (4 bytes)
    assert mem.optimizer_bytes == pytest.approx(held * 8 / 4)
    assert mem.master_weights_bytes == pytest.approx(held * 4 / 4)


def test_first_stage_holds_the_micro_batches_in_flight():
    base = dict(model="llama-2-70b", seq_len=4096, tp=8)
    one_stage = training_memory(Training(**base).arch, Training(**base), 64).activations_bytes
    # 1F1B: p micro-batches of L/p layers = all L layers of one micro-batch (Korthikanti sec. 4.2.3)
    t = Training(**base, pp=4, grad_accum=8)
    assert training_memory(t.arch, t, 64).activations_bytes == pytest.approx(one_stage)
    # two micro-batches per step: only two in flight
    t2 = Training(**base, pp=4, grad_accum=2)
    assert training_memory(t2.arch, t2, 64).activations_bytes == pytest.approx(one_stage / 2)
    # interleaved, v = 2: times 1 + (p - 1)/(p v) = 1 + 3/8
    tv = Training(**base, pp=4, grad_accum=8, virtual_stages=2)
    assert training_memory(tv.arch, tv, 64).activations_bytes == pytest.approx(one_stage * 11 / 8)


def test_collective_volumes_by_hand():
    tokens, d, a = 4096, 8192, 2
    # tensor parallelism 8: 4 all-reduces of b s h per layer, 2 (t - 1)/t each
    assert P.tensor_parallel_bytes_per_layer(tokens, d, a, 8) == 4 * 2 * 7 / 8 * tokens * d * a
    assert P.tensor_parallel_bytes_per_layer(tokens, d, a, 8, recompute=True) == (
        6 * 2 * 7 / 8 * tokens * d * a)
    assert P.tensor_parallel_bytes_per_layer(tokens, d, a, 1) == 0
    # pipeline: activations forward and gradients back, split over tp, per model chunk
    assert P.pipeline_p2p_bytes_per_micro_batch(tokens, d, a, 8, 2) == 2 * 2 * tokens * d * a / 8
    # ring attention over 4: K and V chunks of s/4 passed 3 times, 3x for forward + backward
    assert P.context_parallel_bytes_per_layer(tokens, 1024, a, 4, 1) == (
        3 * 3 * (tokens / 4) * 2 * 1024 * a)
    # expert all-to-all over 8, top-2: 4 all-to-alls of 2 copies of each token, 7/8 leave
    assert P.expert_all_to_all_bytes_per_layer(tokens, d, a, 2, 8) == (
        4 * tokens * 2 * d * a * 7 / 8)
    assert P.data_parallel_grad_bytes(1e9, 2, 4) == 2 * 3 / 4 * 1e9 * 2


def test_each_collective_on_its_link():
    t = Training(model="llama-2-70b", seq_len=4096, tp=8, pp=2, grad_accum=16)
    e = estimate_training(t, Hardware(gpu="a100-80gb", num_gpus=64))
    b = e.step_time_breakdown_s
    assert "nvlink" in b["tensor_parallel_collectives_s"].source     # 8 GPUs of one node
    assert "network" in b["pipeline_sends_s"].source                 # stages on other nodes
    assert "network" in b["communication_s"].source                  # dp ranks 16 GPUs apart
    assert b["pipeline_bubble_s"].value > 0
    # a node of 4 GPUs: tensor parallelism over 8 crosses the network and costs more
    small_nodes = estimate_training(t, Hardware(gpu="a100-80gb", num_gpus=64, gpus_per_node=4))
    tp_small = small_nodes.step_time_breakdown_s["tensor_parallel_collectives_s"]
    assert "network" in tp_small.source
    assert tp_small.value > b["tensor_parallel_collectives_s"].value * 5


def test_the_bubble_is_its_share_of_the_step():
    t = Training(model="llama-2-70b", seq_len=4096, tp=8, pp=4, grad_accum=8)
    e = estimate_training(t, Hardware(gpu="a100-80gb", num_gpus=64))
    b = e.step_time_breakdown_s
    # bubble = (the stage's busy time) x (p - 1)/m: 3/8 of everything but the optimizer step
    # and the data-parallel traffic (both after the pipeline drains)
    busy = (e.step_time_s.value - b["pipeline_bubble_s"].value - b["optimizer_s"].value
            - b["communication_exposed_s"].value)
    assert b["pipeline_bubble_s"].value == pytest.approx(busy * 3 / 8)


def _megatron_gpt(hidden: int, layers: int):
    from gpuhours.estimate.arch import ModelArch

    heads = hidden // 128
    return ModelArch(name="gpt", model_type="gpt2", hidden_size=hidden, num_layers=layers,
                     num_heads=heads, num_kv_heads=heads, head_dim=128,
                     intermediate_size=4 * hidden, vocab_size=51200, tie_embeddings=True,
                     gated_mlp=False, position_embeddings=2048, qkv_bias=True, out_bias=True,
                     mlp_bias=True, norm_bias=True)


@pytest.mark.parametrize(("hidden", "layers", "gpus", "pp", "batch", "published_tflops"), [
    # Megatron-LM README (April 2021), Narayanan et al. 2021 Table 1: GPT on Selene A100-80GB,
    # tensor parallelism 8, the rest of the model-parallel size as pipeline stages
    # (shared/reference/validation/throughput.csv)
    (8192, 48, 512, 2, 1536, 138),
    (12288, 80, 1536, 8, 2304, 148),
    (20480, 105, 2520, 35, 2520, 163),
])
def test_megatron_published_throughput_within_20_percent(hidden, layers, gpus, pp, batch,
                                                          published_tflops):
    """TFLOP/s per GPU in the paper's own count (eq. 3: 96 B s l h^2 (1 + s/6h + V/16lh),
    recomputation included) over the predicted step time; micro-batch 1 and 1F1B are our
    reading of the run. Tolerance 20%: the estimate reads 6-14% high on these rows (the
    analytic model hides nothing of the tensor-parallel traffic and has no kernel launch gaps
    between pipeline stages), docs/validation.md "Pretraining at scale"."""
    dp = gpus // (8 * pp)
    t = Training(arch=_megatron_gpt(hidden, layers), seq_len=2048, precision="fp16-mixed",
                 checkpointing=True, tp=8, pp=pp, grad_accum=batch // dp)
    e = estimate_training(t, Hardware(gpu="a100-80gb", num_gpus=gpus))
    s, v = 2048, 51200
    flops = 96 * batch * s * layers * hidden**2 * (1 + s / (6 * hidden) + v / (16 * layers * hidden))
    predicted = flops / (e.step_time_s.value * gpus) / 1e12
    assert predicted == pytest.approx(published_tflops, rel=0.20)
    assert e.memory.fits


@pytest.mark.parametrize(("args", "option"), [
    (["--tp", "3"], "--tp"),                           # 32 heads
    (["--gpus", "12", "--tp", "8"], "--tp/--pp/--cp"),  # 8 does not divide 12 GPUs
    (["--gpus", "40", "--pp", "40"], "--pp"),          # 32 layers: a stage without one
    (["--ep", "2"], "--ep"),                            # a dense model
    (["--cp", "3"], "--cp"),                            # sequence 2048
    (["--pp", "2", "--virtual-stages", "3"], "--pp/--virtual-stages"),
    (["--pp", "2", "--virtual-stages", "2", "--grad-accum", "3"], "--grad-accum/--virtual-stages"),
    (["--method", "qlora", "--tp", "2"], "--method/--tp/--pp/--cp/--ep"),
])
def test_an_invalid_layout_is_exit_2_naming_the_option(args, option):
    base = ["estimate", "--model", "llama-2-7b", "--gpu", "a100-80gb", "--gpus", "8",
            "--no-calibrate"]
    result = runner.invoke(app, [*base, *args])
    assert result.exit_code == 2, result.output
    assert option in result.output
    assert "Traceback" not in result.output


def test_expert_parallelism_splits_the_experts():
    t = Training(model="qwen3-30b-a3b", ep=8, zero_stage=1)
    lay = P.layout_of(1, 1, 1, 8, 1, 8)
    local = P.local_params(t.arch, count_params(t.arch), lay)
    arch = t.arch
    experts = arch.num_layers * arch.num_experts * 3 * arch.hidden_size * arch.moe_intermediate_size
    assert local.expert == pytest.approx(experts / 8)
    with pytest.raises(FieldError, match="must divide the 8 GPUs"):
        P.layout_of(1, 1, 1, 16, 1, 8)
    e = estimate_training(t, Hardware(gpu="h100-sxm", num_gpus=8))
    assert e.step_time_breakdown_s["expert_all_to_all_s"].value > 0


def test_fit_searches_layouts_when_they_are_left_open():
    result = runner.invoke(app, ["fit", "--model", "llama-2-70b", "--gpu", "a100-80gb",
                                 "--gpus", "64", "--seq", "4096", "--json"])
    # the setup as given (no layout, micro-batch 1) does not fit; the fastest layout that does
    # is a setup of the same model and method on the same GPUs: exit 0
    assert result.exit_code == 0, result.output
    import json

    best = json.loads(result.stdout)["fastest"]
    assert best["tp"] * best["pp"] * best["cp"] > 1   # 70B does not train on 64 GPUs without
    assert best["data_parallel"] * best["tp"] * best["pp"] * best["cp"] == 64
    # a layout given is kept
    kept = runner.invoke(app, ["fit", "--model", "llama-2-70b", "--gpu", "a100-80gb",
                               "--gpus", "64", "--seq", "4096", "--tp", "4", "--pp", "2",
                               "--json"])
    fastest = json.loads(kept.stdout)["fastest"]
    assert fastest is None or (fastest["tp"], fastest["pp"]) == (4, 2)


def test_a_newer_node_than_the_default_network_is_said():
    t = Training(model="llama-2-7b", zero_stage=3, checkpointing=True)
    h100 = estimate_training(t, Hardware(gpu="h100-sxm", num_gpus=16))
    # a DGX H100: 400 Gb/s NDR per GPU = 50 GB/s one way, twice the 200 Gb/s default
    assert any("DGX H100 has 50" in w for w in h100.warnings)
    given = estimate_training(t, Hardware(gpu="h100-sxm", num_gpus=16,
                                          inter_node_gb_per_s_one_way=50.0))
    assert not any("DGX H100" in w for w in given.warnings)
    assert given.step_time_s.value < h100.step_time_s.value
    a100 = estimate_training(t, Hardware(gpu="a100-80gb", num_gpus=16))
    assert not any("network between nodes" in w for w in a100.warnings)


def test_zero3_with_a_layout_says_the_layer_by_layer_rule_it_applies() -> None:
    # under ZeRO-3 with tensor parallelism the data-parallel traffic is exposed layer by layer
    # (timing._layout_data_parallel); the basis said only "at most 0.8 hidden"
    import json

    from typer.testing import CliRunner

    from gpuhours.cli import app

    out = CliRunner().invoke(app, ["estimate", "-m", "llama-2-7b", "-g", "h100-sxm", "--gpus", "8",
                                   "--tp", "2", "--zero", "3", "--json"])
    assert out.exit_code == 0, out.output
    basis = json.loads(out.output)["step_time_breakdown_s"]["communication_exposed_s"]["source"]
    assert "each layer's ZeRO-3 traffic behind at most one layer's compute" in basis
    assert "_layout_data_parallel" in basis
