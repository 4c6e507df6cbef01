"""Whether an engine's decode step replays a CUDA graph or runs eagerly, and what eager costs.

A CUDA graph replays a whole decode forward with one launch; an eager step has the host issue
every kernel of every layer, which overlaps the GPU's work (the step takes the longer of the
two, estimate/generation.py). vLLM and SGLang capture graphs for decode batches up to a size,
and run everything else eagerly. Their rules, read from each engine's code:

- vLLM V0 (`vllm-v0`: 0.3-0.7): graphs only for decode-only batches of at most 256 sequences
  (`_BATCH_SIZES_TO_CAPTURE = [1, 2, 4] + [8 * i for i in range(1, 33)]` in
  vllm/worker/model_runner.py of vllm 0.3.1, 0.4.2 and 0.5.4; 0.6.x captures up to
  max_num_seqs instead, `_get_max_graph_batch_size`) and whose longest sequence is at most
  max_seq_len_to_capture, 8192 by default (`max_context_len_to_capture` in 0.3.1;
  EngineArgs of 0.4.2, 0.5.4, 0.6.3.post1). vllm 0.6.3.post1's builder passes
  `max_decode_seq_len=max_encoder_seq_len` (0 for a decoder) to `_get_cuda_graph_pad_size`
  (worker/model_runner.py line 831), so its context check never fires; 0.5.4 and 0.8.5's V0
  pass the decode length. The context rule is 0.5's and 0.8's; a 0.6.3 run is `on`.
- vLLM V1 (`vllm`: 0.8+): decode batches of at most min(2 x max_num_seqs, 512) tokens
  (vllm 0.12.0 vllm/config/vllm.py `_set_cudagraph_sizes`; 0.8.5 captured up to 512 whatever
  max_num_seqs; both also cap it at max_num_batched_tokens); a larger batch gets
  CUDAGraphMode.NONE (v1/cudagraph_dispatcher.py `dispatch`). No length limit in V1.
- SGLang 0.4.6.post1: batches up to cuda_graph_max_bs: 160, or 256 on a GPU with more than
  81,920 MiB (`get_batch_sizes_to_capture`, model_executor/cuda_graph_runner.py), 8 on one
  under 25,000 MiB with tp < 4 and 80 with tp >= 4 (server_args.py; both figures nvidia-smi's
  memory.total, utils.get_nvgpu_memory_capacity); larger batches run
  without (`CudaGraphRunner.can_run`). SGLang 0.3.0 stopped at 160 on every GPU.

- TensorRT-LLM 0.5-0.6 (`tensorrt-llm`, C++ GptSession): no graph unless asked
  (`setCudaGraphMode`, gptSessionBenchmark's `--enable_cuda_graph`, off by default): `auto`
  is eager, `on` replays every generation step (estimate/trtllm.py).

`enforce_eager=True` (vLLM) and `--disable-cuda-graph` (SGLang) make every step eager:
Generation.cuda_graphs "off". Prefill runs eagerly in every engine; its launches hide under
a prompt's compute and are counted only with graphs off (as the published eager rows ran).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuhours.estimate import assumptions as A
from gpuhours.estimate.arch import ModelArch

#: vLLM V0's largest captured decode batch (0.3-0.5; see the module docstring)
VLLM_V0_MAX_CAPTURED_BATCH = 256
#: vLLM V0's max_seq_len_to_capture default: a longer sequence in the batch runs eagerly
VLLM_V0_MAX_SEQ_LEN_TO_CAPTURE = 8192
#: vLLM V1's largest captured batch with max_num_seqs of 256 or more: min(2 x max_num_seqs, 512)
VLLM_V1_MAX_CAPTURE_SIZE = 512
#: SGLang 0.4.6's cuda_graph_max_bs by GPU memory (MiB, as torch reports it) and tp
SGLANG_MAX_BS = 160
SGLANG_MAX_BS_LARGE_GPU = 256
SGLANG_LARGE_GPU_MIB = 81_920
SGLANG_SMALL_GPU_MIB = 25_000

#: Kernels one dense decoder layer launches at an eager decode step in vLLM's model code
#: (vllm 0.6.3.post1 model_executor/models/qwen2.py and llama.py with the FlashAttention
#: backend): fused_add_rms_norm twice, the qkv GEMM (bias in the same addmm), rotary_embedding,
#: reshape_and_cache_flash and the attention kernel, o_proj, gate_up_proj, silu_and_mul,
#: down_proj: 10. SGLang's layers call the same kinds of kernels (sgl_kernel's norms and
#: activation, FlashInfer's cache write and decode): counted alike.
EAGER_KERNELS_PER_DENSE_LAYER = 10
#: ... and the all-reduce after o_proj and after down_proj under tensor parallelism
EAGER_ALLREDUCES_PER_LAYER = 2


def eager_kernels_per_forward(arch: ModelArch, tensor_parallel: int, routing_kernels: int,
                              quant_kernels: int) -> int:
    """Kernels the host launches for one eager decode forward, counted (not fitted):
    EAGER_KERNELS_PER_DENSE_LAYER a layer, + `routing_kernels` in each MoE layer (the fused-MoE
    path's router and alignment kernels; its grouped GEMMs and activation take the dense
    MLP's three places), + two all-reduces a layer under tensor parallelism, + `quant_kernels`
    a layer (fp8 input quantisation). Other layer kinds (SSM, sliding window, extra norms) are
    counted as dense layers: an approximation."""
    moe = arch.moe_layers if arch.is_moe else 0
    per_layer = (EAGER_KERNELS_PER_DENSE_LAYER + quant_kernels
                 + (EAGER_ALLREDUCES_PER_LAYER if tensor_parallel > 1 else 0))
    return arch.num_layers * per_layer + moe * routing_kernels


def eager_launch_s(kernels: int, host_scale: float = 1.0) -> float:
    """Host time to issue `kernels` eager launches: kernels x EAGER_HOST_S_PER_KERNEL (s)."""
    return kernels * A.EAGER_HOST_S_PER_KERNEL.value * host_scale


@dataclass(frozen=True)
class CaptureRule:
    """When a decode step of `engine` replays a CUDA graph. `mode`: Generation.cuda_graphs."""

    engine: str
    mode: str
    #: largest captured batch (None: no limit)
    max_batch: int | None
    #: longest captured sequence (None: no limit)
    max_context: int | None

    def graphs(self, running: int, context: float) -> bool:
        """Whether a decode step of `running` sequences whose longest holds `context` tokens
        replays a graph."""
        if self.engine not in _GRAPH_ENGINES or self.mode == "off":
            return False
        if self.mode == "on":
            return True
        if self.engine in _GRAPHS_OPT_IN:
            return False
        if self.max_batch is not None and running > self.max_batch:
            return False
        return self.max_context is None or context <= self.max_context

    def reason(self, running: int, first_context: float, last_context: float) -> str:
        """Why the decode steps of a wave run as they do, in words."""
        name = _ENGINE_NAMES.get(self.engine, self.engine)
        if self.engine not in _GRAPH_ENGINES:
            return f"eager: {name} captures no CUDA graph"
        if self.mode == "off":
            return ("eager: cuda_graphs off (vLLM enforce_eager=True, SGLang "
                    "--disable-cuda-graph)")
        if self.mode == "on":
            return "CUDA graph: cuda_graphs on (every batch and length captured)"
        if self.engine in _GRAPHS_OPT_IN:
            return (f"eager: {name} replays CUDA graphs only when asked (GptSession "
                    "cudaGraphMode, --enable_cuda_graph: off by default)")
        if self.max_batch is not None and running > self.max_batch:
            return (f"eager: batch {running} > {name}'s largest captured batch "
                    f"{self.max_batch}")
        if self.max_context is not None and last_context > self.max_context:
            if first_context > self.max_context:
                return (f"eager: context {first_context:,.0f} > {name}'s "
                        f"max_seq_len_to_capture {self.max_context:,}")
            return (f"CUDA graph up to context {self.max_context:,}, eager beyond "
                    f"({name}'s max_seq_len_to_capture)")
        return (f"CUDA graph: batch {running} <= {name}'s largest captured batch "
                f"{self.max_batch}" if self.max_batch is not None else "CUDA graph")


#: engines that capture decode graphs at all (hf-generate runs eagerly: DECODE_HOST_PER_LAYER_S)
_GRAPH_ENGINES = frozenset({"vllm", "vllm-v0", "sglang", "tensorrt-llm"})
#: engines whose graphs are off unless cuda_graphs is "on" (TensorRT-LLM's GptSession)
_GRAPHS_OPT_IN = frozenset({"tensorrt-llm"})
_ENGINE_NAMES = {"vllm": "vLLM V1", "vllm-v0": "vLLM V0", "sglang": "SGLang 0.4.6",
                 "hf-generate": "transformers' generate", "tensorrt-llm": "TensorRT-LLM 0.5-0.6",
                 "lmdeploy": "LMDeploy 0.1's TurboMind"}


def capture_rule(engine: str, mode: str, max_num_seqs: int | None, gpu_memory_bytes: float,
                 tensor_parallel: int) -> CaptureRule:
    """The engine's capture limits (module docstring) for this setup."""
    if engine == "vllm-v0":
        return CaptureRule(engine, mode, VLLM_V0_MAX_CAPTURED_BATCH,
                           VLLM_V0_MAX_SEQ_LEN_TO_CAPTURE)
    if engine == "vllm":
        seqs = max_num_seqs if max_num_seqs is not None else VLLM_V1_MAX_CAPTURE_SIZE
        return CaptureRule(engine, mode, min(2 * seqs, VLLM_V1_MAX_CAPTURE_SIZE), None)
    if engine == "sglang":
        mib = gpu_memory_bytes / 2**20
        if mib < SGLANG_SMALL_GPU_MIB:
            bs = 8 if tensor_parallel < 4 else 80
        else:
            bs = SGLANG_MAX_BS_LARGE_GPU if mib > SGLANG_LARGE_GPU_MIB else SGLANG_MAX_BS
        return CaptureRule(engine, mode, bs, None)
    return CaptureRule(engine, mode, None, None)
