"""Generation (RL rollouts, evaluation, serving): prefill, decode, KV cache, batch by memory.

One engine step (a prefill of the running prompts, or one decode token for each running
sequence) costs

    step_s = host_step_s[engine] + max(eager launches, device_s)
    device_s = max(bytes / (bandwidth x e_bw(d)), flops / (peak x e_gemm(d)))

- `host_step_s` is what does not overlap the GPU: scheduling, sampling, the token's trip back to
  the CPU; it does not grow with the model, which is why small models and HF `generate` run far
  below their bandwidth roofline. Eager launches are the host issuing each kernel: 0 on a
  replayed CUDA graph; for vLLM and SGLang steps outside their capture limits (or with
  cuda_graphs off) the counted kernels x EAGER_HOST_S_PER_KERNEL (estimate/cuda_graphs.py);
  for hf-generate layers x host_per_layer_s. They overlap the GPU's work, hence the max.
- bytes: every weight that a step reads (the input embedding is a gather of a few rows, so an
  untied embedding table is not read) plus the KV cache of every running sequence (times the
  engine's passes over it); flops: 2N + attention per token. Decode is bandwidth-bound at small
  batch and turns compute-bound when batch x flops outgrow the bytes (the roofline of
  Williams et al. 2009 per step, as in Pope et al. 2022). Prefill is the same step over all
  prompt tokens at once: compute-bound, but never faster than one read of the weights.
- Continuous batching: the engine runs at most `max_num_seqs` sequences at once and the KV cache
  caps the batch; sequences beyond the cap wait for a free slot (with equal lengths: waves).
  A batch of unequal lengths replayed through a paged engine's admission and preemption
  (estimate/paged_rollout.py) is timed stretch by stretch by `paged_rollout_time_s`, in the
  cache `paged_cache_tokens` gives.
- TensorRT-LLM 0.5-0.6 (`tensorrt-llm`, estimate/trtllm.py): a static batch whose contiguous
  KV cache is sized to it (the batch fits beside the weights, the context step's activations
  and the CUDA context: `_static_cap`), eager steps enqueued from C++ unless cuda_graphs is on,
  and a decode step that reads a grouped KV cache once per query head.
- LMDeploy 0.1's TurboMind (`lmdeploy`, estimate/lmdeploy.py): continuous batching over a paged
  cache of blocks (its share of memory: `_kv_room`), every kernel launched from C++ (no CUDA
  graphs), and a decode attention that reads a grouped KV head's cache once per CTA of up to
  four query heads.
- Tensor parallelism: each GPU reads 1/tp of the weights with GEMMs 1/tp as wide (the
  bandwidth's width term at d / tp) and adds two all-reduces a layer.
- hf-generate over several GPUs by device_map (estimate/device_map.py): the layers split in
  sequence, so the GPUs' work is one GPU's; the host adds accelerate's hook calls to its
  launches; memory is each GPU's share; the GPU hours count every GPU.
- Engine kernels that cost more than their bytes, where the engine's code shows why: SGLang
  0.4.6's quantised MoE GEMM launches one kernel per expert, empty ones included
  (`empty_expert_launches_s`); a fused MoE layer launches routing kernels a dense MLP does not
  (`routing_launches_s`); transformers' MoE loops over experts in Python, every one or the ones
  hit by release (`expert_loop_s`).

The constants are in estimate/assumptions.py (DECODE_*); the rows that set them and the accuracy
on the rows that did not are in docs/generation.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuhours.catalog.schema import USER_BANDWIDTH_SOURCE, GpuSpec
from gpuhours.errors import FieldDoesNotFit, FieldError, InputError
from gpuhours.estimate import assumptions as A
from gpuhours.estimate import hf_fp8, hf_quant, lmdeploy, trtllm
from gpuhours.estimate.arch import ModelArch
from gpuhours.estimate.blocks import routed_expert_params
from gpuhours.estimate.cuda_graphs import (
    CaptureRule,
    capture_rule,
    eager_kernels_per_forward,
    eager_launch_s,
)
from gpuhours.estimate.device_map import (
    DeviceShare,
    device_map_hook_calls,
    device_map_hooks_s,
    device_map_split,
    unsplittable,
)
from gpuhours.estimate.engine_reserve import ProfileReserve, profile_reserve
from gpuhours.estimate.figures import Figure, assumed, formula, given
from gpuhours.estimate.figures import catalog as from_catalog
from gpuhours.estimate.flops import generation_flops_per_token, prefill_flops_per_token
from gpuhours.estimate.hf_generate_memory import (
    DeviceParts,
    HfGeneratePeak,
    hf_generate_kv_cache_passes,
    hf_generate_mask_bytes_per_sequence,
    hf_generate_peak,
)
from gpuhours.estimate.paged_rollout import PagedRollout
from gpuhours.estimate.params import count_params
from gpuhours.estimate.timing import (
    gemm_efficiency,
    gemm_efficiency_assumptions,
    link_bandwidth_bytes_per_s,
    peak_flops,
)
from gpuhours.estimate.tp_allreduce import (
    VLLM_CUSTOM_ALLREDUCE_MAX_GPUS,
    tp_allreduce_latency_s,
)
from gpuhours.estimate.track_record import for_engine as track_record_for_engine
from gpuhours.estimate.weight_formats import released_note, sixteen_bit_params
from gpuhours.setup import Generation, Hardware, hf_release

#: midpoints over which the decode steps are summed (the step is piecewise linear in context)
_DECODE_SEGMENTS = 32


def kv_cache_bytes_per_token(arch: ModelArch, bytes_per_element: float = 2.0) -> float:
    """K and V of one token over all layers: 2 x layers x kv_heads x head_dim x bytes; with
    multi-head latent attention the compressed latent and the shared rotary key, layers x
    (kv_lora_rank + qk_rope_head_dim) x bytes (DeepSeek-V2, arXiv:2405.04434, Table 1; what
    transformers' DeepseekV3Attention caches and vLLM's MLA backend stores)."""
    return float(arch.kv_cache_elements_per_token) * bytes_per_element


def kv_bytes_per_token_per_gpu(arch: ModelArch, bytes_per_element: float,
                               tensor_parallel: int) -> float:
    """KV cache per token on each GPU of a tensor-parallel group: each holds
    ceil(kv_heads / tp) KV heads (replicated when there are fewer KV heads than GPUs). MLA's
    latent belongs to no head: every GPU of the group keeps all of it (vLLM's MLA backend
    under tensor parallelism)."""
    if arch.mla is not None:
        return kv_cache_bytes_per_token(arch, bytes_per_element)
    heads = math.ceil(arch.num_kv_heads / tensor_parallel)
    return 2.0 * arch.attention_layer_count * heads * arch.head_dim * bytes_per_element


def state_bytes_per_sequence_per_gpu(arch: ModelArch, bytes_per_element: float,
                                     tensor_parallel: int) -> float:
    """The recurrent state of one sequence in the SSM (Mamba-2) layers, on each GPU of a
    tensor-parallel group: (heads x head_dim x state + conv_dim x (conv_kernel - 1)) x layers x
    bytes / tp, the same whatever the sequence's length (it replaces a KV cache in those
    layers). Assumed: kept in the KV-cache dtype (vLLM's mamba_ssm_cache_dtype "auto") and
    split with the heads over the group, as vLLM's Mamba-2 layers shard them. A config that
    names the recurrent state's dtype (mamba_ssm_dtype: Qwen3.5's float32; Nemotron-H's
    mamba_ssm_cache_dtype; ModelArch.ssm_state_bytes) keeps that part in it, the conv windows
    in the KV dtype."""
    conv = arch.ssm_conv_state_elements
    recurrent = arch.ssm_state_elements - conv
    state_bytes = arch.ssm_state_bytes or bytes_per_element
    return (recurrent * state_bytes + conv * bytes_per_element) / tensor_parallel


def kv_tokens_held(arch: ModelArch, context_tokens: float) -> float:
    """Tokens' worth of KV cache (over all layers) a sequence of `context_tokens` holds: the
    whole context on global layers, min(context, window) on sliding-window layers (Gemma 2/3,
    Mistral, gpt-oss). Assumed both engines keep only the window there: vLLM's hybrid KV-cache
    manager frees the blocks that slid out, transformers' sliding-window cache layers keep the
    last `sliding_window` tokens. Llama 4's chunked layers keep up to one chunk (an upper
    bound: the current chunk's tokens)."""
    return arch.attended_tokens(context_tokens, cached=True)


#: bytes per weight of the embedding table and LM head under 8- or 4-bit weights: GPTQ, AWQ
#: and vLLM's fp8 quantise the decoder's linear layers and leave both in 16 bits (AutoGPTQ and
#: AutoAWQ skip lm_head; vLLM's ParallelLMHead and VocabParallelEmbedding take no
#: quantisation method of those schemes)
_UNQUANTISED_BYTES = 2.0


def _vocab_params(arch: ModelArch) -> tuple[int, int]:
    """(input embedding table, LM head) parameters: a tied table is the LM head."""
    p = count_params(arch)
    return (0, p.embedding) if arch.tie_embeddings else (p.embedding, p.lm_head)


def stored_weight_bytes(arch: ModelArch, bytes_per_param: float,
                        released_format: str | None = None) -> float:
    """All weights in memory: `bytes_per_param` each, but the embedding table and LM head stay
    16-bit under 8/4-bit weights (_UNQUANTISED_BYTES), and so does what a released format
    leaves unquantised (weight_formats.sixteen_bit_params)."""
    table, head = _vocab_params(arch)
    vocab_bytes = max(bytes_per_param, _UNQUANTISED_BYTES)
    kept = sixteen_bit_params(arch, released_format)
    return ((count_params(arch).total - table - head - kept) * bytes_per_param
            + (table + head) * vocab_bytes + kept * _UNQUANTISED_BYTES)


def weight_bytes_read_per_step(arch: ModelArch, bytes_per_param: float,
                               released_format: str | None = None) -> float:
    """Weights one forward step reads: all of them but an untied input embedding table, of
    which a step gathers only its tokens' rows (a tied table is read whole as the LM head);
    under 8/4-bit weights the LM head stays 16-bit (_UNQUANTISED_BYTES)."""
    table, head = _vocab_params(arch)
    head_bytes = max(bytes_per_param, _UNQUANTISED_BYTES)
    kept = sixteen_bit_params(arch, released_format)
    return ((count_params(arch).total - table - head - kept) * bytes_per_param + head * head_bytes
            + kept * _UNQUANTISED_BYTES)


def _unquantised_bytes_read(arch: ModelArch, bytes_per_param: float,
                            released_format: str | None = None) -> float:
    """Of weight_bytes_read_per_step, the 16-bit LM head's (and what a released format leaves
    16-bit) under 8/4-bit weights (0 under 16-bit weights: nothing is quantised)."""
    if bytes_per_param >= _UNQUANTISED_BYTES:
        return 0.0
    return (_vocab_params(arch)[1] + sixteen_bit_params(arch, released_format)) * _UNQUANTISED_BYTES


def experts_touched(arch: ModelArch, tokens: float) -> float:
    """Expected distinct experts of one MoE layer that `tokens` tokens route to, each to
    experts_per_token of num_experts: E x (1 - (1 - k/E)^tokens), routing taken as uniform
    and independent (a trained router is not; a skewed one touches fewer)."""
    e, k = arch.num_experts, arch.experts_per_token
    return e * (1.0 - (1.0 - k / e) ** max(tokens, 0.0))


def decode_bandwidth_efficiency(arch: ModelArch, tensor_parallel: int = 1) -> float:
    """Fraction of datasheet bandwidth a decode step's weight reads reach:
    BANDWIDTH_EFFICIENCY x d / (d + DECODE_BANDWIDTH_HALF_WIDTH) (narrow models launch too few
    thread blocks per skinny GEMM to saturate HBM), d the width of each GPU's share of the
    layer: hidden_size / tensor_parallel (a tensor-parallel group splits every GEMM's columns
    or rows, so each GPU runs GEMMs 1/tp as wide, with as many fewer thread blocks)."""
    d = arch.hidden_size / tensor_parallel
    return A.BANDWIDTH_EFFICIENCY.value * d / (d + A.DECODE_BANDWIDTH_HALF_WIDTH.value)


def hf_kv_copy_bytes_per_s(gpu: GpuSpec) -> float | None:
    """Bytes per second transformers' generate moves its KV cache at in a decode step (each
    counted pass of hf_generate_kv_cache_passes: DynamicCache's torch.cat, repeat_kv's copy,
    attention's read) on `gpu`: sm_count x boost clock x HF_KV_COPY_BYTES_PER_SM_CYCLE; None
    where the catalog records no SM count and clock (then DECODE_KV_PASSES["hf-generate"]
    times the bandwidth-time of the bytes, the form fitted before). The copies are eager
    elementwise kernels on 2-byte elements through torch's generic strided path (repeat_kv's
    `expand(...).reshape(...)` of a broadcast view; torch.cat's batched copy along the
    sequence dimension), whose per-element index arithmetic runs on the SMs' integer units:
    their rate follows SMs x clock, not DRAM bandwidth. Checked on held-out rows: the time
    per counted pass between each model's 14K- and 30K-prompt rows is 851-871 GB/s on an A100
    (Qwen2.5-7B/14B/32B, 2.0 TB/s, 108 SMs x 1.41 GHz) and 858-884 GB/s on an H20 (Qwen3-1.7B
    to 32B, 4.0 TB/s, 78 x ~1.98 GHz): equal where the SMs x clock are (152 and 154 G/s) and
    the bandwidths are 2x apart (gpuhours_dev.validation.hf_kv_rate, docs/generation.md)."""
    if gpu.sm_count is None or gpu.boost_clock_mhz is None:
        return None
    return gpu.sm_count * gpu.boost_clock_mhz * 1e6 * A.HF_KV_COPY_BYTES_PER_SM_CYCLE.value


