"""Every assumed number of the analytic model, in one place, with its basis.

An `Assumption` is a value that is neither a formula nor a measurement. Reports list those they
used. Calibration from measurements (the ledger) replaces the efficiencies; nothing here is fitted
to one published run.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Assumption:
    name: str
    value: float
    unit: str
    basis: str


def _a(name: str, value: float, unit: str, basis: str) -> Assumption:
    return Assumption(name, value, unit, basis)


# --- compute efficiency ---------------------------------------------------------------------

#: Fraction of the dense peak that large half-precision GEMMs reach inside a training step, by
#: GPU generation. What each rests on:
#: - ampere: a datasheet-based assumption (cuBLAS A100 ~250-280 of 312 TFLOPS), checked, not
#:   fitted, on the 96 A100 rows of throughput.csv (llm-foundry MPT, torchtune; docs/validation.md;
#:   end-to-end training tops out near it: MPT-13B HFU 72-74%).
#: - hopper: FITTED to the tuning half of the H100 rows (scripts/gpuhours_dev/validation/
#:   hopper.py: split_halves, fit_hopper), of those the dense, GEMM-bound ones (an MoE's grouped
#:   expert GEMMs and routing were not costed then, estimate/moe_gemm.py now); the held-out half
#:   checks it (docs/validation.md, "Training throughput on H100"). Refitted on 2026-11-24 (bf16
#:   0.70 -> 0.71, fp8 0.68 -> 0.70) when the Hopper attention rates were corrected (0.50 ->
#:   0.43 fused, 0.29 -> 0.25 SDPA: their source's backward counts 2.5x the forward's FLOPs).
#: - ada: DERIVED from user microbenchmarks, not from training rows: the median Ada product's
#:   square-matmul rate over its dense peak (r 0.849: RTX 4090 1.00, L20 0.96, L40S 0.74, L4
#:   0.49) x the share of that rate the anchored generations' training GEMMs reach (the mean of
#:   Ampere's 0.80 / A100 SXM r 0.848 and Hopper's 0.71 / H100 SXM r 0.798: 0.917) = 0.78 (0.77
#:   while Hopper's fit was 0.70)
#:   (scripts/gpuhours_dev/validation/matmul_rate.py derived_ada_efficiency). It was an
#:   assumption, 0.70, resting on nothing; the fine-tuning rows on the RTX 4090 check it (held
#:   out: 6 of 11 within 20% at 0.70, 9 of 11 at 0.77; docs/validation.md).
#: - volta, turing, blackwell, cdna2, cdna3, tpu: datasheet-based assumptions, no published
#:   training row expressed on them.
#: Each figure is about the generation's reference product (GEMM_REFERENCE_MATMUL_SHARE); a
#: GeForce card whose own matmul rate was measured (catalog matmul_measured_tflops) runs at the
#: figure x its share of its peak / the reference's (estimate/timing.py product_matmul_factor):
#: user microbenchmarks of torch's bf16 matmul (scripts/gpuhours_dev/validation/data/
#: matmul_microbench.csv) put the GeForce cards at about their rated (boost-clock) peak (RTX
#: 3090 1.08, 4090 1.00), the A100/H100 SXM at 0.85/0.80 of it (issue 14; adopted 2026-11-25,
#: once the RTX 3090 FSDP rows' traffic that had kept them fast was counted; applied to every
#: measured part it moved the L40S, RTX A6000 and H20 rows away: docs/validation.md, "GEMM
#: efficiency per product"; validation/matmul_rate.py).
GEMM_EFFICIENCY_BY_GENERATION: dict[str, Assumption] = {
    "volta": _a("gemm_efficiency.volta", 0.80, "fraction of dense peak",
                "assumption: V100 fp16 tensor-core GEMMs reach ~100 of 125 TFLOPS"),
    "turing": _a("gemm_efficiency.turing", 0.60, "fraction of dense peak",
                 "assumption: T4 (70 W) throttles clocks under sustained tensor-core load"),
    "ampere": _a("gemm_efficiency.ampere", 0.80, "fraction of dense peak",
                 "assumption: A100 bf16 GEMMs ~250 of 312 TFLOPS in training-sized shapes"),
    "ada": _a("gemm_efficiency.ada", 0.78, "fraction of dense peak",
              "derived from user matmul microbenchmarks (matmul_microbench.csv): the median Ada "
              "product's rate, 0.849 of peak, x the 0.917 of that rate the A100 and H100 rows' "
              "training GEMMs reach; no Ada training row used"),
    "hopper": _a("gemm_efficiency.hopper", 0.71, "fraction of dense peak",
                 "fitted to the GEMM-bound bf16 tuning rows of the H100 validation split: ONE "
                 "configuration (NeMo Automodel Qwen2.5-7B LoRA, 1 GPU; rms log error over a "
                 "0.01 grid, scripts/gpuhours_dev/validation/hopper.py); the datasheet-based "
                 "value it replaces was 0.72 (~700 of 989 TFLOPS)"),
    "blackwell": _a("gemm_efficiency.blackwell", 0.70, "fraction of dense peak",
                    "assumption: no public training-shape GEMM sweep read; Hopper-like (the "
                    "data-centre parts, 10.x; GeForce 12.x: GEMM_EFFICIENCY_BY_SM_MAJOR)"),
    "cdna2": _a("gemm_efficiency.cdna2", 0.50, "fraction of dense peak",
                "assumption: MI250X rocBLAS GEMMs reach about half of peak"),
    "cdna3": _a("gemm_efficiency.cdna3", 0.50, "fraction of dense peak",
                "assumption: MI300X hipBLASLt bf16 GEMMs ~650 of 1307 TFLOPS"),
    "tpu": _a("gemm_efficiency.tpu", 0.75, "fraction of dense peak",
              "assumption: XLA matmuls on the MXU, large shapes"),
    "cpu": _a("gemm_efficiency.cpu", 1.0, "fraction of measured peak",
              "the CPU peak is itself measured by a matmul probe"),
}

#: The measured square-matmul share of its dense peak (median measured TFLOPS / catalog peak)
#: of the product each generation's GEMM efficiency is about: the per-product rule's reference
#: (estimate/timing.py product_matmul_factor). Generations without an entry take no factor.
GEMM_REFERENCE_MATMUL_SHARE: dict[str, Assumption] = {
    "ampere": _a("gemm_reference_share.ampere", 0.848, "fraction of dense peak",
                 "A100 SXM4 80GB, the product gemm_efficiency.ampere is about: 264.53 of 312 "
                 "TFLOPS (matmul_microbench.csv, one entry)"),
    "hopper": _a("gemm_reference_share.hopper", 0.798, "fraction of dense peak",
                 "H100 SXM, the product gemm_efficiency.hopper was fitted on: median 789.24 of "
                 "989.5 TFLOPS (matmul_microbench.csv, three entries)"),
    "ada": _a("gemm_reference_share.ada", 0.849, "fraction of dense peak",
              "the median Ada product's share, the one gemm_efficiency.ada is derived from: "
              "the median of L4 0.491, L40S 0.743, L20 0.955, RTX 4090 0.995 "
              "(matmul_microbench.csv; validation/matmul_rate.py ada_median_r)"),
}


#: The GEMM efficiency of a generation's parts whose compute-capability major differs from the
#: parts its GEMM_EFFICIENCY_BY_GENERATION entry is about, keyed (generation, major); looked up
#: by `gemm_efficiency_entry`. Blackwell's 0.70 is about the data-centre parts (10.x: B200,
#: GB200, B300, GB300: tcgen05 tensor cores and tensor memory). The GeForce RTX 50 parts (12.x)
#: have neither: their tensor cores are issued as Ada's are (warp-level mma), at half rate with
#: FP32 accumulation, the rate the catalog holds for them (rtx-5090 notes), and, like the other
#: GeForce cards, they run above their rated boost clock: user microbenchmarks of torch's bf16
#: matmul (scripts/gpuhours_dev/validation/data/matmul_microbench.csv, six RTX 5090 entries,
#: 179-242 TFLOPS, median 236.5) put the 5090 at r = 1.129 of its 209.5 TFLOPS rated peak, where
#: the B200 measures 0.754. The entry is derived as Ada's is (validation/matmul_rate.py
#: derived_geforce_blackwell_efficiency): that r x the share of the measured rate the anchored
#: generations' training GEMMs reach (0.917) = 1.035, rounded to 0.01: above 1 because the
#: catalog's peak is at the rated boost clock (2.41 GHz), below the clock the cards sustain.
#: No training row set it; the held-out Scicom RTX 5090 row (#519) checks it.
GEMM_EFFICIENCY_BY_SM_MAJOR: dict[tuple[str, int], Assumption] = {
    ("blackwell", 12): _a(
        "gemm_efficiency.blackwell_12", 1.04, "fraction of dense peak",
        "derived from user matmul microbenchmarks (matmul_microbench.csv): the RTX 5090's "
        "measured bf16 rate, 1.129 of its rated (boost-clock) peak, x the 0.917 of that rate the "
        "A100 and H100 rows' training GEMMs reach; no training row used"),
}


def _by_part(by_major: dict[tuple[str, int], Assumption],
             by_generation: dict[str, Assumption], generation: str,
             compute_capability: str | None) -> Assumption:
    """A part's entry: its (generation, compute-capability major) one in `by_major` where there
    is one, else its generation's."""
    if compute_capability:
        own = by_major.get((generation, int(compute_capability.split(".")[0])))
        if own is not None:
            return own
    return by_generation[generation]


def gemm_efficiency_entry(generation: str, compute_capability: str | None) -> Assumption:
    """The GEMM efficiency assumption for a part: its (generation, compute-capability major)
    entry of GEMM_EFFICIENCY_BY_SM_MAJOR where there is one, else its generation's."""
    return _by_part(GEMM_EFFICIENCY_BY_SM_MAJOR, GEMM_EFFICIENCY_BY_GENERATION, generation,
                    compute_capability)


#: Fraction of the dense fp8 peak that the fp8 GEMMs of fp8-mixed training reach (Transformer
#: Engine or torchao float8 linears: e4m3 inputs and weights, e5m2 or e4m3 gradients, per-tensor
#: scales), by GPU generation. Only generations with fp8 tensor cores have an entry; the others
#: refuse fp8-mixed (timing.peak_flops). The attention kernels, the LM head and LoRA adapters
#: stay in bf16 at the bf16 efficiencies above. hopper: fitted to the GEMM-bound fp8 tuning
#: rows (11 dense configurations of Megatron-Bridge and NeMo: Llama 2 7B/13B/70B full, 7B and
#: 13B LoRA, Llama 3 8B/70B, Llama 3.1 405B, NeMo's GPT-3 20B/175B), on the megatron kernel path
#: (estimate/host.py: Transformer Engine's fused layers issue ~4x fewer host operators than
#: transformers' eager code, which the previous fit, 0.80 at its grid's bound, was charged with).
#: The others: assumptions, no fp8 training row expressed.
FP8_GEMM_EFFICIENCY_BY_GENERATION: dict[str, Assumption] = {
    "ada": _a("fp8_gemm_efficiency.ada", 0.60, "fraction of dense fp8 peak",
              "assumption: Ada's power limit bites harder at fp8's doubled rate; no training "
              "row read"),
    "hopper": _a("fp8_gemm_efficiency.hopper", 0.70, "fraction of dense fp8 peak",
                 "fitted to the GEMM-bound dense fp8 tuning rows of the H100 validation split "
                 "(11 configurations, Megatron-Bridge and NeMo on the megatron kernel path; "
                 "scripts/gpuhours_dev/validation/hopper.py): ~1390 of 1979 TFLOPS"),
    "blackwell": _a("fp8_gemm_efficiency.blackwell", 0.55, "fraction of dense fp8 peak",
                    "assumption: no B200 fp8 training row expressed; about Hopper's share"),
    "cdna3": _a("fp8_gemm_efficiency.cdna3", 0.40, "fraction of dense fp8 peak",
                "assumption: MI300X hipBLASLt fp8 GEMMs reach a smaller share than bf16"),
}

