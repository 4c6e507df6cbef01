"""`gpuhours generation` against published generation throughput (data/generation_published.csv).

    python -m gpuhours_dev.validation.generation_published     (from scripts/; prints Markdown)

Every row is expressed through `gpuhours.api.estimate_generation`, the function the
`generation` command calls (no ledger: nothing calibrated), with the catalog model and GPU the
command would resolve. Every setting the source does not state is an assumption written beside
the row (`Expressed.assumed`). Like is compared with like: a row's measured quantity (output
tokens/s of one request or of all, per GPU or per group, prompt + output tokens/s, or the
time to the first token) is computed from the same estimate (`predicted_value`).

Eighteen of these rows set constants (TUNED: SGLang's host step and the H20's bandwidth, from
the six SGLang 1-token rows, `fit_sglang_h20`; the host time per running sequence of vLLM V0
and of SGLang, from one batched row each; transformers' host time per expert of its Python MoE
loop, from its one batch-1 MoE row; SGLang's small-kernel launch time, from its one GPTQ-Int4
MoE row; the dequantisation rate of GPTQ/AWQ weights per SM cycle and the fixed time of a
quantised GEMM, from four A100 rows, `fit_quantised_gemm`; the host time of GPTQModel's linear
under transformers, from its Qwen3-0.6B 1-token row, `fit_hf_gptqmodel_linear_host`), counted
apart; the others were
collected after the constants were fitted on the `tune` rows of data/generation.csv, and rows
that duplicate that file are not repeated here.
vLLM rows before 0.8 are costed as `vllm-v0` (the V0 engine); TensorRT-LLM's rows (v0.5 and
v0.6.1 gptSessionBenchmark tables) as `tensorrt-llm` (its static batch, KV cache sized to the
batch, no CUDA graphs, C++ host step; estimate/trtllm.py), with no constant set from them.
LMDeploy's rows (its A100 tables: v0.1.0a1's static and request-throughput tables, v0.2.0's
request-throughput table) as `lmdeploy` (TurboMind's persistent batch over a paged cache of
the block count each row's benchmark config states, C++ launches, no CUDA graphs;
estimate/lmdeploy.py), with no constant set from them either (LMDEPLOY_NOTES).
Rows of an engine the estimate does not model would be shown costed as vLLM V1 (a proxy,
counted apart); none is left.
transformers rows on several GPUs ran the model split by `device_map` (layers in sequence,
estimate/device_map.py), not tensor parallelism: expressed as `device_map_gpus`.
"""

from __future__ import annotations

import csv
import math
import re
import statistics
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuhours.estimate.track_record import TrackRecord, summarise

DATA = Path(__file__).parent / "data" / "generation_published.csv"
#: issue 13's goal
TOLERANCE = 0.25
#: prose lines of the report (the tables are one row a line)
_WIDTH = 100

#: published names -> catalog models (same architecture), with why
MODELS: dict[str, tuple[str, str]] = {
    "Qwen2.5-0.5B-Instruct": ("qwen2.5-0.5b", ""),
    "Qwen2.5-3B-Instruct": ("qwen2.5-3b", ""),
    "Qwen2.5-7B-Instruct": ("qwen2.5-7b", ""),
    "Qwen2.5-14B-Instruct": ("qwen2.5-14b", ""),
    "Qwen2.5-32B-Instruct": ("qwen2.5-32b", ""),
    "Qwen3-0.6B": ("qwen3-0.6b", ""), "Qwen3-1.7B": ("qwen3-1.7b", ""),
    "Qwen3-4B": ("qwen3-4b", ""), "Qwen3-8B": ("qwen3-8b", ""), "Qwen3-14B": ("qwen3-14b", ""),
    "Qwen3-32B": ("qwen3-32b", ""), "Qwen3-30B-A3B": ("qwen3-30b-a3b", ""),
    "Qwen3-235B-A22B": ("qwen3-235b-a22b", ""),
    "Llama-3.1-8B-Instruct": ("llama-3.1-8b", ""), "Meta-Llama-3-8B": ("llama-3-8b", ""),
    "Llama-2-7B": ("llama-2-7b", ""), "Llama-2-13B": ("llama-2-13b", ""),
    "Llama-2-70B": ("llama-2-70b", ""),
    "Llama-3.1-70B-Instruct": ("llama-3.1-70b", ""),
    "Llama-3.3-70B-Instruct": ("llama-3.1-70b", "Llama 3.3 70B has Llama 3.1 70B's architecture"),
    "LLaMA 7B": ("llama-2-7b", "TensorRT-LLM's 'LLaMA 7B' as llama-2-7b (LLaMA 1 and 2 7B share "
                               "d 4096, 32 layers, MHA, 32,000 vocab)"),
    "Mixtral-8x7B-Instruct-v0.1": ("mixtral-8x7b", "Mixtral 8x7B Instruct has the base model's "
                                   "architecture (the catalog's mixtral-8x7b)"),
    "Mixtral-8x22B": ("mixtral-8x22b", "vLLM#4002 names 'Mixtral 8x22' without the variant: "
                                       "the base and Instruct share one architecture"),
    "DeepSeek-R1-0528": ("deepseek-v3", "DeepSeek-R1-0528 has DeepSeek-V3's architecture "
                                        "(DeepseekV3ForCausalLM; its MTP layer unused)"),
    "LLaMA 70B": ("llama-2-70b", "TensorRT-LLM's 'LLaMA 70B' as llama-2-70b (the only 70B of "
                                 "that name, GQA 8 KV heads)"),
}

#: models outside the catalog, from their Hugging Face config.json (given as a config, the
#: way `gpuhours generation --params` takes one)
CONFIGS: dict[str, dict[str, Any]] = {
    "Qwen2.5-1.5B-Instruct": {
        "model_type": "qwen2", "hidden_size": 1536, "num_hidden_layers": 28,
        "num_attention_heads": 12, "num_key_value_heads": 2, "head_dim": 128,
        "intermediate_size": 8960, "vocab_size": 151936, "tie_word_embeddings": True,
        "hidden_act": "silu"},
    "GPT-2": {
        "model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257,
        "n_positions": 1024, "tie_word_embeddings": True,
        "activation_function": "gelu_new"},
    # internlm/internlm-20b config.json (model_type internlm: a Llama-shaped decoder, RMSNorm,
    # SiLU gated MLP, rotary, no biases), as the llama shape the estimate reads
    "InternLM-20B": {
        "model_type": "llama", "hidden_size": 5120, "num_hidden_layers": 60,
        "num_attention_heads": 40, "num_key_value_heads": 40, "intermediate_size": 13824,
        "vocab_size": 103168, "tie_word_embeddings": False, "hidden_act": "silu",
        "max_position_embeddings": 4096},
    # databricks/dbrx-instruct config.json (model_type dbrx: d_model 6144, 40 blocks, 48 heads,
    # kv_n_heads 8, 16 experts of ffn_hidden_size 10752, top 4, vocab 100352, untied), as the
    # Mixtral shape the estimate reads (GLU experts, grouped-query attention; DBRX's bias-free
    # LayerNorm counted as an RMSNorm and its fused Wqkv as three projections: the same weights)
    "DBRX-Instruct": {
        "model_type": "mixtral", "hidden_size": 6144, "num_hidden_layers": 40,
        "num_attention_heads": 48, "num_key_value_heads": 8, "intermediate_size": 10752,
        "num_local_experts": 16, "num_experts_per_tok": 4, "vocab_size": 100352,
        "tie_word_embeddings": False, "hidden_act": "silu", "max_position_embeddings": 32768},
    "Qwen2.5-72B-Instruct": {
        "model_type": "qwen2", "hidden_size": 8192, "num_hidden_layers": 80,
        "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
        "intermediate_size": 29568, "vocab_size": 152064, "tie_word_embeddings": False,
        "hidden_act": "silu"},
}

