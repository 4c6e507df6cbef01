"""transformers' fine-grained FP8 linears in `generate`: a device sync after every linear.

A block-wise fp8 checkpoint (`quantization_config` quant_method "fp8" with weight_block_size
128 x 128, e.g. Qwen3-*-FP8) loads every nn.Linear but the LM head as transformers' FP8Linear
(integrations/finegrained_fp8.py, from 4.49). Its forward runs two Triton kernels, act_quant
(the input to fp8 in 1 x 128 groups) and _w8a8_block_fp8_matmul, then calls
torch.cuda.synchronize() (removed by huggingface/transformers#43349, January 2026: "The
synchronizations are unnecessary and kill performance"). The sync stops the host from running
ahead of the GPU, so a forward's host work and GPU work add instead of overlapping:
each linear's own host work (its Python, two Triton launches, the sync's round trip:
assumptions.HF_FP8_LINEAR_HOST_S over a bf16 linear's) and the GPU time of everything queued
since the previous sync.

The block GEMM gives each program one 128-column block of the output (BLOCK_SIZE_N = the weight
block, 128) and BLOCK_SIZE_M rows (128, or the next power of two of M from 16 when M is
smaller), so its grid is ceil(M / BLOCK_SIZE_M) x ceil(N / 128) programs. At decode (M = the
running sequences, one row block) a linear of N outputs has ceil(N / 128) programs: when they
are fewer than the SMs, its weights stream through that share of the SMs only. Taken here as
bytes / (bandwidth x min(1, programs / SMs)): an assumption that a program reads at its SM's
share of the bandwidth, not measured. The GEMMs read at the bandwidth efficiency alone
(assumptions.BANDWIDTH_EFFICIENCY): the grid share is this kernel's own account of the narrow
GEMMs that the decode reads' width term (DECODE_BANDWIDTH_HALF_WIDTH) stands for elsewhere.

By release (each release's integrations/finegrained_fp8.py, read in its PyPI wheel): no
FP8Linear before 4.49; 4.49 and 4.50 synchronise twice a linear (after act_quant and after
the GEMM), costed as one (the second finds the GPU idle: an assumption); 4.51 to 5.3 once; 5.4
on none (transformers#43349), where the same host work overlaps the GPU's as a bf16 step's does.
"""

from __future__ import annotations

import math

from gpuhours.errors import FieldError
from gpuhours.estimate.arch import ModelArch

#: BLOCK_SIZE_N of transformers' _w8a8_block_fp8_matmul (the weight block, 128 x 128)
BLOCK_N = 128
#: its BLOCK_SIZE_M: 128, or the next power of two of M (at least 16) when M is smaller
BLOCK_M_MAX = 128
BLOCK_M_MIN = 16


#: (first release, device syncs an FP8Linear forward), newest last
SYNCS_FROM_RELEASE: tuple[tuple[tuple[int, int], int], ...] = (
    ((4, 49), 2), ((4, 51), 1), ((5, 4), 0))

#: model types whose attention and MLP projections transformers builds as separate nn.Linear
#: modules (q, k, v, o; gate, up, down), each an FP8Linear; phi3 fuses qkv_proj and
#: gate_up_proj (FUSED_TYPES). Others (GPT-2's Conv1D, GPT-NeoX's, Falcon's and MPT's fused
#: projections, gpt-oss's fused expert tensors) are not counted here and are refused.
SEPARATE_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2",
                            "gemma3_text", "granite", "mixtral", "qwen2_moe", "qwen3_moe"})
FUSED_TYPES = frozenset({"phi3"})


def syncs_per_linear(release: tuple[int, int]) -> int | None:
    """Device syncs in one FP8Linear forward of transformers `release` (major, minor); None
    before 4.49, which has no FP8Linear."""
    syncs = None
    for first, n in SYNCS_FROM_RELEASE:
        if release >= first:
            syncs = n
    return syncs