#: fp8 GEMM efficiency of the parts whose compute-capability major differs from the ones their
#: generation's entry is about (as GEMM_EFFICIENCY_BY_SM_MAJOR for bf16). The GeForce RTX 50
#: parts (12.x) run above their rated boost clock, which lifts fp8 as it lifts bf16: the
#: data-centre fp8 assumption (0.55) x the 12.x bf16 entry over the data-centre bf16 one (1.04 /
#: 0.70) = 0.82. An assumption built on assumptions: no fp8 matmul on a 5090 measured here.
FP8_GEMM_EFFICIENCY_BY_SM_MAJOR: dict[tuple[str, int], Assumption] = {
    ("blackwell", 12): _a(
        "fp8_gemm_efficiency.blackwell_12", 0.82, "fraction of dense fp8 peak",
        "assumption: the data-centre fp8 share (0.55) x the RTX 5090's clock headroom in bf16 "
        "(gemm_efficiency.blackwell_12 1.04 over gemm_efficiency.blackwell 0.70); no fp8 "
        "measurement"),
}


def fp8_gemm_efficiency_entry(generation: str, compute_capability: str | None) -> Assumption:
    """The fp8 GEMM efficiency assumption for a part: its (generation, compute-capability major)
    entry of FP8_GEMM_EFFICIENCY_BY_SM_MAJOR where there is one, else its generation's."""
    return _by_part(FP8_GEMM_EFFICIENCY_BY_SM_MAJOR, FP8_GEMM_EFFICIENCY_BY_GENERATION,
                    generation, compute_capability)


#: Bytes a fp8-mixed step moves per element of each quantised activation (the input of every
#: decoder-layer linear) and output gradient: read the bf16 tensor (2), write its fp8 copy for
#: the forward or input-gradient GEMM (1) and the transposed fp8 copy the weight-gradient GEMM
#: needs on Hopper (1): fp8 GEMMs there take only the TN layout (Transformer Engine docs,
#: "Performance considerations: handling transposes"). Transformer Engine fuses some casts into
#: the norm and activation kernels, so this is an upper count.
FP8_CAST_BYTES_PER_ELEMENT = _a("fp8_cast_bytes_per_element", 4.0, "bytes per element",
                                "count: read bf16 (2) + fp8 rowwise (1) + fp8 columnwise (1)")

#: Bytes per decoder-layer matmul weight of the fp8 copies Transformer Engine keeps through the
#: step (rowwise for the forward GEMM, columnwise for the input-gradient GEMM on Hopper; cached
#: across micro-batches), on top of the bf16 weights and fp32 master/Adam state of bf16-mixed.
#: torchao's float8 linears cast per use instead and keep the cast weight for backward; the
#: same bytes.
FP8_WEIGHT_COPY_BYTES = _a("fp8_weight_copy_bytes", 2.0, "bytes per layer matmul weight",
                           "Transformer Engine Float8Tensor: 1 byte rowwise + 1 columnwise")

#: GEMMs whose inner dimension is the model width d lose a share to pipeline fill and epilogue
#: per output tile: efficiency x d / (d + GEMM_HALF_WIDTH). Basis: the K-dimension dependence of
#: GEMM throughput in NVIDIA's "Matrix Multiplication Background" guide; 128 is one K-tile pair.
GEMM_HALF_WIDTH = _a("gemm_half_width", 128.0, "elements",
                     "assumption: tile pipeline fill of about two 64-wide K tiles")

#: An MoE's routed-expert GEMMs (estimate/moe_gemm.py): the reduction depth K at which a GEMM
#: tile's fixed cost (prologue, epilogue) equals its MMA loop, so a GEMM of depth K reaches
#: K / (K + this) of its large-K rate. Fitted, with a base efficiency (0.72 of the fp8 peak),
#: to the six normal GEMMs of M = 4096 of DeepGEMM's published H800 table (data/
#: grouped_gemm_microbench.csv, validation/grouped_gemm.py), none of the training rows; its ten
#: grouped GEMMs, held out, are within 10%.
GROUPED_GEMM_K_HALF_DEPTH = _a(
    "grouped_gemm_k_half_depth", 375.0, "elements",
    "fitted to the six M = 4096 normal GEMMs of deepseek-ai/DeepGEMM@55ab91f README (H800, "
    "fp8; rms 4%); its ten grouped GEMMs held out: within 10%")
#: Host seconds of one cuBLASLt GEMM call issued from C++ (issue 16): Transformer Engine's grouped
#: GEMM on Blackwell and Hopper without NVTE_USE_CUTLASS_GROUPED_GEMM loops over the local
#: experts in C++ (transformer_engine/common/gemm/cublaslt_gemm.cu @d0067d0d
#: multi_stream_cublas_gemm -> cublas_gemm): each GEMM creates its matrix layouts, matmul
#: descriptor and preference (47 cuBLASLt calls), asks cublasLtMatmulAlgoGetHeuristic, launches
#: and destroys them, with nothing memoised. NVIDIA/raft#1736 measured its GEMM call at about
#: 10 us from entering the wrapper to the kernel's launch (NVTX) through cuBLAS, which chooses
#: its kernel afresh each call, and 5 us through cuBLASLt with the descriptors and the
#: heuristic's answer memoised; pytorch/pytorch#191700 puts cuBLASLt's internally cached
#: heuristic query near 1 us. TE's call memoises neither, so the first figure is taken: a
#: published measurement (host CPU not stated there), not fitted to any training row.
CUBLASLT_GEMM_HOST_S = _a(
    "cublaslt_gemm_host_s", 10e-6, "s per GEMM call",
    "published: NVIDIA/raft#1736 (a GEMM call ~10 us host to launch when its kernel is "
    "chosen each call, ~5 us with cuBLASLt descriptors and heuristic memoised); TE's grouped "
    "GEMM memoises neither (cublaslt_gemm.cu @d0067d0d); x86 host assumed, scaled by the "
    "part's host ratio")
#: The p of the p-norm combining a small GEMM's compute time and its operands' read time
#: (neither hides the other entirely): 2 is an assumption, checked on DeepGEMM's masked grouped
#: GEMMs of M = 256-1024 per group (held out, within 10%).
GEMM_ROOFLINE_P = _a("gemm_roofline_p", 2.0, "exponent",
                     "assumption; checked on DeepGEMM's masked grouped GEMMs (held out)")

#: Attention kernels reach a lower share of peak than GEMMs (softmax and rescaling run off the
#: tensor cores), per causal FLOP: e_attn = ratio x GEMM efficiency. Basis: FlashAttention
#: kernels that do not skip masked blocks (llm-foundry's 2023 triton kernel, as its long-sequence
#: rows imply) run at
#: ~55% of peak on the full S x S work, i.e. ~28% per causal FLOP = 0.35 x 0.80. This one global
#: constant was set with shared/reference/validation/throughput.csv in view (MPT 125M-30B,
#: 512-65536 tokens). FlashAttention-2 with block skipping (Dao 2023, fig. 4-7) reaches about
#: twice this on long causal sequences, so long-context estimates here are conservative.
ATTENTION_EFFICIENCY_RATIO = _a(
    "attention_efficiency_ratio", 0.35, "fraction of the GEMM efficiency",
    "attention kernels ~55% of peak on the full S^2 work without causal block skipping "
    "(llm-foundry MPT table); FlashAttention-2 with skipping is up to 2x faster")

