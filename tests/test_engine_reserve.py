"""vLLM's profiling reserve (estimate/engine_reserve.py): what its startup profile keeps out of
the KV cache, worked by hand, and the per-engine rules for how many tokens it profiles."""

from __future__ import annotations

import dataclasses

import pytest

from gpuhours import catalog
from gpuhours.errors import InputError
from gpuhours.estimate.engine_reserve import (
    forward_elements_per_token,
    profile_reserve,
    profile_tokens,
)
from gpuhours.estimate.generation import estimate_generation, max_batch_by_memory
from gpuhours.resolve import resolve_model
from gpuhours.setup import Generation

GIB = 2**30


def test_kv_capacity_with_the_reserve_by_hand() -> None:
    """Qwen2.5-0.5B on an L4 (24,152,899,584 bytes, under 70 GiB: V1 profiles 8,192 tokens),
    512 + 512 tokens, vLLM's 0.9 share.
    - weights: 494,032,768 parameters (the model's published count) x 2 = 988,065,536 bytes;
    - forward: 8,192 x (2 x 896 + 3 x 4,864 = 16,384) x 2 = 268,435,456 bytes;
    - sampler: 8,192 x 896 x 2 (hidden states) + 256 requests x 151,936 words x 32 bytes =
      14,680,064 + 1,244,659,712 = 1,259,339,776 bytes: the sampler sets the reserve;
    - a sequence's cache: 24 layers x 2 x 2 KV heads x 64 x 2 bytes x 1,024 = 12,582,912;
    (0.9 x 24,152,899,584 - 988,065,536 - 1,259,339,776) / 12,582,912 = 1,548.9: 1,548
    (1,649 without the reserve)."""
    arch, _ = resolve_model("qwen2.5-0.5b")
    gpu = catalog.gpu("l4")
    assert gpu.memory_bytes == 24_152_899_584
    g = Generation(arch=arch, prompt_tokens=512, output_tokens=512)
    reserve = profile_reserve(arch, "vllm", gpu.memory_bytes, 256)
    assert (reserve.tokens, reserve.requests) == (8_192, 256)
    assert reserve.forward_bytes == 268_435_456
    assert reserve.sampler_bytes == 1_259_339_776 == reserve.bytes
    assert max_batch_by_memory(arch, g, gpu) == 1548
    # SGLang sizes its pool without a profiled forward: the weights alone are subtracted
    assert max_batch_by_memory(arch, g.model_copy(update={"engine": "sglang"}), gpu) == 1649
    e = estimate_generation(g, gpu)
    fig = e.figures()["profile_reserve_bytes"]
    assert fig.value == 1_259_339_776 and "8,192 tokens and 256 sampled requests" in fig.source
    assert "sampler sets it" in fig.source


def test_a_larger_max_num_seqs_samples_more_requests() -> None:
    """The dummy sampler samples min(max_num_seqs, tokens) positions: 1,024 sequences of
    Llama-3.1-8B's 128,256 words x 32 bytes = 4.20 GB, beside 16,384 x 4,096 x 2 of hidden
    states, above the forward's 16,384 x (2 x 4,096 + 3 x 14,336) x 2 = 1.68 GB."""
    arch, _ = resolve_model("llama-3.1-8b")
    big = 80 * GIB
    default = profile_reserve(arch, "vllm", big, 256)
    assert default.bytes == default.forward_bytes == 16_384 * 51_200 * 2
    more = profile_reserve(arch, "vllm", big, 1024)
    assert more.bytes == more.sampler_bytes == 16_384 * 4_096 * 2 + 1_024 * 128_256 * 32
    # more sequences than tokens: one request a token
    assert profile_reserve(arch, "vllm", 40 * GIB, 100_000).requests == 8_192


@pytest.mark.parametrize(("engine", "model", "memory_bytes", "tokens"), [
    # V0: max(max_model_len, 2,048), the model's max_position_embeddings as max_model_len
    ("vllm-v0", "llama-2-7b", 80 * GIB, 4_096),
    ("vllm-v0", "qwen2.5-0.5b", 80 * GIB, 32_768),
    # above 32,768 positions V0 turns chunked prefill on by default: 512 a step
    ("vllm-v0", "llama-3.1-8b", 80 * GIB, 512),
    # V1's LLM class: 16,384 from 70 GiB up unless an A100, else 8,192, whatever the model
    ("vllm", "llama-2-7b", 70 * GIB, 16_384),
    ("vllm", "llama-2-7b", 70 * GIB - 1, 8_192),
    ("vllm", "llama-3.1-8b", 24 * GIB, 8_192),
    # engines that do not profile a forward
    ("sglang", "llama-2-7b", 80 * GIB, 0),
    ("hf-generate", "llama-2-7b", 80 * GIB, 0),
])
def test_profile_tokens_per_engine(engine: str, model: str, memory_bytes: int,
                                   tokens: int) -> None:
    arch, _ = resolve_model(model)
    assert profile_tokens(engine, arch, memory_bytes) == tokens


@pytest.mark.parametrize(("gpu", "tokens"), [
    ("a100-80gb", 8_192), ("a100-80gb-pcie", 8_192),  # vLLM keeps the A100 at the small default
    ("a800-80gb", 16_384), ("h100-sxm", 16_384), ("h20", 16_384), ("l40s", 8_192)])
def test_v1_profile_tokens_by_catalog_gpu(gpu: str, tokens: int) -> None:
    arch, _ = resolve_model("llama-2-7b")
    spec = catalog.gpu(gpu)
    assert profile_tokens("vllm", arch, spec.memory_bytes, spec.name) == tokens