#: published GPU -> (catalog name, figure overrides as `generation --gpu X --peak-tflops ...`)
GPUS: dict[str, tuple[str, dict[str, float], str]] = {
    "A100 80GB": ("a100-80gb", {}, ""),
    "A100 (80GB assumed)": ("a100-80gb", {}, "A100 taken as the 80 GB SXM part (not stated)"),
    "H100 80GB": ("h100-sxm", {}, "H100 80GB HBM3 = the SXM part"),
    "H200 141GB": ("h200", {}, ""),
    "H100 (SXM assumed)": ("h100-sxm", {}, "'H100' taken as the 80 GB SXM part (an 8-GPU "
                                          "NVLink node; not stated)"),
    "not stated (H100 80GB assumed)": (
        "h100-sxm", {}, "GPU not stated; an H100 SXM assumed: the row's pair's 7.06 ms graph "
        "step reads 16 GB of weights, >= 2.3 TB/s, more than any A100 has"),
    "not stated (A100 80GB assumed)": (
        "a100-80gb", {}, "GPU not stated; an A100 80GB assumed: the pair's 10.5 ms a token "
        "with graphs reads 13.5 GB of weights, >= 1.3 TB/s (not an A10G or L4)"),
    "H20 96GB": ("h20", {},
                 "the catalog's h20 as `generation --gpu h20` (148 dense bf16 TFLOPS, 296 fp8, "
                 "96 GB, NVLink 900 GB/s) and its decode bandwidth: the catalog's "
                 "decode_bw_gb_per_s, 1.9 TB/s, not the datasheet's 4.0, fitted "
                 "with SGLang's host step to the six SGLang 1-token rows (H20_FIT_ROWS)"),
}

#: fp8 dense TFLOPS stated for a GPU's fp8 rows (resolve_gpu keeps bf16/fp16 only when the
#: peak is overridden): the H20's reported 296, twice its bf16, the catalog's h20 figure too
FP8_TFLOPS: dict[str, tuple[float, str]] = {
    "H20 96GB": (296.0, "H20's fp8 peak: 296 dense TFLOPS (datasheet, twice its bf16)")}

#: The rows that set the H20's decode bandwidth (the GPU catalog's h20 decode_bw_gb_per_s,
#: which `generation --gpu h20` applies) and decode_host_step_s.sglang together: the
#: Qwen3 benchmark's SGLang rows with a 1-token prompt, one per dense model (0.6B-32B). Their
#: per-token time is 1.51 ms + weight bytes / 1.38 TB/s (straight line through the six), a third
#: of the 4.0 TB/s datasheet; the same GPU's transformers rows (held out) read their KV cache
#: as slowly. (SGLang of 2026 decodes a 27B bf16 model in 17 ms a token on an H20,
#: bytedance-iaas/sglang#753: ~3.1 TB/s; the figure is this benchmark's software's, not the
#: silicon's; docs/generation.md.)
H20_FIT_ROWS = ("65", "73", "81", "91", "101", "111")

#: bytes per weight and per KV element by the row's precision
PRECISIONS: dict[str, tuple[float, float, str]] = {
    "bf16": (2.0, 2.0, ""), "fp16": (2.0, 2.0, ""),
    "fp8 weights and KV cache": (1.0, 1.0, "fp8: 1 byte per weight (the embedding and LM head "
                                           "16-bit) and KV element; matmuls costed at the bf16 "
                                           "rate (see FP8_MATMULS)"),
    "fp8 (block W8A8)": (1.0, 2.0, "fp8 W8A8, block-wise (Qwen3-FP8: 128x128 weight blocks, "
                                   "activations quantised per group of 128): 1 byte per weight "
                                   "of the decoder's layers (the embedding and LM head 16-bit), "
                                   "GEMMs at the GPU's fp8 rate, the KV cache bf16"),
    "gptq-int8": (1.0, 2.0, "int8: 1 byte per weight of the decoder's layers; the embedding "
                            "and LM head 16-bit (as the estimate takes any 8/4-bit weights)"),
    "gptq-int4": (0.56, 2.0, "4-bit: 0.56 byte per weight (the setup's documented value) of the "
                             "decoder's layers; the embedding and LM head 16-bit"),
    "awq-int4": (0.56, 2.0, "4-bit: 0.56 byte per weight (the setup's documented value) of the "
                            "decoder's layers; the embedding and LM head 16-bit"),
}

#: ShareGPT prompts in sglang.bench_serving: 453,502 input tokens / 2,000 prompts
#: (sgl-project/sglang#1639, 2024-10-17); the benchmark's own table gives no prompt length
SHAREGPT_PROMPT_TOKENS = 227

#: vLLM's benchmark_throughput.py and sglang.bench_serving sample ShareGPT pairs of at most
#: 2,048 prompt + output tokens (longer ones are dropped): the longest output is below 2,048
#: less its prompt; the runs do not report their longest
SHAREGPT_MAX_PAIR_TOKENS = 2048

#: vLLM's benchmarks/benchmark_throughput.py --num-prompts default (vLLM 0.5.x)
BENCHMARK_THROUGHPUT_PROMPTS = 1000

#: TensorRT-LLM's fp8 rows costed with W8A8 GEMMs at the fp8 rate (Generation.matmul_precision):
#: tried on the vLLM proxy, and off: 10 proxies within 25% against 14 at the bf16 rate
#: (2,048-token TTFT -19% -> +55%; the 2,048-in/128-out row -28% -> -3%): TensorRT-LLM 0.5-0.6's
#: fp8 prefill did not reach the fp8 rate the training fit gives. Off by default: the rows' fp8
#: is 1-byte weights and KV cache with GEMMs at the bf16 rate, a choice made looking at these
#: rows (docs/generation.md says so).
FP8_MATMULS = False

#: engines the estimate models
MODELLED = {"vllm", "hf-generate", "sglang", "tensorrt-llm", "lmdeploy"}


def lmdeploy_setup(r: dict[str, str], assumed: list[str]) -> dict[str, Any]:
    """The TurboMind engine settings an LMDeploy row's notes state (its benchmark config):
    cache_max_entry_count (blocks), and the sequences at once, min(the client's concurrency,
    the engine's max_batch_size)."""
    notes = r["notes"]
    found = {k: re.search(rf"{k} (\d+)", notes) for k in
             ("cache_max_entry_count", "max_batch_size", "concurrency")}
    missing = [k for k, m in found.items() if m is None]
    if missing:
        raise ValueError(f"{DATA.name} row {r['row']}: notes give no {', '.join(missing)}")
    got = {k: int(m[1]) for k, m in found.items() if m is not None}
    assumed.append(f"TurboMind config as stated: cache_max_entry_count {got['cache_max_entry_count']:,} "
                   f"blocks of 128 tokens, at most min(concurrency {got['concurrency']}, "
                   f"max_batch_size {got['max_batch_size']}) sequences at once")
    return {"cache_max_entry_count": float(got["cache_max_entry_count"]),
            "max_num_seqs": min(got["concurrency"], got["max_batch_size"])}

#: The rows that set the dequantisation rate and the fixed time of a quantised GEMM
#: (assumptions.DEQUANT_WEIGHTS_PER_SM_CYCLE, QUANTISED_GEMM_FIXED_S): vLLM 0.6.3's GPTQ-Int4
#: and AWQ Qwen2.5-7B on one A100 and Qwen2.5-72B on two, 1-token prompt (decode alone, batch
#: 1); two sizes tell a cost per weight from a cost per GEMM. Every other quantised row, the
#: H20's (another GPU, engine and model family) included, is held out.
DEQUANT_FIT_ROWS = ("22", "23", "55", "56")


#: The pair that sets assumptions.EAGER_HOST_S_PER_KERNEL (by difference,
#: `fit_eager_per_kernel`): DeepSpeed#8352's vLLM rows, eager and with CUDA graphs, GPT-2 on one
#: H200 at batch 1 (the GPU stated, device time ~0.1 ms: the eager step is its launches).
EAGER_FIT_ROWS = ("307", "308")


#: The row that sets assumptions.HF_FP8_LINEAR_HOST_S (`fit_hf_fp8_linear_host`): transformers
#: 4.51.3 with Qwen3-0.6B-FP8 on an H20, batch 1, 1-token prompt, whose block-fp8 GEMMs take a
#: few microseconds each, so its time per linear is the FP8Linear's host work and sync.
HF_FP8_FIT_ROW = "169"


#: The row that sets assumptions.HF_GPTQMODEL_LINEAR_HOST_S (`fit_hf_gptqmodel_linear_host`):
#: transformers 4.51.3 with GPTQModel 2.2.0 and Qwen3-0.6B-GPTQ-Int8 on an H20, batch 1, 1-token
#: prompt, whose Marlin GEMMs take a few microseconds, so its time per linear is the host's.
HF_GPTQMODEL_FIT_ROW = "170"