#: Generations whose training stacks run attention kernels that skip masked blocks and overlap
#: softmax with the matmuls: the attention efficiency per causal FLOP, as a fraction of the dense
#: bf16 peak, instead of ATTENTION_EFFICIENCY_RATIO x the GEMM efficiency. Hopper: cuDNN's
#: fused attention (Transformer Engine: Megatron-LM, NeMo) and FlashAttention-3 reach ~600-650
#: TFLOPS forward and ~420-500 backward at 2k-16k tokens, head dim 64-128, on an H100 SXM
#: (Shah et al. 2024, arXiv:2407.08608, figs. 5-6). Those backward TFLOPS count 2.5x the
#: forward's FLOPs (five matmuls, QK^T recomputed: flash-attention's benchmark flops(),
#: "2.5 * f if mode == 'bwd'"), where flops.py counts the backward at 2x; per model FLOP,
#: time-weighted: 3 / (989/620 + 2.5 x 989/460) = 0.43 (0.50 until 2026-11-24, when the
#: backward was read at 2x its forward: that overstated the rate). This table holds the fused
#: kernels (Training.fused_attention); SDPA_ATTENTION_EFFICIENCY_BY_GENERATION the default one.
#: Blackwell (compute capability 10.x only: ATTENTION_TABLE_SM_MAJOR): Transformer Engine picks
#: cuDNN's fused attention over flash-attn on compute capability >= 9.0 ("FusedAttention
#: preference on Hopper+", NVIDIA/TransformerEngine@a0b36d0c transformer_engine/pytorch/
#: attention/dot_product_attention/utils.py get_attention_backend). NVIDIA's published cuDNN
#: runs (NVIDIA/cudnn-frontend@3929da2e benchmark/sdpa_benchmark_training/results/llama3.1/
#: gb200/llama3.1_20260424_100750.csv: cuDNN 9.22, one GB200 at its 2,500 TFLOPS dense bf16
#: peak (catalog gb200), bf16, causal (top_left), head dim 128, 64 query / 8 KV heads, batch 2,
#: non-deterministic backward) give forward / backward TFLOPS 1097 / 885 at 2,048 tokens,
#: 1408 / 1148 at 4,096, 1574 / 1332 at 8,192 and 1708 / 1328 at 16,384. Their backward TFLOPS
#: count five matmuls, 2.5x the forward's FLOPs (recomputing QK^T; benchmark_single_sdpa.py
#: flops()), where flops.py counts the backward at 2x: per model FLOP, time-weighted,
#: e = 3 / (peak/fwd + 2.5 x peak/bwd) = 0.32, 0.42, 0.48 and 0.49 at the four lengths; the
#: entry is their mean, 0.43 (the length dependence is not modelled). Their causal FLOPs are
#: S(S+1)/2 scores a head, flops.py's causal count. The same fraction is taken for the B200
#: (2,250 peak, the same SM at lower clocks). FlashAttention-4 agrees: 1418 forward / 1209
#: backward (2-CTA) TFLOPS at 8,192 tokens, causal, head dim 128 on a B200 (one of its authors,
#: Dao-AILab/flash-attention PR #2280, 2026-02-27; the same 2.5x backward count,
#: benchmarks/benchmark_attn.py @0251105a) give 3 / (2250/1418 + 2.5 x 2250/1209) = 0.48.
#: Blackwell Ultra (compute capability 10.3: ATTENTION_TABLE_BY_COMPUTE_CAPABILITY): the same
#: release's run on a GB300 (the same tree, results/llama3.1/gb300/llama3.1_20260424_100757.csv:
#: cuDNN 9.22, the same shape, causal, non-deterministic backward; catalog gb300's 2,500 TFLOPS
#: dense bf16 peak) gives forward / backward TFLOPS 1373 / 967 at 2,048 tokens, 1703 / 1248 at
#: 4,096, 1856 / 1435 at 8,192 and 1915 / 1507 at 16,384: e = 0.36, 0.46, 0.53 and 0.55, mean
#: 0.48 (1.12x GB200's 0.43 at equal peaks; Blackwell Ultra's doubled SFU exp rate for the
#: softmax, 10.7 vs 5 TeraExponentials/s (catalog gb300 notes), the likely mechanism, is not
#: itself used: the kernel figures are what is taken). The
#: same runs' DeepSeek-V3 and Kimi K2.6 shapes (head dim 192 / 128, results/dsv3 and kimiK26
#: gb200 vs gb300 csvs, same formula) move alike: 1.11x and 1.14x GB200's. The same fraction
#: is taken for the B300 (the same SM at its HGX clocks), as B200 takes GB200's.
ATTENTION_EFFICIENCY_BY_GENERATION: dict[str, Assumption] = {
    "hopper": _a("attention_efficiency.hopper", 0.43, "fraction of dense bf16 peak",
                 "cuDNN fused attention / FlashAttention-3 on H100 SXM, forward ~620 and "
                 "backward ~460 TFLOPS (Shah et al. 2024, figs. 5-6; backward counted at "
                 "2.5x the forward's FLOPs)"),
    "blackwell": _a("attention_efficiency.blackwell", 0.43, "fraction of dense bf16 peak",
                    "cuDNN 9.22 fused attention on GB200, causal, head dim 128, 2k-16k tokens: "
                    "forward 1097-1708, backward 885-1332 TFLOPS (NVIDIA/cudnn-frontend "
                    "benchmark/sdpa_benchmark_training results, llama3.1 gb200 csv); "
                    "FlashAttention-4 on B200 alike"),
    "blackwell-ultra": _a("attention_efficiency.blackwell_ultra", 0.48,
                          "fraction of dense bf16 peak",
                          "cuDNN 9.22 fused attention on GB300 (compute capability 10.3), "
                          "causal, head dim 128, 2k-16k tokens: forward 1373-1915, backward "
                          "967-1507 TFLOPS (NVIDIA/cudnn-frontend@3929da2e "
                          "benchmark/sdpa_benchmark_training results, llama3.1 gb300 csv)"),
}
#: The same for PyTorch SDPA's flash kernels (FlashAttention-2: transformers' default, and
#: torchtitan's): on an H100 SXM ~370 TFLOPS forward and ~260 backward at 2k-16k tokens, head
#: dim 128, causal (Shah et al. 2024, figs. 5-6, FlashAttention-2 series; the backward's TFLOPS
#: on 2.5x the forward's FLOPs, as above): 3 / (989/370 + 2.5 x 989/260) = 0.25 (0.29 until
#: 2026-11-24, at 2x). Our own H100 run (HF + SDPA, docs/bench.md) ran on these kernels.
#: Blackwell (10.x): PyTorch's priority order puts cuDNN attention first on compute capability
#: 9.x and 10.x when the runtime cuDNN is newer than 9.15.0 (pytorch/pytorch@001f694a
#: aten/src/ATen/native/transformers/cuda/sdp_utils.cpp check_prefer_cudnn_attention; CUDA 12
#: builds: minor 0 or 3), which torch 2.11's bundled cuDNN is (huggingface/transformers PR
#: #48163, 2026-08-31: "that code is already in 2.10. What changes at 2.11 is the bundled cuDNN
#: crossing the threshold"): the cuDNN figure above. Stacks on older cuDNN run SDPA's
#: FlashAttention-2 (sm80 kernels): ~350 TFLOPS forward, non-causal, head dim 128 on a B200
#: (meta-pytorch/tritonbench PR #171, 2025-03-04), ~0.16 of peak, its backward not found:
#: not modelled, so those runs will be slower than estimated.
SDPA_ATTENTION_EFFICIENCY_BY_GENERATION: dict[str, Assumption] = {
    "hopper": _a("sdpa_attention_efficiency.hopper", 0.25, "fraction of dense bf16 peak",
                 "PyTorch SDPA's FlashAttention-2 kernels on H100 SXM, forward ~370 and "
                 "backward ~260 TFLOPS (Shah et al. 2024, figs. 5-6; backward counted at "
                 "2.5x the forward's FLOPs)"),
    "blackwell": _a("sdpa_attention_efficiency.blackwell", 0.43, "fraction of dense bf16 peak",
                    "PyTorch SDPA runs cuDNN's attention first on compute capability 10.x with "
                    "cuDNN > 9.15.0 (sdp_utils.cpp check_prefer_cudnn_attention): the cuDNN "
                    "figure of attention_efficiency.blackwell; older stacks run "
                    "FlashAttention-2 at ~350 TFLOPS forward (not modelled)"),
    "blackwell-ultra": _a("sdpa_attention_efficiency.blackwell_ultra", 0.48,
                          "fraction of dense bf16 peak",
                          "PyTorch SDPA runs cuDNN's attention first on compute capability "
                          "10.3 with cuDNN > 9.15.0 (sdp_utils.cpp "
                          "check_prefer_cudnn_attention): the cuDNN figure of "
                          "attention_efficiency.blackwell_ultra"),
}

#: The compute-capability major a generation's entries in the two tables above hold for, where
#: the generation spans parts whose attention kernels differ. Blackwell: cuDNN's sm100 kernels and
#: FlashAttention-4 are built on the tcgen05 tensor-core instructions and tensor memory of
#: compute capability 10.x (B200, GB200); 12.x parts (GeForce RTX 50) lack them, and PyTorch
#: prefers cuDNN on 9.x and 10.x only. A part of another major, or with none recorded in the
#: catalog, keeps ATTENTION_EFFICIENCY_RATIO x the GEMM efficiency.
ATTENTION_TABLE_SM_MAJOR: dict[str, int] = {"blackwell": 10}

#: Compute capabilities whose attention kernels have their own published figures: the key of
#: their entries in the two tables above, in place of the generation's. 10.3 (B300, GB300:
#: Blackwell Ultra) has NVIDIA's cuDNN runs on a GB300; 10.0 (B200, GB200) and any other part
#: keep the generation's entry. The major must still be ATTENTION_TABLE_SM_MAJOR's.
ATTENTION_TABLE_BY_COMPUTE_CAPABILITY: dict[str, str] = {"10.3": "blackwell-ultra"}

#: The flash-attn package's FlashAttention-2 kernels called by the model's own code
#: (Training.kernels "flash-attn": Qwen-1's modeling_qwen.py calls flash_attn_func on the whole
#: padded sequence, batch 1, causal), per causal FLOP, as a fraction of the dense bf16 peak.
#: ampere: FITTED to the Qwen-1.8B LoRA and LoRA (emb) rows at 8192 tokens on one A100
#: (finetune_runs.csv #106, #112, where the attention kernels are ~40% of the estimated step;
#: `python scripts/host_overhead.py flash`); held out: every other flash-attn row. It replaces
#: ATTENTION_EFFICIENCY_RATIO's 0.35 x the GEMM efficiency (0.26 on an A100), which was set on
#: llm-foundry's Triton kernel; Dao 2023 (arXiv:2307.08691, abstract) puts FlashAttention-2's
#: forward at 50-73% of the A100's peak, its backward lower: the fit, in the step's context
#: (recompute, the backward's 2x FLOPs), is a little below that. The rows' adapters are fp32
#: with their casts (peft-fp32 branch: the peft of the figures' date, 0.6.2, built adapters
#: fp32; the validation's mapping); costed as bf16 adapters (peft-half, as once mapped) the
#: same fit gave 0.27, the branch's traffic then too small and the kernels taking the rest.
#: With Qwen-1's half-precision loss under autocast counted (loss_kernel half-amp: 40 bytes of
#: traffic a logit, 2026-11-24) the same rows' fit moved 0.47 -> 0.49.
#: Other generations: the tables above.
FLASH_ATTN2_EFFICIENCY_BY_GENERATION: dict[str, Assumption] = {
    "ampere": _a("flash_attn2_efficiency.ampere", 0.49, "fraction of dense bf16 peak",
                 "fitted to Qwen-1.8B LoRA on one A100 at 8192 tokens (finetune_runs.csv "
                 "#106, #112; scripts/host_overhead.py flash), with their adapters in fp32 "
                 "(peft 0.6.2 of the figures' date: the rows' peft-fp32 branch); held out: the "
                 "other flash-attn rows, 66 of 70 within 20% and 46 within 10% (at the 0.26 "
                 "it replaces: 65 and 41)"),
}

#: Achievable fraction of peak memory bandwidth for streaming kernels (elementwise, norms,
#: optimizer). Basis: STREAM-like copy kernels on HBM GPUs reach 80-90% of the datasheet rate.
BANDWIDTH_EFFICIENCY = _a("bandwidth_efficiency", 0.80, "fraction of peak bandwidth",
                          "assumption: streaming kernels reach ~80% of datasheet bandwidth")

#: Memory traffic of the non-matmul work of a layer (norms, activations, residuals, rotary,
#: casts), as a multiple of the bytes the layer saves for backward: each saved tensor is written
#: in forward and read in backward, and its gradient is written and read in backward.
ELEMENTWISE_PASSES = _a("elementwise_passes", 4.0, "x saved activation bytes",
                        "assumption: write + read of each saved tensor and of its gradient")

#: Cost of a 1-byte element (int8, uint8, bool) in a PyTorch CUDA elementwise kernel, in bytes at
#: the streaming rate of BANDWIDTH_EFFICIENCY: ATen's vectorised loops load 4 elements per thread
#: access (CUDALoops.cuh; vec8 withheld from 1-byte types), 4 bytes for them against 8 or 16 for
#: 2- and 4-byte types, so fewer bytes are in flight. pytorch/pytorch#174553 (B200, 128 MB
#: tensors): int8 add_scalar 87.7 us against clone's 45.1 us for the same bytes, 1.9x. Used for
#: auto-gptq's int8 dequantisation intermediates (estimate/quant.py GPTQ_DEQUANT_STEPS).
ONE_BYTE_ELEMENTWISE_COST = _a(
    "one_byte_elementwise_cost", 2.0, "bytes at the streaming rate per 1-byte element",
    "assumption from pytorch/pytorch#174553's B200 table (int8 add_scalar 1.9x a clone of the "
    "same bytes, vec4 loads); not measured on an A100 with torch 2.0")

#: Host cost of DeepSpeed's ZeRO-3 engine per submodule each time it fetches and releases the
#: module's parameters (a pre-forward hook: trace, fetch_sub_module with its stream wait; a
#: post-forward hook: release_sub_module; the PreBackwardFunction/PostBackwardFunction wrapped
#: around its outputs and inputs: deepspeed v0.12.3 runtime/zero/parameter_offload.py
#: _register_hooks_recursively, partitioned_param_coordinator.py), in host operators' worth
#: (x the machine's seconds per operator). Python bookkeeping, not device work: on one GPU the
#: fetch is no copy (partition_parameters.py all_gather_coalesced with one partition).
#: FITTED: Qwen-1.8B full fine-tuning on one A100 through finetune_ds.sh (ds_config_zero3.json),
#: rows #119-121 of finetune_runs.csv (256-1024 tokens, host-bound), with the Qwen README host's
#: 20.5 us per operator; `python scripts/host_overhead.py zero3`. Held out: every other ZeRO-3
#: row (12 of 15 within 20%). 12.5 since the rows' step runs DeepSpeed's FusedAdam (its traffic,
#: assumptions.ADAMW_TRAFFIC_FUSED, in place of torch's foreach: issue 14; the fit was 12).
ZERO3_OPS_PER_MODULE_FETCH = _a(
    "zero3_ops_per_module_fetch", 12.5, "host operators per module per fetch and release",
    "fitted to Qwen-1.8B full fine-tuning under DeepSpeed ZeRO-3 (finetune_runs.csv #119-121); "
    "held out: the other ZeRO-3 rows (docs/validation.md)")

#: Passes over the logits tensor (batch x seq x vocab) per step in bytes per element: LM head
#: write (2), fp32 upcast read+write (2+4), log-softmax read+write (4+4), loss backward
#: write+read (4+4), cast back (4+2).
LOGITS_TRAFFIC_BYTES_PER_ELEMENT = _a(
    "logits_traffic_bytes_per_element", 30.0, "bytes per logit",
    "count of the reads and writes of transformers' causal-LM loss in bf16 with fp32 upcast")