def test_v0_without_a_stated_context_profiles_its_floor() -> None:
    arch, _ = resolve_model("llama-2-7b")
    assert profile_tokens("vllm-v0", dataclasses.replace(arch, max_positions=None), 0) == 2_048
    assert profile_tokens("vllm-v0", dataclasses.replace(arch, max_positions=1_024), 0) == 2_048


def test_forward_elements_dense_tp_and_moe_by_hand() -> None:
    llama, _ = resolve_model("llama-2-7b")
    # 2 x 4,096 + 3 x 11,008; tensor parallelism splits the MLP's columns, not the residual
    assert forward_elements_per_token(llama) == 41_216
    assert forward_elements_per_token(llama, 4) == 8_192 + 3 * 11_008 / 4
    # Qwen3-30B-A3B: 8 routed rows a token through fused_experts' caches (3 x 768 + 2,048 each)
    moe, _ = resolve_model("qwen3-30b-a3b")
    assert forward_elements_per_token(moe) == 2 * 2_048 + 8 * (3 * 768 + 2_048)


def test_sglang_and_hf_generate_keep_no_reserve() -> None:
    arch, _ = resolve_model("llama-2-7b")
    for engine in ("sglang", "hf-generate"):
        r = profile_reserve(arch, engine, 80 * GIB, 256)
        assert r.bytes == 0 and "no profiling reserve" in r.describe()


def test_a_reserve_that_leaves_no_room_names_it() -> None:
    """Llama-2-7B (6,738,415,616 parameters, 13.48 GB) on an L4, 1,024 + 1,024 tokens (a
    sequence's cache: 2,048 x 32 layers x 2 x 32 heads x 128 x 2 = 1.07 GB): at a share that
    leaves the weights room for one sequence and half of V1's profile (8,192 x 41,216 x 2 =
    0.68 GB), SGLang runs one and vLLM none, and the error says what took the room."""
    arch, _ = resolve_model("llama-2-7b")
    gpu = catalog.gpu("l4")
    g = Generation(arch=arch, prompt_tokens=1_024, output_tokens=1_024)
    weights = 6_738_415_616 * 2
    per_seq = 2_048 * 32 * 2 * 32 * 128 * 2  # 1,073,741,824 bytes
    reserve = 8_192 * 41_216 * 2  # 675,282,944 bytes
    # a share where the weights leave room for one sequence and the reserve does not
    share = (weights + per_seq + reserve / 2) / gpu.memory_bytes
    assert max_batch_by_memory(arch, g.model_copy(update={"engine": "sglang"}), gpu, share) == 1
    with pytest.raises(InputError, match=r"profiling run of 8,192 tokens .* leave no room"):
        max_batch_by_memory(arch, g, gpu, share)


def test_an_rl_engines_cache_is_what_the_reserve_leaves() -> None:
    """NeMo-RL's colocated Llama-3.1-8B row (docs/rl.md row 2: vLLM at a 0.6 share of an H100,
    85,520,809,984 bytes, 127-token prompts and 3,969-token longest responses, 4,096 a
    sequence as max_total_sequence_length): (0.6 x
    85,520,809,984 - 8,030,261,248 x 2 bytes of weights - 4,336,910,336 bytes of profile: its
    dummy sampler run, 16,384 x 4,096 x 2 bytes of hidden states + 1,024 requests (vllm.LLM's
    max_num_seqs on an H100) x 128,256 logits x 32 bytes, above the forward's 16,384 x (2 x
    4,096 + 3 x 14,336) x 2) / (32 layers x 2 x 8 KV heads x 128 x 2 bytes a token) = 235,863
    tokens of paged cache. Its 128 sequences a GPU all start at once (128 x 127 prompt tokens)
    and, at the phase's spread of response lengths (mean 1,019), never fill it: none
    preempted, the step as long as the longest response."""
    from gpuhours_dev.validation import rl

    details, _ = rl._details(rl.CASES[0])
    assert details is not None
    assert details["rollout_kv_cache_tokens"] == pytest.approx(235_863, abs=1)
    assert (details["rollout_admissions"], details["rollout_preemptions"]) == (1, 0)
    assert details["rollout_decode_steps"] == 3_969  # the longest response, 4,096 - 127


def test_published_block_counts_of_vllm_pr_2031() -> None:
    """vLLM PR #2031 (2023-12-12): Llama-2-7B on one A100-80GB at benchmark_throughput's
    defaults got 7,449 KV blocks of 16 tokens with torch's allocated peak (7,351 counting memory
    outside torch). Predicted by hand: (0.9 x 85,899,345,920 - 6,738,415,616 x 2 - 4,096 x
    41,216 x 2) / (16 x 32 layers x 2 x 4,096 x 2 = 8,388,608) = 7,569.1 blocks, 1.6% above;
    without the reserve 7,609 (2.1%). Not used to set anything (docs/generation.md)."""
    arch, _ = resolve_model("llama-2-7b")
    gpu = catalog.gpu("a100-80gb")
    g = Generation(arch=arch, prompt_tokens=8, output_tokens=8, engine="vllm-v0")
    blocks = max_batch_by_memory(arch, g, gpu)
    assert blocks == 7569
    assert abs(blocks / 7449 - 1) < 0.02
    assert abs(max_batch_by_memory(arch, g.model_copy(update={"engine": "sglang"}), gpu, 0.9)
               / 7449 - 1) > abs(blocks / 7449 - 1)