def decode_bandwidth_gb_per_s(gpu: GpuSpec) -> tuple[float, str | None]:
    """The bandwidth (GB/s) generation is costed at, before decode_bandwidth_efficiency, and
    where it comes from when it is not the datasheet's (None): the catalog's
    `decode_bw_gb_per_s` of a part whose decode is known to fall short of its datasheet (the
    h20: the figure its validation rows were fitted with, docs/generation.md), with its
    `decode_bw_source`; a bandwidth the user gives replaces both (resolve_gpu)."""
    if gpu.decode_bw_gb_per_s is not None:
        return gpu.decode_bw_gb_per_s, gpu.decode_bw_source
    return gpu.memory_bw_gb_per_s, None


def dequant_weights_per_s(gpu: GpuSpec) -> float | None:
    """Weights per second a weight-only quantised (GPTQ/AWQ) GEMM can dequantise on `gpu`:
    sm_count x boost clock x DEQUANT_WEIGHTS_PER_SM_CYCLE (the conversion's instructions run
    on the SMs, assumptions.py); None where the catalog records no SM count and clock (then
    not costed: the weights take their bytes' time alone)."""
    if gpu.sm_count is None or gpu.boost_clock_mhz is None:
        return None
    return gpu.sm_count * gpu.boost_clock_mhz * 1e6 * A.DEQUANT_WEIGHTS_PER_SM_CYCLE.value


def engine_max_num_seqs_default(engine: str, gpu: GpuSpec) -> A.Assumption | None:
    """The engine's own max_num_seqs default on `gpu` (None: no cap, hf-generate runs the whole
    batch). vLLM V1 takes 1,024 on a GPU of 70 GiB or more not named A100, 256 otherwise
    (EngineArgs.get_batch_defaults, vllm/engine/arg_utils.py 0.11.2 and 0.17.1); V0 256."""
    if (engine == "vllm" and gpu.memory_bytes >= A.VLLM_LARGE_GPU_GIB * 2**30
            and "a100" not in gpu.name.lower()):
        return A.VLLM_LARGE_GPU_MAX_NUM_SEQS
    return A.ENGINE_MAX_NUM_SEQS.get(engine)


def engine_max_num_seqs(g: Generation, gpu: GpuSpec) -> int | None:
    """Sequences the engine runs at once: the setup's, else the engine's default on `gpu`
    (engine_max_num_seqs_default; None: no cap, hf-generate runs the whole batch)."""
    if g.max_num_seqs is not None:
        return g.max_num_seqs
    cap = engine_max_num_seqs_default(g.engine, gpu)
    return None if cap is None else int(cap.value)


@dataclass(frozen=True)
class GenerationEstimate:
    """`batch` sequences generated on one GPU replica. Times in s, sizes in bytes."""

    engine: str
    #: GPUs of one replica (tensor parallelism); times are the group's, memory per GPU
    gpus: int
    batch: int
    max_batch_by_memory: int
    #: sequences running at once: min(batch, the engine's max_num_seqs)
    running_sequences: int
    #: rounds of `running_sequences` needed for `batch` (continuous batching, equal lengths)
    waves: int
    max_num_seqs: int | None
    weights_bytes: float
    weights_read_bytes_per_step: float
    kv_cache_bytes: float
    decode_bandwidth_efficiency: float
    #: bandwidth before decode_bandwidth_efficiency, GB/s
    bandwidth_gb_per_s: float
    host_step_s: float
    allreduce_s_per_decode_step: float
    prefill_s: float
    decode_s: float
    decode_step_s_first: float
    decode_step_s_last: float
    decode_bound: str
    sequences_per_s: float
    output_tokens_per_s: float
    #: the longest output decoded alone beyond the last wave's mean work (0 without
    #: max_output_tokens): the run waits for it
    tail_s: float = 0.0
    #: where the host costs came from when a measurement set them (None: assumed)
    calibration: str | None = None
    #: the host CPU's time for the engine's host work over the x86 hosts DECODE_HOST_* were
    #: fitted on (`host_cpu_ratio`: the catalog's host_op_time_ratio; 1 for an x86 host)
    host_cpu_ratio: float = 1.0
    #: the GPU whose machine's host CPU that ratio is of
    gpu_name: str = ""
    #: where the decode bandwidth comes from when it is not the datasheet's (the catalog's
    #: decode_bw_source; None: the datasheet's)
    bandwidth_source: str | None = None
    #: whether the decode steps replay a CUDA graph or run eagerly, and why
    #: (estimate/cuda_graphs.py CaptureRule.reason)
    cuda_graphs: str = ""
    #: host time issuing the first decode step's kernels (0 on a replayed graph), s
    eager_launch_s_first: float = 0.0
    #: kernels an eager decode forward launches (counted; cuda_graphs.eager_kernels_per_forward)
    eager_kernels: int = 0
    #: what set max_batch_by_memory: the KV cache (vLLM, SGLang), or for hf-generate the phase
    #: and transient of the capped batch's peak (hf_generate_memory.HfGeneratePeak.describe)
    memory_cap: str = ""
    #: hf-generate: the peak of the batch run, with allocator reserve and CUDA context, bytes
    #: per GPU (None for vLLM and SGLang: their KV cache is sized to the share)
    peak_memory_bytes: float | None = None
    #: hf-generate: what set that peak (HfGeneratePeak.describe)
    peak_memory: str = ""
    #: vLLM: its startup profile's peak beyond the weights, kept out of the KV cache, bytes per
    #: GPU (estimate/engine_reserve.py; 0 for SGLang and hf-generate)
    profile_reserve_bytes: float = 0.0
    #: what that reserve is (ProfileReserve.describe)
    profile_reserve: str = ""
    #: hf-generate over several GPUs by device_map: each GPU's blocks and weights ("" on one
    #: GPU or under tensor parallelism)
    device_map: str = ""
    #: host seconds accelerate's hooks add to each forward (device_map; 0 without)
    hooks_s: float = 0.0
    #: hook calls of one forward (device_map; 0 without)
    hook_calls: int = 0
    #: host seconds each running sequence's logprob adds to a decode step when the requests
    #: ask for them (Generation.returns_logprobs; 0 without)
    logprob_host_s_per_sequence: float = 0.0

    @property
    def batch_time_s(self) -> float:
        return self.prefill_s + self.decode_s + self.tail_s

    def figures(self) -> dict[str, Figure]:
        """Every number with its unit and basis (what `generation --json` prints)."""
        src = "estimate/generation.py"
        eng = self.engine
        cap = ("no engine cap" if self.max_num_seqs is None else
               f"max_num_seqs {self.max_num_seqs} (the setup's, else the engine's default "
               f"on this GPU: assumptions.ENGINE_MAX_NUM_SEQS[{eng}], vLLM V1 1,024 on a GPU "
               f"of 70 GiB or more not named A100)")
        out: dict[str, Figure] = {
            "batch": formula(self.batch, "sequences",
                             "the setup's batch, else min(max_batch_by_memory, max_num_seqs)"),
            "max_batch_by_memory": formula(
                self.max_batch_by_memory, "sequences",
                "TensorRT-LLM's static batch: (memory - cuda_context_bytes - weights) / (the "
                "sequence's contiguous KV cache of prompt + output tokens + its context step's "
                "activations, prompt x the layer's transient elements x 2 bytes), per GPU "
                "(estimate/trtllm.py)" if eng == trtllm.ENGINE else
                "TurboMind's paged cache: min(memory x cache_max_entry_count (or its count of "
                "128-token blocks), memory - cuda_context_bytes - weights) in whole 128-token "
                "blocks, a sequence's prompt + output rounded up to them, per GPU "
                "(estimate/lmdeploy.py)" if eng == lmdeploy.ENGINE else
                f"(memory x generation_memory_utilisation - weights - profile_reserve_bytes) / "
                f"KV bytes per sequence ({src})" if self.peak_memory_bytes is None else
                "the largest batch whose peak (weights + KV cache + the largest transient of "
                "the prefill or a decode step, counted from transformers' code) x (1 + "
                "allocator_reserve_fraction) + cuda_context_bytes fits the device "
                f"(estimate/hf_generate_memory.py); set by the {self.memory_cap}"),
            "running_sequences": formula(self.running_sequences, "sequences",
                                         f"min(batch, max_num_seqs); {cap}"),
            "waves": formula(self.waves, "rounds", "ceil(batch / running_sequences)"),
            "weights_bytes": formula(self.weights_bytes, "bytes (GB = 1e9)",
                                     "parameters x weight_bytes_per_param (whole model; "
                                     "under 8/4-bit weights the embedding and LM head stay "
                                     "16-bit, and with weights as released what their format "
                                     "leaves unquantised)"),
            "weights_read_bytes_per_step": formula(
                self.weights_read_bytes_per_step, "bytes (GB = 1e9)",
                "parameters a decode step of the running sequences reads (an untied input "
                "embedding is gathered, not read; of an MoE's routed experts, those its tokens "
                "route to: E x (1 - (1 - k/E)^sequences), uniform routing assumed) x "
                "weight_bytes_per_param (the LM head 16-bit under 8/4-bit weights) / "
                "tensor_parallel, per GPU"),
            "kv_cache_bytes": formula(self.kv_cache_bytes, "bytes (GB = 1e9)",
                                      "running sequences x ((prompt + output) x 2 x "
                                      "attention layers x KV heads per GPU x head_dim (MLA: "
                                      "layers x (kv_lora_rank + qk_rope_head_dim)) + SSM "
                                      "state) x kv_bytes_per_element, per GPU" + (
                                          "; device_map: the GPU with the most layers, its "
                                          "layers' share" if self.device_map else "")),
            "decode_bandwidth_efficiency": assumed(
                self.decode_bandwidth_efficiency, "fraction of bandwidth_gb_per_s",
                "bandwidth_efficiency x d / (d + decode_bandwidth_half_width), d = hidden_size "
                "/ tensor_parallel (each GPU's GEMM width), assumptions.py"),
            "bandwidth_gb_per_s": from_catalog(self.bandwidth_gb_per_s, "GB/s",
                                               "the GPU's datasheet memory bandwidth")
            if self.bandwidth_source is None else given(
                self.bandwidth_gb_per_s, "GB/s", self.bandwidth_source)
            if self.bandwidth_source == USER_BANDWIDTH_SOURCE else assumed(
                self.bandwidth_gb_per_s, "GB/s",
                "the GPU catalog's decode_bw_gb_per_s, not its datasheet figure: "
                + self.bandwidth_source),
            "profile_reserve_bytes": formula(
                self.profile_reserve_bytes, "bytes (GB = 1e9)",
                f"{self.profile_reserve}: max(tokens x (2 d + the MLP's intermediates per GPU) "
                "x 2 bytes, tokens x d x 2 + requests x vocab x 32 bytes of the sampler's "
                "top-k/top-p tensors), kept out of the KV cache as vLLM's startup profile "
                "keeps it (estimate/engine_reserve.py); memory outside torch (CUDA context, "
                "NCCL) and CUDA graphs (captured after the cache is sized) not counted"),
            "gpus": formula(self.gpus, "GPUs", "tensor_parallel: GPUs of one replica"
                            if not self.device_map else "device_map_gpus: GPUs the layers "
                            "are split over, in sequence"),
            "allreduce_s_per_decode_step": formula(
                self.allreduce_s_per_decode_step, "s",
                "2 x layers x (all-reduce latency: tp_allreduce_latency_s within a node of up "
                "to 8, NCCL's model beyond (estimate/tp_allreduce.py) + 2(tp-1)/tp x running "
                "x d x 2 bytes / link bandwidth); 0 without tensor parallelism"),
            "host_step_s": assumed(self.host_step_s, "s per engine step",
                                   f"assumptions.DECODE_HOST_STEP_S[{eng}]" + (
                                       f" x {self.host_cpu_ratio:g} for {self.gpu_name}'s "
                                       "host CPU (catalog host_op_time_ratio)"
                                       if self.host_cpu_ratio != 1.0 else ""))
            if self.calibration is None else Figure(
                value=self.host_step_s, unit="s per engine step", basis="measured",
                source=self.calibration),
            "prefill_s": formula(self.prefill_s, "s",
                                 "per wave: host step + max(prompt FLOPs / (peak x GEMM "
                                 "efficiency), weight read / bandwidth) (+ hf-generate's "
                                 "Python loop over an MoE's experts)"),
            "decode_s": formula(self.decode_s, "s",
                                "per wave: sum over output tokens of host step + max(eager "
                                "launches, weight + KV bytes / bandwidth (8/4-bit weights "
                                "on vLLM/SGLang or GPTQModel: or their count / the SMs' "
                                "dequantisation rate; AutoAWQ: + its split-k partials or "
                                "dequantised weights), FLOPs / peak) (+ small kernels where the step has "
                                "them: MoE routing, fp8 "
                                "input quantisation, quantised GEMMs' fixed time; + "
                                "hf-generate's Python loop over an MoE's experts)"),
            "eager_launch_s_first": formula(
                self.eager_launch_s_first, "s per decode step",
                f"{self.cuda_graphs}; eager: {self.eager_kernels} kernels a forward (counted, "
                "estimate/cuda_graphs.py) x assumptions.EAGER_HOST_S_PER_KERNEL (tensorrt-llm: "
                "TRTLLM_ENQUEUE_S_PER_KERNEL; lmdeploy: LMDEPLOY_LAUNCH_S_PER_KERNEL; "
                "hf-generate: layers x DECODE_HOST_PER_LAYER_S, "
                "+ GPTQModel's or AutoAWQ's linears' own, estimate/hf_quant.py), "
                "overlapping the GPU's work; 0 on a replayed CUDA graph"),
            "decode_step_s_first": formula(self.decode_step_s_first, "s",
                                           "first decode step (context = prompt)"),
            "decode_step_s_last": formula(self.decode_step_s_last, "s",
                                          "last decode step (context = prompt + output)"),
            "tail_s": formula(self.tail_s, "s",
                              "max(0, one sequence's prefill + decode of max_output_tokens "
                              "alone - the last wave at the mean): the run waits for its "
                              "longest output; 0 without max_output_tokens"),
            **({} if not self.logprob_host_s_per_sequence else {
                "logprob_host_s_per_sequence": Figure(
                    value=self.logprob_host_s_per_sequence,
                    unit="s per running sequence per decode step", basis="measured",
                    source="assumptions.DECODE_HOST_LOGPROB_S_PER_SEQUENCE: vLLM 0.11.2's "
                    "LogprobsLists.slice + LogprobsProcessor timed on this project's 2-core "
                    "x86 VM (scripts/bench_vllm_logprob_host.py), taken for the GPU host's CPU "
                    "(an assumption)" + (f", x {self.host_cpu_ratio:g} for {self.gpu_name}'s "
                                         "host CPU (catalog host_op_time_ratio)"
                                         if self.host_cpu_ratio != 1.0 else "")
                    + "; added to each decode step's host work x running sequences, serial "
                    "with the GPU unless async scheduling")}),
            **({} if not self.device_map else {"hooks_s": formula(
                self.hooks_s, "s per forward",
                f"{self.hook_calls} accelerate hook calls (layers x hooks a layer + 5, counted "
                "from accelerate 1.0.1's hooks.py; estimate/device_map.py) x "
                "assumptions.ACCELERATE_HOOK_HOST_S, host time beside the launches; split: "
                f"{self.device_map}")}),
            **({} if self.peak_memory_bytes is None else {"peak_memory_bytes": formula(
                self.peak_memory_bytes, "bytes (GB = 1e9)",
                "transformers' generate at this batch, per GPU: weights + KV cache + the "
                "largest transient, x (1 + allocator_reserve_fraction) + cuda_context_bytes "
                f"(estimate/hf_generate_memory.py); {self.peak_memory}")}),
            "batch_time_s": formula(self.batch_time_s, "s", "prefill_s + decode_s + tail_s"),
            "sequences_per_s": formula(self.sequences_per_s, "sequences/s",
                                       "batch / batch_time_s"),
            "output_tokens_per_s": formula(self.output_tokens_per_s, "tokens/s",
                                           "batch x output_tokens / batch_time_s"),
        }
        return out