#: torchtune's chunked cross-entropy splits the logits into this many chunks along the sequence
#: (CEWithChunkedOutputLoss(num_output_chunks=8), torchtune/modules/loss/ce_chunked_output_loss.py,
#: the recipes' default): one chunk at a time is upcast to fp32.
CHUNKED_CE_CHUNKS = _a("chunked_ce_chunks", 8.0, "chunks",
                       "torchtune CEWithChunkedOutputLoss default num_output_chunks=8")

#: Memory traffic over the logits (bytes per logit at bf16, scaled by activation bytes / 2 like
#: the hf count above) of each loss kernel, outside the LM head's GEMMs.
#: chunked: the hf passes (each chunk upcast, log-softmax, backward, cast back), a chunk at a
#: time: the same bytes (each chunk has its own LM-head matmul; no gradient concatenation).
#: fused-linear (Liger, src/liger_kernel/ops/fused_linear_cross_entropy.py): the LM head GEMM
#: writes a chunk of logits (2); Liger's cross-entropy kernel reads it twice (online max/sum,
#: then the gradient: 2 + 2) and writes the gradient in place (2); the gradient GEMMs read it
#: as an operand (GEMM time).
#: cut-ce (Wijmans et al. 2024, "Cut Your Losses in Large-Vocabulary Language Models",
#: arXiv:2411.09009, sec. 4): logits are computed blockwise in on-chip memory and never written
#: to HBM, in forward or backward; its cost is the recomputed LM head GEMM (estimate/flops.py).
LOSS_KERNEL_LOGITS_TRAFFIC: dict[str, Assumption] = {
    "hf": LOGITS_TRAFFIC_BYTES_PER_ELEMENT,
    "chunked": _a("logits_traffic_bytes_per_element.chunked", 30.0, "bytes per logit",
                  "count: hf's passes, one chunk at a time"),
    "fused-linear": _a("logits_traffic_bytes_per_element.fused-linear", 8.0, "bytes per logit",
                       "count: Liger FLCE chunk write (2) + cross-entropy kernel 2 reads + "
                       "in-place gradient write (2 + 2 + 2)"),
    "half": _a("logits_traffic_bytes_per_element.half", 20.0, "bytes per logit",
               "count: logits write, log-softmax read and write; backward: the loss gradient "
               "write, log-softmax backward two reads and a write, the slice's zero-fill and "
               "copy (2 bytes each)"),
    "half-amp": _a("logits_traffic_bytes_per_element.half-amp", 40.0, "bytes per logit",
                   "count: logits write (2), half log-softmax read and write (2 + 2), nll_loss's "
                   "fp32 cast (2 + 4), accelerate's fp32 copy of the logits (2 + 4); backward: "
                   "the fp32 loss gradient write (4), its cast to half (4 + 2), log-softmax "
                   "backward two reads and a write (2 + 2 + 2), the slice's zero-fill and copy "
                   "(2 + 2 + 2)"),
    "chunked-half": _a("logits_traffic_bytes_per_element.chunked-half", 14.0, "bytes per logit",
                       "count: logits write, log-softmax read and write; backward: the loss "
                       "gradient write, log-softmax backward two reads and a write (2 bytes "
                       "each; each chunk has its own head matmul, so no slice copy)"),
    "chunked-fabric": _a("logits_traffic_bytes_per_element.chunked-fabric", 38.0,
                         "bytes per logit",
                         "count: the head's write (2), Fabric's fp32 cast read and write (2 + "
                         "4), log-softmax read and write (4 + 4); backward: the loss gradient "
                         "write (4), log-softmax backward two reads and a write (4 each), the "
                         "cast's backward read and write (4 + 2); full.py's reshape copy and "
                         "the split's concatenation above one sequence not counted "
                         "(estimate/fabric_loss.py)"),
    "verl-logprobs": _a("logits_traffic_bytes_per_element.verl-logprobs", 16.0,
                        "bytes per logit", "count: LM head write, the in-place temperature "
                        "division's read and write, the kernel's forward read, its backward "
                        "read and in-place write, the division's backward read and write (2 "
                        "bytes each; verl@df340d70 dp_actor.py, flash-attn cross_entropy.py)"),
    "megatron": _a("logits_traffic_bytes_per_element.megatron", 54.0, "bytes per logit",
                   "count: Megatron-Core's unfused vocab-parallel CE (cross_entropy.py @ "
                   "b997545c): LM head write (2), fp32 cast read and write (2 + 4), max read "
                   "(4), in-place subtract, exp and divide (8 each), sum read (4); backward: "
                   "in-place multiply (8), the cast back (4 + 2). Its fused variant merges "
                   "passes: not modelled"),
    "te": _a("logits_traffic_bytes_per_element.te", 12.0, "bytes per logit",
             "count: LM head write, Transformer Engine's online-softmax read, the loss "
             "kernel's read and in-place gradient write, backward's in-place scale read and "
             "write (2 bytes each; triton/cross_entropy.py @ 1bd45b97)"),
    "unsloth-ce": _a("logits_traffic_bytes_per_element.unsloth-ce", 8.0, "bytes per logit",
                     "count: LM head write, Unsloth's forward kernel's one read of each row "
                     "(max and log-sum-exp in one pass), its backward kernel's read and "
                     "in-place gradient write (2 bytes each; unsloth/kernels/"
                     "cross_entropy_loss.py @ ef70177a, d9ed4bef)"),
    "cut-ce": _a("logits_traffic_bytes_per_element.cut-ce", 0.0, "bytes per logit",
                 "Cut Cross-Entropy keeps logit blocks on chip (Wijmans et al. 2024, sec. 4)"),
}

# --- the host: issuing eager operators (issue 14, docs/bench.md "The host floor") ------------
# An eager step cannot finish before its host has issued every device operator (Python,
# dispatcher, autograd, cudaLaunchKernel). The counts below are counted, not assumed:
# `python scripts/host_overhead.py count` runs bench's own trainer on 2- and 4-layer Llama and
# Qwen2 models under gpuhours.torchkit.ops.count_ops (torch 2.13, transformers 5.23, peft 0.21;
# views and allocations excluded) and takes the difference per layer. Other families are
# costed as Llama-shaped layers.

#: Host seconds per device operator of a training step (forward under autograd, backward in
#: the autograd engine, optimizer). Host-specific: CPU single-thread speed, torch release.
HOST_S_PER_OP = _a(
    "host_s_per_op", 32e-6, "s per operator",
    "fitted to ONE step: ledger row 1 of the H100 run (scripts/gpuhours_dev/validation/data/"
    "h100_2026-11-23: Qwen2.5-0.5B full, 1 x 512 tokens, host-bound: 131.5 ms = the optimizer's "
    "counted 14 ms + 3656 counted operators combined with 4.7 ms of GPU work; 16-core Xeon VM "
    "host, torch 2.11). The forward and backward phases measured there give 31 us. A faster "
    "host is faster (docs/bench.md, 'The host floor')")

#: The part of a GPU host's time per operator that a CPU timing of the same Python holds
#: nothing of: the CUDA launch (cudaLaunchKernel through the driver, a few microseconds), the
#: same for every operator whatever code issues it. The figure of TRTLLM_ENQUEUE_S_PER_KERNEL
#: and LMDEPLOY_LAUNCH_S_PER_KERNEL (a C++ launch): an assumption, not fitted.
CUDA_LAUNCH_HOST_S = _a(
    "cuda_launch_host_s", 4e-6, "s per operator",
    "assumption: a cudaLaunchKernel-class call, a few microseconds (as "
    "tensorrt_llm_enqueue_s_per_kernel and lmdeploy_launch_s_per_kernel); not fitted")

#: Host time per operator of Megatron-Core's MoE router and token dispatcher over transformers'
#: eager decoder layer's, both on one CPU: scripts/bench_megatron_host_ops.py, data
#: tests/data/megatron_host_op_times.json (torch 2.13, Megatron-LM@d98e8a64, transformers 5.23;
#: AMD EPYC, 2 shared cores, one torch thread). Each configuration's time per counted operator
#: (gpuhours.torchkit.ops.count_ops, views excluded, as HOST_S_PER_OP's count) is the fastest
#: of its rounds; per size and precision, the mean over the router's dtypes of
#: TopKRouter + MoEAlltoAllTokenDispatcher (EP 1, 4 experts, top-2, unfused permute) over the
#: mean of the Qwen2 and Llama layers; the figure is the mean of those four ratios. Megatron's
#: code is dearer per operator, not cheaper: the router's gating and the dispatcher's steps are
#: Python autograd.Functions (RouterGatingLinearFunction, the permute's and all-to-all's
#: wrappers) whose backward calls back into Python, and the dispatcher does host-side
#: bookkeeping between operators (splits into per-expert views, .tolist() of the counts, the
#: sort by chunk in Python), where the eager layer's operators are built-ins with C++
#: backwards. The local-spec Megatron-Core TransformerLayer measures about as dear (recorded in
#: the same file; not used: the megatron path's layer is Transformer Engine's, not measured).
#: Applied to the host-side part of an operator only (estimate/host.py
#: megatron_moe_host_op_weight): HOST_S_PER_OP less CUDA_LAUNCH_HOST_S. Not fitted to any
#: training row.
MEGATRON_MOE_HOST_OP_RATIO = _a(
    "megatron_moe_host_op_ratio", 1.8, "ratio",
    "measured: scripts/bench_megatron_host_ops.py on one CPU (tests/data/"
    "megatron_host_op_times.json): Megatron-Core@d98e8a64's TopKRouter and "
    "MoEAlltoAllTokenDispatcher per counted operator over transformers' eager Qwen2/Llama "
    "layer's, torch 2.13; applied to the host-side part (less cuda_launch_host_s)")

#: Operators per decoder layer per micro-batch, counted, by how the precision runs in torch:
#: (forward, backward). autocast (-amp, -mixed) adds a cast per linear weight and its grad.
OPS_PER_LAYER: dict[str, tuple[float, float]] = {
    "fp32": (41.0, 69.0),
    "half": (45.0, 73.0),       # pure bf16/fp16: the RMSNorm upcasts add ops
    "autocast": (55.0, 89.0),
}
#: ... and per LoRA adapter (A, B, scale, add; their gradients), (forward, backward); the
#: frozen base linear drops its weight-gradient matmul (one operator) from the backward.
OPS_PER_LORA_ADAPTER: dict[str, tuple[float, float]] = {
    "fp32": (6.0, 5.4),
    "half": (8.0, 8.4),
    "autocast": (8.6, 7.1),
}
#: Operators per micro-batch outside the layers (embedding, final norm, LM head, loss),
#: (forward, backward with trainable embeddings and head; a LoRA backward has ~none).
OPS_PER_MICRO_BATCH = (32.0, 24.0)
#: Backward operators per bias of a trainable linear (Qwen2's q/k/v biases: +6 per layer).
OPS_PER_BIAS_GRAD = 2.0
#: Optimizer-step operators: torch's foreach AdamW issues 11 multi-tensor operators, fused
#: AdamW 4; a per-parameter loop 9 per parameter tensor (+2).
OPS_OPTIMIZER = {"foreach": 11.0, "fused": 4.0, "per-parameter-per-tensor": 9.0,
                 # torch 2.0's foreach AdamW: the first moment by mul_ and add_ where later
                 # releases run one lerp_ (torch/optim/adamw.py of 2.0.0 and 2.1.0)
                 "foreach-2.0": 12.0}

