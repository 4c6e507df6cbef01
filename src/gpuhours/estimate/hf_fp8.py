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
share of the bandwidth, not measured.
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


def check_covered(arch: ModelArch) -> None:
    """Refuse what this count does not describe: latent attention (its down/up projections),
    state-space mixers and vision towers are linears too, not counted here."""
    if arch.mla is not None or arch.ssm is not None or arch.vision is not None or arch.encoder:
        raise FieldError("matmul_precision",
                         f"transformers' FP8Linear in generate is modelled for attention + MLP "
                         f"(and MoE) decoders; {arch.name} has latent attention, state-space "
                         "mixers, a vision tower or is an encoder, whose linears are not "
                         "counted here.")


def layer_linear_shapes(arch: ModelArch) -> list[tuple[int, int, int]]:
    """(K, N, linears per forward) of the FP8Linears outside the routed experts: q, k, v, o on
    every attention layer; gate, up, down (up, down without a gate) on every dense-MLP layer;
    the shared expert's on every MoE layer. The LM head stays 16-bit (modules_to_not_convert)."""
    d, q, kv = arch.hidden_size, arch.q_dim, arch.kv_dim
    att = arch.attention_layer_count
    shapes = [(d, q, att), (d, kv, att), (d, kv, att), (q, d, att)]
    dense = arch.num_layers - arch.moe_layers - arch.mlp_free_layers
    f = arch.intermediate_size
    if dense > 0:
        shapes += [(d, f, dense * (2 if arch.gated_mlp else 1)), (f, d, dense)]
    shared = arch.shared_expert_intermediate_size
    if arch.is_moe and shared:
        shapes += [(d, shared, 2 * arch.moe_layers), (shared, d, arch.moe_layers)]
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