#: The prose for docs/generation.md's section on LMDeploy (issue 13; estimate/lmdeploy.py),
#: with the figures this script gives; `print(LMDEPLOY_NOTES)`.
LMDEPLOY_NOTES = """\
## LMDeploy's TurboMind (issue 13; estimate/lmdeploy.py)

LMDeploy publishes one set of A100-80GB tables (InternLM/lmdeploy docs/en/benchmark/a100_fp16.md):
at ebe90bc9 (2023-12-06, "The tested lmdeploy version is v0.1.0a1") a static-inference table per
model (Llama-2-7B and 13B on one GPU, InternLM-20B on two, Llama-2-70B on four; 1, 16, 32 and 64
client threads x five prompt/output pairs: 80 rows) and a ShareGPT request-throughput table (9
rows); the page was relabelled v0.1.0 (379a2d5a) and v0.2.0 (9e420561) with those numbers
unchanged, and 9e420561 added a v0.2.0 request-throughput table (4 rows). All 93 rows are in
data/generation_published.csv (rows 317-409), each with its benchmark config (cache_max_entry_count
blocks, max_batch_size) from benchmark/benchmark_<size>.sh@ebe90bc9 or benchmark/config/*.ini
@9e420561. None sets a constant: `decode_host_step_s.lmdeploy` (50 us) is an assumption read from
TurboMind's loop (one cudaStreamSynchronize a step in LlamaBatch::Finish, launches from C++, no
Python on that thread), and the decode attention's reads of a grouped cache (group / heads per CTA:
2 for Llama-2-70B) are counted from decoder_multihead_attention.cu at v0.1.0a1.

Held out, 81 of 93 rows are within 25%, median measured / predicted 0.93 (the estimate a little
fast). Static rows at batch 1 are within -1% to +15%; 16 to 64 sequences with 2,048 output tokens
within -19% to +19%. The misses:
- Llama-2-7B, short runs at 32-64 client threads (1-token prompts, 128 output tokens: +50% and
  +44%): profile_generation.py runs 6 rounds of one request a thread, and at 32-64 Python threads
  each round's next request starts late; the per-token latencies the page gives (11-12 ms at the
  median) are near the predicted step (10-11 ms), so the lost time is between requests, the
  client's, which the engine's step does not hold. The same batches with 2,048 output tokens are
  within -9% to -3%.
- Llama-2-70B at 32-64 threads and short outputs (+52% at 1/128, +38% and +26% at 128/128): here
  the step itself is slower than predicted (the page's median per-token latency 37 ms at batch
  64 against 31 ms predicted; 29 ms against 28 ms at batch 1). Its runs did not tune their GEMMs
  (benchmark_70b.sh at ebe90bc9 runs no generate_gemm_config; the v0.2.0 ini says tune_gemm=0,
  "Turbomind gemm_tune doesn't support" GQA) while the 7B-20B runs did; the estimate's GEMM
  efficiency is one figure for both, so this is a candidate, not a measured cause.
- ShareGPT request throughput: Llama-2-70B on four GPUs (+40% to +71%), InternLM-20B at
  concurrency 128 (+26%), Llama-2-7B at v0.2.0's concurrency 256 (+25.2%):
  the estimate runs the ShareGPT waves at the mean lengths; not explained further (the
  all-reduce latency of NCCL on A100 NVLink, 10 us assumed a call, and the paged cache's
  preemption at the stated block counts are candidates, not checked).
- Llama-2-7B, 16 threads, 2,048 in / 128 out (+28%): prefill-heavy; TurboMind prefills each
  arriving request in sub-batches of at most 4 x session_len tokens as it comes.
A host step fitted to the one 7B batch-1 decode row (0.8 ms) would put 84 of 93 within 25%; it
is not set: TurboMind's code shows no such cost, and the 13B batch-1 rows need none.
"""


#: The prose for docs/generation.md's section on transformers with GPTQ/AWQ weights (issue 13;
#: estimate/hf_quant.py), with the figures this script gives; `print(HF_QUANT_NOTES)`.
HF_QUANT_NOTES = """\
## transformers with GPTQModel or AutoAWQ weights (issue 13; estimate/hf_quant.py)

The Qwen3 speed benchmark's transformers rows of GPTQ-Int8 (Qwen3-0.6B, 1.7B: transformers 4.51.3,
GPTQModel 2.2.0) and AWQ-Int4 (Qwen3-4B to 32B: AutoAWQ 0.2.9 with AutoAWQ_kernels 0.0.9) are
costed with `generation --engine hf-generate --hf-quant-linear gptqmodel-2.2.0|autoawq-0.2.9`,
which names the library the checkpoint's linears load into. Read in the releases' PyPI sdists
and wheel (transformers 4.51.3, optimum 1.24/1.25, gptqmodel 2.2.0, autoawq 0.2.9) and in
casper-hansen/AutoAWQ_kernels@16c5fe16 (the 0.0.9 wheel holds no source):

- GPTQModel: quantizer_gptq.py -> optimum GPTQQuantizer.convert_model -> GPTQModel's
  hf_select_quant_linear(pack=False) (optimum#2138). Under the benchmark's device_map="auto"
  (its speed_benchmark_transformers.py) BACKEND.AUTO tries Marlin first: 8-bit, symmetric,
  compute capability 8.0+, the compiled gptqmodel_marlin_kernels (a "+cu128torch2.6" wheel is
  built with them). So MarlinQuantLinear: one gptq_marlin_gemm call a linear (vLLM's kernel,
  ported), no dequantised copy in memory. GPU: the 1-byte weights at the Marlin dequantisation
  rate and quantised_gemm_fixed_s a GEMM (7 a layer, none fused), as vLLM's Marlin is costed.
  Host: `hf_gptqmodel_linear_host_s` a linear beyond a bf16 linear's, fitted to ONE row (170,
  Qwen3-0.6B, 1-token prompt, `fit_hf_gptqmodel_linear_host`): 61 us. The code read does not
  explain that much: one extension call with three allocations is a few microseconds. The
  measured rows say the GPTQ-Int8 runs took 1,273-1,345 us a layer where the same benchmark's
  bf16 runs took 605-615: about 100 us more a linear, what GPTQModel's TorchQuantLinear (about
  11 torch operators a linear to dequantise the whole weight at every call) would cost, not
  Marlin. Which kernel ran is not recorded; the fitted value stands for whatever did.
- AutoAWQ: integrations/awq.py replace_with_awq_linear puts WQLinear_GEMM in place of each
  linear (version "gemm"; fused modules only with do_fuse or modules_to_fuse, which Qwen's AWQ
  configs do not set: assumed, fused modules not modelled). Below 1,024 tokens
  awq_ext.gemm_forward_cuda writes 8 split-k partial outputs and sums them: one operator more
  than F.linear (host: 0.88 ms / 79 operators = 11 us a linear, derived, not fitted) and
  2 x 8 x tokens x N x 2 bytes more; at 1,024 tokens or more dequantize_weights_cuda writes the
  weight in fp16 and torch.matmul reads it back (4 bytes a weight more). No constant is fitted
  for it: on row 206 a fit would need a negative host time, below. Memory: both paths hold a
  transient a bf16 linear does not, counted in generate's peak (hf_quant
  layer_transient_elements, each moment of the layer with what else is alive then): below
  1,024 tokens the 8 partials and their sum, 9 x tokens x N (Qwen3-32B's up_proj beside
  act(gate) at a 1,000-token prefill: 0.51 GB, where the bf16 MLP holds 0.15); at 1,024 or
  more the fp16 weight and the matmul's output (up_proj's 262 MB weight: 0.37 GB at 1,024
  tokens).

Refused: either library under another engine, tensor parallelism or device_map; other bit
widths; fp8; MoE models, latent attention, SSM mixers, vision towers, fused or Conv1D
projections; transformers 5.x; GPTQModel before 4.49.

Results (error = predicted / measured rate - 1). Before: the 24 rows not expressed. Now all 24
are: tuned row 170 +0%; rows 172, 174, 176 (its model, longer prompts) counted apart, +13%, -4%,
+21%; held out, Qwen3-1.7B GPTQ-Int8 (186-192) -5%, -4%, -5%, +7%, all within 25%; held out, the
16 AWQ rows, 4 within 25% (-11% to -22% at 6K-14K prompts), the rest -31% to -64%, all too slow.
Why the AWQ rows read slow: (1) at a 1-token prompt the step is the host's, and hf-generate's
host constant (0.88 ms a layer, fitted on an A100 host under transformers 4.46) is ~45% above
this H20 host's bf16 rows (597-615 us a layer: their 1-token rows read -32% to -35%); (2) the
AWQ runs took 539-560 us a layer for 4B-14B and 374 us for 32B, less than the same
benchmark's bf16 runs (another software environment, no flash-attn listed), which no
per-linear cost can give; (3) their time grows 6-21 s from a 14K to a 30K prompt where the same
models' bf16 rows grow 66-211 s, so the cache-copy model (fitted on bf16 rows) makes their 30K
prompts 52-64% slow. Held-out tally of the whole table: 245 -> 265 rows, 222 -> 230 within 25%;
no other row moved.
"""