#: How host and GPU time of a micro-batch combine: (host^p + gpu^p)^(1/p). p -> infinity
#: would be perfect overlap (the larger alone), p = 1 none (their sum). Between: the host runs
#: ahead during long GEMMs and the GPU waits during runs of short operators. The form is a
#: choice (smooth, homogeneous, exact at both limits); only p is fitted.
HOST_GPU_OVERLAP_P = _a(
    "host_gpu_overlap_p", 1.5, "exponent",
    "fitted to the 7 full fine-tuning rows of the H100 run (p in 1, 1.5, ... 6, with "
    "host_s_per_op refitted to row 1 for each; rms error 5.7%); the 8 LoRA rows were held out: "
    "all within 18%, 7 of 8 within 10% (docs/bench.md)")

#: Bytes each optimizer implementation moves per parameter, by element size: s = one moment
#: (fp32: 4), g = gradient, p = the parameter it updates (the fp32 master under -mixed).
#: Counted from torch/optim/adamw.py's foreach path (_foreach_lerp_ on m: 2s + g; mul_ and
#: addcmul_ on v: 4s + 2g; weight decay mul_ on p: 2p; sqrt, div_, add_ into a temporary: 5s;
#: addcdiv_ into p: 2p + 2s) = 13s + 3g + 4p; fused AdamW reads p, g, m, v and writes p, m, v
#: once = 2p + g + 4s. Measured on the H100: 14.9 ms and 96.1 ms for Qwen2.5-0.5B and
#: Llama-3.2-3B full fine-tuning (fp32 states, 80 B/param) against 14.7 and 95.9 counted.
ADAMW_TRAFFIC_FOREACH = (13.0, 3.0, 4.0)  # (s, g, p) multipliers
#: torch 2.0's foreach path: the first moment's mul_ (2s) and add_ (2s + g) in place of one
#: lerp_ (2s + g), 2s more; its out-of-place `denom` moves what the in-place add_ does
ADAMW_TRAFFIC_FOREACH_2_0 = (15.0, 3.0, 4.0)
ADAMW_TRAFFIC_FUSED = (4.0, 1.0, 2.0)

#: torch.compile's speed-up of a training step, as a range: from 1.0 (no gain: graph breaks, a
#: step dominated by large GEMMs, which compile leaves to cuBLAS) up to these geometric means of
#: the PyTorch 2.0 benchmark (163 HF, TIMM and TorchBench models, training on an A100:
#: "21% faster" in fp32, "51% faster" with AMP; pytorch.org/get-started/pytorch-2.0). Not
#: measured on other GPUs by that source; a range for `gpuhours trace`, never a prediction.
TORCH_COMPILE_SPEEDUP_FP32 = _a(
    "torch_compile_speedup_fp32", 1.21, "x (upper end; lower end 1.0)",
    "PyTorch 2.0 benchmark geomean, training, fp32, A100 (pytorch.org/get-started/pytorch-2.0)")
TORCH_COMPILE_SPEEDUP_AMP = _a(
    "torch_compile_speedup_amp", 1.51, "x (upper end; lower end 1.0)",
    "PyTorch 2.0 benchmark geomean, training, AMP, A100 (pytorch.org/get-started/pytorch-2.0)")

# --- communication --------------------------------------------------------------------------

#: Fraction of link bandwidth that NCCL collectives reach (bus bandwidth / link bandwidth).
#: Basis: nccl-tests all-reduce busbw on DGX A100 ~230 GB/s of 300 GB/s per direction.
COLLECTIVE_EFFICIENCY = _a("collective_efficiency", 0.75, "fraction of link bandwidth",
                           "nccl-tests busbw on NVLink and InfiniBand, large messages")

#: Share of gradient/parameter communication hidden behind compute (DDP bucketing, FSDP
#: prefetch). The rest is exposed; communication longer than compute is exposed in full.
COMM_OVERLAP = _a("comm_overlap", 0.8, "fraction hidden",
                  "assumption: DDP bucketed all-reduce and FSDP prefetch overlap most traffic")

#: Share of tensor-parallel, expert all-to-all and pipeline-stage traffic hidden behind compute.
#: Megatron-LM's tensor-parallel collectives sit between the matmuls that need them (Narayanan et
#: al. 2021, sec. 3.2: "on the critical path"); Transformer Engine's userbuffer overlap (2023+)
#: hides part of them, MoE dispatch overlap likewise: neither is assumed.
MODEL_PARALLEL_COMM_OVERLAP = _a("model_parallel_comm_overlap", 0.0, "fraction hidden",
                                 "assumption: Megatron-LM 2021 runs tensor-parallel collectives "
                                 "on the critical path (Narayanan et al. 2021, sec. 3.2)")

#: Share of the SMs communication kernels take while they run beside compute (an overlapped
#: all-to-all or tensor-parallel collective): compute runs that much slower for as long.
OVERLAP_COMM_SM_SHARE = _a("overlap_comm_sm_share", 20 / 132, "share of SMs",
                           "DeepSeek-V3 report (arXiv 2412.19437) sec. 3.2.2: 20 of the H800's "
                           "132 SMs run the all-to-all beside compute")

#: PCIe bandwidth per direction between GPUs without NVLink, GB/s (PCIe 4.0 x16, ~80% usable).
PCIE_FALLBACK_GB_PER_S_ONE_WAY = _a("pcie_fallback_gb_per_s_one_way", 25.0, "GB/s per direction",
                        "PCIe 4.0 x16: 32 GB/s per direction at ~80% efficiency")

# --- memory ---------------------------------------------------------------------------------

#: The CUDA context, cuBLAS workspaces and kernels loaded with CUDA 12 lazy loading, bytes.
#: Older CUDA (eager module loading) takes ~1.3 GiB (transformers single-GPU training guide,
#: V100: ~1343 MB). Not counted by torch.cuda.memory_reserved, counted by nvidia-smi.
CUDA_CONTEXT_BYTES = _a("cuda_context_bytes", 0.5 * 2**30, "bytes",
                        "assumption: CUDA 12 context with lazy loading, 300-600 MiB")

#: The caching allocator reserves more than the peak of live tensors (block rounding,
#: fragmentation). Issue 5's trace models the allocator; here a flat share.
ALLOCATOR_RESERVE_FRACTION = _a("allocator_reserve_fraction", 0.05, "of peak tensor bytes",
                                "assumption: reserved/allocated of 1.03-1.10 is typical")

#: Micro-batches the variable-length replay (estimate/fragmentation.py) runs when the run's
#: length is not given (no --steps/--tokens/--examples/--epochs). Reserved memory grows with
#: every longer micro-batch than before, fast at first and then slowly: a longer run reads higher.
REPLAY_MICRO_BATCHES = _a("replay_micro_batches", 1000, "micro-batches",
                          "assumption: the run's length when none is given; not measured")

#: The shape of the sample lengths the replay draws (estimate/lengths.py): a log-normal with
#: the given mean and spread, capped at seq_len. Lengths are positive and right-skewed; no
#: dataset's histogram was fitted (ms-swift's runs state only a mean and std).
SAMPLE_LENGTHS_LOGNORMAL = _a("sample_lengths_lognormal", 1, "(1 = log-normal)",
                              "assumption: the shape of --seq-mean/--seq-std's lengths, a "
                              "log-normal matched to the two; not fitted to a histogram")

#: Headroom left free when `fit` searches for the largest batch.
FIT_HEADROOM_FRACTION = _a("fit_headroom_fraction", 0.10, "of device memory",
                           "assumption: room for fragmentation spikes and evaluation")

#: The global batch (tokens per optimizer step) the setup chooser aims at when none is given,
#: by total parameter count (MoE: all experts), key: the upper bound of the size class. Read
#: from published pretraining recipes, never fitted: GPT-3 (Brown et al. 2020, table 2.1:
#: 0.5M tokens for 125M-760M, 1M for 1.3B-2.7B, 2M for 6.7B-13B, 3.2M for 175B); LLaMA and
#: Llama 2 (Touvron et al. 2023a table 2 and 2023b table 1: 4M tokens for 7B-70B); Llama 3
#: 405B (Llama Team 2024 sec. 3.4.1 and table 4: 4M, then 8M, then 16M tokens for most of
#: the run); DeepSeek-V3 671B (DeepSeek-AI 2024 sec. 4.2: 3,072 ramped to 15,360 sequences
#: of 4K, 63M tokens). The powers of two are the published "0.5M", "1M", "4M", "16M".
#: 100B-300B, 4M tokens: the dense runs of that size took 2M-6M (GPT-3 175B 3.2M; OPT-175B 2M,
#: Zhang et al. 2022 table 1; BLOOM 176B 2,048 x 2,048 = 4.2M, BigScience 2022 sec. 3.5.4;
#: Gopher 280B 3M then 6M, Rae et al. 2021 table 1; MT-NLG 530B 1,920 x 2,048 = 3.9M, Smith et
#: al. 2022), where this class had taken Llama 3 405B's 16M; DeepSeek-V2 236B (MoE) ramped to
#: 9,216 sequences of 4K, 38M (DeepSeek-AI 2024 sec. 3.2.1): the exception, not the rule.
DEFAULT_GLOBAL_BATCH_TOKENS: dict[float, Assumption] = {
    1e9: _a("default_global_batch_tokens.below_1b", 2.0**19, "tokens per optimizer step",
            "GPT-3 table 2.1: 0.5M tokens for 125M-760M"),
    6e9: _a("default_global_batch_tokens.1b_to_6b", 2.0**20, "tokens per optimizer step",
            "GPT-3 table 2.1: 1M tokens for 1.3B and 2.7B"),
    100e9: _a("default_global_batch_tokens.6b_to_100b", 2.0**22, "tokens per optimizer step",
              "LLaMA table 2 and Llama 2 table 1: 4M tokens for 7B-70B"),
    300e9: _a("default_global_batch_tokens.100b_to_300b", 2.0**22, "tokens per optimizer step",
              "GPT-3 175B 3.2M, OPT-175B 2M, BLOOM 176B 4.2M, Gopher 280B 3M-6M tokens"),
    float("inf"): _a("default_global_batch_tokens.300b_and_up", 2.0**24,
                     "tokens per optimizer step",
                     "Llama 3 405B table 4: 16M tokens (DeepSeek-V3 671B: 63M; GPT-3 175B: "
                     "3.2M)"),
}

# --- generation -----------------------------------------------------------------------------

#: Share of device memory a serving engine may use (vLLM gpu_memory_utilization default 0.9).
GENERATION_MEMORY_UTILISATION = _a("generation_memory_utilisation", 0.90, "of device memory",
                                   "vLLM's default gpu_memory_utilization")


#: Share of device memory a rollout engine gets when it shares its GPUs with the trainer
#: (colocated RL): the trainer's weights, gradients and optimizer state keep the rest.
COLOCATED_ROLLOUT_MEMORY_UTILISATION = _a(
    "colocated_rollout_memory_utilisation", 0.5, "of device memory",
    "assumption: verl's GRPO/PPO examples set rollout gpu_memory_utilization 0.4-0.6; TRL's "
    "colocate mode defaults to vllm_gpu_memory_utilization 0.3")

#: Tokens per GPU per micro-batch of an RL policy update when the plan sets no micro-batch:
#: the rollouts are packed (or dynamically batched) up to this many tokens, a whole number of
#: sequences of the mean length.
RL_UPDATE_TOKENS_PER_MICRO_BATCH = _a(
    "rl_update_tokens_per_micro_batch", 16384.0, "tokens",
    "verl's ppo_max_token_len_per_gpu default (16384) with use_dynamic_bsz; NeMo-RL and "
    "OpenRLHF pack sequences likewise")

