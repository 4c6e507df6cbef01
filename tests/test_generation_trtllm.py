"""TensorRT-LLM 0.5-0.6 as a generation engine (`tensorrt-llm`, issue 13; estimate/trtllm.py):
a static batch whose contiguous KV cache is sized to it, no CUDA graphs unless asked, a C++
host step, and grouped-query attention read once per query head. Hand-worked figures; the
published rows are held out (docs/generation.md)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gpuhours import catalog
from gpuhours.cli import app
from gpuhours.errors import FieldDoesNotFit, FieldError
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.generation import (
    decode_bandwidth_efficiency,
    estimate_generation,
    max_batch_by_memory,
)
from gpuhours.estimate.trtllm import kv_reads_per_decode_step
from gpuhours.resolve import resolve_model
from gpuhours.setup import Generation

GIB = 2**30


def test_the_static_batch_memory_rule_by_hand() -> None:
    """Llama-2-7B in fp16 on an A100 80GB, 128 + 2,048 tokens (published row 140's setup):
    - device: 81,920 MiB (the catalog's memory_total_mib) = 85,899,345,920 bytes
    - CUDA context: 0.5 GiB = 536,870,912
    - weights: 6,738,415,616 parameters (Llama-2-7b-hf's count) x 2 = 13,476,831,232
    - KV a sequence: (128 + 2,048) x 2 (K, V) x 32 layers x 32 heads x 128 x 2 bytes
      = 2,176 x 524,288 = 1,140,850,688 (the contiguous [batch, 2, heads, maxSeqLength, 128]
      buffer of every layer)
    - the context step's activations a sequence: 128 tokens x (2 x 4,096 + 3 x 11,008)
      x 2 bytes = 10,551,296
    (85,899,345,920 - 536,870,912 - 13,476,831,232) / 1,151,401,984 = 62.4: 62 sequences.
    vLLM's rule (0.9 of the device, less its profiling reserve) holds 55: the row's 60 did not
    fit it."""
    arch, _ = resolve_model("llama-2-7b")
    gpu = catalog.gpu("a100-80gb")
    g = Generation(arch=arch, prompt_tokens=128, output_tokens=2048, engine="tensorrt-llm")
    room = 85_899_345_920 - 536_870_912 - 2 * 6_738_415_616
    per_sequence = 2176 * 2 * 32 * 32 * 128 * 2 + 128 * (2 * 4096 + 3 * 11008) * 2
    assert room // per_sequence == 62
    assert max_batch_by_memory(arch, g, gpu) == 62
    assert max_batch_by_memory(arch, g.model_copy(update={"engine": "vllm-v0"}), gpu) == 55
    assert estimate_generation(g.model_copy(update={"batch": 60}), gpu).batch == 60
    with pytest.raises(FieldDoesNotFit, match="at most 62 fit"):
        estimate_generation(g.model_copy(update={"batch": 63}), gpu)


def test_grouped_query_attention_is_read_once_per_query_head() -> None:
    """The masked attention kernel runs a block per query head that reads its KV head's cache:
    Llama-2-70B (64 query heads, 8 KV heads) reads it 8 times at any tp up to 8; beyond, the KV
    heads are replicated (16 GPUs: 4 query heads, 1 KV head, 4 reads); multi-head attention
    once."""
    arch70, _ = resolve_model("llama-2-70b")
    arch7, _ = resolve_model("llama-2-7b")
    assert [kv_reads_per_decode_step(arch70, tp) for tp in (1, 2, 4, 8, 16)] == [8, 8, 8, 8, 4]
    assert kv_reads_per_decode_step(arch7, 1) == 1


def test_a_decode_step_reads_the_grouped_cache_eight_times_by_hand() -> None:
    """Llama-2-70B fp8 (1-byte weights and KV) on 4 H100s, 64 sequences, prompt 2,000 and
    1,000 generated: the first decode step (context 2,000) and the last (3,000) are both
    bandwidth-bound and differ only in the KV cache they read: 64 x 1,000 tokens x (2 x 80
    layers x 2 KV heads a GPU x 128 x 1 byte) x 8 reads, at 3,350 GB/s x the decode bandwidth
    efficiency of d / tp = 2,048 (the weights, host step and all-reduces cancel)."""
    arch, _ = resolve_model("llama-2-70b")
    gpu = catalog.gpu("h100-sxm")
    g = Generation(arch=arch, prompt_tokens=2000, output_tokens=1000, batch=64,
                   engine="tensorrt-llm", tensor_parallel=4, weight_bytes_per_param=1.0,
                   kv_bytes_per_element=1.0)
    e = estimate_generation(g, gpu)
    assert e.decode_bound == "memory bandwidth"
    bw = 3350e9 * decode_bandwidth_efficiency(arch, 4)
    assert decode_bandwidth_efficiency(arch, 4) == pytest.approx(0.8 * 2048 / (2048 + 500))
    extra = 64 * 1000 * (2 * 80 * 2 * 128 * 1) * 8 / bw
    assert e.decode_step_s_last - e.decode_step_s_first == pytest.approx(extra, rel=1e-9)


def test_a_small_model_at_batch_one_is_bound_by_its_enqueue() -> None:
    """No CUDA graph by default (GptSession's cudaGraphMode off): Qwen2.5-0.5B at batch 1 on an
    H100 enqueues 24 layers x 10 kernels x 4 us = 0.96 ms a step, longer than its ~0.7 ms of
    weight reads, after the 50 us host step: 1.01 ms. With cuda_graphs on the launches go."""
    arch, _ = resolve_model("qwen2.5-0.5b")
    gpu = catalog.gpu("h100-sxm")
    g = Generation(arch=arch, prompt_tokens=16, output_tokens=16, batch=1,
                   engine="tensorrt-llm")
    e = estimate_generation(g, gpu)
    assert A.TRTLLM_ENQUEUE_S_PER_KERNEL.value == 4e-6
    assert A.DECODE_HOST_STEP_S["tensorrt-llm"].value == 50e-6
    assert e.eager_kernels == 24 * 10
    assert e.decode_step_s_first == pytest.approx(50e-6 + 240 * 4e-6)
    assert e.decode_bound.startswith("host")
    assert e.cuda_graphs.startswith("eager: TensorRT-LLM 0.5-0.6 replays CUDA graphs only when")
    on = estimate_generation(g.model_copy(update={"cuda_graphs": "on"}), gpu)
    assert on.cuda_graphs.startswith("CUDA graph")
    assert on.decode_step_s_first < e.decode_step_s_first - 0.2e-3


def test_models_the_engine_does_not_cover_are_refused() -> None:
    arch, _ = resolve_model("qwen3-30b-a3b")
    g = Generation(arch=arch, prompt_tokens=16, output_tokens=16, engine="tensorrt-llm")
    with pytest.raises(FieldError, match="MoE layers"):
        estimate_generation(g, catalog.gpu("h100-sxm"))


def test_the_cli_takes_the_engine_and_refuses_an_unknown_one() -> None:
    ok = CliRunner().invoke(app, ["generation", "--model", "llama-2-7b", "--gpu", "a100-80gb",
                                  "--engine", "tensorrt-llm", "--prompt-tokens", "128",
                                  "--output-tokens", "2048", "--batch", "60", "--json"])
    assert ok.exit_code == 0, ok.output
    assert '"engine": "tensorrt-llm"' in ok.stdout
    bad = CliRunner().invoke(app, ["generation", "--model", "llama-2-7b", "--gpu", "a100-80gb",
                                   "--engine", "tensorrt"])
    assert bad.exit_code == 2
    assert "'tensorrt-llm'" in bad.output and "Traceback" not in bad.output
    moe = CliRunner().invoke(app, ["generation", "--model", "qwen3-30b-a3b", "--gpu",
                                   "h100-sxm", "--engine", "tensorrt-llm"])
    assert moe.exit_code == 2, moe.output
    assert "dense decoders only" in moe.output
