"""LMDeploy 0.1's TurboMind as a generation engine (`lmdeploy`, issue 13).

What its engine does, read from InternLM/lmdeploy at v0.1.0a1 (9c46b27c), the release its
A100 benchmark tables were measured with (docs/en/benchmark/a100_fp16.md@ebe90bc9, "The tested
lmdeploy version is v0.1.0a1"; the same numbers were relabelled v0.1.0 at 379a2d5a and v0.2.0
at 9e420561):

- **A persistent batch, continuous batching, a paged KV cache.** One C++ thread per GPU runs
  `LlamaBatch::InternalThreadEntry` (src/turbomind/models/llama/LlamaBatch.cc): each
  iteration takes new requests into free slots (up to `max_batch_size`), prefills them
  (`ContextDecode`, sub-batches of at most `max_context_token_num` tokens, eagerly), then
  runs `step_length` (1) decode steps (`Generate`) for every running sequence. The cache is
  blocks of `cache_block_seq_len` (128) tokens (BlockManager.cc): `cache_max_entry_count`
  below 1 is a share of the device's total memory, 1 or more a block count.
- **No CUDA graphs.** Every kernel of a decode step (cuBLAS GEMMs, TurboMind's fused kernels)
  is launched from C++ each step, overlapping the GPU's work: kernels x
  LMDEPLOY_LAUNCH_S_PER_KERNEL (the kernels counted as vLLM's layers, estimate/cuda_graphs.py).
- **A small host step.** Each iteration ends in `Finish`: the output ids and finished flags
  are copied to the host and `cudaStreamSynchronize` waits for them before the next
  iteration dequeues, materialises the sequences' blocks (SequenceManager) and launches again;
  the streamed tokens go to Python on a separate output thread. DECODE_HOST_STEP_S["lmdeploy"].
- **Decode attention reads a grouped KV head's cache once per CTA of query heads.**
  `DispatchDecoderMultiheadAttention` (src/turbomind/kernels/decoder_multihead_attention/
  decoder_multihead_attention.cu) gives one CTA `HeadPerCta` query heads of one KV head: 4
  when the group size divides by 4, else 2 when it divides by 2, else 1; an int8 cache
  (quant_policy kCacheKVInt8) always 1. Per decode step the cache is read
  group / HeadPerCta times (`kv_reads_per_decode_step`): 1 for multi-head attention, 2 for
  Llama-2-70B's groups of 8. Assumed: from DRAM, no reuse in L2.

Tensor parallelism is costed with the estimate's shared all-reduce. What this release takes
(`check_supported`): 16-bit weights or 4-bit AWQ weights (W4A16, `lmdeploy lite auto_awq`),
a 16-bit or int8 KV cache, dense decoders with full attention. Pure functions of counts; the
engine step that uses them is estimate/generation.py's.
"""

from __future__ import annotations

from gpuhours.errors import FieldError
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.arch import ModelArch

ENGINE = "lmdeploy"

#: TurboMind's KV-cache block, tokens (cache_block_seq_len default, LlamaTritonModel.cc)
CACHE_BLOCK_TOKENS = 128

#: the largest bytes per weight of a 4-bit AWQ checkpoint (4 bits + a 16-bit scale and 4-bit
#: zero per group of 128: 0.52; the estimate's documented 4-bit value is 0.56): above it and
#: below 2, the weights are 8-bit, which TurboMind 0.1 has no kernel for
MAX_4BIT_BYTES_PER_WEIGHT = 0.6


#: the head size TurboMind 0.1's decode attention is built for (decoder_multihead_attention.cu
#: @9c46b27c: FT_CHECK(params.size_per_head == HeadDim), HeadDim 128)
HEAD_DIM = 128
#: the model types TurboMind 0.1's converter takes as its LlamaV2 (lmdeploy/turbomind/deploy
#: source models at v0.1.0a1: Llama / Llama 2 / Code Llama, InternLM, Qwen-1 and Baichuan,
#: all Llama-shaped: RMSNorm, rotary, a SiLU-gated MLP); the estimate's configs read as these
MODEL_TYPES = frozenset({"llama", "internlm", "qwen", "baichuan"})
#: TurboMind 0.1 runs a tensor-parallel group as threads of one process, a GPU each (its
#: LlamaTritonModel's per-device instances over one NCCL communicator): one node
MAX_TENSOR_PARALLEL = 8


