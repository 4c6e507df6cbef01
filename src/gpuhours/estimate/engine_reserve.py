"""What vLLM keeps out of its KV cache: the peak of its profiling forward (issue 13).

vLLM sizes its KV cache after one dummy forward of `max_num_batched_tokens` tokens and a
dummy sampler run, at startup:

    KV bytes = total x gpu_memory_utilization - (weights + torch's allocated peak of that
               profile + memory outside torch)

- V0, 0.6.x: vllm-project/vllm `vllm/worker/worker.py`@6ae52299 `determine_num_available_blocks`:
  `peak_memory = memory_stats()["allocated_bytes.all.peak"]` after `profile_run()` (weights
  included), plus `non_torch_allocations`; `available_kv_cache_memory = total_gpu_memory x
  gpu_memory_utilization - peak_memory`.
- V1, 0.8.x: `vllm/v1/worker/gpu_worker.py`@0012cf69 `determine_available_memory`, the same
  formula; later V1 releases (0.10) take the same three terms as differences from a snapshot
  taken at startup (`memory_profiling`'s `non_kv_cache_memory`).

CUDA graphs are captured after the cache is allocated in both (V0 `Worker._warm_up_model` after
`_init_cache_engine`; V1 `compile_or_warm_up_model` after `initialize_from_config`): their pool
comes out of the device's (1 - gpu_memory_utilization), not out of the cache, so it is 0 here.
Memory outside torch (the CUDA context, NCCL's buffers under tensor parallelism) is counted by
0.6.x and 0.8.x and not by the snapshot-based releases, which the engine names here do not
tell apart: it is left out (0.3-0.6 GB; the basis says so).

SGLang sizes its pool as the memory free after loading less (1 - mem_fraction_static) of the
device (`ModelRunner.profile_max_num_token`: `rest_memory = available_gpu_memory -
total_gpu_memory * (1 - mem_fraction_static)`): the activations stay outside its share by design,
so no profiled reserve (its CUDA context, counted there, is left out here as for vLLM).
transformers' generate has no share at all (its peak is estimate/hf_generate_memory.py's).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuhours.estimate.arch import ModelArch

#: V0: with chunked prefill off, max_num_batched_tokens = max(max_model_len, 2048)
#: (vllm 0.5-0.6 `config.py` SchedulerConfig, `_DEFAULT_MAX_NUM_BATCHED_TOKENS`)
V0_MIN_BATCHED_TOKENS = 2048
#: V0 turns chunked prefill on by default above 32,768 positions (0.5.1+ `arg_utils.py`
#: `use_long_context`), and then schedules 512 tokens a step (config.py, the same branch)
V0_LONG_CONTEXT_POSITIONS = 32_768
V0_CHUNKED_BATCHED_TOKENS = 512
#: V1 (`LLM` class, as the RL frameworks build it): 16,384 tokens a step on a GPU of 70 GiB or
#: more whose name does not contain "a100", 8,192 otherwise (vllm 0.10 `engine/arg_utils.py`
#: `_set_default_args`: `device_memory >= 70 * GiB_bytes and "a100" not in device_name`, the A100
#: kept small because the larger budget lowered its throughput, vllm PR #17885)
V1_LARGE_GPU_BYTES = 70 * 2**30
V1_BATCHED_TOKENS_LARGE = 16_384
V1_BATCHED_TOKENS_SMALL = 8_192
#: when the config states no max_position_embeddings: V0's floor
_UNKNOWN_POSITIONS = V0_MIN_BATCHED_TOKENS

#: bytes per activation element (bf16/fp16)
_ACT_BYTES = 2.0
#: bytes a dummy sampler run holds per logit (one request's logit of one vocabulary entry),
#: counted from vLLM's torch top-k/top-p path, which both profiles take (V0 `profile_run` samples
#: with top_p 0.99 and top_k V - 1; V1's `_dummy_sampler_run`, 0.8-0.10, with
#: `top_p=dummy_tensors(0.9)` and `top_k=dummy_tensors(logits.size(1) - 1)`):
#: the LM head's bf16 logits (2), the sampler's fp32 copy (4), `logits.sort`'s values (4) and
#: int64 indices (8), the top-k mask (bool, 1), the sorted softmax (4) and its cumsum (4), the
#: top-p mask (1), and the scattered result (4), all alive at the scatter (V0
#: `model_executor/layers/sampler.py` `_apply_top_k_top_p`; V1 `v1/sample/ops/topk_topp_sampler.py`
#: the same steps). FlashInfer's sampling kernels, when enabled, sort nothing: fewer bytes.
SAMPLER_BYTES_PER_LOGIT = 32.0


def profile_tokens(engine: str, arch: ModelArch, gpu_memory_bytes: float,
                   gpu_name: str = "") -> int:
    """Tokens of vLLM's profiling forward (its default max_num_batched_tokens), by engine:

    - vllm-v0 (0.5-0.7): max(max_model_len, 2048), max_model_len being the model's
      max_position_embeddings (vLLM's default); above 32,768 positions chunked prefill is on by
      default and a step takes 512 tokens;
    - vllm (V1, 0.8+; the LLM class): 16,384 on a GPU of 70 GiB or more that is not an A100
      (`gpu_name` holds no "a100", as vLLM tests the CUDA device name), else 8,192.
    Other engines do not profile: 0."""
    if engine == "vllm-v0":
        positions = arch.max_positions or _UNKNOWN_POSITIONS
        if positions > V0_LONG_CONTEXT_POSITIONS:
            return V0_CHUNKED_BATCHED_TOKENS
        return max(positions, V0_MIN_BATCHED_TOKENS)
    if engine == "vllm":
        large = gpu_memory_bytes >= V1_LARGE_GPU_BYTES and "a100" not in gpu_name.lower()
        return V1_BATCHED_TOKENS_LARGE if large else V1_BATCHED_TOKENS_SMALL
    return 0


def forward_elements_per_token(arch: ModelArch, tensor_parallel: int = 1) -> float:
    """Activation elements per token alive at the peak of one vLLM decoder layer, per GPU.

    Beside the layer's input and the residual (2 d: vLLM's fused add-RMSNorm keeps the two), a
    gated MLP holds the fused gate_up projection's output (2 I / tp) and SiluAndMul's (I / tp)
    until down_proj reads it: 2 d + 3 I / tp (a plain MLP: fc1's output and its activation,
    2 I / tp). An MoE layer through `fused_experts` holds its three intermediate caches for k
    routed rows a token: k x (2 I + I) / tp + k x d, beside the 2 d. A layer's attention holds
    less (q, k, v and its output: under 2 d + 2 kv_dim) for every model here."""
    d = float(arch.hidden_size)
    tp = float(tensor_parallel)
    dense = (3.0 if arch.gated_mlp else 2.0) * arch.intermediate_size / tp
    if not arch.is_moe:
        return 2.0 * d + dense
    k = float(arch.experts_per_token)
    widths = 3.0 if arch.gated_mlp else 2.0  # Nemotron-H's experts: fc1's output, relu2's
    routed = k * (widths * arch.moe_intermediate_size / tp + d)
    shared = widths * arch.shared_expert_intermediate_size / tp
    has_dense = arch.dense_mlp_layers > arch.mlp_free_layers  # some layer has a dense MLP
    mlp = max(routed + shared, dense if has_dense else 0.0)
    return 2.0 * d + mlp


@dataclass(frozen=True)
class ProfileReserve:
    """What vLLM's profiling run keeps out of the KV cache, bytes per GPU."""

    #: tokens of the profiling forward (max_num_batched_tokens)
    tokens: int
    #: requests the dummy sampler run samples for: min(max_num_seqs, tokens)
    requests: int
    #: the forward's largest layer transient
    forward_bytes: float
    #: the sampler's tensors beside the forward's last hidden states
    sampler_bytes: float

    @property
    def bytes(self) -> float:
        """torch's allocated peak beyond the weights: the larger of the two phases (the forward's
        transients are freed before the sampler runs)."""
        return max(self.forward_bytes, self.sampler_bytes)

    def describe(self) -> str:
        if self.tokens == 0:
            return "no profiling reserve (the engine does not profile a forward)"
        which = "forward" if self.forward_bytes >= self.sampler_bytes else "sampler"
        return (f"vLLM's profiling run of {self.tokens:,} tokens and {self.requests:,} "
                f"sampled requests ({which} sets it)")