#: The prose for docs/generation.md's section on MoE decode at batch under tensor parallelism
#: (issue 13; rows 410-458, validation/moe_expert_reads.py); `print(MOE_BATCH_NOTES)`.
MOE_BATCH_NOTES = """\
## MoE decode at batch under tensor parallelism (issue 13; validation/moe_expert_reads.py)

Until row 410 every MoE row here was batch 1 on an H20. Rows 410-462 add every row of the
fused_moe tables in four vLLM pull requests, each a benchmark_latency.py run (the mean time to
prefill and decode one batch): #2542 (Mixtral 8x7B, H100, TP 8, 1,000 in / 50 out, batch 1-64),
#3240 (Mixtral 8x7B, A100, TP 2, same lengths, the PR's tile config and master's default), #3692
(DBRX, H100, TP 4 and 8, batch 8-64, default and tuned) and #4002 (Mixtral 8x22B, A100, TP 4 and
8, batch 8-32, default and tuned; these two give no lengths: the script's 32 / 128 assumed); and
InferenceX's DeepSeek-R1-0528 FP8 sweep on one SGLang v0.5.7 engine over 8 H200 (TP 8, EP 1,
1,024 / 1,024, concurrency 8-64; issue 870, a bot's summary of a CI run). All 53 held out; 43
within 25% as the estimate stands. DeepSeek on H200 reads -0%, -12%, -13%, -16% (the estimate a
little slow at 16-64 sequences); DBRX -25% to +6%; Mixtral 8x22B -26% to -11%; Mixtral 8x7B on
A100 TP 2 -13% to +64% and on H100 TP 8 +16% to +78%, rising with the batch.

The question they were collected for: the estimate reads a touched expert's bytes at the dense
width term, d = hidden_size / tp (0.40 of bandwidth for Mixtral 8x7B or Qwen3-235B at TP 8, 0.51
for DeepSeek-V3 at TP 8, 0.25 at TP 32), while the fused MoE kernel's programs (cdiv(EM,
BLOCK_SIZE_M) x cdiv(N, BLOCK_SIZE_N), vLLM fused_moe.py) grow with the experts a step touches
and each streams K / BLOCK_SIZE_K tiles, K = hidden for gate/up and moe_ffn / tp for down (64
for DeepSeek-V3 at TP 32). Six readings of that were tried against every held-out row of both
harnesses, none with a constant set from a row (python -m
gpuhours_dev.validation.moe_expert_reads; "k-depth" takes GROUPED_GEMM_K_HALF_DEPTH, 375, fitted
on DeepGEMM's compute-bound tiles, and 1,000 is a sensitivity, not a fit):

| expert reads at | generation held out | vLLM | SGLang | MoE rows | rows 410-462 | RL held out |
|---|---|---|---|---|---|---|
| the width term at hidden / tp (as now) | 354/411 | 77/89 | 122/131 | 69/83 | 43/53 | 45/62 |
| no width term (0.80) | 336/411 | 70/89 | 111/131 | 51/83 | 36/53 | 37/62 |
| width term at one expert's moe_ffn / tp | 350/411 | 75/89 | 120/131 | 65/83 | 37/53 | 39/62 |
| width term at touched x hidden / tp | 339/411 | 72/89 | 112/131 | 54/83 | 38/53 | 37/62 |
| width term at touched x moe_ffn / tp | 340/411 | 70/89 | 115/131 | 55/83 | 36/53 | 38/62 |
| K / (K + 375) per expert GEMM | 347/411 | 74/89 | 118/131 | 62/83 | 40/53 | 44/62 |
| K / (K + 1,000) per expert GEMM | 353/411 | 77/89 | 121/131 | 68/83 | 40/53 | 43/62 |

None is adopted: each brings some rows in and throws others out. One expert's width (moe_ffn /
tp, 256 for DeepSeek-V3 at TP 8) makes DeepSeek on H200 -33%..-48% and the one-step-off RL rows
+123%..+164%: the grid is wider than one expert. Without the width term Mixtral 8x22B comes to
-6%..+24% and DBRX's tuned rows to -6%..+17%, but DeepSeek on H200 goes to +12%..+24%, DBRX's
default-config TP 8 rows to +17%..+34%, Qwen3-235B bf16 TP 8 on the H20 from -0%..+12% to
+6%..+39%. The K-depth term keeps DeepSeek (-14%..+1%) and 27 of the 28 DBRX and 8x22B rows
within 25% (two in, DBRX's row 438 out at +26%), but moves four H20 Qwen3-235B fp8 TP 4 rows
across the line (+23-25% -> +26-27%) and four Mixtral 8x7B rows out (9 out, 2 in; RL: 2 out, 1
in). In the RL table the one-step-off NeMo-RL rows that prompted this come in only without the
width term (lines 44, 47, 58, 61: +48/+66/+48/+41% -> +4/+7/+5/-9%), while 23 other MoE rows,
most already costed short, fall 3 to 39 points (46 +7% -> -27%, 59 +17% -> -20%, 60 +12% ->
-27%, 43 -21% -> -42%). DeepSeek-V3's own decode at TP 8 and batch 8-64 is costed within 16% by
the rule as it stands, so the one-step-off rows' excess is not shown to be the expert reads;
their TP 32 (d = 224) is checked by no generation row.

What else the rows say: (1) the tile config alone moves a fused MoE step by 4-20% at the same
batch (DBRX main vs the PR's config; 8x22B with and without), which no rule without the config
gives; (2) the Mixtral 8x7B H100 TP 8 rows are too fast already at batch 1 (about 8.9 ms a step:
the measured 0.459 s less the predicted 14 ms prefill, over 50 steps; 6.0 ms predicted, 2.3 of
it the host step): vLLM of January 2024 (before its custom all-reduce) spends per step at TP 8
what the estimate does not count; a candidate, not checked. Not done: a tile-config model;
DeepSeek-V3 at TP 16-32 on one engine (none found); Qwen3-235B on 8 H100 at about 1,000 requests
at once (GPUStack's performance-lab page, vLLM 0.11 and SGLang 0.5.5) is a candidate not taken
in the time given.
"""


#: transformers rows that name the library their GPTQ/AWQ linears load into (engine_version)
#: -> Generation.hf_quant_linear (estimate/hf_quant.py), with what the row leaves to assume
HF_QUANT_STACKS: dict[str, tuple[str, str]] = {
    "GPTQModel 2.2.0": (
        "gptqmodel-2.2.0",
        "GPTQModel's MarlinQuantLinear (its BACKEND.AUTO pick under device_map=\"auto\", as "
        "the benchmark's script loads): the checkpoint taken as Qwen's GPTQ-Int8 hub config "
        "(8-bit, group 128, sym, no act order) and the wheel's Marlin extension as built"),
    "AutoAWQ 0.2.9": (
        "autoawq-0.2.9",
        "AutoAWQ's WQLinear_GEMM with AutoAWQ_kernels' awq_ext (the page lists 0.0.9): the "
        "checkpoint taken as Qwen's AWQ hub config (version gemm, no modules_to_fuse: fused "
        "modules off), fp16 activations"),
}