def max_batch_by_memory(arch: ModelArch, g: Generation, gpu: GpuSpec,
                        memory_utilisation: float | None = None) -> int:
    """Sequences that fit on each GPU of the tensor-parallel group (weights split tp ways).
    vLLM and SGLang: those whose full KV cache (prompt + output, KV heads as
    kv_bytes_per_token_per_gpu) and SSM state (state_bytes_per_sequence_per_gpu) fit beside the
    weights and, for vLLM, the peak of its startup profile (engine_profile_reserve) in the
    engine's share, `memory_utilisation` (vLLM gpu_memory_utilization; default
    assumptions.GENERATION_MEMORY_UTILISATION). tensorrt-llm: the static batch whose contiguous
    KV cache (prompt + output tokens) and context-step activations fit beside the weights and
    the CUDA context in all of the device (estimate/trtllm.py). hf-generate: the largest batch whose peak
    (estimate/hf_generate_memory.py: the prefill's or a decode step's largest transient beside
    the KV cache and weights, the allocator reserve and CUDA context) fits in
    `memory_utilisation` of the device (default: all of it; transformers reserves no share)."""
    return memory_cap(arch, g, gpu, memory_utilisation)[0]


def _kv_cap(arch: ModelArch, g: Generation, gpu: GpuSpec, share: float) -> int:
    """Sequences whose KV cache and state fit beside the weights and the engine's profiling
    reserve (vLLM: engine_profile_reserve) in `share` of the device."""
    tp = g.tensor_parallel
    weights, reserve, usable = _kv_room(arch, g, gpu, share)
    per_seq = kv_bytes_per_token_per_gpu(arch, g.kv_bytes_per_element, tp) * kv_tokens_held(
        arch, g.prompt_tokens + g.output_tokens) + state_bytes_per_sequence_per_gpu(
        arch, g.kv_bytes_per_element, tp)
    fits = None
    if g.engine == lmdeploy.ENGINE:  # whole 128-token blocks a sequence (estimate/lmdeploy.py)
        fits = lmdeploy.sequences_in_room(
            usable, kv_bytes_per_token_per_gpu(arch, g.kv_bytes_per_element, tp),
            g.prompt_tokens + g.output_tokens)
        if fits < 1 and g.cache_max_entry_count is not None:
            raise FieldDoesNotFit(
                "cache_max_entry_count", f"the cache cache_max_entry_count "
                f"{g.cache_max_entry_count:g} sets ({usable / 1e9:.2f} GB a GPU) holds no "
                f"sequence of {g.prompt_tokens + g.output_tokens:,} tokens in whole "
                f"{lmdeploy.CACHE_BLOCK_TOKENS}-token blocks.",
                "Give a larger cache_max_entry_count (a share of the device below 1, else "
                "blocks), or shorter sequences.")
        if fits >= 1:
            return fits
    if usable <= per_seq or fits == 0:
        where = (f"{gpu.name} ({gpu.memory_gb:g} GB)" if tp == 1 else
                 f"{tp} x {gpu.name} ({gpu.memory_gb:g} GB each)")
        raise FieldDoesNotFit(
            "gpu" if tp == 1 else ("gpu", "tensor_parallel"),
            f"{arch.name} weights ({weights / 1e9:.1f} GB)"
            + (f" and {reserve.describe()} ({reserve.bytes / 1e9:.1f} GB a GPU)"
               if reserve.bytes else "")
            + f" leave no room for one sequence's KV cache on {where}.",
            "Use a larger GPU, a quantised model, or more tensor parallelism"
            + (" (hf-generate: split the layers over GPUs by device_map)."
               if g.engine in _COPIES_KV and not unsplittable(arch) else "."),
        )
    return int(usable // per_seq)


def _static_cap(arch: ModelArch, g: Generation, gpu: GpuSpec, share: float) -> int:
    """TensorRT-LLM's static batch (estimate/trtllm.py): the sequences whose contiguous KV
    cache of prompt + output tokens (every layer holds the whole length: the buffer is
    [batch, 2, KV heads, maxSeqLength, head size]) and the context step's activations fit
    beside the weights and the CUDA context in `share` of each GPU."""
    tp = g.tensor_parallel
    per_seq = (kv_bytes_per_token_per_gpu(arch, g.kv_bytes_per_element, tp)
               * (g.prompt_tokens + g.output_tokens))
    where = (f"{gpu.name} ({gpu.memory_gb:g} GB)" if tp == 1 else
             f"{tp} x {gpu.name} ({gpu.memory_gb:g} GB each)")
    return trtllm.static_batch_cap(
        gpu.memory_bytes * share,
        stored_weight_bytes(arch, g.weight_bytes_per_param, g.released_format) / tp, per_seq,
        trtllm.workspace_bytes_per_sequence(arch, g.prompt_tokens, tp), where, arch.name,
        "gpu" if tp == 1 else ("gpu", "tensor_parallel"))


def _kv_room(arch: ModelArch, g: Generation, gpu: GpuSpec,
             share: float) -> tuple[float, ProfileReserve, float]:
    """(the stored weights' bytes, the engine's profiling reserve, the bytes left for KV cache
    and state on each GPU of the tensor-parallel group in `share` of the device)."""
    weights = stored_weight_bytes(arch, g.weight_bytes_per_param, g.released_format)
    reserve = engine_profile_reserve(arch, g, gpu)
    if g.engine == lmdeploy.ENGINE:
        # TurboMind's blocks: cache_max_entry_count of the device, what the weights leave
        return weights, reserve, lmdeploy.kv_cache_room_bytes(
            gpu.memory_bytes * share, weights / g.tensor_parallel,
            kv_bytes_per_token_per_gpu(arch, g.kv_bytes_per_element, g.tensor_parallel),
            g.cache_max_entry_count)
    return weights, reserve, (gpu.memory_bytes * share - weights / g.tensor_parallel
                              - reserve.bytes)


def engine_profile_reserve(arch: ModelArch, g: Generation, gpu: GpuSpec) -> ProfileReserve:
    """What the engine's startup profile keeps out of its KV cache, per GPU
    (estimate/engine_reserve.py; 0 for SGLang and hf-generate)."""
    return profile_reserve(arch, g.engine, gpu.memory_bytes, engine_max_num_seqs(g, gpu),
                           g.tensor_parallel, gpu.name)


def device_map_shares(arch: ModelArch, g: Generation, gpu: GpuSpec) -> list[DeviceShare]:
    """The setup's split over device_map_gpus GPUs (estimate/device_map.py), each with what
    torch reports free before the model loads: the device's memory less the CUDA context."""
    return device_map_split(arch, g.weight_bytes_per_param, g.device_map_gpus,
                            gpu.memory_bytes - A.CUDA_CONTEXT_BYTES.value)


def _describe_shares(arch: ModelArch, shares: list[DeviceShare]) -> str:
    parts = []
    for s in shares:
        what = (["embedding"] if s.embedding else []) + (
            [f"layers {s.first_layer}-{s.first_layer + s.layers - 1}"] if s.layers else []) + (
            ["LM head"] if s.head else [])
        parts.append(f"GPU {s.gpu}: {' + '.join(what)} ({s.weights_bytes / 1e9:.1f} GB)")
    return "; ".join(parts)


def _device_map_peak(arch: ModelArch, g: Generation, batch: int,
                     gpu: GpuSpec) -> HfGeneratePeak:
    """The largest of the device_map GPUs' peaks (each: its weights, its layers' KV cache, the
    transients of the parts it holds: hf_generate_memory.DeviceParts)."""
    kv_token = kv_bytes_per_token_per_gpu(arch, g.kv_bytes_per_element, 1)
    held = {"prefill": kv_tokens_held(arch, g.prompt_tokens),
            "decode": kv_tokens_held(arch, g.prompt_tokens + g.output_tokens)}
    peaks = []
    for s in device_map_shares(arch, g, gpu):
        share = s.layers / arch.num_layers
        peaks.append(hf_generate_peak(
            arch, g.hf_transformers_version, batch, g.prompt_tokens, g.output_tokens,
            s.weights_bytes, kv_token * share, held, 1,
            parts=DeviceParts(layers=s.layers > 0, head=s.head, sampler=s.gpu == 0),
            kv_layers=max(1, s.layers)))
    return max(peaks, key=lambda p: p.reserved_bytes)


def hf_generate_peak_of(arch: ModelArch, g: Generation, batch: int,
                        gpu: GpuSpec | None = None) -> HfGeneratePeak:
    """hf_generate_peak for `batch` sequences of this setup, per GPU (with device_map_gpus,
    the GPU whose peak is the largest, which needs the `gpu`)."""
    if g.device_map_gpus > 1:
        if gpu is None:
            raise ValueError("a device_map split needs the GPU")
        return _device_map_peak(arch, g, batch, gpu)
    tp = g.tensor_parallel
    kv_token = kv_bytes_per_token_per_gpu(arch, g.kv_bytes_per_element, tp)
    state = state_bytes_per_sequence_per_gpu(arch, g.kv_bytes_per_element, tp)
    return hf_generate_peak(
        arch, g.hf_transformers_version, batch, g.prompt_tokens, g.output_tokens,
        stored_weight_bytes(arch, g.weight_bytes_per_param, g.released_format) / tp, kv_token,
        {"prefill": kv_tokens_held(arch, g.prompt_tokens),
         "decode": kv_tokens_held(arch, g.prompt_tokens + g.output_tokens)}, tp,
        state_bytes_per_sequence=state, quant_linear=g.hf_quant_linear)


def engine_memory_share(g: Generation, memory_utilisation: float | None = None) -> float:
    """The share of the device the engine may fill: `memory_utilisation` when given; else
    vLLM's/SGLang's default gpu_memory_utilization (GENERATION_MEMORY_UTILISATION), or the
    whole device for hf-generate, whose peak counts the allocator reserve and CUDA context
    itself (hf_generate_peak), for TensorRT-LLM, whose static batch allocates its buffers
    outright (estimate/trtllm.py), and for LMDeploy, whose cache takes its own share of it
    (lmdeploy.kv_cache_room_bytes)."""
    if memory_utilisation is not None:
        return memory_utilisation
    return (1.0 if g.engine in _COPIES_KV or g.engine in (trtllm.ENGINE, lmdeploy.ENGINE)
            else A.GENERATION_MEMORY_UTILISATION.value)


def memory_cap(arch: ModelArch, g: Generation, gpu: GpuSpec,
               memory_utilisation: float | None = None) -> tuple[int, HfGeneratePeak | None]:
    """max_batch_by_memory and, for hf-generate, the peak of that batch (what set the cap;
    None for vLLM, SGLang and TensorRT-LLM, whose KV cache sets it)."""
    share = engine_memory_share(g, memory_utilisation)
    if g.engine == trtllm.ENGINE:
        return _static_cap(arch, g, gpu, share), None
    if g.engine not in _COPIES_KV:
        return _kv_cap(arch, g, gpu, share), None
    budget = gpu.memory_bytes * share
    # the KV cache alone bounds the batch from above; the peak grows with the batch: bisect
    hi = (_kv_cap(arch, g, gpu, share) if g.device_map_gpus == 1
          else _device_map_kv_cap(arch, g, gpu, budget))
    lo = 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if hf_generate_peak_of(arch, g, mid, gpu).reserved_bytes <= budget:
            lo = mid
        else:
            hi = mid - 1
    if lo == 0:
        one = hf_generate_peak_of(arch, g, 1, gpu)
        raise FieldDoesNotFit(
            "gpu" if g.tensor_parallel == 1 and g.device_map_gpus == 1 else
            ("gpu", "tensor_parallel") if g.tensor_parallel > 1 else ("gpu", "device_map_gpus"),
            f"transformers' generate cannot run one sequence of {arch.name} on {gpu.name} "
            f"({budget / 1e9:.1f} GB for it): {one.describe(g.prompt_tokens)}.",
            "Use a larger GPU, shorter prompts, a quantised model, or vLLM/SGLang.")
    return lo, hf_generate_peak_of(arch, g, lo, gpu)


def _device_map_kv_cap(arch: ModelArch, g: Generation, gpu: GpuSpec, budget: float) -> int:
    """Sequences whose KV cache fits beside each device_map GPU's weights in `budget`: an upper
    bound on the batch (the peak adds transients, the allocator reserve and the context)."""
    per_layer_seq = (kv_bytes_per_token_per_gpu(arch, g.kv_bytes_per_element, 1)
                     * kv_tokens_held(arch, g.prompt_tokens + g.output_tokens)
                     / arch.num_layers)
    caps = [int(max(0.0, budget - s.weights_bytes) // (per_layer_seq * s.layers))
            for s in device_map_shares(arch, g, gpu) if s.layers]
    return min(caps)


@dataclass(frozen=True)
class _Step:
    """The cost of one engine step of a setup on a GPU (see the module docstring)."""

    arch: ModelArch
    engine: str
    peak_flops: float
    gemm_efficiency: float
    bandwidth_bytes_per_s: float
    weights_read_bytes: float
    kv_bytes_per_token: float
    tensor_parallel: int
    link_bytes_per_s: float
    #: one all-reduce's latency in the group (estimate/tp_allreduce.py), s
    allreduce_latency_s: float = A.TP_ALLREDUCE_LATENCY_S.value
    #: a measured host relative to the engine's assumed one (calibration; 1 = assumed)
    host_scale: float = 1.0
    #: SSM state per sequence and GPU: read and written back by every decode step
    state_bytes_per_sequence: float = 0.0
    #: of weights_read_bytes, the routed experts' (per GPU): a step reads only the experts
    #: its tokens route to (experts_touched)
    routed_bytes: float = 0.0
    #: weight-only 8/4-bit weights (GPTQ/AWQ: fewer than 2 bytes a weight, bf16 matmuls)
    weight_only_quantised: bool = False
    #: the transformers release an hf-generate step runs (Generation.hf_transformers_version)
    hf_transformers_version: str = "4.46"
    #: of weights_read_bytes, the 16-bit ones (embedding table, LM head) under 8/4-bit weights
    unquantised_bytes: float = 0.0
    #: bytes per quantised weight (Generation.weight_bytes_per_param)
    weight_bytes_per_param: float = 2.0
    #: weights per second the GPU can dequantise (dequant_weights_per_s; 0: not costed)
    dequant_weights_per_s: float = 0.0
    #: small kernels a layer launches to quantise the inputs of W8A8 (fp8) GEMMs
    #: (FP8_ACTIVATION_QUANT_KERNELS; 0 under 16-bit or weight-only quantised GEMMs)
    activation_quant_kernels: int = 0
    #: when a decode step replays a CUDA graph (estimate/cuda_graphs.py)
    capture: CaptureRule = CaptureRule("vllm", "auto", None, None)
    #: kernels an eager forward launches (cuda_graphs.eager_kernels_per_forward)
    eager_kernels: int = 0
    #: bytes/s an engine that copies its KV cache every step (hf-generate) moves it at on
    #: this GPU (hf_kv_copy_bytes_per_s; 0: not known, the bandwidth form instead)
    kv_copy_bytes_per_s: float = 0.0
    #: transformers' FP8Linear (hf-generate with fp8 weights, estimate/hf_fp8.py): its device
    #: syncs a linear by release (None: not this path); with any, host and GPU are serial
    fp8_syncs: int | None = None
    #: bytes/s the block-fp8 GEMMs stream at before their grid share (bandwidth x
    #: BANDWIDTH_EFFICIENCY, without the decode reads' width term)
    fp8_gemm_bandwidth_bytes_per_s: float = 0.0
    #: the GPU's SMs, for the block-fp8 GEMM's grid share (0: not in the catalog, share 1)
    sm_count: int = 0
    #: times a decode step reads the KV cache per DECODE_KV_PASSES pass: TensorRT-LLM's
    #: masked attention reads it once per query head of a group (trtllm.kv_reads_per_decode_step)
    kv_reads: float = 1.0
    #: host seconds of accelerate's hooks a forward (hf-generate by device_map; 0 without)
    hooks_s: float = 0.0
    #: the library whose quantised linears hf-generate runs (estimate/hf_quant.py; None: none)
    hf_quant_linear: str | None = None
    #: vLLM's async scheduling (Generation.async_scheduling): host step beside the GPU's
    async_scheduling: bool = False
    #: the requests ask for their sampled tokens' logprobs (Generation.returns_logprobs)
    returns_logprobs: bool = False

    def weights_read(self, tokens: float) -> float:
        """Weight bytes a step of `tokens` tokens reads on each GPU: all but the routed
        experts no token of the step goes to."""
        if not self.routed_bytes:
            return self.weights_read_bytes
        unread = 1.0 - experts_touched(self.arch, tokens) / self.arch.num_experts
        return self.weights_read_bytes - self.routed_bytes * unread

    @property
    def host_s(self) -> float:
        return A.DECODE_HOST_STEP_S[self.engine].value * self.host_scale

    @property
    def host_per_sequence_s(self) -> float:
        return A.DECODE_HOST_PER_SEQUENCE_S[self.engine].value * self.host_scale

    @property
    def logprob_host_s_per_sequence(self) -> float:
        """Host seconds a decode step spends on each running sequence's logprob when the
        requests ask for them (vLLM V1's LogprobsLists.slice + LogprobsProcessor, measured:
        DECODE_HOST_LOGPROB_S_PER_SEQUENCE, x the host's ratio); 0 when they do not."""
        if not self.returns_logprobs:
            return 0.0
        return A.DECODE_HOST_LOGPROB_S_PER_SEQUENCE.value * self.host_scale

    def allreduce_s(self, tokens: float) -> float:
        """Two all-reduces per layer of tokens x d activations (bf16) in a tensor-parallel
        group (Megatron-LM, Shoeybi et al. 2019): latency (vLLM's custom all-reduce within a node
        of up to 8, NCCL's beyond: estimate/tp_allreduce.py) + ring traffic 2(tp-1)/tp x bytes."""
        tp = self.tensor_parallel
        if tp == 1:
            return 0.0
        message = tokens * self.arch.hidden_size * 2.0
        one = self.allreduce_latency_s + 2 * (tp - 1) / tp * message / self.link_bytes_per_s
        return 2 * self.arch.num_layers * one

    def weights_s(self, tokens: float) -> tuple[float, bool]:
        """Time to read (and, for weight-only 8/4-bit weights, dequantise) the weights a step
        of `tokens` tokens reads on each GPU, and whether the dequantisation bounds it: the
        quantised weights take the longer of their bytes' time and their count /
        dequant_weights_per_s (the conversion overlaps the streaming reads, as Marlin's
        pipeline does); the 16-bit embedding and LM head their bytes' time."""
        read = self.weights_read(tokens)
        if not (self.weight_only_quantised and self.dequant_weights_per_s):
            return read / self.bandwidth_bytes_per_s, False
        quantised = read - self.unquantised_bytes
        t_bytes = quantised / self.bandwidth_bytes_per_s
        t_dequant = quantised / self.weight_bytes_per_param / self.dequant_weights_per_s
        return (max(t_bytes, t_dequant) + self.unquantised_bytes / self.bandwidth_bytes_per_s,
                t_dequant > t_bytes)

    def launch_s(self, eager: bool) -> float:
        """Host time issuing one forward's kernels, which overlaps the GPU's work: for an
        engine that captures CUDA graphs, 0 on a replayed graph and the counted kernels x
        EAGER_HOST_S_PER_KERNEL when eager (estimate/cuda_graphs.py); for hf-generate, always
        eager, layers x DECODE_HOST_PER_LAYER_S (+ GPTQModel's or AutoAWQ's linears' own host
        work, quant_linear_host_s)."""
        if self.engine in _SMALL_KERNEL_ENGINES:
            return eager_launch_s(self.eager_kernels, self.host_scale) if eager else 0.0
        if self.engine == trtllm.ENGINE:
            return (self.eager_kernels * A.TRTLLM_ENQUEUE_S_PER_KERNEL.value * self.host_scale
                    if eager else 0.0)
        if self.engine == lmdeploy.ENGINE:  # no CUDA graphs: every step launches from C++
            return self.eager_kernels * A.LMDEPLOY_LAUNCH_S_PER_KERNEL.value * self.host_scale
        # under device_map, accelerate's hooks are host work beside the launches; GPTQModel's
        # and AutoAWQ's linears their own beyond a bf16 linear's (estimate/hf_quant.py)
        return ((self.arch.num_layers * A.DECODE_HOST_PER_LAYER_S[self.engine].value
                 + self.hooks_s + self.quant_linear_host_s) * self.host_scale)

    @property
    def quant_linear_host_s(self) -> float:
        """Host seconds a forward's GPTQModel or AutoAWQ linears take beyond bf16 linears'
        (hf_quant.host_s_per_linear x the linears); 0 without them."""
        if self.hf_quant_linear is None:
            return 0.0
        return (hf_quant.linear_count(self.arch)
                * hf_quant.host_s_per_linear(self.hf_quant_linear))

    def seconds(self, tokens: float, kv_bytes: float, flops: float,
                eager: bool = False, kv_copy_s: float = 0.0,
                host_extra_s: float = 0.0) -> tuple[float, str]:
        """Time of a step that processes `tokens` tokens, reads `kv_bytes` of KV cache (and
        spends `kv_copy_s` copying it, hf-generate) and does `flops` on each GPU of the group,
        eagerly or as a replayed CUDA graph, with `host_extra_s` of the engine's host work
        beside its host step (the running sequences' logprobs); and what bounds it."""
        if self.fp8_syncs is not None:
            return self.fp8_linear_seconds(tokens, kv_bytes, flops, eager, kv_copy_s)
        t_weights, dequant = self.weights_s(tokens)
        t_mem = (t_weights + kv_bytes / self.bandwidth_bytes_per_s + kv_copy_s
                 + self.quant_extra_bytes(tokens) / self.bandwidth_bytes_per_s)
        t_cmp = flops / (self.peak_flops * self.gemm_efficiency)
        t_launch = self.launch_s(eager)
        device, bound = (t_mem, "memory bandwidth") if t_mem >= t_cmp else (t_cmp, "compute")
        if dequant and t_mem >= t_cmp:
            bound = "dequantisation (weights per SM cycle)"
        elif kv_copy_s > t_mem - kv_copy_s and t_mem >= t_cmp:
            bound = "KV-cache copies (SMs x clock)"
        allreduce = self.allreduce_s(tokens)
        if allreduce > device:  # the group's all-reduces outlast its reads and GEMMs (walk F4b)
            bound = "tensor-parallel all-reduces"
        device += allreduce
        launches = (self.empty_expert_launches_s(tokens) + self.routing_launches_s
                    + self.activation_quant_launches_s + self.quantised_gemm_fixed_s)
        if launches > device:
            bound = ("kernel launches (one per MoE expert, empty ones included)"
                     if self.empty_expert_launches_s(tokens) else
                     "small kernels (MoE routing, fp8 input quantisation, quantised GEMMs' "
                     "fixed time)")
        device += launches
        if t_launch > device:
            device, bound = t_launch, ("host (eager kernel launches)"
                                       if self.engine in _SMALL_KERNEL_ENGINES
                                       else "host (kernel launches)")
        host = self.host_s + host_extra_s
        if host > device:
            bound = ("host (engine step)" if not host_extra_s else
                     "host (engine step and per-sequence logprobs)")
        experts = self.expert_loop_s(tokens)
        if experts > max(device, host):
            bound = "host (Python loop over experts)"
        if self.async_scheduling:
            # vLLM's async scheduling: the engine's host work for the next step runs while the
            # GPU runs this one, so a step takes the longer of the two
            return max(host, device) + experts, bound
        return host + device + experts, bound

    def fp8_linear_seconds(self, tokens: float, kv_bytes: float, flops: float,
                           eager: bool, kv_copy_s: float = 0.0) -> tuple[float, str]:
        """A step under transformers' FP8Linear (estimate/hf_fp8.py): the host's work (the
        bf16 forward's launches, DECODE_HOST_PER_LAYER_S, + HF_FP8_LINEAR_HOST_S a linear) and
        the GPU's (the block-fp8 linears at their grid's share of the SMs, then the rest: LM
        head, KV cache and its copies, attention) in series where the release synchronises
        after each linear, overlapped (the longer) where it does not; + the engine's host step
        and the expert loop, with its experts' linears (expert_loop_s)."""
        shapes = hf_fp8.layer_linear_shapes(self.arch)
        rate = self.peak_flops * self.gemm_efficiency
        bw = self.bandwidth_bytes_per_s
        linears = hf_fp8.linears_s(shapes, tokens, self.fp8_gemm_bandwidth_bytes_per_s, rate,
                                   self.sm_count)
        routed_read = self.routed_bytes - (self.weights_read_bytes - self.weights_read(tokens))
        rest_bytes = max(0.0, self.weights_read(tokens) - hf_fp8.weight_bytes(shapes)
                         - routed_read)
        expert_flops = (2.0 * tokens * self.arch.experts_per_token * self.arch.moe_layers
                        * hf_fp8.weight_bytes(hf_fp8.expert_linear_shapes(self.arch)))
        rest_flops = max(0.0, flops - hf_fp8.flops(shapes, tokens) - expert_flops)
        device = linears + max((rest_bytes + kv_bytes) / bw + kv_copy_s, rest_flops / rate)
        host = (self.launch_s(eager) + hf_fp8.count(shapes) * A.HF_FP8_LINEAR_HOST_S.value
                * self.host_scale)
        experts = self.expert_loop_s(tokens)
        if self.fp8_syncs:
            return (self.host_s + host + device + experts,
                    "FP8Linear syncs (serial)")
        bound = "host (kernel launches)" if host > device else "memory bandwidth"
        return self.host_s + max(host, device) + experts, bound

    def empty_expert_launches_s(self, tokens: float) -> float:
        """GPU time of the MoE GEMM launches for experts no token of the step routes to, in
        engines whose quantised MoE GEMM launches one kernel per expert (SGLang 0.4.6 with
        vLLM 0.7.2's Marlin MoE, _LAUNCHES_PER_EXPERT): moe_layers x 2 GEMMs x (E - experts
        touched) x SGLANG_MARLIN_MOE_EMPTY_LAUNCH_S; the experts with tokens are in the
        bytes. 0 for dense models, 16-bit or fp8 weights and the other engines."""
        if not _pays_empty_expert_launches(self.engine, self.arch, self.weight_only_quantised):
            return 0.0
        empty = self.arch.num_experts - experts_touched(self.arch, tokens)
        return (self.arch.moe_layers * 2 * empty
                * A.SGLANG_MARLIN_MOE_EMPTY_LAUNCH_S.value)

    @property
    def routing_launches_s(self) -> float:
        """GPU time of the small kernels a fused MoE layer launches that a dense MLP does not
        (FUSED_MOE_ROUTING_KERNELS, each taking SGLANG_MARLIN_MOE_EMPTY_LAUNCH_S, the time of a
        kernel that does almost no work in that stack's CUDA graph): moe_layers x 8 x 2.4 us a
        forward, serial on the stream. 0 for dense models and for engines without a fused MoE
        path (hf-generate: its loop, expert_loop_s)."""
        if not _pays_routing_kernels(self.engine, self.arch):
            return 0.0
        return (self.arch.moe_layers * FUSED_MOE_ROUTING_KERNELS
                * A.SGLANG_MARLIN_MOE_EMPTY_LAUNCH_S.value)

    def quant_extra_bytes(self, tokens: float) -> float:
        """Bytes a forward's AutoAWQ linears move beyond their weights (split-k partials, or
        the fp16 weights they dequantise at 1,024 tokens or more; hf_quant.extra_bytes); 0
        otherwise."""
        if self.hf_quant_linear is None:
            return 0.0
        return hf_quant.extra_bytes(self.hf_quant_linear, self.arch, tokens)

    @property
    def quantised_gemm_fixed_s(self) -> float:
        """The fixed GPU time of each weight-only quantised (Marlin) GEMM at decode, serial on
        the stream: QUANTISED_GEMM_FIXED_S x (4 a dense layer + 2 an MoE layer) under vLLM and
        SGLang, x every linear (7 a layer, none fused) under hf-generate with GPTQModel's Marlin
        (hf_quant.marlin_gemms); 0 for 16-bit and fp8 weights and otherwise."""
        if self.hf_quant_linear is not None:
            return (hf_quant.marlin_gemms(self.hf_quant_linear, self.arch)
                    * A.QUANTISED_GEMM_FIXED_S.value)
        if not _marlin_engine(self.engine, self.weight_only_quantised):
            return 0.0
        moe = self.arch.moe_layers if self.arch.is_moe else 0
        gemms = (self.arch.num_layers - moe) * 4 + moe * 2
        return gemms * A.QUANTISED_GEMM_FIXED_S.value

    @property
    def activation_quant_launches_s(self) -> float:
        """GPU time of the kernels that quantise each W8A8 (fp8) GEMM's input to fp8 before the
        GEMM (activation_quant_kernels a layer, each a small kernel's time,
        SGLANG_MARLIN_MOE_EMPTY_LAUNCH_S), serial on the stream; 0 for 16-bit and weight-only
        quantised GEMMs and for hf-generate (its launches are host time,
        DECODE_HOST_PER_LAYER_S)."""
        if self.engine not in _SMALL_KERNEL_ENGINES:
            return 0.0
        return (self.arch.num_layers * self.activation_quant_kernels
                * A.SGLANG_MARLIN_MOE_EMPTY_LAUNCH_S.value)

    def expert_loop_s(self, tokens: float) -> float:
        """transformers' generate runs an MoE layer as a Python loop over experts, each
        iteration synchronising with the GPU (torch.where): moe_layers x the experts looped
        (hf_generate_experts_looped: all of them, the ones the step's `tokens` route to, or
        none, by release) x HF_GENERATE_HOST_PER_EXPERT_S a forward, serial with the device; 0
        for the engines with fused MoE kernels and for dense models."""
        if self.engine not in _LOOPS_EXPERTS or not self.arch.is_moe:
            return 0.0
        looped = hf_generate_experts_looped(self.arch, self.hf_transformers_version, tokens)
        loop = looped * A.HF_GENERATE_HOST_PER_EXPERT_S.value * self.host_scale
        if self.fp8_syncs is not None:
            # each looped expert's FP8Linears, host work and sync included, and the GPU work of
            # the experts with tokens (at decode a few rows each), serial with the loop
            shapes = hf_fp8.expert_linear_shapes(self.arch)
            touched = experts_touched(self.arch, tokens)
            rows = tokens * self.arch.experts_per_token / touched
            loop += (looped * hf_fp8.count(shapes) * A.HF_FP8_LINEAR_HOST_S.value
                     * self.host_scale
                     + touched * hf_fp8.linears_s(shapes, rows,
                                                  self.fp8_gemm_bandwidth_bytes_per_s,
                                                  self.peak_flops * self.gemm_efficiency,
                                                  self.sm_count))
        return self.arch.moe_layers * loop

    def decode(self, running: int, context: float) -> tuple[float, str]:
        held = running * kv_tokens_held(self.arch, context) * self.kv_bytes_per_token
        kv, copy_s = A.DECODE_KV_PASSES[self.engine].value * self.kv_reads * held, 0.0
        if self.engine in _COPIES_KV:
            # transformers' generate copies the cache each step (DynamicCache's torch.cat, then
            # repeat_kv for a group) and 4.38 rebuilds its mask: the counted traffic, at the
            # copies' rate on this GPU's SMs (hf_kv_copy_bytes_per_s), or where the catalog has
            # no SM count and clock, DECODE_KV_PASSES times its bandwidth-time
            copied = (hf_generate_kv_cache_passes(self.arch, self.hf_transformers_version) * held
                      + running * hf_generate_mask_bytes_per_sequence(
                          self.arch, self.hf_transformers_version, context))
            if self.kv_copy_bytes_per_s:
                kv, copy_s = 0.0, copied / self.kv_copy_bytes_per_s
            else:
                kv = A.DECODE_KV_PASSES[self.engine].value * copied
        kv += 2 * running * self.state_bytes_per_sequence
        flops = running * generation_flops_per_token(self.arch, context)
        # each running sequence's logprob turned into Python objects (returns_logprobs),
        # beside the engine's host step: serial with the GPU unless async scheduling
        s, bound = self.seconds(running, kv, flops / self.tensor_parallel,
                                not self.capture.graphs(running, context), copy_s,
                                running * self.logprob_host_s_per_sequence)
        # the engine's Python work for each running sequence, serial with the GPU; the host
        # leads when it and the engine's step outlast the rest (walk F4: it was added after
        # seconds() chose the bound, so a step 88% host read "compute")
        per_sequence = running * self.host_per_sequence_s
        if per_sequence and self.host_s + per_sequence > s - self.host_s:
            bound = "host (engine step and per-sequence work)"
        return s + per_sequence, bound

    def prefill(self, running: int, prompt_tokens: int) -> float:
        flops = running * prompt_tokens * prefill_flops_per_token(self.arch, prompt_tokens)
        # prefill runs eagerly in every engine; its launches are counted with graphs off only
        # (they hide under any real prompt's compute; estimate/cuda_graphs.py), and always for
        # TensorRT-LLM, whose context step is never a graph (GptSession step 0), and LMDeploy
        # 0.1, which captures none
        return self.seconds(running * prompt_tokens, 0.0, flops / self.tensor_parallel,
                            self.capture.mode == "off"
                            or self.engine in (trtllm.ENGINE, lmdeploy.ENGINE))[0]


#: Engines that run an MoE layer as a Python loop over experts (transformers' generate:
#: hf_generate_experts_looped): HF_GENERATE_HOST_PER_EXPERT_S each
_LOOPS_EXPERTS = frozenset({"hf-generate"})

#: The first transformers release whose sparse MoE block loops over the experts hit only
#: (`expert_hitted = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()`), by
#: model_type: Mixtral and Qwen2-MoE by huggingface/transformers#32429 (approved 2025-04-08,
#: after 4.51.0 of 2025-04-05: 4.52), Qwen3-MoE by #38133 (opened 2025-05-15, reviewed
#: 2025-06-02, after 4.52: 4.53). Not listed: looped over all experts in every 4.x (not
#: checked further)
HF_LOOPS_EXPERTS_HIT_FROM: dict[str, tuple[int, int]] = {
    "mixtral": (4, 52), "qwen2_moe": (4, 52), "qwen3_moe": (4, 53)}


def hf_generate_experts_looped(arch: ModelArch, release: str, tokens: float) -> float:
    """Experts of one MoE layer that transformers' `release` loops over in Python for a
    forward of `tokens` tokens:
    - 5.x: none: the experts run as grouped kernels (5.23 modeling_utils.py
      get_correct_experts_implementation: "grouped_mm" by default for every block decorated
      with @use_experts_implementation; integrations/moe.py grouped_mm_experts_forward), no
      per-expert loop or synchronisation;
    - 4.x from HF_LOOPS_EXPERTS_HIT_FROM's release: the experts hit, the expected distinct
      experts the tokens route to (experts_touched: 8 of 128 at batch 1 for Qwen3-MoE's top-8,
      about 51 at batch 8);
    - earlier 4.x (4.51's Qwen3MoeSparseMoeBlock: `for expert_idx in range(self.num_experts)`),
      and the families not listed: every expert."""
    version = hf_release(release)
    if version >= (5, 0):
        return 0.0
    start = HF_LOOPS_EXPERTS_HIT_FROM.get(arch.model_type)
    if start is not None and version >= start:
        return experts_touched(arch, tokens)
    return float(arch.num_experts)

#: Engines whose weight-only quantised MoE layers launch one GEMM kernel per expert, all of
#: them (SGLang 0.4.6's GPTQ/AWQ Marlin MoE, vLLM 0.7.2's marlin_gemm_moe):
#: SGLANG_MARLIN_MOE_EMPTY_LAUNCH_S for each expert without tokens
_LAUNCHES_PER_EXPERT = frozenset({"sglang"})

#: Engines that replay their decode step as a CUDA graph, where a kernel that does almost no
#: work still takes its GPU time on the stream (hf-generate's eager launches are host time
#: instead, DECODE_HOST_PER_LAYER_S); they run an MoE layer through vLLM's fused-MoE path
#: (SGLang's derives from it): router GEMM, top-k, alignment, two grouped GEMMs, the sum
_SMALL_KERNEL_ENGINES = frozenset({"vllm", "vllm-v0", "sglang"})

#: Kernels a decoder layer launches to quantise the inputs of its W8A8 (fp8) GEMMs: one before
#: each of its four linear layers (qkv, o, gate-up, down), as SGLang's block-fp8 linear
#: (`apply_w8a8_block_fp8_linear`, python/sglang/srt/layers/quantization/fp8_utils.py of
#: 2025: `per_token_group_quant_fp8`, then `w8a8_block_fp8_matmul`) and vLLM's fp8 linear
#: (`scaled_fp8_quant`, then the GEMM) run them; in an MoE layer the fused path's two
#: `moe_kernel_quantize_input` calls take gate-up's and down's places (vLLM fused_moe.py
#: @000d1458). The router and the LM head stay 16-bit.
FP8_ACTIVATION_QUANT_KERNELS = 4

#: Kernels one fused MoE layer launches at a decode step beyond the three of a dense MLP
#: (gate-up GEMM, activation, down GEMM), counted from vLLM's path (vllm-project/vllm
#: vllm/model_executor/layers/fused_moe/fused_moe.py@000d1458, which SGLang 0.4.6's
#: fused_moe_triton copies): the router GEMM (the model's `gate`), `gating_output.float()`,
#: `topk_softmax`, the renormalisation of Qwen3's top-k weights (a sum and a divide:
#: norm_topk_prob), moe_align_block_size's `sorted_ids.fill_` and its align kernel, and
#: `moe_sum` over the top-k outputs: 8. The two grouped GEMMs and the activation take the
#: dense MLP's place (their bytes are costed); fp8's activation quantisation runs in dense
#: fp8 layers too and is costed in neither.
FUSED_MOE_ROUTING_KERNELS = 8

#: Engines whose decode step copies the KV cache (transformers' DynamicCache and `repeat_kv`):
#: their traffic is hf_generate_kv_cache_passes, not one read of a paged cache
_COPIES_KV = frozenset({"hf-generate"})


def _pays_empty_expert_launches(engine: str, arch: ModelArch, weight_only_quantised: bool
                                ) -> bool:
    """Whether a step launches a GEMM for every MoE expert, empty ones included: an engine of
    _LAUNCHES_PER_EXPERT running an MoE model's 8/4-bit weights under bf16 matmuls."""
    return engine in _LAUNCHES_PER_EXPERT and arch.is_moe and weight_only_quantised


def _pays_routing_kernels(engine: str, arch: ModelArch) -> bool:
    """Whether a step runs the fused-MoE path's routing kernels on the GPU's stream
    (FUSED_MOE_ROUTING_KERNELS): an MoE model on an engine of _SMALL_KERNEL_ENGINES."""
    return engine in _SMALL_KERNEL_ENGINES and arch.is_moe


def _marlin_engine(engine: str, weight_only_quantised: bool) -> bool:
    """8/4-bit weights on an engine whose GPTQ/AWQ path is Marlin's kernel (vLLM, SGLang)."""
    return weight_only_quantised and engine in _SMALL_KERNEL_ENGINES


def _weight_only_quantised(g: Generation) -> bool:
    """8/4-bit weights under 16-bit matmuls (GPTQ, AWQ: dequantised in the GEMM), as against
    16-bit weights or fp8 W8A8."""
    return g.weight_bytes_per_param < 2.0 and g.matmul_precision != "fp8"


def _runs_marlin(g: Generation) -> bool:
    """8/4-bit weights on an engine whose GPTQ/AWQ path is Marlin's kernel (vLLM, SGLang):
    the dequantisation cap and the fixed time per GEMM apply. transformers' generate runs
    other kernels (bitsandbytes, AutoAWQ, GPTQModel), not modelled: its weights take their
    bytes' time alone."""
    return _marlin_engine(g.engine, _weight_only_quantised(g))


def _quantised_weights_note(g: Generation, gpu: GpuSpec) -> str:
    """What the step leaves out for 8/4-bit weights, '' when nothing."""
    if not _weight_only_quantised(g):
        return ""
    if g.engine in (trtllm.ENGINE, lmdeploy.ENGINE):
        return (f"; 8/4-bit weights on {g.engine}: its weight-only GEMM kernels are not "
                "modelled, the weights take their bytes' time alone")
    if g.hf_quant_linear is not None:
        return hf_quant.note(g.hf_quant_linear)
    if g.engine not in _SMALL_KERNEL_ENGINES:
        return (f"; 8/4-bit weights on {g.engine}: its kernels are not modelled, the weights "
                "take their bytes' time alone (hf_quant_linear names GPTQModel 2.2.0's or "
                "AutoAWQ 0.2.9's)")
    if dequant_weights_per_s(gpu) is None:
        return (f"; the dequantisation is not costed: the GPU catalog has no SM count and clock "
                f"for {gpu.name} (the fixed time per GEMM is)")
    return ""


def _wave_s(step: _Step, running: int, g: Generation) -> tuple[float, float]:
    """Prefill and decode time of `running` sequences generated together."""
    prefill = step.prefill(running, g.prompt_tokens)
    n = g.output_tokens
    if n == 0:
        return prefill, 0.0
    segments = min(n, _DECODE_SEGMENTS)
    per = n / segments
    decode = sum(per * step.decode(running, g.prompt_tokens + (i + 0.5) * per)[0]
                 for i in range(segments))
    return prefill, decode


def host_cpu_ratio(gpu: GpuSpec) -> float:
    """How much longer the host CPU of `gpu`'s machine takes for the engine's host work than
    the x86 hosts the DECODE_HOST_* figures were fitted on: the catalog's host_op_time_ratio
    (a Grace superchip's Arm CPU: 2.75 on GB200, NVIDIA/TransformerEngine issue #2053's torch
    Linear CPU time against an H100 DGX's Xeon), 1 for an x86 host. The engine step's host
    work is the same kind as a training step's operator issue: Python and PyTorch's dispatch
    on one core (vLLM V1's scheduler, input preparation, sampler launches and the sampled
    tokens' trip back, serial with the GPU unless async scheduling is on: off by default
    before vLLM 0.14.0, vllm#27614; Generation.async_scheduling), so it takes the same ratio:
    an assumption, no engine step timed on a Grace host."""
    return gpu.host_op_time_ratio or 1.0


def _runs_fp8_linear(g: Generation) -> bool:
    """transformers' generate with fp8 (W8A8 block) weights runs its linears as FP8Linear
    (estimate/hf_fp8.py)."""
    return g.engine in _COPIES_KV and g.matmul_precision == "fp8"


def fp8_linear_syncs(g: Generation) -> int | None:
    """The device syncs an FP8Linear takes in this setup's release (estimate/hf_fp8.py);
    None where the setup runs no FP8Linear (_runs_fp8_linear), and before 4.49 (no FP8Linear:
    refused by check_covered)."""
    if not _runs_fp8_linear(g):
        return None
    return hf_fp8.syncs_per_linear(hf_release(g.hf_transformers_version))


def _engine_step(g: Generation, gpu: GpuSpec, precision: str, host_scale: float) -> _Step:
    """The step cost of this setup's engine on `gpu` (see the module docstring); the host's
    costs x the host CPU's ratio (`host_cpu_ratio`)."""
    arch = g.arch
    max_seqs = engine_max_num_seqs(g, gpu)
    e_bw = decode_bandwidth_efficiency(arch, g.tensor_parallel)
    bandwidth_gb_per_s, _ = decode_bandwidth_gb_per_s(gpu)
    tp = g.tensor_parallel
    kv_token = kv_bytes_per_token_per_gpu(arch, g.kv_bytes_per_element, tp)
    state = state_bytes_per_sequence_per_gpu(arch, g.kv_bytes_per_element, tp)
    link, _ = link_bandwidth_bytes_per_s(Hardware(
        gpu=gpu, num_gpus=tp, gpus_per_node=g.gpus_per_node,
        inter_node_gb_per_s_one_way=g.inter_node_gb_per_s_one_way))
    if _runs_fp8_linear(g):
        hf_fp8.check_covered(arch, hf_release(g.hf_transformers_version), tp,
                             g.weight_bytes_per_param)
    if g.hf_quant_linear is not None:
        hf_quant.check_covered(g.hf_quant_linear, arch, g.engine,
                               hf_release(g.hf_transformers_version), tp, g.device_map_gpus,
                               g.weight_bytes_per_param, g.matmul_precision)
    # a bf16 setup on a GPU without bf16 runs in fp16 (runs_fp16): every engine step's rate
    return _Step(arch=arch, engine=g.engine,
                  peak_flops=peak_flops(gpu, runs_fp16(gpu, precision) or precision),
                  gemm_efficiency=gemm_efficiency(gpu, arch.hidden_size),
                  bandwidth_bytes_per_s=bandwidth_gb_per_s * 1e9 * e_bw,
                  weights_read_bytes=weight_bytes_read_per_step(
                      arch, g.weight_bytes_per_param, g.released_format) / tp,
                  kv_bytes_per_token=kv_token, tensor_parallel=tp, link_bytes_per_s=link,
                  allreduce_latency_s=tp_allreduce_latency_s(tp, g.gpus_per_node),
                  host_scale=host_scale * host_cpu_ratio(gpu), state_bytes_per_sequence=state,
                  routed_bytes=routed_expert_params(arch) * g.weight_bytes_per_param / tp,
                  weight_only_quantised=_weight_only_quantised(g),
                  hf_transformers_version=g.hf_transformers_version,
                  unquantised_bytes=_unquantised_bytes_read(arch, g.weight_bytes_per_param,
                                                            g.released_format) / tp,
                  weight_bytes_per_param=g.weight_bytes_per_param,
                  dequant_weights_per_s=((dequant_weights_per_s(gpu) or 0.0) if _runs_marlin(g)
                                         or g.hf_quant_linear == hf_quant.GPTQMODEL else 0.0),
                  activation_quant_kernels=(FP8_ACTIVATION_QUANT_KERNELS
                                            if g.matmul_precision == "fp8" else 0),
                  capture=capture_rule(g.engine, g.cuda_graphs, max_seqs, gpu.memory_bytes, tp),
                  eager_kernels=eager_kernels_per_forward(
                      arch, tp, FUSED_MOE_ROUTING_KERNELS,
                      FP8_ACTIVATION_QUANT_KERNELS if g.matmul_precision == "fp8" else 0),
                  kv_copy_bytes_per_s=((hf_kv_copy_bytes_per_s(gpu) or 0.0)
                                       if g.engine in _COPIES_KV else 0.0),
                  fp8_syncs=fp8_linear_syncs(g), sm_count=gpu.sm_count or 0,
                  fp8_gemm_bandwidth_bytes_per_s=(bandwidth_gb_per_s * 1e9
                                                  * A.BANDWIDTH_EFFICIENCY.value),
                  kv_reads=(trtllm.kv_reads_per_decode_step(arch, tp)
                            if g.engine == trtllm.ENGINE else
                            lmdeploy.kv_reads_per_decode_step(arch, g.kv_bytes_per_element)
                            if g.engine == lmdeploy.ENGINE else 1.0),
                  hooks_s=device_map_hooks_s(arch) if g.device_map_gpus > 1 else 0.0,
                  hf_quant_linear=g.hf_quant_linear, async_scheduling=g.async_scheduling,
                  returns_logprobs=g.returns_logprobs)


def paged_cache_tokens(arch: ModelArch, g: Generation, gpu: GpuSpec,
                       share: float) -> tuple[float, float]:
    """The KV cache of a paged engine (vLLM, SGLang) on each GPU of the tensor-parallel group,
    in tokens: what is left of `share` of the device after the weights and the engine's
    startup profile (`_kv_room`, as max_batch_by_memory), over the KV bytes of one token; a
    model with sliding-window layers holds fewer tokens than its context (kv_tokens_held),
    taken at the setup's prompt + output tokens. Also a hybrid model's SSM state per sequence, in the same
    tokens (0 without one)."""
    tp = g.tensor_parallel
    usable = _kv_room(arch, g, gpu, share)[2]
    context = g.prompt_tokens + g.output_tokens
    per_token = (kv_bytes_per_token_per_gpu(arch, g.kv_bytes_per_element, tp)
                 * kv_tokens_held(arch, context) / context)
    state = state_bytes_per_sequence_per_gpu(arch, g.kv_bytes_per_element, tp)
    return max(0.0, usable) / per_token, state / per_token


def paged_rollout_time_s(g: Generation, gpu: GpuSpec, rollout: PagedRollout,
                         precision: str = "bf16") -> tuple[float, float]:
    """Prefill and decode seconds of a replayed paged-cache batch (estimate/paged_rollout.py)
    at this setup's engine step: each admission's prefill (fresh prompts, recomputed
    prompt + output) and each stretch of decode steps at its running sequences and mean
    context."""
    if g.matmul_precision == "fp8":
        precision = "fp8-mixed"
    step = _engine_step(g, gpu, precision, 1.0)
    prefill_s = sum(step.prefill(a.sequences, max(1, round(a.mean_prefill_tokens)))
                    for a in rollout.admissions)
    decode_s = sum(s.steps * step.decode(s.running_sequences, s.mean_context_tokens)[0]
                   for s in rollout.stretches)
    return prefill_s, decode_s


def paged_step_costs(g: Generation, gpu: GpuSpec, precision: str = "bf16"
                     ) -> tuple[Callable[[float, float], float], Callable[[float, float], float]]:
    """One engine's step at this setup, as `paged_rollout_time_s` costs a replay's: decode
    seconds of a step of `sequences` at a mean context of `tokens`, and prefill seconds of
    `sequences` prompts of `tokens` each (for a replay that keeps its own clock:
    estimate/inflight_rollout.py)."""
    if g.matmul_precision == "fp8":
        precision = "fp8-mixed"
    step = _engine_step(g, gpu, precision, 1.0)

    # (a mean share of sequences may be fractional: the step's terms are linear in it)
    def decode(sequences: float, tokens: float) -> float:
        return float(step.decode(sequences, tokens)[0])  # type: ignore[arg-type]

    def prefill(sequences: float, tokens: float) -> float:
        return float(step.prefill(sequences, max(1, round(tokens))))  # type: ignore[arg-type]

    return decode, prefill


def runs_fp16(gpu: GpuSpec, precision: str) -> str | None:
    """'fp16' when a bf16 generation runs on a GPU without bf16 matmuls (V100, T4): the engines
    cast to float16 there (vLLM's dtype "auto" below compute capability 8.0; SGLang and
    transformers alike); None otherwise."""
    if precision == "bf16" and gpu.dense_tflops.bf16 is None and gpu.dense_tflops.fp16:
        return "fp16"
    return None


def estimate_generation(g: Generation, gpu: GpuSpec, precision: str = "bf16",
                        host_scale: float = 1.0) -> GenerationEstimate:
    """Time to prefill `batch` prompts and decode `output_tokens` for each, on one GPU.
    `host_scale` multiplies the engine's host costs (a calibration from a measured host)."""
    arch = g.arch
    if arch.encoder:
        raise FieldError("model", f"{arch.name} is an encoder: it does not generate tokens.")
    if g.engine == trtllm.ENGINE:
        trtllm.check_supported(arch)
    if g.engine == lmdeploy.ENGINE:
        lmdeploy.check_supported(arch, g.weight_bytes_per_param, g.kv_bytes_per_element,
                                 g.matmul_precision, g.cuda_graphs, g.tensor_parallel)
    if g.matmul_precision == "fp8":
        # W8A8: every GEMM at the fp8 rate (peak_flops refuses a GPU without fp8 tensor cores)
        try:
            peak_flops(gpu, "fp8-mixed")
        except InputError as err:
            raise FieldError("matmul_precision", err.message) from None
        precision = "fp8-mixed"
    cap, cap_peak = memory_cap(arch, g, gpu)
    reserve = engine_profile_reserve(arch, g, gpu)
    max_seqs = engine_max_num_seqs(g, gpu)
    default = cap if max_seqs is None else min(cap, max_seqs)
    batch = g.batch if g.batch is not None else default
    if batch > cap:
        if cap_peak is None:
            raise FieldDoesNotFit("batch", f"a batch of {batch} sequences needs more KV cache "
                                           f"than fits on {gpu.name}; at most {cap} fit"
                                  + (f" in the cache cache_max_entry_count "
                                     f"{g.cache_max_entry_count:g} sets"
                                     if g.cache_max_entry_count is not None else "") + ".")
        over = hf_generate_peak_of(arch, g, batch, gpu)
        raise FieldDoesNotFit("batch", f"transformers' generate with a batch of {batch:,} "
                                       f"sequences needs {over.reserved_bytes / 1e9:.1f} GB on "
                                       f"{gpu.name} ({gpu.memory_bytes / 1e9:.1f} GB): "
                                       f"{over.describe(g.prompt_tokens)}; at most {cap:,} fit.")
    running = batch if max_seqs is None else min(batch, max_seqs)
    run_peak = (None if cap_peak is None else cap_peak if running == cap_peak.batch
                else hf_generate_peak_of(arch, g, running, gpu))
    full_waves, rest = divmod(batch, running)
    e_bw = decode_bandwidth_efficiency(arch, g.tensor_parallel)
    bandwidth_gb_per_s, bandwidth_source = decode_bandwidth_gb_per_s(gpu)
    tp = g.tensor_parallel
    kv_token = kv_bytes_per_token_per_gpu(arch, g.kv_bytes_per_element, tp)
    state = state_bytes_per_sequence_per_gpu(arch, g.kv_bytes_per_element, tp)
    step = _engine_step(g, gpu, precision, host_scale)
    prefill_s, decode_s = (full_waves * t for t in _wave_s(step, running, g))
    if rest:
        p, d = _wave_s(step, rest, g)
        prefill_s, decode_s = prefill_s + p, decode_s + d
    tail_s = 0.0
    if g.max_output_tokens is not None and g.max_output_tokens > g.output_tokens:
        # continuous batching refills the batch as outputs finish, so the mean work holds
        # until the end; then the longest output decodes with ever fewer sequences beside it,
        # taken alone (as the rl phase's tail): the run lasts the longer of the two
        last_wave = sum(_wave_s(step, rest or running, g))
        alone = sum(_wave_s(step, 1, g.model_copy(update={"output_tokens":
                                                           g.max_output_tokens})))
        tail_s = max(0.0, alone - last_wave)
    first, bound = step.decode(running, g.prompt_tokens)
    last, _ = step.decode(running, g.prompt_tokens + g.output_tokens)
    graphs_first = step.capture.graphs(running, g.prompt_tokens)
    total = prefill_s + decode_s + tail_s
    mapped = g.device_map_gpus > 1
    shares = device_map_shares(arch, g, gpu) if mapped else []
    return GenerationEstimate(
        engine=g.engine,
        gpus=g.device_map_gpus if mapped else tp,
        batch=batch,
        max_batch_by_memory=cap,
        running_sequences=running,
        waves=full_waves + (1 if rest else 0),
        max_num_seqs=max_seqs,
        weights_bytes=stored_weight_bytes(arch, g.weight_bytes_per_param, g.released_format),
        weights_read_bytes_per_step=step.weights_read(running),
        kv_cache_bytes=running * (kv_token * kv_tokens_held(arch, g.prompt_tokens
                                                            + g.output_tokens) + state)
        * (max(s.layers for s in shares) / arch.num_layers if shares else 1.0),
        decode_bandwidth_efficiency=e_bw,
        bandwidth_gb_per_s=bandwidth_gb_per_s,
        host_step_s=step.host_s,
        logprob_host_s_per_sequence=step.logprob_host_s_per_sequence,
        host_cpu_ratio=host_cpu_ratio(gpu),
        gpu_name=gpu.name,
        allreduce_s_per_decode_step=step.allreduce_s(running),
        prefill_s=prefill_s,
        decode_s=decode_s,
        decode_step_s_first=first,
        decode_step_s_last=last,
        decode_bound=bound,
        sequences_per_s=batch / total,
        output_tokens_per_s=batch * g.output_tokens / total,
        tail_s=tail_s,
        bandwidth_source=bandwidth_source,
        cuda_graphs=step.capture.reason(running, g.prompt_tokens,
                                        g.prompt_tokens + g.output_tokens),
        eager_launch_s_first=0.0 if g.output_tokens == 0 else step.launch_s(not graphs_first),
        eager_kernels=step.eager_kernels,
        memory_cap=("KV cache" if cap_peak is None
                    else cap_peak.describe(g.prompt_tokens)),
        peak_memory_bytes=None if run_peak is None else run_peak.reserved_bytes,
        peak_memory="" if run_peak is None else run_peak.describe(g.prompt_tokens),
        profile_reserve_bytes=reserve.bytes,
        profile_reserve=reserve.describe(),
        device_map=_describe_shares(arch, shares) if mapped else "",
        hooks_s=step.hooks_s,
        hook_calls=device_map_hook_calls(arch) if mapped else 0,
    )


def _step_basis(g: Generation, *, launches: bool, dequant: bool = False,
                routing: bool = False, quant: bool = False, qgemm: bool = False,
                kv_copy_sm: bool = False) -> str:
    """The formula of an engine step as this setup's terms make it up."""
    syncs = fp8_linear_syncs(g)
    if syncs is not None:
        kv = ("the KV cache's copies at SMs x clock x the fitted bytes per SM cycle"
              if kv_copy_sm else "the KV cache's copies x the fitted time per pass")
        combine = ("+ the GPU's work, in series, not overlapped: this release's FP8Linear "
                   "synchronises the device after every linear (integrations/"
                   "finegrained_fp8.py, 4.49 to 5.3)" if syncs else
                   "and the GPU's work, overlapped (the longer): this release's FP8Linear "
                   "does not synchronise (transformers#43349, 5.4)")
        experts = ""
        if g.arch.is_moe:
            n = hf_fp8.count(hf_fp8.expert_linear_shapes(g.arch))
            experts = f"; + the expert loop, each looped expert's {n} FP8Linears more"
        return ("formula: engine step = host step + (layers x DECODE_HOST_PER_LAYER_S + "
                f"FP8Linears x HF_FP8_LINEAR_HOST_S) {combine}; the GPU's work: the block-fp8 "
                "GEMMs' 1-byte weights read at bandwidth x bandwidth_efficiency through the "
                "SMs their grid of ceil(N / 128) programs occupies (estimate/hf_fp8.py), then "
                f"the LM head and KV bytes at the decode bandwidth + {kv}, or the FLOPs at the "
                f"fp8 rate where they take longer{experts}")
    device = ("max(max(quantised weight bytes / bandwidth, their count / (SMs x clock x "
              "weights per SM cycle)) + 16-bit head and KV bytes / bandwidth, FLOPs / peak)"
              if dequant else
              "max(weight bytes / bandwidth + the KV cache's copies (below), FLOPs / peak)"
              if kv_copy_sm else "max(weight and KV bytes / bandwidth, FLOPs / peak)")
    if g.tensor_parallel > 1:
        device += " + the TP all-reduces"
    if launches:
        device += " + a Marlin MoE launch per empty expert: SGLang 0.4.6 with vLLM 0.7.2's kernels"
    if routing:
        device += f" + {FUSED_MOE_ROUTING_KERNELS} MoE routing kernels a layer x a small kernel's time"
    if quant:
        device += (f" + {FP8_ACTIVATION_QUANT_KERNELS} fp8 input-quantisation kernels a layer x a "
                   "small kernel's time")
    if qgemm:
        device += " + a fixed time per quantised GEMM"
    issued = ("eager launches + accelerate's hook calls (device_map: the GPUs' work in "
              "sequence, one GPU's)" if g.device_map_gpus > 1 else "eager launches")
    text = f"formula: engine step = host step + max({issued}, {device}"
    if g.engine == trtllm.ENGINE:
        reads = trtllm.kv_reads_per_decode_step(g.arch, g.tensor_parallel)
        text += ("; a static batch (TensorRT-LLM 0.5-0.6's GptSession), its launches enqueued "
                 "from C++" + (f"; KV bytes x {reads:g} reads a decode step (query heads per "
                               "KV head: its masked attention kernel reads the cache once per "
                               "query head)" if reads > 1 else ""))
    if g.engine == lmdeploy.ENGINE:
        reads = lmdeploy.kv_reads_per_decode_step(g.arch, g.kv_bytes_per_element)
        text += ("; continuous batching over a paged cache (LMDeploy 0.1's TurboMind), every "
                 "kernel launched from C++" + (
                     f"; KV bytes x {reads:g} reads a decode step (group size / query heads a "
                     "CTA of its decoder attention serves)" if reads > 1 else ""))
    if g.engine in _COPIES_KV:
        hf = g.hf_transformers_version
        passes = hf_generate_kv_cache_passes(g.arch, hf)
        ops = "attention" if passes == 3 else "repeat_kv, attention"
        if hf_generate_mask_bytes_per_sequence(g.arch, hf, g.prompt_tokens):
            ops += ", and the causal mask rebuilt every forward"
        rate = ("at SMs x clock x the fitted bytes per SM cycle" if kv_copy_sm
                else "x the fitted time per pass")
        text += (f"; KV bytes x {passes:g} passes counted from transformers {hf}'s decode step "
                 f"(DynamicCache's torch.cat, {ops}) {rate}")
    return text + ")"


def tensor_parallel_assumptions(g: Generation) -> list[A.Assumption]:
    """What a tensor-parallel group's all-reduces are costed with: vLLM's own all-reduce's
    latency within a node of up to 8 GPUs (TP_ALLREDUCE_LATENCY_S); beyond, NCCL's latency
    model (estimate/tp_allreduce.py) over the setup's GPUs per node and network, said as the
    setup gives them (Generation's defaults: 8 a node, 25 GB/s one way)."""
    if g.tensor_parallel <= min(VLLM_CUSTOM_ALLREDUCE_MAX_GPUS, g.gpus_per_node):
        return [A.TP_ALLREDUCE_LATENCY_S]

    def said(field: str) -> str:
        if field in g.model_fields_set:
            return "given (--node, or the option itself)"
        return "assumed: the default, not given (--node or the option sets it)"

    return [A.Assumption("tp_allreduce_latency_s.nccl",
                         tp_allreduce_latency_s(g.tensor_parallel, g.gpus_per_node), "s",
                         f"NCCL's latency model, ring or tree (NVIDIA/nccl@5067397c "
                         f"tuning.cc; estimate/tp_allreduce.py), {g.tensor_parallel} GPUs, "
                         f"{g.gpus_per_node} a node"),
            A.Assumption("gpus_per_node", float(g.gpus_per_node), "GPUs",
                         said("gpus_per_node")),
            A.Assumption("inter_node_gb_per_s_one_way", g.inter_node_gb_per_s_one_way,
                         "GB/s per GPU", said("inter_node_gb_per_s_one_way"))]


def generation_summary(e: GenerationEstimate, g: Generation, gpu: GpuSpec,
                       sequences: float | None = None,
                       price_rows: list[Any] | None = None) -> dict[str, Any]:
    """Everything `generation` reports, JSON-ready: the setup, every figure as {value, unit,
    basis, source}, and with `sequences` the GPU hours and their cost at each catalog price of
    `gpu` (none for a GPU outside the catalog), or at `price_rows` when given."""
    from gpuhours import catalog
    from gpuhours.estimate.estimator import cost_rows

    gpu_hours = None
    costs: list[Any] = []
    left_out: list[str] = []
    if sequences is not None:
        if not sequences > 0:
            raise FieldError("sequences", f"expected a positive number, got {sequences!r}.")
        # the batch's own rate holds its longest output's tail once; a run of many batches
        # through continuous batching keeps the engine full and waits for a tail only at its
        # end: the steady rate for every sequence, the tail once
        steady_s = sequences * (e.prefill_s + e.decode_s) / e.batch
        tail = (f" + tail_s {e.tail_s:.3g} s once" if e.tail_s else "")
        gpu_hours = formula((steady_s + e.tail_s) / 3600 * e.gpus, "GPU hours",
                            f"({sequences:g} sequences x (prefill_s + decode_s) / batch{tail}) "
                            f"/ 3600 x {e.gpus} GPUs per replica"
                            + (" (device_map: every GPU held for the run)"
                               if g.device_map_gpus > 1 else ""))
        known = gpu.name in {c.name for c in catalog.gpus()}
        if price_rows is None:
            price_rows = catalog.prices(gpu.name) if known else []
        costs = cost_rows(gpu_hours.value, price_rows, e.gpus)
        # one replica's GPUs (its tensor-parallel group, or device_map's split) exchange every
        # layer's activations: small instances joined over the network cannot hold it, as
        # `compare` leaves such rows out (catalog/billing.py spans_network)
        from gpuhours.catalog.billing import bill

        def spans(c: Any) -> bool:
            return bill(e.gpus, c.gpus_per_instance).spans_network(g.gpus_per_node)

        left_out = [f"{c.provider} {c.instance} ({c.instances} instances of "
                    f"{c.gpus_per_instance} GPU(s))" for c in costs if spans(c)]
        costs = [c for c in costs if not spans(c)]
    # hf-generate's batch is capped by its peak (with the allocator reserve and CUDA context,
    # as the training side counts them), not by a share of the device
    memory = ([A.ALLOCATOR_RESERVE_FRACTION, A.CUDA_CONTEXT_BYTES] if g.engine in _COPIES_KV
              else [A.CUDA_CONTEXT_BYTES] if g.engine == trtllm.ENGINE
              else [*([A.LMDEPLOY_CACHE_MAX_ENTRY_COUNT] if g.cache_max_entry_count is None
                      else []), A.CUDA_CONTEXT_BYTES]
              if g.engine == lmdeploy.ENGINE
              else [A.GENERATION_MEMORY_UTILISATION])
    # hf-generate's cache copies at the SMs' rate where the catalog has SMs and a clock
    kv_copy_sm = g.engine in _COPIES_KV and hf_kv_copy_bytes_per_s(gpu) is not None
    used = [A.DECODE_HOST_STEP_S[g.engine], A.DECODE_HOST_PER_SEQUENCE_S[g.engine],
            A.DECODE_HOST_PER_LAYER_S[g.engine],
            A.HF_KV_COPY_BYTES_PER_SM_CYCLE if kv_copy_sm else A.DECODE_KV_PASSES[g.engine],
            A.DECODE_BANDWIDTH_HALF_WIDTH,
            A.BANDWIDTH_EFFICIENCY, *memory,
            *gemm_efficiency_assumptions(gpu), A.GEMM_HALF_WIDTH]
    if (g.engine in _LOOPS_EXPERTS and g.arch.is_moe
            and hf_generate_experts_looped(g.arch, g.hf_transformers_version, 1) > 0):
        used.append(A.HF_GENERATE_HOST_PER_EXPERT_S)  # not under 5.x's grouped experts
    if fp8_linear_syncs(g) is not None:
        used.append(A.HF_FP8_LINEAR_HOST_S)
    if g.returns_logprobs:
        used.append(A.DECODE_HOST_LOGPROB_S_PER_SEQUENCE)
    if g.hf_quant_linear == hf_quant.GPTQMODEL:
        used.append(A.HF_GPTQMODEL_LINEAR_HOST_S)
    launches = _pays_empty_expert_launches(g.engine, g.arch, _weight_only_quantised(g))
    routing = _pays_routing_kernels(g.engine, g.arch)
    # the fp8 input-quantisation kernels: the step's activation_quant_launches_s is non-zero
    quant = g.engine in _SMALL_KERNEL_ENGINES and g.matmul_precision == "fp8"
    if launches or routing or quant:
        used.append(A.SGLANG_MARLIN_MOE_EMPTY_LAUNCH_S)
    # GPTQModel's Marlin under hf-generate: the same kernel's rate and fixed time
    marlin = _runs_marlin(g) or g.hf_quant_linear == hf_quant.GPTQMODEL
    dequant = marlin and dequant_weights_per_s(gpu) is not None
    qgemm = marlin
    if qgemm:
        used.append(A.QUANTISED_GEMM_FIXED_S)
    if dequant:
        used.append(A.DEQUANT_WEIGHTS_PER_SM_CYCLE)
    if dequant or kv_copy_sm:
        used.append(A.Assumption(f"{gpu.name}.sm_count_x_boost_clock",
                                 float(gpu.sm_count or 0) * float(gpu.boost_clock_mhz or 0),
                                 "SM x MHz", f"GPU catalog (gpus.yaml): {gpu.sm_source}"))
    if e.bandwidth_source is not None:
        used.append(A.Assumption(f"{gpu.name}.decode_bw_gb_per_s", e.bandwidth_gb_per_s, "GB/s",
                                 f"GPU catalog (gpus.yaml): {e.bandwidth_source}"))
    if g.engine in _SMALL_KERNEL_ENGINES and not e.cuda_graphs.startswith("CUDA graph:"):
        used.append(A.EAGER_HOST_S_PER_KERNEL)
    if g.engine == trtllm.ENGINE:  # its context step's launches are counted in any mode
        used.append(A.TRTLLM_ENQUEUE_S_PER_KERNEL)
    if g.engine == lmdeploy.ENGINE:  # every step's launches are counted
        used.append(A.LMDEPLOY_LAUNCH_S_PER_KERNEL)
    if g.tensor_parallel > 1:
        used += tensor_parallel_assumptions(g)
    if g.device_map_gpus > 1:
        used += [A.ACCELERATE_HOOK_HOST_S, A.ACCELERATE_HOOK_OPERATOR_TIMES]
    default_cap = engine_max_num_seqs_default(g.engine, gpu)
    if g.max_num_seqs is None and default_cap is not None:
        used.append(default_cap)
    figures = e.figures()
    if g.batch is not None:
        figures["batch"] = given(g.batch, "sequences", "the batch given (--batch)")
    return {
        "model": g.model or g.arch.name, "model_basis": g.model_basis, "gpu": gpu.name,
        "engine": g.engine,
        "setup": g.model_dump(mode="json", include={"prompt_tokens", "output_tokens", "batch",
                                                    "max_num_seqs", "engine",
                                                    *(("cache_max_entry_count",)
                                                      if g.engine == lmdeploy.ENGINE else ()),
                                                    "tensor_parallel",
                                                    *(("device_map_gpus",)
                                                      if g.device_map_gpus > 1 else ()),
                                                    "weight_bytes_per_param",
                                                    "released_format",
                                                    "kv_bytes_per_element", "cuda_graphs",
                                                    *(("hf_transformers_version",)
                                                      if g.engine in _COPIES_KV else ())}),
        "decode_bound": e.decode_bound,
        "decode_cuda_graphs": e.cuda_graphs,
        # what set max_batch_by_memory: "KV cache", or hf-generate's peak (phase, transient)
        "memory_cap": e.memory_cap,
        **{k: f.model_dump(mode="json") for k, f in figures.items()},
        "sequences": None if sequences is None else given(
            sequences, "sequences", "the number given (--sequences)").model_dump(mode="json"),
        "gpu_hours": None if gpu_hours is None else gpu_hours.model_dump(mode="json"),
        "cost_usd": [c.model_dump(mode="json") for c in costs],
        # price rows whose instances are too small for one replica (not offered)
        "cost_rows_left_out": ({"rows": left_out, "reason": (
            f"one replica's {e.gpus} GPUs would span instances joined only by the network; "
            "tensor parallelism (or device_map's split) runs over each node's own links")}
            if sequences is not None and left_out else None),
        "basis": (_step_basis(g, launches=launches, dequant=dequant, routing=routing,
                              quant=quant, qgemm=qgemm, kv_copy_sm=kv_copy_sm)
                  + f"; decode steps: {e.cuda_graphs}"
                  + _quantised_weights_note(g, gpu)
                  + (f"; fp16 matmuls: {gpu.name} has no bf16 (engines cast to float16 "
                     "below compute capability 8.0)" if runs_fp16(gpu, "bf16") else "")
                  + released_note(g.released_format, g.weight_bytes_per_param)
                  + (f" (estimate/generation.py), constants for {g.engine} fitted to the tune "
                     "rows of the generation validation data (docs/generation.md)"
                     if g.engine != lmdeploy.ENGINE else
                     " (estimate/generation.py, estimate/lmdeploy.py): lmdeploy's own constants "
                     "assumed from TurboMind's code, none fitted (its published rows are all "
                     "held out); the shared ones fitted to the tune rows of the generation "
                     "validation data (docs/generation.md)")
                  + (f"; host costs {e.calibration}" if e.calibration else "")),
        "calibration": e.calibration,
        # how this engine's published rows landed against the model (measured; the table of
        # docs/generation.md, estimate/track_record.py): not applied to the figures above
        "track_record": (None if (record := track_record_for_engine(g.engine)) is None
                         else record.model_dump(mode="json")),
        # each a figure with its name: the SMs x clock product is the catalog's, the rest assumed
        "assumptions": [{"name": a.name, "value": a.value, "unit": a.unit,
                         "basis": "catalog" if a.name.endswith(".sm_count_x_boost_clock")
                         else "assumed", "source": a.basis} for a in used],
    }


def scoring_time_s(arch: ModelArch, sequences: float, tokens_per_sequence: float, gpu: GpuSpec,
                   precision: str = "bf16") -> float:
    """One forward pass over whole sequences (a reference or reward model scoring rollouts), on
    one GPU: compute-bound like a prefill, 2N + causal attention FLOPs per token at GEMM
    efficiency."""
    if arch.encoder:
        raise FieldError("model", f"{arch.name} is an encoder; a scoring model must be a "
                                  f"decoder here.")
    flops = sequences * tokens_per_sequence * prefill_flops_per_token(arch, tokens_per_sequence)
    return flops / (peak_flops(gpu, precision) * gemm_efficiency(gpu, arch.hidden_size))



def rollout_precision(gpu: GpuSpec, training_precision: str) -> str:
    """The matmul precision rollouts and scoring passes are costed at: bf16, as engines run
    them, on a device with a bf16 rate; on one without (a CPU measured by `gpuhours bench`
    in fp32), the training's own matmul precision."""
    return "bf16" if gpu.dense_tflops.bf16 else training_precision
