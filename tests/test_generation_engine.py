"""The generation model against published measurements, and the engine physics by hand.

The validation rows are scripts/gpuhours_dev/validation/data/generation.csv (Qwen2.5 speed
benchmark, A100-80GB; row 15 a user's approximate report). Rows marked `tune` (odd rows 1-13)
set DECODE_HOST_STEP_S[vllm], DECODE_BANDWIDTH_HALF_WIDTH, DECODE_HOST_PER_LAYER_S[hf-generate]
and DECODE_KV_PASSES[hf-generate] (the rate per counted pass); rows marked `held-out` did not.
docs/generation.md has both accuracy tables.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from gpuhours import catalog
from gpuhours.errors import InputError
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.arch import ModelArch, from_hf_config
from gpuhours.estimate.generation import (
    decode_bandwidth_efficiency,
    estimate_generation,
    max_batch_by_memory,
    weight_bytes_read_per_step,
)
from gpuhours.estimate.params import count_params
from gpuhours.resolve import resolve_model
from gpuhours.setup import Generation

ROWS_CSV = (Path(__file__).resolve().parents[1] / "scripts" / "gpuhours_dev" / "validation"
            / "data" / "generation.csv")
#: the rows that set the constants: the fit's residuals, not a prediction
TUNED_TOLERANCE = 0.15
#: issue 13's goal (within 25% of published throughput) on rows that set nothing
HELD_OUT_TOLERANCE = 0.25


def gen(**fields: Any) -> Generation:
    """A Generation from a catalog model name (resolved by the model's validator)."""
    return Generation.model_validate(fields)


def _rows() -> list[dict[str, Any]]:
    with ROWS_CSV.open(newline="") as f:
        return list(csv.DictReader(f))


def _arch(r: dict[str, Any]) -> ModelArch:
    cfg = {"model_type": "qwen2", "hidden_size": int(r["hidden_size"]),
           "num_hidden_layers": int(r["num_hidden_layers"]),
           "num_attention_heads": int(r["num_attention_heads"]),
           "num_key_value_heads": int(r["num_key_value_heads"]), "head_dim": int(r["head_dim"]),
           "intermediate_size": int(r["intermediate_size"]), "vocab_size": int(r["vocab_size"]),
           "tie_word_embeddings": r["tie_word_embeddings"] == "true", "hidden_act": "silu"}
    return from_hf_config(cfg, r["model"])


def predicted_output_tokens_per_s(r: dict[str, Any]) -> float:
    """The estimate for one row: its prompts run together, as many as the KV cache holds."""
    arch = _arch(r)
    gpu = catalog.gpu(r["gpu"])
    g = Generation(arch=arch, prompt_tokens=int(r["input_tokens"]),
                   output_tokens=int(r["output_tokens"]), engine=r["engine"])
    batch = min(int(r["concurrency"]), max_batch_by_memory(arch, g, gpu))
    return estimate_generation(g.model_copy(update={"batch": batch}), gpu).output_tokens_per_s


def _case(r: dict[str, Any]) -> Any:
    return pytest.param(r, id=f"row{r['row']}-{r['model']}-{r['engine']}-in{r['input_tokens']}")


def test_the_split_is_every_other_row() -> None:
    rows = _rows()
    assert [r["split"] for r in rows] == [
        "tune" if int(r["row"]) % 2 and int(r["row"]) < 15 else "held-out" for r in rows]
    assert {r["engine"] for r in rows if r["split"] == "held-out"} == {"vllm", "hf-generate"}


@pytest.mark.parametrize("row", [_case(r) for r in _rows() if r["split"] == "held-out"])
def test_held_out_rows_within_25_percent(row: dict[str, Any]) -> None:
    measured = float(row["measured_output_tok_per_s"])
    assert predicted_output_tokens_per_s(row) == pytest.approx(measured,
                                                               rel=HELD_OUT_TOLERANCE)


@pytest.mark.parametrize("row", [_case(r) for r in _rows() if r["split"] == "tune"])
def test_tuned_rows_within_15_percent(row: dict[str, Any]) -> None:
    measured = float(row["measured_output_tok_per_s"])
    assert predicted_output_tokens_per_s(row) == pytest.approx(measured, rel=TUNED_TOLERANCE)


# Physics by hand -----------------------------------------------------------------------------

def test_host_step_does_not_scale_with_the_model() -> None:
    """A 0.5B model's decode step is mostly the engine's fixed cost; a 7B model's mostly weights."""
    gpu = catalog.gpu("a100-80gb")
    small = estimate_generation(gen(model="qwen2.5-0.5b", prompt_tokens=1,
                                           output_tokens=64, batch=1), gpu)
    large = estimate_generation(gen(model="qwen2.5-7b", prompt_tokens=1,
                                           output_tokens=64, batch=1), gpu)
    assert small.host_step_s == large.host_step_s == A.DECODE_HOST_STEP_S["vllm"].value
    assert small.host_step_s > small.decode_step_s_first / 2
    assert large.host_step_s < large.decode_step_s_first / 4


def test_grace_host_takes_its_ratio_of_the_engine_step() -> None:
    """A GB200's host is a Grace CPU: the catalog's host_op_time_ratio 2.75 (TransformerEngine
    issue #2053: a torch Linear forward's CPU time 37.08 us on GB200, 13.48 us on an H100
    DGX's Xeon) multiplies vLLM's host step, 2.3 ms -> 6.325 ms, and nothing of the GPU's own
    time; an x86-hosted part (h100-sxm, no ratio) keeps the fitted 2.3 ms."""
    grace = catalog.gpu("gb200")
    assert grace.host_op_time_ratio == 2.75
    x86 = grace.model_copy(update={"host_op_time_ratio": None, "host_op_time_source": ""})
    g = gen(model="llama-3.1-8b", prompt_tokens=128, output_tokens=1024, batch=64)
    on_grace, on_x86 = estimate_generation(g, grace), estimate_generation(g, x86)
    assert on_x86.host_step_s == pytest.approx(2.3e-3)
    assert on_grace.host_step_s == pytest.approx(2.3e-3 * 2.75)
    # the decode step differs by the host's extra 1.75 x 2.3 ms only (CUDA graphs: no launches)
    assert on_grace.decode_step_s_first - on_x86.decode_step_s_first == pytest.approx(
        1.75 * 2.3e-3)
    assert "x 2.75 for gb200's host CPU" in on_grace.figures()["host_step_s"].source
    h100 = estimate_generation(g, catalog.gpu("h100-sxm"))
    assert h100.host_step_s == pytest.approx(2.3e-3)


def test_decode_step_at_batch_one_by_hand() -> None:
    arch, _ = resolve_model("qwen2.5-7b")
    gpu = catalog.gpu("a100-80gb")
    e = estimate_generation(Generation(arch=arch, prompt_tokens=100, output_tokens=10, batch=1),
                            gpu)
    p = count_params(arch)
    # untied Qwen2.5-7B: the 152064 x 3584 input embedding is gathered, not read
    read = (p.total - 152064 * 3584) * 2
    assert weight_bytes_read_per_step(arch, 2.0) == read
    bw = 2039e9 * 0.80 * 3584 / (3584 + A.DECODE_BANDWIDTH_HALF_WIDTH.value)
    assert decode_bandwidth_efficiency(arch) * 2039e9 == pytest.approx(bw)
    kv = 100 * 2 * 28 * 512 * 2
    assert e.decode_step_s_first == pytest.approx(A.DECODE_HOST_STEP_S["vllm"].value
                                                  + (read + kv) / bw)
    assert e.decode_bound == "memory bandwidth"


def test_hf_generate_is_launch_bound_for_a_small_model() -> None:
    arch, _ = resolve_model("qwen2.5-0.5b")
    e = estimate_generation(Generation(arch=arch, prompt_tokens=1, output_tokens=8, batch=1,
                                       engine="hf-generate"), catalog.gpu("a100-80gb"))
    per_layer = A.DECODE_HOST_PER_LAYER_S["hf-generate"].value
    assert e.decode_bound == "host (kernel launches)"
    assert e.decode_step_s_first == pytest.approx(A.DECODE_HOST_STEP_S["hf-generate"].value
                                                  + 24 * per_layer)


def test_hf_generate_loops_over_every_expert_of_an_moe_layer_by_hand() -> None:
    """transformers 4.51's MoE block runs all 128 experts of each of Qwen3-30B-A3B's 48 layers
    in a Python loop that synchronises per expert: 6,144 x 79 us = 0.485 s a forward, on top of
    the step hf-generate costs a dense model; the fused-kernel engines pay nothing for it."""
    arch, _ = resolve_model("qwen3-30b-a3b")
    assert (arch.moe_layers, arch.num_experts) == (48, 128)
    gpu = catalog.gpu("h100-sxm")
    hf = estimate_generation(Generation(arch=arch, prompt_tokens=1, output_tokens=8, batch=1,
                                        engine="hf-generate"), gpu)
    loop = 48 * 128 * 79e-6
    assert A.HF_GENERATE_HOST_PER_EXPERT_S.value == 79e-6
    # at batch 1 the eager launches (48 x 0.88 ms) outlast the device: host step + launches
    launches = 48 * A.DECODE_HOST_PER_LAYER_S["hf-generate"].value
    assert hf.decode_step_s_first == pytest.approx(
        A.DECODE_HOST_STEP_S["hf-generate"].value + launches + loop)
    assert hf.decode_bound == "host (Python loop over experts)"
    vllm = estimate_generation(Generation(arch=arch, prompt_tokens=1, output_tokens=8, batch=1,
                                          engine="vllm"), gpu)
    assert vllm.decode_step_s_first < 0.01
    dense, _ = resolve_model("qwen3-32b")
    d = estimate_generation(Generation(arch=dense, prompt_tokens=1, output_tokens=8, batch=1,
                                       engine="hf-generate"), gpu)
    assert d.decode_step_s_first < 0.1 and d.decode_bound != "host (Python loop over experts)"


def test_decode_turns_compute_bound_at_large_batch() -> None:
    gpu = catalog.gpu("h100-sxm")
    g = gen(model="qwen2.5-7b", prompt_tokens=16, output_tokens=16, batch=2048,
                   max_num_seqs=2048)
    e = estimate_generation(g, gpu)
    assert e.decode_bound == "compute"
    one = estimate_generation(g.model_copy(update={"batch": 1}), gpu)
    assert one.decode_bound == "memory bandwidth"


def test_prefill_is_never_faster_than_one_weight_read() -> None:
    arch, _ = resolve_model("qwen2.5-7b")
    gpu = catalog.gpu("a100-80gb")
    e = estimate_generation(Generation(arch=arch, prompt_tokens=1, output_tokens=0, batch=1), gpu)
    floor = weight_bytes_read_per_step(arch, 2.0) / (2039e9 * decode_bandwidth_efficiency(arch))
    assert e.prefill_s == pytest.approx(A.DECODE_HOST_STEP_S["vllm"].value + floor)


def test_vllm_max_num_seqs_default_follows_the_gpu() -> None:
    # vLLM V1's EngineArgs.get_batch_defaults (arg_utils.py, 0.11.2 and 0.17.1): 1,024 for
    # vllm.LLM and `vllm serve` on a device of >= 70 GiB whose name lacks "a100", else 256
    expect = {"h100-sxm": 1024, "h200": 1024, "h800": 1024, "a100-80gb": 256,
              "a100-40gb": 256, "l40s": 256, "rtx-4090": 256}
    g = gen(model="qwen2.5-0.5b", prompt_tokens=64, output_tokens=64, batch=2000)
    for name, seqs in expect.items():
        e = estimate_generation(g, catalog.gpu(name))
        assert e.max_num_seqs == seqs, name
        assert e.running_sequences == seqs and e.waves == -(-2000 // seqs), name
    # V0 (vllm-v0) took 256 on every GPU; a setup's own cap wins over the default
    h100 = catalog.gpu("h100-sxm")
    assert estimate_generation(g.model_copy(update={"engine": "vllm-v0"}), h100).max_num_seqs \
        == 256
    assert estimate_generation(g.model_copy(update={"max_num_seqs": 128}), h100).max_num_seqs \
        == 128


def test_max_num_seqs_runs_the_batch_in_waves() -> None:
    gpu = catalog.gpu("a100-80gb")  # vLLM's default there: 256 sequences at once
    g = gen(model="qwen2.5-0.5b", prompt_tokens=64, output_tokens=64, batch=600)
    e = estimate_generation(g, gpu)
    assert e.max_num_seqs == 256 and e.running_sequences == 256 and e.waves == 3
    # two full waves of 256 and one of 88
    full = estimate_generation(g.model_copy(update={"batch": 256}), gpu)
    rest = estimate_generation(g.model_copy(update={"batch": 88}), gpu)
    assert e.batch_time_s == pytest.approx(2 * full.batch_time_s + rest.batch_time_s)
    # one wave of 600 with every step a CUDA graph is faster; vLLM V1 captures only up to
    # min(2 x max_num_seqs, 512), so at 600 its steps run eagerly (estimate/cuda_graphs.py)
    wide = estimate_generation(g.model_copy(update={"max_num_seqs": 1024,
                                                    "cuda_graphs": "on"}), gpu)
    assert wide.waves == 1 and wide.output_tokens_per_s > e.output_tokens_per_s
    eager = estimate_generation(g.model_copy(update={"max_num_seqs": 1024}), gpu)
    assert eager.cuda_graphs == "eager: batch 600 > vLLM V1's largest captured batch 512"
    assert eager.output_tokens_per_s < wide.output_tokens_per_s


def test_default_batch_is_the_engine_cap_or_the_kv_cache() -> None:
    gpu = catalog.gpu("h100-sxm")
    small = estimate_generation(gen(model="qwen2.5-0.5b"), gpu)
    assert small.batch == 1024 < small.max_batch_by_memory  # vLLM V1 on an H100
    hf = estimate_generation(gen(model="qwen2.5-0.5b", engine="hf-generate"), gpu)
    assert hf.batch == hf.max_batch_by_memory and hf.waves == 1


def test_every_figure_has_a_unit_and_a_basis() -> None:
    e = estimate_generation(gen(model="qwen2.5-7b"), catalog.gpu("h100-sxm"))
    figures = e.figures()
    assert figures["prefill_s"].value == e.prefill_s
    assert figures["host_step_s"].basis == "assumed"
    assert all(f.unit and f.source for f in figures.values())


def test_tensor_parallel_splits_weights_and_adds_all_reduces_by_hand() -> None:
    arch, _ = resolve_model("llama-2-70b")
    gpu = catalog.gpu("h100-sxm")
    one_gpu = gen(model="llama-2-70b", prompt_tokens=1, output_tokens=16, batch=1)
    with pytest.raises(InputError, match="leave no room"):
        estimate_generation(one_gpu, gpu)
    e = estimate_generation(one_gpu.model_copy(update={"tensor_parallel": 4}), gpu)
    assert e.gpus == 4
    # 2 all-reduces per layer of 1 x 8192 bf16 values over NVLink (450 GB/s one way)
    one = A.TP_ALLREDUCE_LATENCY_S.value + 2 * 3 / 4 * 8192 * 2 / 450e9
    assert e.allreduce_s_per_decode_step == pytest.approx(2 * 80 * one)
    # each GPU runs GEMMs a quarter as wide: the width term at 8192 / 4 = 2048, not 8192
    bw = 3350e9 * A.BANDWIDTH_EFFICIENCY.value * 2048 / (2048 + A.DECODE_BANDWIDTH_HALF_WIDTH.value)
    assert bw == pytest.approx(3350e9 * decode_bandwidth_efficiency(arch, 4))
    assert decode_bandwidth_efficiency(arch, 4) < decode_bandwidth_efficiency(arch)
    kv = 1 * 2 * 80 * (8 // 4) * 128 * 2  # 8 KV heads split 4 ways, one token of context
    assert e.decode_step_s_first == pytest.approx(
        A.DECODE_HOST_STEP_S["vllm"].value + e.allreduce_s_per_decode_step
        + (weight_bytes_read_per_step(arch, 2.0) / 4 + kv) / bw)


def test_tensor_parallel_must_divide_the_heads() -> None:
    with pytest.raises(InputError, match="must divide them"):
        gen(model="qwen2.5-7b", tensor_parallel=8)  # 28 heads


def test_gpu_hours_count_every_gpu_of_a_replica() -> None:
    from gpuhours.estimate.generation import generation_summary

    g = gen(model="qwen2.5-7b", tensor_parallel=2)
    gpu = catalog.gpu("h100-sxm")
    e = estimate_generation(g, gpu)
    out = generation_summary(e, g, gpu, sequences=1e5)
    assert out["gpu_hours"]["value"] == pytest.approx(1e5 / e.sequences_per_s / 3600 * 2)


def test_8_bit_weights_and_kv_halve_the_bytes() -> None:
    gpu = catalog.gpu("a100-80gb")
    bf16 = gen(model="qwen2.5-7b", prompt_tokens=512, output_tokens=512)
    fp8 = bf16.model_copy(update={"weight_bytes_per_param": 1.0, "kv_bytes_per_element": 1.0})
    a, b = estimate_generation(bf16, gpu), estimate_generation(fp8, gpu)
    # the decoder's layers at 1 byte; the 152064 x 3584 LM head stays 16-bit (GPTQ, AWQ and
    # vLLM's fp8 leave it unquantised), and the untied input table is gathered, not read
    total, table = count_params(bf16.arch).total, 152064 * 3584
    assert a.weights_read_bytes_per_step == (total - table) * 2
    assert b.weights_read_bytes_per_step == (total - 2 * table) * 1 + table * 2
    # in memory both tables stay 16-bit
    assert b.weights_bytes == (total - 2 * table) * 1 + 2 * table * 2
    assert b.max_batch_by_memory > 2 * a.max_batch_by_memory
    one = estimate_generation(fp8.model_copy(update={"batch": 1}), gpu)
    ref = estimate_generation(bf16.model_copy(update={"batch": 1}), gpu)
    # batch 1 is weight-bound: the device time falls with the bytes (the host cost stays, and
    # each of the 28 x 4 quantised GEMMs adds its fixed time)
    ratio = b.weights_read_bytes_per_step / a.weights_read_bytes_per_step
    assert 0.53 < ratio < 0.55
    fixed = 28 * 4 * A.QUANTISED_GEMM_FIXED_S.value
    assert one.decode_step_s_first - one.host_step_s - fixed == pytest.approx(
        (ref.decode_step_s_first - ref.host_step_s) * ratio, rel=0.01)


def test_decode_led_by_the_engines_per_sequence_host_work_says_host() -> None:
    """Walk finding F4: SGLang on a B200 with 2,048 Qwen2.5-7B sequences running. Their GEMMs,
    2,048 x ~2 x 7.6e9 FLOPs = 31 TFLOP, take ~20 ms at the B200's 2,250 TFLOPS x 0.7, while
    SGLang's host work per running sequence (DECODE_HOST_PER_SEQUENCE_S) x 2,048 is
    ~145 ms: the step is mostly host, and says so (it read "compute")."""
    gpu = catalog.gpu("b200")
    g = gen(model="qwen2.5-7b", prompt_tokens=16, output_tokens=16, batch=2048,
            max_num_seqs=2048, engine="sglang")
    e = estimate_generation(g, gpu)
    host = e.host_step_s + 2048 * A.DECODE_HOST_PER_SEQUENCE_S["sglang"].value
    assert host > 0.5 * e.decode_step_s_first  # the host is most of the step
    assert e.decode_bound == "host (engine step and per-sequence work)"


def test_decode_led_by_tensor_parallel_all_reduces_says_so() -> None:
    """Walk finding F4b: Llama-3-70B in 4-bit over 8 RTX 4090s (PCIe), with the 256 sequences
    vLLM runs at once: 2 all-reduces a layer x 80 layers of 256 x 8,192 x 2 bytes = 4.2 MB each,
    over PCIe, outlast the step's weight reads (~40 GB / 8 GPUs at ~1 TB/s) and its GEMMs
    (256 x 2 x 70e9 / 8 FLOPs); the label said "compute"."""
    gpu = catalog.gpu("rtx-4090")
    g = gen(model="llama-3-70b", tensor_parallel=8, weight_bytes_per_param=0.56, batch=256)
    e = estimate_generation(g, gpu)
    assert e.allreduce_s_per_decode_step > 0.5 * e.decode_step_s_first
    assert e.decode_bound == "tensor-parallel all-reduces"
    # on NVLink H100s the same group's all-reduces are a small part: weight reads lead
    h100 = estimate_generation(g, catalog.gpu("h100-sxm"))
    assert h100.allreduce_s_per_decode_step < 0.5 * h100.decode_step_s_first
    assert h100.decode_bound != "tensor-parallel all-reduces"