#: rows that set a constant (tuned): their error is a residual, not a prediction, and they are
#: counted apart. H20_FIT_ROWS set decode_host_step_s.sglang and the H20's bandwidth; rows
#: 154 (SGLang 0.3.0) and 160 (vLLM V0, 256 running) the host time per running sequence;
#: row 127 (transformers 4.51, Qwen3-30B-A3B, 1-token prompt) the host time per expert.
TUNED = {**{row: "sets decode_host_step_s.sglang and the H20's bandwidth"
            for row in H20_FIT_ROWS},
         "127": "sets hf_generate_host_per_expert_s",
         HF_FP8_FIT_ROW: "sets hf_fp8_linear_host_s",
         HF_GPTQMODEL_FIT_ROW: "sets hf_gptqmodel_linear_host_s",
         "154": "sets decode_host_per_sequence_s.sglang",
         "160": "sets decode_host_per_sequence_s.vllm-v0",
         "274": "sets sglang_marlin_moe_empty_launch_s",
         **{row: "sets dequant_weights_per_sm_cycle and quantised_gemm_fixed_s"
            for row in DEQUANT_FIT_ROWS},
         **{row: "sets eager_host_s_per_kernel (by difference)" for row in EAGER_FIT_ROWS}}

#: held-out rows that share a tuned row's mechanism, so they are not independent checks: rows
#: 128-130 are row 127's model, host and batch 1 with longer prompts, and the expert loop fitted
#: on row 127 is 82-92% of each one's predicted time (48 x 128 x 79 us = 485 ms a token, x 2,048
#: tokens, over its whole predicted run). Counted apart from the held-out tally.
DEPENDENT = {row: "shares tuned row 127's fitted expert loop (82-92% of its predicted time)"
             for row in ("128", "129", "130")}
#: rows 171, 173 and 175 are tuned row 169's model (Qwen3-0.6B-FP8), host, engine and batch 1
#: with longer prompts; rows 285-288, Qwen3-30B-A3B-FP8 under transformers 4.51, loop over
#: every expert, so row 127's fitted expert loop and row 169's FP8Linear host time (3 linears
#: an expert) make most of their time. Counted apart.
DEPENDENT.update({row: "shares tuned row 169's fitted FP8Linear host time"
                  for row in ("171", "173", "175")})
#: rows 172, 174 and 176 are tuned row 170's model (Qwen3-0.6B-GPTQ-Int8), host, engine and
#: batch 1 with longer prompts, the fitted host time 31-32% of each one's predicted time (2,048
#: steps x 196 linears x 61 us = 24.5 s of ~78 s): counted apart, as 171/173/175 are for 169
DEPENDENT.update({row: "shares tuned row 170's fitted GPTQModel linear host time"
                  for row in ("172", "174", "176")})
DEPENDENT.update({row: "shares tuned rows 127's expert loop and 169's FP8Linear host time"
                  for row in ("285", "286", "287", "288")})
#: TensorRT-LLM's fp8 rows: FP8_MATMULS (their GEMMs at the bf16 rate) was chosen looking at
#: them while they were vLLM proxies, so they are not independent checks; counted apart (a
#: reviewer's read).
DEPENDENT.update({str(row): "FP8_MATMULS (bf16-rate GEMMs for its fp8) chosen looking at "
                            "these rows" for row in range(131, 139)})
DEPENDENT.update({str(row): "FP8_MATMULS (bf16-rate GEMMs for its fp8) chosen looking at "
                            "these rows" for row in range(146, 150)})
#: rows 276, 278, 280, 282 and 284 are tuned row 274's model (Qwen3-30B-A3B GPTQ-Int4), host,
#: engine and batch 1 with longer prompts: the empty-expert launch cost fitted on row 274 is
#: 36-88% of each one's predicted time. Counted apart, like 128-130 (a reviewer's read).
DEPENDENT.update({row: "shares tuned row 274's fitted empty-expert launches (36-88% of its "
                       "predicted time)" for row in ("276", "278", "280", "282", "284")})
#: rows 25, 26 and 61 are tuned rows 22, 23 and 55 (Qwen2.5 GPTQ/AWQ on the A100, vLLM 0.6.3)
#: with a 30K prompt: the same model, GPU, engine and quantisation, whose fitted Marlin terms
#: are 10-11% of each one's predicted time. Counted apart (a reviewer's read).
DEPENDENT.update({row: "shares tuned rows 22, 23 and 55's fitted Marlin terms (10-11% of its "
                       "predicted time)" for row in ("25", "26", "61")})


@dataclass(frozen=True)
class Result:
    row: dict[str, str]
    #: the predicted value in the row's unit (None: not expressed)
    predicted: float | None
    #: predicted rate / measured rate - 1 (for a time, measured / predicted - 1)
    error: float | None
    #: the same costed as vLLM, for engines the estimate does not model
    proxy_predicted: float | None = None
    proxy_error: float | None = None
    why: str = ""
    assumed: list[str] = field(default_factory=list)


def rows() -> list[dict[str, str]]:
    with DATA.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))




def cuda_graphs_of(r: dict[str, str], assumed: list[str]) -> str:
    """The row's Generation.cuda_graphs: off where the source ran without graphs
    (enforce_eager=True, --disable-cuda-graph); on for vLLM 0.6.3, whose builder never applies
    its max_seq_len_to_capture check (estimate/cuda_graphs.py: it passes max_encoder_seq_len,
    0, as the decode length), so its steps replay graphs at every context; else auto (the
    engine's capture rules)."""
    notes = r["notes"]
    if "enforce_eager=True" in notes or "--disable-cuda-graph" in notes:
        return "off"
    if r["engine"] == "vllm" and "0.6.3" in r["engine_version"]:
        if float(r["input_tokens"] or 0) + float(r["output_tokens"]) > 8192:
            assumed.append("CUDA graphs at every context: vLLM 0.6.3.post1's builder passes "
                           "max_encoder_seq_len (0) as the decode length to its "
                           "max_seq_len_to_capture (8,192) check (worker/model_runner.py line "
                           "831), so the check never fires")
        return "on"
    return "auto"