#: Bytes per second a single-controller RL framework moves its step's batch through the driver
#: (verl's RayPPOTrainer: DataProto chunks out to the workers through Ray, results gathered
#: back; src/gpuhours/plan/rl_driver.py counts the bytes). FITTED (tuned rows 12 and 14 of
#: scripts/gpuhours_dev/validation/data/rl_steps.csv, verl's colocated Qwen2.5-Math-7B DAPO step
#: on 32 and 128 H20s): their old-log-prob pass, 107.7 and 53.9 s, is a + b/GPUs with a = 36.0 s
#: that no GPU count removes; the pass moves 11.3 GB (8,192 sequences padded to 256 + 28,672
#: tokens), so 0.315 GB/s. Held out: row 13 (64 GPUs: a + b/64 = 71.9 s, measured 70.3 s) and
#: row 18 (verl + Megatron, 30B-A3B). Ray's object transfer of the time measured 0.2-0.3 GB/s
#: per sending node (github.com/ray-project/ray/issues/42632), the same order.
RL_DRIVER_BYTES_PER_S = _a(
    "rl_driver_bytes_per_s", 0.315e9, "bytes/s",
    "fitted: the part of verl's old-log-prob pass no GPU count removes (36.0 s on 32-128 H20s, "
    "rl_steps.csv rows 12 and 14) over the 11.3 GB it moves; rows 13 and 18 held out")

#: Bytes per pixel of a decoded image that travels with a vision-language RL batch through the
#: single controller (plan/rl_driver.py): PIL pickles an image's decoded pixels
#: (Image.__getstate__ keeps `tobytes()`), so an RGB image is 3 bytes a pixel; a palette or grey
#: image would be 1, RGBA 4. Assumption: RGB.
RL_IMAGE_BYTES_PER_PIXEL = _a(
    "rl_image_bytes_per_pixel", 3.0, "bytes per pixel",
    "assumption: RGB images, one byte a channel (PIL pickles the decoded pixels, not the file)")

#: Host seconds per megapixel to prepare one image of a vision-language RL batch inside the step,
#: as EasyR1's workers do (plan/rl_images.py `image_prep_by_workers`): decode the dataset's PNG,
#: scale it up to data.min_pixels (EasyR1 @8460e817 verl/utils/dataset.py process_image), then
#: Qwen2.5-VL's image processor (resize to multiples of 28, rescale, normalise, patchify).
#: MEASURED here, not fitted: scripts/bench_image_processing.py on this project's CPU machine
#: (AMD EPYC, 2 cores shared with other jobs, one thread, torch 2.13 CPU), a 400 x 300 line
#: drawing scaled to 262,144 pixels, process_image + the torchvision ("fast") processor's
#: operations (transformers 4.54-4.56, EasyR1's pin, forces the fast processor for
#: Qwen2VLImageProcessor): 11.2 / 12.5 / 14.3 ms an image in the three runs at the lowest load
#: (load average 1.5-1.9), 16-25 ms at 2.6-3.5; the median of the three quiet runs taken,
#: 12.5 ms = 0.048 s a megapixel. The library's own call overhead (argument checks, vLLM's
#: image hash and prompt update) is not in it; the PIL/numpy processor takes 20-30 ms.
RL_IMAGE_PREP_S_PER_MEGAPIXEL = _a(
    "rl_image_prep_s_per_megapixel", 0.048, "s per megapixel",
    "measured on this project's 2-core AMD EPYC VM, one thread (scripts/bench_image_processing.py: "
    "EasyR1's process_image + Qwen2.5-VL's fast image processor's operations, 12.5 ms for a "
    "262,144-pixel image) and taken for a run's host CPU: an assumption there")

# --- generation engines (issue 13): the cost of a decode step that is not weight traffic ------
# Set from the rows marked `tune` (odd row numbers, rows 1-13) of
# scripts/gpuhours_dev/validation/data/generation.csv (Qwen2.5 speed benchmark, A100-80GB,
# batch 1); the even rows are held out. docs/generation.md has the fit and both accuracies.

#: Host time per engine step that does not overlap the GPU: scheduling, input preparation,
#: sampling and returning the token to the CPU (one synchronisation per step), and for vLLM the
#: CUDA-graph replay. Independent of the model's size.
DECODE_HOST_STEP_S: dict[str, Assumption] = {
    "vllm": _a("decode_host_step_s.vllm", 2.3e-3, "s per step",
               "fitted to generation.csv tune rows 1,3,5,7,9 (vLLM 0.6.3, A100, batch 1); "
               "vLLM's own profile of 0.5.x put CPU work at >50% of a small model's step"),
    "hf-generate": _a("decode_host_step_s.hf-generate", 1.0e-3, "s per step",
                      "assumption: logits processors, sampling and the stopping check's "
                      "synchronisation in transformers' generate loop, ~1 ms"),
    "sglang": _a("decode_host_step_s.sglang", 1.13e-3, "s per step",
                 "fitted with the H20's decode bandwidth (the GPU catalog's h20 "
                 "decode_bw_gb_per_s) to the six 1-token rows of "
                 "generation_published.csv (65, 73, 81, 91, 101, 111: SGLang 0.4.6.post1, "
                 "Qwen3-0.6B to -32B, H20, batch 1; least squares on log error, "
                 "generation_published.fit_sglang_h20); every other row held out "
                 "(docs/generation.md)"),
    "tensorrt-llm": _a("decode_host_step_s.tensorrt-llm", 50e-6, "s per step",
                       "assumption: TensorRT-LLM 0.5-0.6's C++ GptSession ends each step in "
                       "shouldStopSync (a host synchronisation on the decoder's finished "
                       "count) before enqueuing the next: a wake-up and the first launches, "
                       "tens of microseconds, no Python (estimate/trtllm.py); no published "
                       "row isolates it"),
    "lmdeploy": _a("decode_host_step_s.lmdeploy", 50e-6, "s per step",
                   "assumption: LMDeploy 0.1's TurboMind ends each step in LlamaBatch::Finish "
                   "(the ids copied to the host, cudaStreamSynchronize) before its C++ loop "
                   "dequeues and launches the next: tens of microseconds, no Python (its "
                   "streamed outputs go to Python on another thread; estimate/lmdeploy.py); "
                   "not fitted: every LMDeploy row is held out (docs/generation.md)"),
}

#: Host time per running sequence per decode step that does not overlap the GPU: the
#: scheduler's, sampler's and output processor's Python work for each sequence (vLLM V0's
#: per-sequence objects; vllm#7117 is a PR cutting it). 0 for hf-generate (one tensor op for
#: the whole batch). Set from one row each (generation_published.csv; docs/generation.md).
DECODE_HOST_PER_SEQUENCE_S: dict[str, Assumption] = {
    "vllm-v0": _a("decode_host_per_sequence_s.vllm-v0", 84e-6,
                  "s per running sequence per step",
                  "fitted to ONE row: generation_published.csv row 160 (vLLM main of "
                  "2024-08-04, before vllm#7117, Llama-3-8B on an H100, 256 in / 256 out, "
                  "256 running); the other batched vLLM 0.5-0.6 rows are held out"),
    "vllm": _a("decode_host_per_sequence_s.vllm", 0.0, "s per running sequence per step",
               "assumption: vLLM V1 (0.8+, the only engine since 0.11) keeps a persistent "
               "batch and schedules the next step while the GPU runs this one (vLLM V1 "
               "alpha post, blog.vllm.ai 2025-01-27); no published batched V1 row here"),
    "sglang": _a("decode_host_per_sequence_s.sglang", 71e-6,
                 "s per running sequence per step",
                 "fitted to ONE row: generation_published.csv row 154 (SGLang 0.3.0, "
                 "Llama-3.1-8B on an A100, ShareGPT, 256 running; with the host step "
                 "above); row 156 is held out; "
                 "SGLang 0.4's overlap scheduler may hide it (not measured)"),
    "hf-generate": _a("decode_host_per_sequence_s.hf-generate", 0.0,
                      "s per running sequence per step",
                      "transformers' generate handles the batch as one tensor: no per-sequence "
                      "host work"),
    "tensorrt-llm": _a("decode_host_per_sequence_s.tensorrt-llm", 0.0,
                       "s per running sequence per step",
                       "TensorRT-LLM's GptSession runs a static batch as tensors (C++ "
                       "RuntimeBuffers::prepareNextStep): no per-sequence objects"),
    "lmdeploy": _a("decode_host_per_sequence_s.lmdeploy", 0.0,
                   "s per running sequence per step",
                   "TurboMind 0.1's C++ batch loop (LlamaBatch::Finish) copies every "
                   "sequence's ids in one transfer and loops over them in C++: microseconds "
                   "for the whole batch, not counted (estimate/lmdeploy.py)"),
}

#: Host time per running sequence per decode step that vLLM V1 spends on the sampled token's
#: log-probability when the request asks for it (SamplingParams.logprobs=0; Generation.
#: returns_logprobs), beyond what it spends on a request that does not: the engine core's
#: Scheduler.update_from_output slices the step's LogprobsLists for the request
#: (vllm/v1/core/sched/scheduler.py; vllm/v1/outputs.py LogprobsLists.slice), and the output
#: processor's LogprobsProcessor._update_sample_logprobs (vllm/v1/engine/logprobs.py) turns it
#: into Python: three ndarray.tolist(), a dict {token id: Logprob} appended to the request's
#: list (vllm/logprobs.py append_logprobs_for_next_position; VLLM_FLAT_LOGPROBS off by
#: default), kept until the request returns, so the garbage collector walks them (vLLM 0.11.2,
#: read from its wheel). MEASURED, not fitted: scripts/bench_vllm_logprob_host.py calling vLLM
#: 0.11.2's own LogprobsLists and LogprobsProcessor (its Python files, CPU only) on this
#: project's 2-core AMD EPYC VM, one thread, 256 sequences x 512 steps, the startup heap
#: frozen as EngineCore.__init__ freezes it (freeze_gc_heap): 4.41 us a token (median of 9
#: runs, 4.33-4.92, load average 1.2-1.3); the same operations re-implemented: 4.04 us. Not in
#: it: the sampler's logprob kernels and the three .cpu() copies (once a step, not a
#: sequence), and the framework's own unpacking after generate (NeMo-RL: 2.5 us a token on
#: the same VM, not costed).
DECODE_HOST_LOGPROB_S_PER_SEQUENCE = _a(
    "decode_host_logprob_s_per_sequence", 4.4e-6, "s per running sequence per step",
    "measured on this project's 2-core AMD EPYC VM (scripts/bench_vllm_logprob_host.py: vLLM "
    "0.11.2's own LogprobsLists.slice + LogprobsProcessor, 4.41 us median of 9 runs) and taken "
    "for an x86 GPU host's CPU: an assumption there (x the catalog's host_op_time_ratio on "
    "others)")

#: Host time per transformer layer per forward that overlaps the GPU's work (eager kernel
#: launches, Python module calls): a step takes the longer of the two. vLLM replays a CUDA
#: graph (one launch per step), so 0; transformers' generate runs the model eagerly.
DECODE_HOST_PER_LAYER_S: dict[str, Assumption] = {
    "vllm": _a("decode_host_per_layer_s.vllm", 0.0, "s per layer",
               "a replayed CUDA graph: the whole decode forward is one launch (an eager step "
               "costs EAGER_HOST_S_PER_KERNEL per kernel instead; estimate/cuda_graphs.py)"),
    "sglang": _a("decode_host_per_layer_s.sglang", 0.0, "s per layer",
                 "a replayed CUDA graph (SGLang's default up to cuda_graph_max_bs): one launch "
                 "per step (eager: EAGER_HOST_S_PER_KERNEL per kernel)"),
    "hf-generate": _a("decode_host_per_layer_s.hf-generate", 0.88e-3, "s per layer",
                      "fitted to generation.csv tune rows 11 and 13 (transformers 4.46 "
                      "eager, FA2): ~100 operator dispatches of ~8 us per decoder layer"),
    "tensorrt-llm": _a("decode_host_per_layer_s.tensorrt-llm", 0.0, "s per layer",
                       "its launches are counted per kernel instead "
                       "(tensorrt_llm_enqueue_s_per_kernel)"),
    "lmdeploy": _a("decode_host_per_layer_s.lmdeploy", 0.0, "s per layer",
                   "its launches are counted per kernel instead "
                   "(lmdeploy_launch_s_per_kernel)"),
}

