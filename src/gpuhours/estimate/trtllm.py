"""TensorRT-LLM 0.5-0.6's C++ GptSession as a generation engine (`tensorrt-llm`, issue 13).

What its runtime does, read from NVIDIA/TensorRT-LLM's 2023 C++ runtime (gptSession.cpp and
benchmarks/cpp/gptSessionBenchmark.cpp at 027cd518, a pre-0.5 tree; the stored 2023
runtimeBuffers.cpp and decoderMaskedMultiheadAttentionTemplate.h), the runtime the v0.5 and
v0.6.1 benchmark tables of docs/source/performance.md@138f96d4 ran; the 0.6 releases' exact
files were not read:

- **A static batch.** `gptSessionBenchmark` (benchmarks/cpp/gptSessionBenchmark.cpp) calls
  `session.setup(batchSize, beamWidth, maxInputLength + maxNewTokens, ...)` and then
  `session.generate` on the whole batch: every sequence prefills at once (step 0, the context
  phase) and decodes together until the last token; no continuous batching.
- **Its KV cache is sized to that batch, not to a share of memory.** The page's LLaMA engines
  are built without `--paged_kv_cache`, so `RuntimeBuffers::reshape`
  (cpp/tensorrt_llm/runtime/runtimeBuffers.cpp, 2023) shapes each layer's
  `present_key_value` buffer as [batch, 2, KV heads, maxSeqLength, head size]: batch x (prompt +
  output) tokens, allocated outright. `kv_cache_free_gpu_mem_fraction` (0.9 of the memory free
  after loading, `KvCacheConfig::kDefaultGpuMemFraction` of later trees) belongs to the paged
  cache of the in-flight batch manager (gptManagerBenchmark), not to these rows. The batch fits
  when the weights, that cache, the engine's activation memory and the CUDA context fit the
  device (`static_batch_cap`).
- **No CUDA graphs by default.** `GptSession::setCudaGraphMode` is set from the benchmark's
  `--enable_cuda_graph` flag, off unless given (the page's commands do not give it); the
  context step is never a graph (`generateSingleBatch`, step 0 is `executeContext`). The host
  enqueues every kernel of the TensorRT engine each step (C++, no Python):
  `TRTLLM_ENQUEUE_S_PER_KERNEL` a kernel, overlapping the GPU's work.
- **A small host step.** Each step ends in `shouldStopSync` (a host synchronisation on the
  decoder's finished count); the next step's enqueue begins after it: DECODE_HOST_STEP_S.
- **Grouped-query attention reads the cache once per query head.** The generation-phase kernel
  (decoderMaskedMultiheadAttentionTemplate.h: one thread block per query head and sequence,
  `hi_kv = hi / qhead_per_kv`) has each query head's block read its KV head's whole cache:
  per decode step the cache is read (query heads / KV heads) times per GPU
  (`kv_reads_per_decode_step`; 1 for multi-head attention). Assumed: from DRAM, no reuse in L2.

Tensor parallelism is costed with the estimate's shared all-reduce (latency + ring traffic; the
page's build commands name no all-reduce option). Pure functions of counts; the engine step
that uses them is estimate/generation.py's.
"""

from __future__ import annotations

import math

from gpuhours.errors import FieldDoesNotFit, FieldError
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.arch import ModelArch
from gpuhours.estimate.engine_reserve import forward_elements_per_token

ENGINE = "tensorrt-llm"
#: bytes per activation element of the context step's transients (fp16 activations: the fp8
#: builds quantise GEMM inputs, the tensors between kernels stay fp16)
ACTIVATION_BYTES = 2.0


#: the largest query heads per KV head the rows test (Llama-2-70B, 8): beyond it the cache's
#: re-reads per decode step (kv_reads_per_decode_step) are not checked, and the rows already
#: show part of them served from L2 at 8 (docs/generation.md)
MAX_HEADS_PER_KV_HEAD = 8