def _estimate(r: dict[str, str], engine: str, assumed: list[str]) -> float:
    """The row's measured quantity, predicted with `engine`'s constants."""
    from gpuhours.api import estimate_generation
    from gpuhours.estimate.arch import from_hf_config
    from gpuhours.estimate.generation import engine_max_num_seqs, max_batch_by_memory
    from gpuhours.resolve import resolve_gpu, resolve_model
    from gpuhours.setup import Generation, Hardware

    name = r["model"]
    if name in CONFIGS:
        arch = from_hf_config(CONFIGS[name], name)
        assumed.append("model from its config.json (not in the catalog)")
    else:
        catalog_name, why = MODELS[name]
        arch, _ = resolve_model(catalog_name, None)
        if why:
            assumed.append(why)
    gpu_name, overrides, why = GPUS[r["gpu"]]
    gpu = resolve_gpu(gpu_name, **overrides)
    if why:
        assumed.append(why)
    if r["gpu"] in FP8_TFLOPS and r["precision"] == "fp8 (block W8A8)":
        tflops, why = FP8_TFLOPS[r["gpu"]]
        gpu = gpu.model_copy(update={"dense_tflops": gpu.dense_tflops.model_copy(
            update={"fp8": tflops})})
        assumed.append(why)
    weight_bytes, kv_bytes, why = PRECISIONS[r["precision"]]
    if why:
        assumed.append(why)
    tp = int(r["gpu_count"])
    # transformers over several GPUs splits the model by device_map (layers in sequence), not
    # by tensor parallelism (estimate/device_map.py)
    mapped = engine == "hf-generate" and tp > 1
    if mapped:
        assumed.append("device_map=\"auto\" over the GPUs (the benchmark's 'by device_map'): "
                       "accelerate's balanced split, layers in sequence, its hooks on the host "
                       "(estimate/device_map.py); GPU memory as torch reports it free: the "
                       "device less the CUDA context")
    prompt = round(float(r["input_tokens"])) if r["input_tokens"] else SHAREGPT_PROMPT_TOKENS
    if not r["input_tokens"]:
        assumed.append(f"prompt {SHAREGPT_PROMPT_TOKENS} tokens (ShareGPT mean in "
                       f"sglang.bench_serving, sglang#1639)")
    output = round(float(r["output_tokens"]))
    metric = r["metric"]
    if metric == "ttft_ms":
        output = 0
        assumed.append("TTFT = the prefill of the prompt")
    # the transformers release the row states (engine_version): what hf-generate's decode step
    # copies depends on it (estimate/generation.py hf_generate_kv_cache_passes)
    release = re.search(r"transformers (\d+\.\d+(?:\.\d+)?)", r["engine_version"])
    hf = release[1] if engine == "hf-generate" and release else Generation.model_fields[
        "hf_transformers_version"].default
    quant = _hf_quant_stack(r) if engine == "hf-generate" else None
    if quant is not None:
        assumed.append(quant[1])
    g = Generation(arch=arch, model=name, prompt_tokens=prompt, output_tokens=output,
                   engine=engine,  # type: ignore[arg-type]
                   tensor_parallel=1 if mapped else tp,  # type: ignore[arg-type]
                   device_map_gpus=tp if mapped else 1,
                   hf_transformers_version=hf,
                   hf_quant_linear=None if quant is None else quant[0],  # type: ignore[arg-type]
                   cuda_graphs=cuda_graphs_of(r, assumed)  # type: ignore[arg-type]
                   if engine != "hf-generate" else "auto",
                   weight_bytes_per_param=weight_bytes, kv_bytes_per_element=kv_bytes,
                   matmul_precision="fp8" if r["precision"] == "fp8 (block W8A8)" or (
                       FP8_MATMULS and r["precision"].startswith("fp8")) else "bf16")
    if engine == "lmdeploy":
        g = g.model_copy(update=lmdeploy_setup(r, assumed))
    if r["batch"]:
        requests = int(r["batch"])
    else:
        requests = BENCHMARK_THROUGHPUT_PROMPTS
        assumed.append("1000 prompts (benchmark_throughput.py's default --num-prompts; not "
                       "given)")
    if engine == "tensorrt-llm":
        # a static batch (gptSessionBenchmark): every sequence at once, the engine's own rule
        batch = requests
    elif engine == "vllm" and r["engine"] == "tensorrt-llm":
        # the vLLM proxy of a static batch: every sequence at once
        g = g.model_copy(update={"max_num_seqs": requests})
        batch = requests
        if batch > 1:
            assumed.append("static batch: every sequence at once (max_num_seqs = batch)")
    elif requests > 1:
        # continuous batching: min(requests, the engine's max_num_seqs, the KV cache) at once,
        # in waves; max_num_seqs the row's, else vLLM's default on this GPU (V1: 1,024 on a GPU
        # of 70 GiB or more not named A100; V0 and smaller GPUs 256), and SGLang's running
        # requests taken as 256 (row 154's tuned host time per sequence was set at it)
        cap = max_batch_by_memory(arch, g, gpu)
        seqs = (g.max_num_seqs or (engine_max_num_seqs(g, gpu) or 256)
                if engine in ("vllm", "vllm-v0") else g.max_num_seqs or 256)
        batch = min(requests, seqs, cap)
        if "ShareGPT" in r["notes"]:
            # lengths spread: the mean work, then the run waits for its longest output
            longest = SHAREGPT_MAX_PAIR_TOKENS - prompt
            g = g.model_copy(update={"max_output_tokens": longest})
            assumed.append(f"continuous batching: min(requests, max_num_seqs {seqs}, what the KV "
                           f"cache holds) run at once, in waves of the mean lengths; the run "
                           f"then waits for its longest output, taken as {longest:,} tokens "
                           f"(the ShareGPT sampler's 2,048-token pair cap less the mean "
                           f"prompt; the run's longest is not given)")
        else:
            assumed.append(f"continuous batching: min(requests, max_num_seqs {seqs}, what the KV "
                           "cache holds) run at once; the aggregate rate is one full wave's")
    else:
        batch = 1
    e = estimate_generation(g.model_copy(update={"batch": batch}), Hardware(gpu=gpu))
    if e.tail_s:
        # the whole run: every wave at the mean, then the longest output's tail, once
        waves = -(-requests // batch)
        run_s = waves * (e.prefill_s + e.decode_s) + e.tail_s
        if metric == "output_tokens_per_s":
            return requests * output / run_s
        if metric == "total_tokens_per_s":
            return requests * (prompt + output) / run_s
        raise ValueError(f"{DATA.name}: a spread of lengths for {metric!r} is not expressed")
    if metric == "output_tokens_per_s":
        return e.output_tokens_per_s
    if metric == "output_tokens_per_s_ambiguous":
        # the page's H100 table says per GPU; read as the group's total, its A100 LLaMA 70B
        # TP 4 row (670) would be 168 per GPU, 16x below the H100 fp8 TP 2 row (2,657 per GPU)
        # where NVIDIA's own H100/A100 claim is at most 4.6x
        assumed.append("throughput read as per GPU, as the same page's H100 table says (read "
                       "as the TP group's total, the estimate would be TP times higher)")
        return e.output_tokens_per_s / tp
    if metric == "output_tokens_per_s_per_gpu":
        return e.output_tokens_per_s / tp
    if metric == "total_tokens_per_s":
        return batch * (prompt + output) / e.batch_time_s
    if metric == "ttft_ms":
        return e.prefill_s * 1e3
    if metric == "decode_step_ms":
        # sglang.bench_latency's median decode latency: one step at about the prompt's context
        return e.decode_step_s_first * 1e3
    if metric == "request_latency_s":
        return e.batch_time_s
    raise ValueError(f"{DATA.name}: unknown metric {metric!r}")


def _error(predicted: float, measured: float, metric: str) -> float:
    """Predicted rate / measured rate - 1: + means the estimate is faster than measured."""
    if metric in _TIMES:
        return measured / predicted - 1
    return predicted / measured - 1


#: metrics that are times (the error is measured / predicted - 1: + means faster than measured)
_TIMES = frozenset({"ttft_ms", "decode_step_ms", "request_latency_s"})


def _engine(r: dict[str, str]) -> str:
    """The estimate's engine for a row: vLLM before 0.8 ran the V0 engine (`vllm-v0`, whose
    host work grows with the running batch); V1 became the default in 0.8."""
    if r["engine"] != "vllm":
        return r["engine"]
    version = re.search(r"\b0\.(\d+)", r["engine_version"])
    if version is None and "2024" not in r["engine_version"]:
        raise ValueError(f"{DATA.name} row {r['row']}: vLLM release not known")
    return "vllm-v0" if version is None or int(version.group(1)) < 8 else "vllm"


def _not_expressed(r: dict[str, str]) -> str:
    """Why a row cannot be expressed with its own engine ("" when it can)."""
    if r["engine"] not in MODELLED:
        return f"{r['engine']} is not modelled (no host cost of its own)"
    if (r["engine"] == "hf-generate" and r["precision"] not in ("bf16", "fp8 (block W8A8)")
            and _hf_quant_stack(r) is None):
        return ("transformers with GPTQ/AWQ weights of a library other than GPTQModel 2.2.0 "
                "and AutoAWQ 0.2.9 is not modelled (estimate/hf_quant.py)")
    return ""


def _hf_quant_stack(r: dict[str, str]) -> tuple[str, str] | None:
    """(Generation.hf_quant_linear, what is assumed) for a transformers row that names its
    GPTQ/AWQ library (HF_QUANT_STACKS); None for any other row."""
    for name, stack in HF_QUANT_STACKS.items():
        if name in r["engine_version"]:
            return stack
    return None


def predict(r: dict[str, str]) -> Result:
    """One row expressed (or the reason it cannot be), with its proxy for unmodelled engines."""
    from gpuhours.errors import InputError

    measured = float(r["measured"])
    why = _not_expressed(r)
    assumed: list[str] = []
    if why and r["engine"] in MODELLED:
        return Result(r, None, None, why=why)
    engine = _engine(r) if not why else "vllm"
    try:
        value = _estimate(r, engine, assumed)
    except InputError as exc:
        fit = f"does not fit as expressed: {exc.message.rstrip('.')}"
        return Result(r, None, None, why=f"{why}; {fit}" if why else fit, assumed=assumed)
    err = _error(value, measured, r["metric"])
    if not why:
        return Result(r, value, err, assumed=assumed)
    return Result(r, None, None, proxy_predicted=value, proxy_error=err, why=why,
                  assumed=["costed as vLLM (proxy)", *assumed])


def results() -> list[Result]:
    return [predict(r) for r in rows()]


def fit_sglang_h20(host_step_s: list[float],
                   bandwidth_gb_per_s: list[float]) -> tuple[float, float]:
    """The (SGLang host step s, H20 decode bandwidth GB/s) of the grid given that minimises the
    sum of squared log errors on H20_FIT_ROWS, each row predicted as `predict` does (the
    bandwidth tried in place of the catalog's h20 decode_bw_gb_per_s)."""
    import dataclasses

    from gpuhours.estimate import assumptions as A
    from gpuhours.estimate import generation

    data = {r["row"]: r for r in rows()}
    saved_host, saved_bw = A.DECODE_HOST_STEP_S["sglang"], generation.decode_bandwidth_gb_per_s
    best: tuple[float, float, float] | None = None
    try:
        for h in host_step_s:
            A.DECODE_HOST_STEP_S["sglang"] = dataclasses.replace(saved_host, value=h)
            for bw in bandwidth_gb_per_s:
                def trial(gpu: Any, bw: float = bw) -> tuple[float, str | None]:
                    value, source = saved_bw(gpu)
                    return (bw, "fit trial") if gpu.name == "h20" else (value, source)

                generation.decode_bandwidth_gb_per_s = trial  # type: ignore[assignment]
                loss = _log_loss(data, H20_FIT_ROWS)
                if best is None or loss < best[0]:
                    best = (loss, h, bw)
    finally:
        A.DECODE_HOST_STEP_S["sglang"] = saved_host
        generation.decode_bandwidth_gb_per_s = saved_bw  # type: ignore[assignment]
    assert best is not None
    return best[1], best[2]


def _fit_host_constant(name: str, fit_row: str, low_s: float, high_s: float) -> float:
    """The value of assumptions.`name` (a host time, s) at which `predict` meets `fit_row`'s
    measured rate, by bisection to 0.1 us (the predicted rate falls as it grows), rounded to
    the microsecond; the constant is restored after."""
    import dataclasses

    from gpuhours.estimate import assumptions as A

    row = {r["row"]: r for r in rows()}[fit_row]
    saved = getattr(A, name)
    try:
        while high_s - low_s > 1e-7:
            mid = (low_s + high_s) / 2
            setattr(A, name, dataclasses.replace(saved, value=mid))
            err = predict(row).error
            assert err is not None
            low_s, high_s = (mid, high_s) if err > 0 else (low_s, mid)
    finally:
        setattr(A, name, saved)
    return round((low_s + high_s) / 2, 6)


def fit_hf_fp8_linear_host(low_s: float = 0.0, high_s: float = 500e-6) -> float:
    """assumptions.HF_FP8_LINEAR_HOST_S from HF_FP8_FIT_ROW: the host time per FP8Linear at
    which `predict` meets the row's measured rate (_fit_host_constant)."""
    return _fit_host_constant("HF_FP8_LINEAR_HOST_S", HF_FP8_FIT_ROW, low_s, high_s)


def fit_hf_gptqmodel_linear_host(low_s: float = 0.0, high_s: float = 500e-6) -> float:
    """assumptions.HF_GPTQMODEL_LINEAR_HOST_S from HF_GPTQMODEL_FIT_ROW: the host time per
    GPTQModel linear (beyond a bf16 linear's) at which `predict` meets the row's measured
    rate (_fit_host_constant)."""
    return _fit_host_constant("HF_GPTQMODEL_LINEAR_HOST_S", HF_GPTQMODEL_FIT_ROW, low_s, high_s)


def fit_eager_per_kernel() -> float:
    """assumptions.EAGER_HOST_S_PER_KERNEL from EAGER_FIT_ROWS, by difference: the eager
    run's time per output token less the graph run's (the engine's host step and the prefill
    cancel; each output token is one forward) is what launching the forward's kernels costs
    beyond the device time it overlaps, so per kernel = (extra + the graph step's device time)
    / the counted kernels. The device time is the estimate's (bytes / bandwidth at batch 1,
    ~0.1 ms for GPT-2 on an H200)."""
    from gpuhours.api import estimate_generation
    from gpuhours.estimate.arch import from_hf_config
    from gpuhours.resolve import resolve_gpu
    from gpuhours.setup import Generation, Hardware

    data = {r["row"]: r for r in rows()}
    eager, graph = (data[row] for row in EAGER_FIT_ROWS)
    extra_s = 1 / float(eager["measured"]) - 1 / float(graph["measured"])
    arch = from_hf_config(CONFIGS[graph["model"]], graph["model"])
    g = Generation(arch=arch, prompt_tokens=int(graph["input_tokens"]),
                   output_tokens=int(graph["output_tokens"]), batch=1, engine="vllm")
    e = estimate_generation(g, Hardware(gpu=resolve_gpu(GPUS[graph["gpu"]][0])))
    device_s = e.decode_step_s_first - e.host_step_s
    return (extra_s + device_s) / e.eager_kernels


def _log_loss(data: dict[str, dict[str, str]], fit_rows: Iterable[str]) -> float:
    """Sum of squared log errors of `fit_rows`, each predicted as `predict` does (a fit's
    objective)."""
    loss = 0.0
    for row in fit_rows:
        value = predict(data[row]).predicted
        assert value is not None, row
        loss += math.log(value / float(data[row]["measured"])) ** 2
    return loss


def fit_quantised_gemm(weights_per_sm_cycle: list[float],
                       fixed_s: list[float]) -> tuple[float, float]:
    """The (dequantisation rate in weights per SM per cycle, fixed seconds per quantised GEMM)
    of the grid given that minimises the sum of squared log errors on DEQUANT_FIT_ROWS, each
    row predicted as `predict` does."""
    import dataclasses

    from gpuhours.estimate import assumptions as A

    data = {r["row"]: r for r in rows()}
    saved_rate, saved_fixed = A.DEQUANT_WEIGHTS_PER_SM_CYCLE, A.QUANTISED_GEMM_FIXED_S
    best: tuple[float, float, float] | None = None
    try:
        for fixed in fixed_s:
            A.QUANTISED_GEMM_FIXED_S = dataclasses.replace(saved_fixed, value=fixed)
            for rate in weights_per_sm_cycle:
                A.DEQUANT_WEIGHTS_PER_SM_CYCLE = dataclasses.replace(saved_rate, value=rate)
                loss = _log_loss(data, DEQUANT_FIT_ROWS)
                if best is None or loss < best[0]:
                    best = (loss, rate, fixed)
    finally:
        A.DEQUANT_WEIGHTS_PER_SM_CYCLE, A.QUANTISED_GEMM_FIXED_S = saved_rate, saved_fixed
    assert best is not None
    return best[1], best[2]


def _short_source(src: str) -> str:
    for key, short in (("Qwen3", "Qwen3"), ("Qwen2.5", "Qwen2.5"), ("TensorRT", "TRT-LLM"),
                       ("sglang", "SGLang bench"), ("issues/12315", "vLLM#12315"),
                       ("pull/7117", "vLLM#7117"), ("pull/2542", "vLLM#2542"),
                       ("pull/3240", "vLLM#3240"), ("pull/3692", "vLLM#3692"),
                       ("pull/4002", "vLLM#4002"), ("InferenceX", "InferenceX#870")):
        if key in src:
            return short
    return src[:20]


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:,.1f}"