def check_covered(arch: ModelArch, release: tuple[int, int], tensor_parallel: int,
                  weight_bytes_per_param: float) -> None:
    """Refuse what this model does not describe, naming the field: a release without
    FP8Linear; linears not counted here (latent attention, state-space mixers, vision towers,
    fused or Conv1D projections); 5.x's grouped FP8 experts; tensor parallelism; weights that
    are not FP8Linear's 1 byte (1.125 with scales)."""
    if syncs_per_linear(release) is None:
        raise FieldError("hf_transformers_version",
                         "transformers before 4.49 has no fine-grained FP8Linear "
                         "(integrations/finegrained_fp8.py came in 4.49): give 4.49 or later, "
                         "or bf16 weights.")
    if (arch.mla is not None or arch.ssm is not None or arch.vision is not None or arch.encoder
            or arch.model_type not in SEPARATE_TYPES | FUSED_TYPES):
        raise FieldError("matmul_precision",
                         f"transformers' FP8Linear in generate is modelled for decoders whose "
                         f"projections are separate or phi3-fused nn.Linear modules "
                         f"({', '.join(sorted(SEPARATE_TYPES | FUSED_TYPES))}), without latent "
                         f"attention, state-space mixers or a vision tower; {arch.name} "
                         f"({arch.model_type}) is not.")
    if arch.is_moe and release >= (5, 0):
        raise FieldError("hf_transformers_version",
                         "transformers 5.x runs an fp8 MoE's experts as its grouped FP8Expert, "
                         "not modelled: give a 4.x release or bf16 weights.")
    if tensor_parallel != 1:
        raise FieldError("tensor_parallel",
                         "transformers' generate with FP8Linear is modelled on one GPU; got "
                         f"tensor parallelism {tensor_parallel}.")
    if not 1.0 <= weight_bytes_per_param <= 1.125:
        raise FieldError("weight_bytes_per_param",
                         "FP8Linear reads 1-byte weights (1.125 with their block scales); got "
                         f"{weight_bytes_per_param:g}.")


def layer_linear_shapes(arch: ModelArch) -> list[tuple[int, int, int]]:
    """(K, N, linears per forward) of the FP8Linears outside the routed experts: q, k, v, o on
    every attention layer; gate, up, down (up, down without a gate) on every dense-MLP layer;
    the shared expert's on every MoE layer. The LM head stays 16-bit (modules_to_not_convert)."""
    d, q, kv = arch.hidden_size, arch.q_dim, arch.kv_dim
    att = arch.attention_layer_count
    dense = arch.num_layers - arch.moe_layers - arch.mlp_free_layers
    f = arch.intermediate_size
    if arch.model_type in FUSED_TYPES:  # phi3: qkv_proj and gate_up_proj
        shapes = [(d, q + 2 * kv, att), (q, d, att)]
        if dense > 0:
            shapes += [(d, 2 * f, dense), (f, d, dense)]
        return [s for s in shapes if s[2] > 0]
    shapes = [(d, q, att), (d, kv, att), (d, kv, att), (q, d, att)]
    if dense > 0:
        shapes += [(d, f, dense * (2 if arch.gated_mlp else 1)), (f, d, dense)]
    shared = arch.shared_expert_intermediate_size
    if arch.is_moe and shared:
        shapes += [(d, shared, (2 if arch.gated_mlp else 1) * arch.moe_layers),
                   (shared, d, arch.moe_layers)]
    return [s for s in shapes if s[2] > 0]


def expert_linear_shapes(arch: ModelArch) -> list[tuple[int, int, int]]:
    """(K, N, linears) of one routed expert: gate and up (d -> moe_intermediate), down."""
    if not arch.is_moe:
        return []
    d, f = arch.hidden_size, arch.moe_intermediate_size
    return [(d, f, 2 if arch.gated_mlp else 1), (f, d, 1)]


def programs(tokens: float, n: int) -> int:
    """Programs of _w8a8_block_fp8_matmul's grid for an M x N output (M = `tokens`)."""
    m = max(1, math.ceil(tokens))
    block_m = BLOCK_M_MAX if m >= BLOCK_M_MAX else max(BLOCK_M_MIN, 1 << (m - 1).bit_length())
    return math.ceil(m / block_m) * math.ceil(n / BLOCK_N)


def block_gemm_s(k: int, n: int, tokens: float, bandwidth_bytes_per_s: float,
                 fp8_flops_per_s: float, sms: int) -> float:
    """GPU seconds of one block-fp8 linear of `tokens` rows: the longer of its 1-byte weights
    read through the SMs its grid occupies (bytes / (bandwidth x min(1, programs / SMs))) and
    its FLOPs at `fp8_flops_per_s` (the fp8 peak x the GEMM efficiency)."""
    share = min(1.0, programs(tokens, n) / sms) if sms else 1.0
    read = k * n / (bandwidth_bytes_per_s * share)
    return max(read, 2.0 * tokens * k * n / fp8_flops_per_s)


def linears_s(shapes: list[tuple[int, int, int]], tokens: float, bandwidth_bytes_per_s: float,
              fp8_flops_per_s: float, sms: int) -> float:
    """GPU seconds of every linear of `shapes` at `tokens` rows each."""
    return sum(c * block_gemm_s(k, n, tokens, bandwidth_bytes_per_s, fp8_flops_per_s, sms)
               for k, n, c in shapes)


def weight_bytes(shapes: list[tuple[int, int, int]]) -> float:
    """The 1-byte weights of `shapes` (their 128 x 128 block scales, 1/16,384 more, left out)."""
    return float(sum(k * n * c for k, n, c in shapes))


def flops(shapes: list[tuple[int, int, int]], tokens: float) -> float:
    return sum(2.0 * tokens * k * n * c for k, n, c in shapes)


def count(shapes: list[tuple[int, int, int]]) -> int:
    return sum(c for _, _, c in shapes)
