"""LMDeploy 0.1's TurboMind as a generation engine (`lmdeploy`, issue 13; estimate/lmdeploy.py):
a persistent batch over a paged cache of TurboMind's blocks, every kernel launched from C++, a
decode attention that reads a grouped KV head's cache once per CTA of query heads, and what
that release does not run refused by field. Hand-worked figures; the published rows (LMDeploy's
A100 tables) are all held out (docs/generation.md)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gpuhours import catalog
from gpuhours.cli import app
from gpuhours.errors import FieldError
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.generation import estimate_generation, max_batch_by_memory
from gpuhours.estimate.lmdeploy import (
    heads_per_cta,
    kv_reads_per_decode_step,
    sequences_in_blocks,
)
from gpuhours.estimate.track_record import load
from gpuhours.resolve import resolve_model
from gpuhours.setup import Generation

A100 = "a100-80gb"


def _gpu():
    return catalog.gpu(A100)


def _setup(model: str = "llama-2-7b", **kw) -> Generation:
    arch, _ = resolve_model(model)
    return Generation(arch=arch, engine="lmdeploy", **kw)


def test_a_decode_step_by_hand() -> None:
    """Llama-2-7B in fp16 on an A100 80GB, one sequence, its first decode step (context 1):
    - weights read: 6,738,415,616 parameters less the untied embedding table's 32,000 x 4,096
      = 131,072,000 (gathered, not read) = 6,607,343,616 x 2 bytes = 13,214,687,232
    - KV cache read: 1 token x 2 x 32 layers x 32 heads x 128 x 2 bytes = 524,288 (once: a
      multi-head model's group is 1)
    - bandwidth: 2,039 GB/s x bandwidth_efficiency 0.8 x 4,096 / (4,096 + 500)
    - + the host step (decode_host_step_s.lmdeploy); the C++ launches (~330 kernels x 4 us)
      overlap the 9 ms of reads and the 13.5 GFLOP take microseconds."""
    e = estimate_generation(_setup(prompt_tokens=1, output_tokens=128, batch=1), _gpu())
    bandwidth = (2039e9 * A.BANDWIDTH_EFFICIENCY.value * 4096
                 / (4096 + A.DECODE_BANDWIDTH_HALF_WIDTH.value))
    reads_s = (13_214_687_232 + 524_288) / bandwidth
    assert reads_s == pytest.approx(9.0905e-3, rel=1e-4)
    assert e.decode_step_s_first == pytest.approx(
        A.DECODE_HOST_STEP_S["lmdeploy"].value + reads_s, rel=1e-6)
    assert e.decode_bound == "memory bandwidth"
    # no CUDA graph: the step's launches are counted, from C++, and overlap the reads
    assert e.cuda_graphs.startswith("eager")
    assert 0 < e.eager_launch_s_first < reads_s
    assert e.eager_launch_s_first == pytest.approx(
        e.eager_kernels * A.LMDEPLOY_LAUNCH_S_PER_KERNEL.value)


def test_the_grouped_cache_is_read_once_per_cta_of_query_heads() -> None:
    """DispatchDecoderMultiheadAttention (v0.1.0a1): 4 query heads a CTA when the group divides
    by 4, 2 when by 2, else 1; an int8 cache 1 a CTA."""
    assert [heads_per_cta(g, False) for g in (1, 2, 3, 4, 6, 8)] == [1, 2, 1, 4, 2, 4]
    assert heads_per_cta(8, True) == 1
    seventy, _ = resolve_model("llama-2-70b")  # 64 query heads, 8 KV heads: groups of 8
    seven, _ = resolve_model("llama-2-7b")  # multi-head
    assert kv_reads_per_decode_step(seventy, 2.0) == 2.0
    assert kv_reads_per_decode_step(seventy, 1.0) == 8.0
    assert kv_reads_per_decode_step(seven, 2.0) == 1.0
    # the estimate's decode step carries them: at batch 64 and a 4K context the 70B step on
    # four GPUs reads 64 x 4,096 x 2 x 80 layers x 2 KV heads x 128 x 2 bytes = 10.7 GB of cache
    # twice, the weights (34.5 GB a GPU) once
    g = _setup("llama-2-70b", prompt_tokens=4096, output_tokens=1, batch=64, tensor_parallel=4)
    e = estimate_generation(g, _gpu())
    kv_once = 64 * 4096 * 2 * 80 * 2 * 128 * 2
    bandwidth = 2039e9 * e.decode_bandwidth_efficiency
    expected = (A.DECODE_HOST_STEP_S["lmdeploy"].value + e.allreduce_s_per_decode_step
                + (e.weights_read_bytes_per_step + 2 * kv_once) / bandwidth)
    assert e.decode_step_s_first == pytest.approx(expected, rel=1e-3)


def test_the_cache_holds_its_blocks_or_its_share_of_memory() -> None:
    """Llama-2-7B, 128 + 2,048 tokens a sequence = 2,176 x 524,288 = 1,140,850,688 bytes:
    - 1,000 blocks (benchmark_7b.sh's cache_max_entry_count) x 128 tokens x 524,288 =
      67,108,864,000 bytes: 58 sequences (58.8); the 17-block sequences TurboMind would
      allocate hold the same 58
    - the converter's default 0.5 of the device's 85,899,345,920 bytes = 42,949,672,960: 37
    - 13B's 1,000 blocks (104.9 GB) are more than the device: what its weights
      (26.0 GB) and the CUDA context leave."""
    g = _setup(prompt_tokens=128, output_tokens=2048, cache_max_entry_count=1000)
    assert max_batch_by_memory(g.arch, g, _gpu()) == 58
    assert sequences_in_blocks(1000, 2176) == 58
    default = _setup(prompt_tokens=128, output_tokens=2048)
    assert max_batch_by_memory(default.arch, default, _gpu()) == 37
    big = _setup("llama-2-13b", prompt_tokens=128, output_tokens=2048,
                 cache_max_entry_count=1000)
    per_sequence = 2176 * 2 * 40 * 40 * 128 * 2
    weights = 13_015_864_320 * 2
    room = 85_899_345_920 - A.CUDA_CONTEXT_BYTES.value - weights
    assert max_batch_by_memory(big.arch, big, _gpu()) == int(room // per_sequence)


@pytest.mark.parametrize(("setup", "field", "pattern"), [
    (dict(weight_bytes_per_param=1.0), "weight_bytes_per_param", "8-bit"),
    (dict(matmul_precision="fp8", weight_bytes_per_param=1.0), "matmul_precision", "fp8"),
    (dict(kv_bytes_per_element=1.125), "kv_bytes_per_element", "int8"),
    (dict(cuda_graphs="on"), "cuda_graphs", "captures no CUDA graphs"),
])
def test_what_turbomind_0_1_does_not_run_is_refused_by_field(setup, field, pattern) -> None:
    with pytest.raises(FieldError, match=pattern) as caught:
        estimate_generation(_setup(prompt_tokens=128, output_tokens=128, batch=1, **setup),
                            _gpu())
    assert field in str(caught.value)


def test_an_moe_model_and_another_engines_cache_setting_are_refused() -> None:
    with pytest.raises(FieldError, match="dense decoders only"):
        estimate_generation(_setup("qwen3-30b-a3b", prompt_tokens=128, output_tokens=128,
                                   batch=1), _gpu())
    arch, _ = resolve_model("llama-2-7b")
    with pytest.raises(FieldError, match="TurboMind"):
        Generation(arch=arch, engine="vllm", cache_max_entry_count=1000)
    # 4-bit AWQ weights are TurboMind's W4A16 path: taken, their bytes' time alone
    e = estimate_generation(_setup(prompt_tokens=1, output_tokens=16, batch=1,
                                   weight_bytes_per_param=0.56), _gpu())
    assert e.weights_bytes < 6e9


def test_the_cli_prints_lmdeploy_figures_with_their_basis() -> None:
    args = ["generation", "--model", "llama-2-7b", "--gpu", A100, "--engine", "lmdeploy",
            "--prompt-tokens", "128", "--output-tokens", "128", "--batch", "16",
            "--cache-max-entry-count", "1000"]
    out = CliRunner().invoke(app, [*args, "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["engine"] == "lmdeploy" and data["setup"]["cache_max_entry_count"] == 1000
    for key in ("host_step_s", "decode_s", "max_batch_by_memory", "output_tokens_per_s"):
        assert set(data[key]) == {"value", "unit", "basis", "source"}, key
    assert "TurboMind" in data["basis"]
    names = {a["name"] for a in data["assumptions"]}
    assert {"decode_host_step_s.lmdeploy", "lmdeploy_launch_s_per_kernel"} <= names
    # the cache size given replaces the converter's default share: only the given one is named
    assert "lmdeploy_cache_max_entry_count" not in names
    # its published rows' record, as the other engines print theirs (scripts/regen_docs.py
    # writes catalog/data/track_record_generation-lmdeploy.json)
    assert data["track_record"] == load("generation-lmdeploy").model_dump(mode="json")
    bad = CliRunner().invoke(app, [*args, "--weight-bytes-per-param", "1"])
    assert bad.exit_code == 2
    assert "weight" in bad.output and "Traceback" not in bad.output


def test_every_lmdeploy_row_is_expressed_and_held_out() -> None:
    from gpuhours_dev.validation import generation_published as gp

    rows = [r for r in gp.rows() if r["engine"] == "lmdeploy"]
    assert len(rows) == 93  # a100_fp16.md: 80 static + 9 request rows (v0.1.0a1), 4 (v0.2.0)
    for r in rows:
        res = gp.predict(r)
        assert res.error is not None and res.predicted is not None, (r["row"], res.why)
        assert r["row"] not in gp.TUNED and r["row"] not in gp.DEPENDENT


def test_a_sequence_takes_whole_blocks() -> None:
    """1,000 blocks, 1 + 1,000 = 1,001-token sequences: 8 blocks each (1,024 tokens held), so
    125 sequences, not the 127 the tokens alone would give (1,000 x 128 / 1,001)."""
    g = _setup(prompt_tokens=1, output_tokens=1000, cache_max_entry_count=1000)
    assert max_batch_by_memory(g.arch, g, _gpu()) == 125 == 1000 // 8


def test_a_cache_too_small_names_its_setting_and_turbomind_limits_are_refused() -> None:
    from gpuhours.errors import FieldDoesNotFit

    g = _setup(prompt_tokens=128, output_tokens=2048, cache_max_entry_count=1)
    with pytest.raises(FieldDoesNotFit, match="cache_max_entry_count 1 sets") as caught:
        max_batch_by_memory(g.arch, g, _gpu())
    assert "cache_max_entry_count" in str(caught.value)
    # head size 64 (Llama 3.2 1B): the decode attention is built for 128
    with pytest.raises(FieldError, match="head size 64"):
        estimate_generation(_setup("llama-3.2-1b", prompt_tokens=128, output_tokens=128,
                                   batch=1), _gpu())
    # a parallel residual (Phi-2), learned positions (GPT-2): not TurboMind's LlamaV2
    for model, pattern in (("phi-2", "parallel residual"), ("gpt2", "learned position")):
        with pytest.raises(FieldError, match=pattern):
            estimate_generation(_setup(model, prompt_tokens=16, output_tokens=16, batch=1),
                                _gpu())
    with pytest.raises(FieldError, match="one node") as caught:
        estimate_generation(_setup("llama-2-70b", prompt_tokens=128, output_tokens=128,
                                   batch=1, tensor_parallel=16), _gpu())
    assert "tensor_parallel" in str(caught.value)


@pytest.mark.parametrize("model, pattern", [("qwen3-8b", "q/k norms"),
                                            ("mpt-7b", "model type mpt"),
                                            ("qwen2.5-7b", "model type qwen2")])
def test_models_turbomind_0_1_does_not_convert_are_refused(model, pattern) -> None:
    with pytest.raises(FieldError, match=pattern):
        estimate_generation(_setup(model, prompt_tokens=16, output_tokens=16, batch=1),
                            _gpu())