def _key(n: int) -> str:
    """[a], [b], ... [z], [aa], ...: the key of the n-th distinct assumption."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    return f"[{letters[n]}]" if n < 26 else f"[{letters[n // 26 - 1]}{letters[n % 26]}]"


def generation_track_record(engine: str, as_of: str, res: list[Result] | None = None
                            ) -> TrackRecord:
    """The record `gpuhours generation` prints for `engine` (estimate/track_record.py): the
    held-out rows summary counts ("native": not TUNED, not DEPENDENT) of that engine, each as
    measured rate / predicted rate (a TTFT row: predicted time / measured time); `res`: the
    results already computed (else computed here)."""
    res = results() if res is None else res
    errors = [x.error for x in res if x.error is not None and x.row["engine"] == engine
              and x.row["row"] not in TUNED and x.row["row"] not in DEPENDENT]
    return summarise([1 / (1 + e) for e in errors], TOLERANCE,
                     f"generation with {engine}; published rows held out (GPUs, batches, "
                     "lengths and releases as the rows ran)", "throughput",
                     f"docs/generation.md, the published rows of engine {engine}", as_of,
                     higher_is_faster=True)


def summary(res: list[Result]) -> dict[str, Any]:
    """Counts over the rows expressed with their own engine, and over the proxies."""
    native = [x.error for x in res if x.error is not None and x.row["row"] not in TUNED
              and x.row["row"] not in DEPENDENT]
    dependent = [x.error for x in res if x.error is not None and x.row["row"] in DEPENDENT]
    proxy = [x.proxy_error for x in res if x.proxy_error is not None]

    def stats(errs: list[float]) -> dict[str, Any]:
        if not errs:
            return {"n": 0, "within": 0, "median_abs": None, "worst": None}
        worst = max(errs, key=abs)
        return {"n": len(errs), "within": sum(abs(e) <= TOLERANCE for e in errs),
                "median_abs": statistics.median(abs(e) for e in errs), "worst": worst}

    return {"rows": len(res), "native": stats(native), "proxy": stats(proxy),
            "tuned": sum(x.row["row"] in TUNED for x in res), "dependent": stats(dependent),
            "not_expressed": sum(x.error is None and x.proxy_error is None for x in res)}


def _group_lines(res: list[Result]) -> list[str]:
    groups: dict[tuple[str, str, str, str], list[float]] = {}
    for x in res:
        e = x.error if x.error is not None else x.proxy_error
        if e is None or x.row["row"] in TUNED or x.row["row"] in DEPENDENT:
            continue
        key = (_short_source(x.row["source"]), x.row["engine"] + (
            " (as vLLM)" if x.proxy_error is not None else ""), x.row["precision"],
            x.row["metric"])
        groups.setdefault(key, []).append(e)
    out = ["| source | engine | precision | measured quantity | rows | within 25% | median error "
           "| range |", "|---|---|---|---|---|---|---|---|"]
    for (src, eng, precision, metric), errs in groups.items():
        out.append(f"| {src} | {eng} | {precision} | {metric} | {len(errs)} | "
                   f"{sum(abs(e) <= TOLERANCE for e in errs)} | "
                   f"{statistics.median(errs):+.0%} | {min(errs):+.0%} to {max(errs):+.0%} |")
    return out


def report(res: list[Result] | None = None) -> str:
    """The published-rows report of docs/generation.md; `res`: the results already computed."""
    res = results() if res is None else res
    s = summary(res)
    n, p, d = s["native"], s["proxy"], s["dependent"]
    headline = (
        f"{s['rows']} published rows ({s['tuned']} tuned, set apart; {d['n']} sharing a tuned "
        f"row's mechanism, rows {', '.join(DEPENDENT)}, counted apart: {d['within']} of them "
        f"within 25%, not independent checks): {n['n']} held-out rows "
        f"expressed with their own engine, {n['within']} "
        f"of them within 25%, median |error| {n['median_abs']:.0%}, worst {n['worst']:+.0%}; "
        + (f"{p['n']} of engines not modelled, costed as vLLM (proxy): {p['within']} within "
           f"25%, median |error| {p['median_abs']:.0%}, worst {p['worst']:+.0%}; "
           if p["n"] else "0 of engines not modelled, costed as vLLM (proxy): 0 within 25%; ")
        + f"{s['not_expressed']} not expressed.")
    lines = [
        *textwrap.wrap(headline, _WIDTH), "",
        *textwrap.wrap("Error = predicted rate / measured rate - 1 (for TTFT, measured / predicted "
                       "time - 1): + means the estimate is faster than measured.", _WIDTH), "",
        *_group_lines(res), "",
        "| row | source | model | GPU | engine, precision | batch | in / out | measured | "
        "predicted | error | assumed (key below) / why not |",
        "|---|---|---|---|---|---|---|---|---|---|---|"]
    keys: dict[str, str] = {}
    for x in res:
        r = x.row
        unit = {"output_tokens_per_s": "out tok/s", "output_tokens_per_s_ambiguous": "out tok/s",
                "output_tokens_per_s_per_gpu": "out tok/s/GPU",
                "total_tokens_per_s": "(in+out) tok/s", "ttft_ms": "ms TTFT",
                "decode_step_ms": "ms a decode step",
                "request_latency_s": "s a request"}[r["metric"]]
        if x.predicted is not None and x.error is not None:
            pred, err = _fmt(x.predicted), f"{x.error:+.0%}"
        elif x.proxy_predicted is not None and x.proxy_error is not None:
            pred, err = f"({_fmt(x.proxy_predicted)})", f"({x.proxy_error:+.0%})"
        else:
            pred, err = "-", ""
        gpus = f"{r['gpu_count']} x {r['gpu']}" if r["gpu_count"] != "1" else r["gpu"]
        codes = [keys.setdefault(a, _key(len(keys))) for a in x.assumed]
        tuned = ([f"tuned: {TUNED[r['row']]}"] if r["row"] in TUNED else
                 [f"counted apart: {DEPENDENT[r['row']]}"] if r["row"] in DEPENDENT else [])
        notes = "; ".join(tuned + ([x.why] if x.why else [])
                          + ([" ".join(codes)] if codes else []))
        lines.append(
            f"| {r['row']} | {_short_source(r['source'])} | {r['model']} | {gpus} | "
            f"{r['engine_version']}, {r['precision']} | {r['batch'] or '?'} | "
            f"{r['input_tokens'] or '?'} / {r['output_tokens']} | {float(r['measured']):,.6g} "
            f"{unit} | {pred} | {err} | {notes} |")
    lines += ["", "Assumed:", ""]
    for text, k in keys.items():
        lines += textwrap.wrap(f"- {k} {text}", _WIDTH, subsequent_indent="  ")
    return "\n".join(lines)


def h20_breakdown() -> str:
    """The Qwen3 benchmark's bf16 1-GPU 1-token rows (decode alone: 2,049 tokens of which 2,048 are
    generated) as time per token against the weight bytes a step reads (counted from the
    config, bf16; an MoE's experts one token routes to), with the straight line through the
    dense SGLang rows: its intercept is the host's, its slope the bandwidth reached (a table of
    docs/generation.md)."""
    from gpuhours.estimate.blocks import routed_expert_params
    from gpuhours.estimate.generation import experts_touched, weight_bytes_read_per_step
    from gpuhours.resolve import resolve_model

    points: list[tuple[str, str, int, float, float, bool]] = []
    for r in rows():
        if ("Qwen3" not in r["source"] or r["input_tokens"] != "1" or r["precision"] != "bf16"
                or r["gpu_count"] != "1"):
            continue
        arch, _ = resolve_model(MODELS[r["model"]][0], None)
        read = weight_bytes_read_per_step(arch, 2.0)
        if arch.is_moe:
            unread = 1.0 - experts_touched(arch, 1) / arch.num_experts
            read -= routed_expert_params(arch) * 2.0 * unread
        # 2,049 tokens in 2,048 forwards (the prefill gives the first generated token)
        ms = 2049 / float(r["measured"]) / 2048 * 1e3
        points.append((r["model"], r["engine"], arch.num_layers, read / 1e9, ms, arch.is_moe))
    dense = [(gb, ms) for _, e, _, gb, ms, moe in points if e == "sglang" and not moe]
    mx = statistics.fmean(gb for gb, _ in dense)
    my = statistics.fmean(ms for _, ms in dense)
    slope = (sum((gb - mx) * (ms - my) for gb, ms in dense)
             / sum((gb - mx) ** 2 for gb, _ in dense))
    lines = ["| model | engine | layers | weights read / token | ms / token | ms / layer | "
             "line (SGLang dense) |", "|---|---|---|---|---|---|---|"]
    for m, e, layers, gb, ms, _ in points:
        line = f"{my + slope * (gb - mx):.2f}" if e == "sglang" else ""
        lines.append(f"| {m} | {e} | {layers} | {gb:.2f} GB | {ms:.2f} | "
                     f"{ms / layers * 1e3:.0f} us | {line} |")
    lines += ["", f"Line through the dense SGLang rows: {my - slope * mx:.2f} ms + weight bytes "
                  f"/ {1 / slope:.2f} TB/s."]
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    print(h20_breakdown() if "--h20-breakdown" in sys.argv else report())