#: Host time TensorRT-LLM's C++ runtime takes to enqueue one kernel of its TensorRT engine
#: (IExecutionContext::enqueue issuing each layer's plugins and fused kernels), overlapping the
#: GPU's work: a step without a CUDA graph takes max(kernels x this, device time), the kernels
#: counted as vLLM's layers (estimate/cuda_graphs.py, 10 a dense layer). No Python dispatch
#: (vLLM's eager_host_s_per_kernel is 30 us): a cudaLaunchKernel-class call. Assumption, not
#: fitted: no published row is launch-bound (the TensorRT-LLM rows run batches of 48-1,280 or
#: prefill whole prompts).
TRTLLM_ENQUEUE_S_PER_KERNEL = _a(
    "tensorrt_llm_enqueue_s_per_kernel", 4e-6, "s per kernel launched",
    "assumption: a C++ kernel launch through TensorRT's enqueue, a few microseconds; not "
    "fitted (no launch-bound TensorRT-LLM row)")

#: Host time LMDeploy 0.1's TurboMind takes to launch one kernel of a decode step from C++
#: (cuBLAS GEMMs and its own fused kernels, no CUDA graph: estimate/lmdeploy.py), overlapping
#: the GPU's work; the kernels counted as vLLM's layers (estimate/cuda_graphs.py). Assumption,
#: the same cudaLaunchKernel-class call as TRTLLM_ENQUEUE_S_PER_KERNEL; not fitted (no
#: published row isolates it).
LMDEPLOY_LAUNCH_S_PER_KERNEL = _a(
    "lmdeploy_launch_s_per_kernel", 4e-6, "s per kernel launched",
    "assumption: a C++ kernel launch (TurboMind 0.1 LlamaBatch, no CUDA graph), a few "
    "microseconds; not fitted")

#: The share of the device's total memory LMDeploy 0.1's paged KV cache may take when the
#: setup gives no block count: cache_max_entry_count 0.5, the default its converter writes
#: (lmdeploy/turbomind/deploy/target_model/base.py@v0.1.0a1; BlockManager::GetBlockCount:
#: total memory x ratio / block size).
LMDEPLOY_CACHE_MAX_ENTRY_COUNT = _a(
    "lmdeploy_cache_max_entry_count", 0.5, "fraction of total device memory",
    "LMDeploy v0.1.0a1 converter default (deploy/target_model/base.py: cache_max_entry_count "
    "0.5), read as BlockManager::GetBlockCount does")

#: Host time of one accelerate hook call (AlignDevicesHook.pre_forward's send_to_device of the
#: module's arguments, the wrapped forward, post_forward) in transformers' generate over several
#: GPUs by device_map (estimate/device_map.py counts the calls: 12 a Qwen2/Llama layer). Its
#: ratio to the step's time per aten operator is measured; the time per operator is the
#: hf-generate fit's host's: DECODE_HOST_PER_LAYER_S over the 79 aten operators transformers
#: 4.46.0 dispatches per Qwen2 layer (gpuhours_dev.validation.hf_op_count, docs/generation.md).
#: aten operators transformers 4.46.0 dispatches per Qwen2 decoder layer at decode, SDPA, batch 1
#: (counted: gpuhours_dev.validation.hf_op_count): what DECODE_HOST_PER_LAYER_S["hf-generate"]
#: is spread over where a per-operator host time is needed (accelerate's hooks, AutoAWQ's extra
#: operator: estimate/hf_quant.py)
HF_DECODE_OPS_PER_LAYER = 79
ACCELERATE_HOOK_OPERATOR_TIMES = _a(
    "accelerate_hook_operator_times", 3.04, "aten operators' host time per hook call",
    "measured on this repository's 2-core VM (gpuhours_dev.validation.device_map_hooks: "
    "transformers 4.46.0, accelerate 1.0.1, torch 2.13 CPU, a tiny Qwen2 of 8 layers "
    "dispatched on a device map of 'cpu' entries with force_hooks, one decode step: "
    "10.7 us a hook call against 3.53 us per aten operator of the step without hooks, medians "
    "of 7 x 400 steps; 2.9-3.4 over three runs by medians and minima); a ratio, so that the "
    "host's speed cancels (assumed to carry over to "
    "the GPU host: the hooks are Python and `.to` calls, as the operators' dispatch is)")
ACCELERATE_HOOK_HOST_S = _a(
    "accelerate_hook_host_s",
    ACCELERATE_HOOK_OPERATOR_TIMES.value * DECODE_HOST_PER_LAYER_S["hf-generate"].value
    / HF_DECODE_OPS_PER_LAYER,
    "s per hook call",
    "accelerate_hook_operator_times x decode_host_per_layer_s.hf-generate / 79 aten operators "
    "a transformers 4.46.0 Qwen2 layer dispatches (counted, hf_op_count): no row fitted")

#: Host time to issue one kernel of an eager decode forward in vLLM or SGLang (Python module
#: calls, the dispatcher, cudaLaunchKernel), overlapping the GPU's work: a step without a CUDA
#: graph takes max(kernels x this, device time) (estimate/cuda_graphs.py counts the kernels:
#: 10 a dense layer). Fitted BY DIFFERENCE on ONE pair of rows, generation_published.csv rows
#: 307 and 308 (deepspeedai/DeepSpeed#8352: GPT-2 on one H200, batch 1, 128-token prompt, 32
#: tokens, verl's vLLM eager 154.1 ms against non-eager 41.8 ms): the eager forward's extra
#: time per token plus the graph step's device time, over 12 layers x 10 kernels
#: (generation_published.fit_eager_per_kernel). Held out: that PR's SGLang pair, SGLang#1401's
#: Llama-3-8B pairs, vLLM#1440's Llama-2-7B pair, vLLM 0.6.3's enforce_eager rows 41-43, 51, and
#: every RL row (docs/generation.md, "Eager decode"). Host- and release-specific: a faster CPU
#: issues faster (SGLang#1401's host: ~22 us).
EAGER_HOST_S_PER_KERNEL = _a(
    "eager_host_s_per_kernel", 30e-6, "s per kernel launched",
    "fitted by difference to ONE pair: generation_published.csv rows 307-308 (DeepSpeed#8352, "
    "GPT-2, H200, batch 1: vLLM eager vs CUDA graph, 12 layers x 10 kernels); held out: the "
    "same PR's SGLang pair, SGLang#1401, vLLM#1440, vLLM 0.6.3 enforce_eager rows, RL rows")

#: Host time per routed expert per MoE layer per forward in transformers' generate, serial with
#: the GPU: transformers 4.51's Qwen3MoeSparseMoeBlock (Mixtral's block since 4.36) loops in
#: Python over ALL num_experts experts of a layer, each iteration a torch.where (nonzero: a
#: device-to-host synchronisation) and ~18 dispatched operators (counted at batch 1: 2,322 per
#: layer of 128 experts), most on empty tensors. vLLM and SGLang run fused MoE kernels: 0.
#: Later releases loop over the experts hit only (4.52 Mixtral/Qwen2-MoE, 4.53 Qwen3-MoE) and 5.x
#: runs grouped kernels: estimate/generation.py hf_generate_experts_looped counts them by release.
HF_GENERATE_HOST_PER_EXPERT_S = _a(
    "hf_generate_host_per_expert_s", 79e-6, "s per expert per MoE layer per forward",
    "fitted to ONE row: generation_published.csv row 127 (transformers 4.51.3, Qwen3-30B-A3B, "
    "H20, batch 1, 1-token prompt: 529 ms a token, 48 layers x 128 experts); rows 128-130 "
    "(same model and host, longer prompts) are held out (docs/generation.md)")

#: Host time of one transformers FP8Linear forward beyond a bf16 linear's, in generate: Python,
#: two Triton launches (act_quant, _w8a8_block_fp8_matmul) and the torch.cuda.synchronize() it
#: ends with (integrations/finegrained_fp8.py, removed by transformers#43349 in January 2026).
#: The sync makes the host and GPU serial (estimate/hf_fp8.py). Fitted to ONE row, the smallest
#: model, whose GPU time per linear is a few microseconds.
HF_FP8_LINEAR_HOST_S = _a(
    "hf_fp8_linear_host_s", 60e-6, "s per FP8Linear per forward, beyond a bf16 linear's",
    "fitted to ONE row: generation_published.csv row 169 (transformers 4.51.3, Qwen3-0.6B-FP8, "
    "H20, batch 1, 1-token prompt: 40.7 ms a token, 196 linears; "
    "generation_published.fit_hf_fp8_linear_host); the other block-fp8 transformers rows "
    "are held out (docs/generation.md)")

#: Host time of one GPTQModel 2.2.0 MarlinQuantLinear forward beyond a bf16 linear's, in
#: transformers' generate (estimate/hf_quant.py). The code read (one gptq_marlin_gemm extension
#: call with three allocations, where F.linear makes one aten call) would put it at a few
#: microseconds; it cannot be read as a time, so it is fitted to ONE row, the smallest model's,
#: whose GEMMs take a few microseconds. The value found is far above what that code explains
#: (docs: a fallback to GPTQModel's TorchQuantLinear, ~11 operators a linear, would match it).
HF_GPTQMODEL_LINEAR_HOST_S = _a(
    "hf_gptqmodel_linear_host_s", 61e-6, "s per GPTQModel linear per forward, beyond a bf16 "
    "linear's",
    "fitted to ONE row: generation_published.csv row 170 (transformers 4.51.3, GPTQModel "
    "2.2.0, Qwen3-0.6B-GPTQ-Int8, H20, batch 1, 1-token prompt: 37.6 ms a token, 196 linears; "
    "generation_published.fit_hf_gptqmodel_linear_host) less hf-generate's bf16 host "
    "(decode_host_per_layer_s 0.88 ms, fitted on an A100 host); that H20 host's own bf16 row "
    "(69) takes 0.61 ms a layer, so against it the linears' extra is ~105 us: the 61 us holds "
    "that host's difference too, and no row checks it on another host. The Qwen3-1.7B rows "
    "(same host) are held out, rows 172-176 (row 170's model, longer prompts) counted apart")

#: GPU time of one Marlin MoE GEMM launch for an expert no token of the step routes to. SGLang
#: 0.4.6 runs a weight-only quantised (GPTQ/AWQ, 4- or 8-bit) MoE layer through vLLM 0.7.2's
#: fused_marlin_moe, whose marlin_gemm_moe launches one kernel per expert, ALL num_experts of
#: them, with a grid of every SM, for each of the layer's two GEMMs (vllm-project/vllm
#: csrc/moe/marlin_moe_ops.cu@00adeed583d0, marlin_mm_moe's `for expert_idx < num_experts`;
#: SGLang 0.4.x's quantization/__init__.py patches vLLM's GPTQ/AWQ configs so that every
#: FusedMoE layer gets vLLM's GPTQMarlinMoEMethod / AWQMoEMethod (gptq_get_quant_method, a
#: reviewer's read of sgl-project/sglang at 0.4.x; the Qwen3 benchmark page names vLLM 0.7.2
#: beside SGLang 0.4.6.post1). A later gptq.py (@006d0961, which calls sgl_kernel's own
#: fused_marlin_moe) still comments out the moe_wna16 switch for >32 experts "until SGLang
#: syncs with vllm >= 0.7.3"). The constant belongs to that pairing, not to today's SGLang,
#: whose kernel may launch once: the estimate names the versions. An expert
#: without tokens exits at once but its launch still costs this, serial on the stream (the
#: CUDA graph replays launches, it does not remove them). vLLM 0.8+ (moe_wna16 marlin,
#: vllm#14447) runs all experts in one launch: not this engine's constant.
SGLANG_MARLIN_MOE_EMPTY_LAUNCH_S = _a(
    "sglang_marlin_moe_empty_launch_s", 2.4e-6, "s per empty expert per MoE GEMM",
    "fitted to ONE row: generation_published.csv row 274 (SGLang 0.4.6.post1, Qwen3-30B-A3B "
    "GPTQ-Int4, H20, batch 1, 1-token prompt: 32 ms a token, 48 layers x (2 GEMMs x 120 "
    "empty experts + 8 routing kernels, generation.FUSED_MOE_ROUTING_KERNELS)); also the "
    "time of each routing kernel of any fused MoE layer (a kernel doing almost no work); "
    "the other 11 GPTQ-Int4 MoE rows (longer prompts, Qwen3-235B-A22B on 4 "
    "H20s) are held out, rows 276-284 (even: row 274's model with longer prompts) counted "
    "apart (docs/generation.md); SGLang 0.4.6 with vLLM 0.7.2's Marlin MoE only")