def check_supported(arch: ModelArch) -> None:
    """Refuse what this engine's model does not cover: it is TensorRT-LLM 0.5-0.6's dense text
    decoders (multi-head or grouped-query attention up to MAX_HEADS_PER_KV_HEAD query heads a
    KV head, full attention on every layer); MoE layers, latent attention, recurrent mixers
    (SSM, Gated DeltaNet), sliding windows and vision towers are not modelled for it."""
    kinds = [k for k, has in (
        ("MoE layers", arch.is_moe), ("multi-head latent attention", arch.mla is not None),
        ("recurrent mixers (SSM, Gated DeltaNet)", bool(arch.ssm_state_elements)),
        ("sliding-window layers", bool(arch.sliding_window and arch.sliding_layers)),
        ("a vision tower", arch.vision is not None),
        (f"{arch.num_heads // max(1, arch.num_kv_heads)} query heads a KV head (above "
         f"{MAX_HEADS_PER_KV_HEAD}, the most the rows test)",
         arch.num_heads > MAX_HEADS_PER_KV_HEAD * arch.num_kv_heads)) if has]
    if kinds:
        raise FieldError("engine", f"{arch.name} has {' and '.join(kinds)}: the tensorrt-llm "
                                   f"engine is modelled as TensorRT-LLM 0.5-0.6's GptSession "
                                   f"with dense decoders only.",
                         "Use --engine vllm or sglang for this model.")


def kv_reads_per_decode_step(arch: ModelArch, tensor_parallel: int) -> float:
    """Times a decode step reads each GPU's KV cache: its query heads over its KV heads
    ((heads / tp) / ceil(kv_heads / tp)), as the masked multi-head attention kernel gives each
    query head a thread block that reads its KV head's cache (module docstring); 1 for
    multi-head attention, 8 for Llama-2-70B at any tp up to 8."""
    q_heads = arch.num_heads / tensor_parallel
    kv_heads = math.ceil(arch.num_kv_heads / tensor_parallel)
    return max(1.0, q_heads / kv_heads)


def workspace_bytes_per_sequence(arch: ModelArch, prompt_tokens: int,
                                 tensor_parallel: int) -> float:
    """Activation memory the TensorRT engine holds for one sequence of the batch, per GPU: its
    context step's largest layer transient, prompt_tokens x forward_elements_per_token (the
    layer input, residual and MLP intermediates per GPU, estimate/engine_reserve.py) x 2 bytes.
    Assumed: the engine built for this batch and prompt (TensorRT sizes an execution context's
    memory for its build's largest shapes, which the page does not give; this is the least)."""
    return (prompt_tokens * forward_elements_per_token(arch, tensor_parallel)
            * ACTIVATION_BYTES)


def static_batch_cap(memory_bytes: float, weights_bytes_per_gpu: float,
                     kv_bytes_per_sequence: float, workspace_per_sequence: float,
                     where: str, name: str, fields: str | tuple[str, ...] = "gpu") -> int:
    """The largest static batch that fits each GPU: (memory - CUDA context - weights) /
    (the sequence's contiguous KV cache, prompt + output tokens, + its share of the context
    step's activations); raises FieldDoesNotFit when not one sequence fits. Bytes."""
    room = memory_bytes - A.CUDA_CONTEXT_BYTES.value - weights_bytes_per_gpu
    per_sequence = kv_bytes_per_sequence + workspace_per_sequence
    if room < per_sequence:
        raise FieldDoesNotFit(
            fields, f"{name} weights ({weights_bytes_per_gpu / 1e9:.1f} GB a GPU) leave no room "
                   f"for one sequence's KV cache and activations ({per_sequence / 1e9:.2f} GB) "
                   f"on {where} under TensorRT-LLM's static batch.",
            "Use a larger GPU, a quantised model, or more tensor parallelism.")
    return int(room // per_sequence)