def profile_reserve(arch: ModelArch, engine: str, gpu_memory_bytes: float,
                    max_num_seqs: int | None, tensor_parallel: int = 1,
                    gpu_name: str = "") -> ProfileReserve:
    """The profile's peak beyond the weights, per GPU (see the module docstring):

        forward = tokens x forward_elements_per_token x 2 bytes
        sampler = tokens x d x 2 (the forward's hidden states, still held)
                  + requests x V x SAMPLER_BYTES_PER_LOGIT
        reserve = max(forward, sampler)

    requests = min(max_num_seqs, tokens) (V0 `profile_run` splits the tokens over max_num_seqs
    dummy sequences and samples each one's last position; V1 `_dummy_run` likewise over
    min(tokens, max_num_reqs)). The logits are gathered to the whole vocabulary under tensor
    parallelism before sampling. 0 for engines that do not profile (SGLang, hf-generate)."""
    tokens = profile_tokens(engine, arch, gpu_memory_bytes, gpu_name)
    if tokens == 0:
        return ProfileReserve(0, 0, 0.0, 0.0)
    requests = min(max_num_seqs or tokens, tokens)
    forward = tokens * forward_elements_per_token(arch, tensor_parallel) * _ACT_BYTES
    sampler = (tokens * arch.hidden_size * _ACT_BYTES
               + requests * arch.vocab_size * SAMPLER_BYTES_PER_LOGIT)
    return ProfileReserve(tokens, requests, forward, sampler)