#: Weights a weight-only quantised GEMM (GPTQ/AWQ 4- or 8-bit, Marlin) dequantises per SM per
#: clock cycle at a decode step. Marlin (IST-DASLab/marlin, Frantar et al. 2024) streams the
#: packed weights and turns each into a 16-bit value in registers (shifts, LOP3 masks, a
#: subtract and a multiply by the group's scale) before the tensor-core MMA; those instructions
#: run on the SMs' integer and fp16 units, so a step cannot convert weights faster than
#: SMs x clock x this, however few bytes they are (estimate/generation.py
#: dequant_weights_per_s). At batch 1 on an A100 Marlin's 4-bit reaches 1.8-1.9 x 10^12
#: weights/s where its bytes would allow 2.6 (docs/generation.md).
DEQUANT_WEIGHTS_PER_SM_CYCLE = _a(
    "dequant_weights_per_sm_cycle", 14.9, "weights per SM per clock cycle",
    "fitted with quantised_gemm_fixed_s to FOUR rows: generation_published.csv rows 22, 23, "
    "55 and 56 (vLLM 0.6.3, GPTQ-Int4 and AWQ, Qwen2.5-7B on one A100 80GB and Qwen2.5-72B "
    "on two, batch 1, 1-token prompt; least squares on log error, "
    "generation_published.fit_quantised_gemm); every other quantised row held out, the "
    "H20's included (docs/generation.md), though the H20 AWQ rows were seen when the fixed "
    "per-GEMM term was added. A measured rate on A100s, far below the conversion's "
    "instruction count; its scaling to other GPUs by SMs x clock is an assumption, and on "
    "Hopper vLLM may run Machete rather than Marlin")

#: GPU time a weight-only quantised (Marlin) GEMM takes beyond its bytes or its conversion, per
#: call at decode: Marlin splits each column slice's reduction over several thread blocks and
#: joins their partial sums through global-memory locks (IST-DASLab/marlin@e017bb46
#: `barrier_acquire`/`barrier_release`), a serial wait a 16-bit GEMM does not have. One per
#: quantised linear layer: 4 a dense decoder layer (qkv, o, gate-up, down), 2 an MoE layer
#: (qkv, o; its experts' Marlin launches are sglang_marlin_moe_empty_launch_s's).
QUANTISED_GEMM_FIXED_S = _a(
    "quantised_gemm_fixed_s", 5e-6, "s per weight-only quantised GEMM per forward",
    "fitted with dequant_weights_per_sm_cycle to the same four rows (22, 23, 55, 56: 7B and "
    "72B tell the per-weight and the per-GEMM costs apart); held out as it is")

#: Passes over the KV cache per decode step. vLLM's paged attention reads it once;
#: transformers' DynamicCache concatenates (copies) it every step and flash-attn's unpadding
#: gathers it again, and the rows show more than those copies explain.
DECODE_KV_PASSES: dict[str, Assumption] = {
    "vllm": _a("decode_kv_passes.vllm", 1.0, "reads of the KV cache per step",
               "paged attention reads each cached K and V once"),
    "sglang": _a("decode_kv_passes.sglang", 1.0, "reads of the KV cache per step",
                 "FlashInfer's paged decode attention reads each cached K and V once"),
    "hf-generate": _a("decode_kv_passes.hf-generate", 1.895,
                      "bandwidth-time of one counted pass over the KV cache",
                      "fitted to generation.csv tune rows 11 and 13 (least squares on log error "
                      "with the per-layer cost, which stays 0.88 ms; issue 13): each of the "
                      "passes counted from transformers' code (generation."
                      "hf_generate_kv_cache_passes: DynamicCache's torch.cat, repeat_kv, "
                      "attention; 17 for Qwen2.5-7B) takes 1.9x a weight read's time: eager "
                      "copies and q_len=1 attention run at ~53% of the streaming rate"),
    "tensorrt-llm": _a("decode_kv_passes.tensorrt-llm", 1.0, "reads of the KV cache per query "
                       "head group per step",
                       "each query head's thread block of the masked multi-head attention "
                       "kernel reads its KV head's cache once; x (query heads / KV heads) per "
                       "step (estimate/trtllm.py kv_reads_per_decode_step)"),
    "lmdeploy": _a("decode_kv_passes.lmdeploy", 1.0, "reads of the KV cache per CTA of "
                   "query heads per step",
                   "each CTA of TurboMind 0.1's decoder attention serves up to 4 query heads "
                   "of one KV head and reads its cache once; x (group / heads per CTA) per "
                   "step (estimate/lmdeploy.py kv_reads_per_decode_step)"),
}

#: Bytes of KV cache transformers' generate copies (or reads) per SM per clock cycle, for each
#: pass hf_generate_kv_cache_passes counts (DynamicCache's torch.cat, repeat_kv's copy,
#: attention's read): eager 2-byte elementwise copies through torch's strided path, bound by
#: their index arithmetic on the SMs, so the rate is SMs x clock x this
#: (generation.hf_kv_copy_bytes_per_s), not a share of DRAM bandwidth. GPUs without an SM count
#: and clock in the catalog keep DECODE_KV_PASSES["hf-generate"]'s bandwidth form.
HF_KV_COPY_BYTES_PER_SM_CYCLE = _a(
    "hf_kv_copy_bytes_per_sm_cycle", 4.96, "bytes per SM per clock cycle per counted pass",
    "fitted with decode_host_per_layer_s.hf-generate to generation.csv tune rows 11 and 13 "
    "(Qwen2.5-7B, transformers 4.46, A100 80GB, 6K and 30K prompts; least squares on log "
    "error, gpuhours_dev.validation.hf_kv_rate.fit_hf_generate); held out: every other "
    "transformers row, the Qwen3 benchmark's H20 rows included (docs/generation.md)")

#: Decode reads each layer's weights with skinny GEMMs whose bandwidth falls for narrow models
#: (few thread blocks per kernel, ramp and tail of each of ~10 kernels per layer): achieved
#: bandwidth = bandwidth_efficiency x d / (d + this).
DECODE_BANDWIDTH_HALF_WIDTH = _a(
    "decode_bandwidth_half_width", 500.0, "elements of model width",
    "fitted to generation.csv tune rows 1,3,5,7,9 (Qwen2.5 0.5B-14B, vLLM, A100)")

#: Sequences an engine runs at once (continuous batching); more wait for a free slot.
ENGINE_MAX_NUM_SEQS: dict[str, Assumption] = {
    "vllm": _a("engine_max_num_seqs.vllm", 256.0, "sequences",
               "vLLM's max_num_seqs default for vllm.LLM and `vllm serve` on an A100 or a GPU "
               "under 70 GiB (EngineArgs.get_batch_defaults, vllm/engine/arg_utils.py at "
               "0.11.2 and 0.17.1; V0 0.6.x: 256 on every GPU); larger GPUs: "
               "engine_max_num_seqs.vllm_large_gpu"),
    "lmdeploy": _a("engine_max_num_seqs.lmdeploy", 64.0, "sequences",
                   "TurboMind 0.1's max_batch_size as its converter writes it "
                   "(lmdeploy/turbomind/deploy/target_model/base.py@v0.1.0a1: 64); "
                   "benchmark configs raise it: set Generation.max_num_seqs"),
}

#: vLLM V1's max_num_seqs default for vllm.LLM and `vllm serve` on a GPU of 70 GiB or more whose
#: name does not contain "a100" (H100, H200, H20, A800, B200, GB200, MI300X): 1,024
#: (EngineArgs.get_batch_defaults, vllm/engine/arg_utils.py at 0.11.2 and 0.17.1; the A100 is
#: left at 256 after vllm#17885 measured a regression there). An AsyncLLM made by
#: from_engine_args without a usage context (UsageContext.ENGINE_CONTEXT, as NeMo-RL's async
#: engine is) takes SchedulerConfig.DEFAULT_MAX_NUM_SEQS, 128, on every GPU: set
#: Generation.max_num_seqs (a plan's rollout_max_num_seqs) for it.
VLLM_LARGE_GPU_MAX_NUM_SEQS = _a(
    "engine_max_num_seqs.vllm_large_gpu", 1024.0, "sequences",
    "vLLM V1 EngineArgs.get_batch_defaults: 1,024 for LLM_CLASS and OPENAI_API_SERVER on a "
    "device of >= 70 GiB not named A100 (vllm/engine/arg_utils.py, 0.11.2 and 0.17.1)")
#: GiB of device memory from which vLLM V1 takes the larger default (arg_utils.py: 70 * GiB)
VLLM_LARGE_GPU_GIB = 70.0

#: Time of one small all-reduce (a decode step's activations, KBs) between the GPUs of a
#: tensor-parallel group on NVLink: latency-bound. Basis: vLLM's custom all-reduce and NCCL's
#: small-message latency on NVLink are ~5-20 us; no row of the validation data has TP > 1.
TP_ALLREDUCE_LATENCY_S = _a("tp_allreduce_latency_s", 10e-6, "s per all-reduce",
                            "assumption: small-message all-reduce latency on NVLink, 5-20 us")

# vLLM V0 (0.5-0.7, `vllm-v0`) shares V1's other engine constants: the batch-1 ones were
# fitted to V0 (0.6.3) rows, and no V1 row says how they differ
for _table in (DECODE_HOST_STEP_S, DECODE_HOST_PER_LAYER_S, DECODE_KV_PASSES,
               ENGINE_MAX_NUM_SEQS):
    _table["vllm-v0"] = _table["vllm"]


def all_assumptions() -> list[Assumption]:
    """Every assumption, for reports."""
    out = [v for v in globals().values() if isinstance(v, Assumption)]
    out += list(GEMM_EFFICIENCY_BY_GENERATION.values())
    out += list(GEMM_EFFICIENCY_BY_SM_MAJOR.values())
    out += list(GEMM_REFERENCE_MATMUL_SHARE.values())
    out += list(FP8_GEMM_EFFICIENCY_BY_GENERATION.values())
    out += list(FP8_GEMM_EFFICIENCY_BY_SM_MAJOR.values())
    out += list(ATTENTION_EFFICIENCY_BY_GENERATION.values())
    out += list(SDPA_ATTENTION_EFFICIENCY_BY_GENERATION.values())
    out += [v for k, v in LOSS_KERNEL_LOGITS_TRAFFIC.items() if k != "hf"]  # hf is a global
    for table in (DECODE_HOST_STEP_S, DECODE_HOST_PER_SEQUENCE_S, DECODE_HOST_PER_LAYER_S,
                  DECODE_KV_PASSES,
                  ENGINE_MAX_NUM_SEQS, DEFAULT_GLOBAL_BATCH_TOKENS):
        out += [v for k, v in table.items() if k != "vllm-v0" or table is
                DECODE_HOST_PER_SEQUENCE_S]  # vllm-v0 shares vllm's other constants
    return out