def check_supported(arch: ModelArch, weight_bytes_per_param: float,
                    kv_bytes_per_element: float, matmul_precision: str,
                    cuda_graphs: str, tensor_parallel: int = 1) -> None:
    """Refuse what TurboMind 0.1 does not run, naming the field: MoE layers, latent attention,
    recurrent mixers, sliding windows, vision towers, learned positions, parallel residuals and
    a head size other than HEAD_DIM (its LlamaV2 is a dense Llama-shaped decoder); 8-bit
    weights and fp8 GEMMs (its linears are fp16 or W4A16 AWQ); a KV cache other than 16-bit or
    int8 (quant_policy 4); CUDA graphs (it captures none); a tensor-parallel group beyond one
    node."""
    kinds = [k for k, has in (
        ("MoE layers", arch.is_moe), ("multi-head latent attention", arch.mla is not None),
        ("recurrent mixers (SSM, Gated DeltaNet)", bool(arch.ssm_state_elements)),
        ("sliding-window layers", bool(arch.sliding_window and arch.sliding_layers)),
        ("a vision tower", arch.vision is not None),
        ("learned position embeddings", bool(arch.position_embeddings)),
        ("a parallel residual", arch.parallel_residual),
        (f"head size {arch.head_dim} (TurboMind 0.1's decode attention takes {HEAD_DIM})",
         arch.head_dim != HEAD_DIM),
        ("q/k norms", arch.qk_norm),
        (f"model type {arch.model_type} (TurboMind 0.1 converts "
         f"{', '.join(sorted(MODEL_TYPES))})", arch.model_type not in MODEL_TYPES)) if has]
    if kinds:
        raise FieldError("engine", f"{arch.name} has {' and '.join(kinds)}: the lmdeploy engine "
                                   f"is modelled as LMDeploy 0.1's TurboMind: Llama-shaped dense "
                                   f"decoders only.", "Use --engine vllm or sglang for this model.")
    if matmul_precision != "bf16":
        raise FieldError("matmul_precision", f"TurboMind 0.1 has no {matmul_precision} GEMMs "
                                             "(fp16, or W4A16 AWQ weights).",
                         "Leave matmul_precision at bf16 for --engine lmdeploy.")
    if MAX_4BIT_BYTES_PER_WEIGHT < weight_bytes_per_param < 2.0:
        raise FieldError("weight_bytes_per_param",
                         f"{weight_bytes_per_param:g} bytes a weight is 8-bit: TurboMind 0.1 "
                         "runs 16-bit weights or 4-bit AWQ (W4A16) only.",
                         "Use 2 (fp16) or 0.56 (4-bit AWQ) for --engine lmdeploy.")
    if kv_bytes_per_element not in (1.0, 2.0):
        raise FieldError("kv_bytes_per_element",
                         f"{kv_bytes_per_element:g} bytes a KV element: TurboMind 0.1 keeps "
                         "its cache in fp16 (2) or int8 (1, quant_policy 4).",
                         "Use 2 or 1 for --engine lmdeploy.")
    if tensor_parallel > MAX_TENSOR_PARALLEL:
        raise FieldError("tensor_parallel", f"TurboMind 0.1 runs its tensor-parallel GPUs as "
                                            f"threads of one process, on one node (at most "
                                            f"{MAX_TENSOR_PARALLEL}); {tensor_parallel} asked.",
                         f"Use --tensor-parallel {MAX_TENSOR_PARALLEL} or fewer for --engine "
                         "lmdeploy.")
    if cuda_graphs == "on":
        raise FieldError("cuda_graphs", "TurboMind 0.1 captures no CUDA graphs: every decode "
                                        "step launches its kernels from C++.",
                         "Leave cuda_graphs at auto (or off) for --engine lmdeploy.")


def heads_per_cta(group_size: int, kv_int8: bool) -> int:
    """Query heads one decode-attention CTA serves (DispatchDecoderMultiheadAttention,
    v0.1.0a1): 1 for an int8 cache, else 4 if the group size divides by 4, 2 if by 2, else 1."""
    if kv_int8:
        return 1
    if group_size % 4 == 0:
        return 4
    return 2 if group_size % 2 == 0 else 1


def kv_reads_per_decode_step(arch: ModelArch, kv_bytes_per_element: float) -> float:
    """Times a decode step reads each GPU's KV cache: the group size (query heads per KV head,
    the same on every GPU of a tensor-parallel group) over heads_per_cta; 1 for multi-head
    attention."""
    group = max(1, arch.num_heads // max(1, arch.num_kv_heads))
    return group / heads_per_cta(group, kv_bytes_per_element < 2.0)


def kv_cache_room_bytes(memory_bytes: float, weights_bytes_per_gpu: float,
                        kv_bytes_per_token: float,
                        cache_max_entry_count: float | None = None) -> float:
    """Bytes the paged cache may take on each GPU: cache_max_entry_count (default
    LMDEPLOY_CACHE_MAX_ENTRY_COUNT) below 1 is that share of the device's total memory
    (BlockManager::GetBlockCount: total x ratio / block size), 1 or more that many blocks of
    CACHE_BLOCK_TOKENS tokens x `kv_bytes_per_token` (each GPU's); allocated a chunk at a time
    as sequences grow, so never more than what the weights and the CUDA context leave (a
    chunk beyond it cannot be allocated)."""
    count = (A.LMDEPLOY_CACHE_MAX_ENTRY_COUNT.value if cache_max_entry_count is None
             else cache_max_entry_count)
    wanted = (memory_bytes * count if count < 1.0
              else int(count) * CACHE_BLOCK_TOKENS * kv_bytes_per_token)
    return max(0.0, min(wanted, memory_bytes - A.CUDA_CONTEXT_BYTES.value
                        - weights_bytes_per_gpu))


def sequences_in_blocks(blocks: int, context_tokens: int) -> int:
    """Sequences of `context_tokens` (prompt + output) that `blocks` cache blocks of
    CACHE_BLOCK_TOKENS hold whole: each takes its tokens rounded up to whole blocks."""
    per_sequence = -(-context_tokens // CACHE_BLOCK_TOKENS)
    return blocks // per_sequence


def sequences_in_room(room_bytes: float, kv_bytes_per_token: float,
                      context_tokens: int) -> int:
    """Sequences the paged cache of `room_bytes` (kv_cache_room_bytes) holds: its whole blocks
    of CACHE_BLOCK_TOKENS tokens x `kv_bytes_per_token` (each GPU's), shared out by
    sequences_in_blocks."""
    blocks = int(room_bytes // (CACHE_BLOCK_TOKENS * kv_bytes_per_token))
    return sequences_in_blocks(blocks, context_tokens)
