"""Bytes of a quantised base model's linear layers (QLoRA-style fine-tuning on a 4-bit base).

What each kernel stores per linear layer of `in` x `out` weights (group size g = 128 input rows):
- nf4 (bitsandbytes Params4bit, NF4 with double quantisation; Dettmers et al. 2023, sec. 3):
  4 bits per weight, an 8-bit absmax per block of 64 and an fp32 constant per 256 such blocks:
  4.127 bits per weight.
- nf4-nodq (the same without double quantisation: bitsandbytes' compress_statistics=False,
  litgpt's --quantize bnb.nf4 where bnb.nf4-dq turns it on): an fp32 absmax per block of 64,
  4.5 bits per weight (bitsandbytes functional.quantize_4bit, blocksize 64).
- nf4-torchao (torchao's NF4Tensor, torchtune's QLoRA: to_nf4 with block_size 64 and
  scaler_block_size 256): the same 4.127 bits as nf4; it differs in what its matmul keeps for
  backward (torchao/dtypes/nf4tensor.py LinearNF4 saves the NF4 weight only, not the input:
  estimate/memory.py quantised_base_bytes_per_token_layer).
- gptq-int4 (auto-gptq's QuantLinear, as transformers' GPTQConfig(bits=4) loads a GPTQ
  checkpoint such as Qwen-7B-Chat-Int4): `qweight` int32 holding 8 weights each (in x out / 2
  bytes), per group and output column an fp16 `scales` (2 bytes) and a 4-bit zero point packed in
  int32 `qzeros` (0.5 bytes), and `g_idx`, one int32 per input row (the group of each row, kept
  whether or not act-order was used). Biases stay fp16 beside them.
- awq-int4 (AutoAWQ's WQLinear_GEMM): the same packed weights, scales and zero points, no g_idx.
All three keep their 4-bit data as buffers or frozen parameters and dequantise one layer's weight
to fp16/bf16 for its matmul, a transient not counted here (the largest linear's weight in 16 bits,
0.4 GB for a 72B model's MLP). On auto-gptq's torch path an int32 and an int8 copy of it are
alive at once before that, 5 bytes per weight (1.0 GB for a 72B model's 8192 x 24576 linears):
`gptq_dequant_transient_bytes`, which memory.py adds to the fp16 weights autograd keeps
(memory.gptq_saved_weight_bytes_per_layer).

What else differs is outside the linears: peft's prepare_model_for_kbit_training casts every
16-bit parameter (embeddings, norms, LM head, biases) to fp32 for bitsandbytes and AWQ bases but
not for GPTQ (peft/utils/other.py: `if not is_gptq_quantized and not is_aqlm_quantized ...`);
see estimate/memory.py kbit_bytes.

How long the dequantisation takes is memory traffic, and it differs by kernel
(`dequant_bytes_per_weight`): bitsandbytes dequantises in one CUDA kernel (read 4 bits, write 2
bytes); auto-gptq's training path unpacks the int32 words with five PyTorch operators, each a
full-size intermediate (GPTQ_DEQUANT_STEPS).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

from gpuhours.estimate import assumptions as A
from gpuhours.estimate.bnb_int8 import (
    INT8_DEQUANTS_PER_MICRO_BATCH,
    int8_dequant_bytes_per_weight,
    int8_linears_bytes,
    int8_weight_read_bytes,
)

if TYPE_CHECKING:
    from gpuhours.estimate.arch import ModelArch

#: the 4-bit base of a qlora setup (setup.Training.base_quant)
BaseQuant = Literal["nf4", "gptq-int4", "awq-int4", "nf4-nodq", "nf4-torchao", "int8-bnb"]
#: NF4 with double quantisation: 4 bits + 8-bit absmax per 64 + fp32 per 256 absmax blocks
NF4_BYTES_PER_PARAM = (4 + 8 / 64 + 32 / (64 * 256)) / 8
#: NF4 without double quantisation: 4 bits + an fp32 absmax per block of 64
NF4_NODQ_BYTES_PER_PARAM = (4 + 32 / 64) / 8
#: group size of GPTQ and AWQ checkpoints as published (Qwen-*-Chat-Int4: group_size 128)
INT4_GROUP_SIZE = 128


def int4_linear_bytes(in_features: int, out_features: int, base_quant: BaseQuant,
                      group_size: int = INT4_GROUP_SIZE) -> float:
    """Bytes one GPTQ or AWQ 4-bit linear layer stores (see the module docstring):
    in x out / 2 (packed weights) + ceil(in / g) x out x 2.5 (fp16 scales, 4-bit zeros)
    + 4 x in (GPTQ's g_idx)."""
    groups = math.ceil(in_features / group_size)
    stored = in_features * out_features / 2 + groups * out_features * 2.5
    if base_quant == "gptq-int4":
        stored += 4 * in_features
    return stored


def block_linears(arch: ModelArch) -> list[tuple[int, int, int]]:
    """(in_features, out_features, how many) of the linear layers of one decoder block, as the
    analytic model sees them: q, k, v and o, and the MLP's (gate,) up and down, once per expert
    for an MoE (plus a shared expert). A checkpoint that fuses q, k and v (Qwen-1's c_attn) has
    one input index of `in` rows instead of three: GPTQ's g_idx differs by 8 x in bytes."""
    d = arch.hidden_size
    out = [(d, arch.q_dim, 1), (d, arch.kv_dim, 2), (arch.q_dim, d, 1)]
    mats_in = 2 if arch.gated_mlp else 1
    if arch.is_moe:
        f, n = arch.moe_intermediate_size, arch.num_experts
        out += [(d, f, mats_in * n), (f, d, n)]
        if arch.shared_expert_intermediate_size:
            s = arch.shared_expert_intermediate_size
            out += [(d, s, mats_in), (s, d, 1)]
    else:
        out += [(d, arch.intermediate_size, mats_in), (arch.intermediate_size, d, 1)]
    return out


def quantised_linears_bytes(arch: ModelArch, quantised_params: int,
                            base_quant: BaseQuant) -> float:
    """Bytes of the quantised linear layers of the whole model: `quantised_params` weights at
    NF4's 4.127 bits (4.5 without double quantisation), each block linear at
    `int4_linear_bytes` (GPTQ, AWQ), or at bitsandbytes' int8 (estimate/bnb_int8.py)."""
    if base_quant == "int8-bnb":
        return int8_linears_bytes(arch, quantised_params, block_linears(arch))
    if base_quant in ("nf4", "nf4-torchao"):
        return quantised_params * NF4_BYTES_PER_PARAM
    if base_quant == "nf4-nodq":
        return quantised_params * NF4_NODQ_BYTES_PER_PARAM
    if arch.mixed:
        # layers of different shapes (latent attention, dense and MoE layers): the packed
        # weights and the group constants per weight; GPTQ's g_idx (4 bytes per input row,
        # about 0.1% of the 4-bit data) left out
        return quantised_params * (0.5 + 2.5 / INT4_GROUP_SIZE)
    per_block = sum(n * int4_linear_bytes(i, o, base_quant) for i, o, n in block_linears(arch))
    in_blocks = arch.num_layers * sum(n * i * o for i, o, n in block_linears(arch))
    # anything else counted as quantised (a vision tower's linears) at the blocks' mean rate
    rest = max(quantised_params - in_blocks, 0)
    per_param = per_block / max(sum(n * i * o for i, o, n in block_linears(arch)), 1)
    return arch.num_layers * per_block + rest * per_param


def bnb_quant_state_bytes(quantised_params: int, base_quant: BaseQuant) -> float:
    """Bytes of bitsandbytes' quantisation state of `quantised_params` NF4 weights: the absmax
    per block of 64 (8-bit with its fp32 constants per 256 blocks under double quantisation,
    fp32 without), the part of NF4_BYTES_PER_PARAM that is not the 4-bit data. It lives in
    each Params4bit's `quant_state` (bitsandbytes 0.43 nn/modules.py Params4bit._quantize:
    `functional.quantize_4bit` returns it beside the packed data), an attribute, not a
    parameter or buffer: FSDP flattens and shards only parameters (FlatParamHandle), so under
    ZeRO-3/FSDP every rank keeps the whole state, and CPUOffload(offload_params=True) moves
    only the flat parameters to the host, so it stays on the GPU. Answer.AI's train.py
    (AnswerDotAI/fsdp_qlora@05ed9f2, load_and_quantize) quantises on every rank's GPU for
    this reason ("FSDP only syncs parameters and buffers, so the quant_state isn't copied").
    0 for other bases (torchao's NF4Tensor holds its scales inside the tensor FSDP shards)."""
    per_weight = {"nf4": NF4_BYTES_PER_PARAM, "nf4-nodq": NF4_NODQ_BYTES_PER_PARAM}
    if base_quant not in per_weight:
        return 0.0
    return quantised_params * (per_weight[base_quant] - 4 / 8)  # less the 4-bit data


def bnb_dequant_transient_bytes(arch: ModelArch, base_quant: BaseQuant,
                                activation_bytes: float) -> float:
    """Bytes of the half-precision copy bitsandbytes makes of one 4-bit weight at its matmul:
    MatMul4Bit (bitsandbytes 0.42-0.43 autograd/_functions.py) runs
    `F.linear(A, F.dequantize_4bit(B, quant_state).to(A.dtype).t())` in forward and
    `torch.matmul(grad_output, F.dequantize_4bit(B, ctx.state).to(grad_output.dtype).t())`
    for the input's gradient in backward; dequantize_4bit allocates the whole weight
    (`torch.empty(quant_state.shape, dtype=quant_state.dtype)`), freed after the matmul, so
    one is alive at a time: the largest linear of a layer, the MLP's f x d (or the q
    projection's where wider), at `activation_bytes` each. Its fp32 absmax (4/64 bytes a
    weight, freed when dequantize_4bit returns) is left out. 0 for other bases."""
    if base_quant not in ("nf4", "nf4-nodq"):
        return 0.0
    d = arch.hidden_size
    return float(activation_bytes * max(arch.intermediate_size * d, arch.q_dim * d))


def nf4_dequant_bytes_per_weight(activation_bytes: float = 2.0) -> float:
    """DRAM bytes per weight of one bitsandbytes NF4 dequantisation before a matmul, with the
    GEMM's read of the copy it makes (bitsandbytes-foundation/bitsandbytes@95f9af30):

    - functional.dequantize_4bit on a nested (double-quantised) state first runs
      dequantize_blockwise over the 8-bit absmax: reads 1 byte and writes an fp32 absmax per
      64 weights (1/64 + 4/64);
    - csrc/kernels.cu kDequantizeBlockwise<T, 512, 64, 8, NF4> reads the packed weights (half
      a byte each) and one fp32 absmax per block of 64 (__ldg, 4/64) and stores each weight in
      the compute dtype (`activation_bytes`, 2 for bf16);
    - autograd/_functions.py MatMul4Bit then hands that copy to torch.nn.functional.linear
      (forward) or torch.matmul (backward's input gradient): a fresh tensor as large as the
      layer's weights (hundreds of MB, far beyond L2), read back from DRAM (`activation_bytes`).

    0.5 + 5/64 + 4/64 + 2 + 2 = 4.64 bytes for bf16; the fp32 constants of the nested absmax
    (one per 256 blocks) are left out (0.0002 bytes)."""
    packed = 0.5
    nested_absmax = 1 / 64 + 4 / 64
    absmax_read = 4 / 64
    return packed + nested_absmax + absmax_read + 2 * activation_bytes


#: auto-gptq's QuantLinear runs its own CUDA kernel below this many rows (tokens) per call
#: (qlinear_cuda_old.py, kernel_switch_threshold=128) and PyTorch's dequantise-and-matmul above
GPTQ_KERNEL_SWITCH_ROWS = 128

#: auto-gptq's 4-bit dequantisation on its training path, qlinear_cuda_old.QuantLinear.forward
#: at or above its kernel_switch_threshold (128 rows), as Qwen's finetune.py loads the -Int4
#: checkpoints (GPTQConfig(bits=4, disable_exllama=True); desc_act false, group 128:
#: import_utils.dynamically_import_QuantLinear picks qlinear_cuda_old). AutoGPTQ/AutoGPTQ
#: v0.4.2 (ef442d9f), the release Qwen's README pairs with torch 2.0 ("auto-gptq<0.5.0").
#: Each operator with what it reads and writes per weight of the in x out matrix, as (bytes,
#: element size in bytes): 1-byte elements run at a lower rate
#: (assumptions.ONE_BYTE_ELEMENTWISE_COST).
GPTQ_DEQUANT_STEPS: tuple[tuple[str, tuple[float, int], tuple[float, int]], ...] = (
    # qweight (in/8 x out int32) expanded to (in/8, 8, out) and shifted by wf: an int32 result
    # per weight; the packed words are read once (8 weights a word: 0.5 byte)
    ("bitwise_right_shift(qweight.expand, wf)", (0.5, 4), (4.0, 4)),
    ("to(torch.int8)", (4.0, 4), (1.0, 1)),
    ("bitwise_and(weight, 15, out=weight)", (1.0, 1), (1.0, 1)),
    # zeros (one per group and column, int8) broadcast over the group's 128 rows: int8 result
    ("weight - zeros", (1.0, 1), (1.0, 1)),
    # fp16 scales (per group and column) times the int8 difference: the fp16 weight
    ("scales * (weight - zeros)", (1.0, 1), (2.0, 2)),
)


#: bytes per weight alive at once while auto-gptq's torch path unpacks one 4-bit weight: the
#: int32 result of `bitwise_right_shift` over the expanded qweight (4) and its `.to(torch.int8)`
#: copy (1), both live until the statement ends and frees the int32 temporary
#: (qlinear_cuda_old.py, AutoGPTQ v0.4.2 62187bf8 line 240; v0.5.1 ddbfb04c the same). The later
#: steps hold less: the int8 weight, `weight - zeros` (int8) and the fp16 product, 4 bytes. The
#: first two outputs of GPTQ_DEQUANT_STEPS.
GPTQ_UNPACK_PEAK_BYTES = GPTQ_DEQUANT_STEPS[0][2][0] + GPTQ_DEQUANT_STEPS[1][2][0]
#: bytes per weight of the fp16 weight each dequantisation leaves (`scales * (weight - zeros)`),
#: which matmul keeps for the input's gradient when the forward records for backward
GPTQ_DEQUANT_WEIGHT_BYTES = GPTQ_DEQUANT_STEPS[-1][2][0]


def gptq_dequant_transient_bytes(weights_in_order: list[int], keeps_weights: bool) -> float:
    """Bytes auto-gptq's torch path holds at a layer's worst linear beyond the fp16 weights the
    layer keeps for backward, the linears run in program order (`weights_in_order`: in x out of
    each, w_k). Unpacking linear k holds GPTQ_UNPACK_PEAK_BYTES (5) x w_k
    (qlinear_cuda_old.py's shift and int8 cast):

    - `keeps_weights` (a forward that records for backward: the recomputed layer under
      checkpointing, every layer without it): the fp16 weights of the linears before k are
      kept then (2 w_j, j < k) and linear k's own will be, so above the layer's kept total
      2 sum(w) the excess is max_k (5 w_k - 2 sum_{j >= k} w_j), at least 0: 3 w of the last
      linear (a decoder layer's MLP down projection) where it is not far smaller than the rest.
    - otherwise (checkpointing's no-grad first pass: torch.no_grad keeps nothing, and each
      fp16 weight is freed after its matmul): 5 w of the largest linear, all of it.

    The int32 zero points unpacked beside them (4 bytes per group of 128 rows and column) are
    left out (1/128 of the weights')."""
    if not weights_in_order:
        return 0.0
    if not keeps_weights:
        return GPTQ_UNPACK_PEAK_BYTES * max(weights_in_order)
    excess, later = 0.0, 0.0
    for w in reversed(weights_in_order):  # later = sum of w_j for j >= k
        later += w
        excess = max(excess, GPTQ_UNPACK_PEAK_BYTES * w - GPTQ_DEQUANT_WEIGHT_BYTES * later)
    return excess


def _bandwidth_bytes(nbytes: float, element_bytes: int) -> float:
    """Bytes at the streaming rate that moving `nbytes` of `element_bytes`-sized elements costs
    in a PyTorch elementwise kernel (1-byte elements: assumptions.ONE_BYTE_ELEMENTWISE_COST)."""
    return nbytes * (A.ONE_BYTE_ELEMENTWISE_COST.value if element_bytes == 1 else 1.0)


def dequant_bytes_per_weight(base_quant: BaseQuant, rows: int | None = None,
                             compute_bytes: float = 2.0) -> float:
    """Bandwidth-equivalent bytes one dequantisation of a 4-bit weight to the compute dtype
    (`compute_bytes` a weight: 2 for bf16/fp16, 4 for fp32) moves, up to the weight written
    (the matmul's read of it is counted by the caller):
    - nf4: bitsandbytes' dequantize_4bit kernels (nf4_dequant_bytes_per_weight less the GEMM's
      read-back: 2.64 bytes for bf16).
    - gptq-int4: the sum over GPTQ_DEQUANT_STEPS (16.5 bytes read and written; 22.5 at a
      1-byte cost of 2).
      Below GPTQ_KERNEL_SWITCH_ROWS rows per call auto-gptq runs its own CUDA kernel on the
      packed weights instead: taken as nf4's single kernel.
    - awq-int4: taken as nf4's (AutoAWQ's training path not read).
    fp32 compute (setup: nf4 bases only) writes 4 bytes a weight: dequantize_4bit returns the
    dtype the weight was quantised from, taken as fp32 (a model loaded in fp32); a model loaded
    in bf16 adds a cast to fp32 (`.to(A.dtype)`, 2 bytes read and 4 written a weight), not
    counted."""
    torch_path = rows is None or rows >= GPTQ_KERNEL_SWITCH_ROWS
    if base_quant == "int8-bnb":
        return int8_dequant_bytes_per_weight(compute_bytes)
    if base_quant == "gptq-int4" and torch_path:
        return sum(_bandwidth_bytes(*read) + _bandwidth_bytes(*written)
                   for _, read, written in GPTQ_DEQUANT_STEPS)
    return nf4_dequant_bytes_per_weight(compute_bytes) - compute_bytes


def dequants_per_micro_batch(base_quant: BaseQuant, checkpointing: bool) -> int:
    """How often each quantised weight is dequantised per micro-batch: bitsandbytes'
    MatMul4Bit dequantises in forward and again in backward (for the input gradient), and in
    the recomputed forward under checkpointing; auto-gptq's torch path dequantises in forward
    only (autograd keeps the fp16 weight for backward: memory.gptq_saved_weight_bytes_per_layer)
    and in the recomputed forward."""
    if base_quant == "int8-bnb":  # estimate/bnb_int8.py
        return INT8_DEQUANTS_PER_MICRO_BATCH
    if base_quant == "gptq-int4":
        return 2 if checkpointing else 1
    return 3 if checkpointing else 2


def matmuls_per_micro_batch(checkpointing: bool) -> int:
    """Matmuls that read each dequantised 16-bit weight per micro-batch: forward, input gradient,
    and the recomputed forward under checkpointing (frozen base: no weight gradient)."""
    return 3 if checkpointing else 2


def weight_read_bytes_per_micro_batch(base_quant: BaseQuant, checkpointing: bool,
                                      compute_bytes: float) -> float:
    """Bytes per weight the matmuls read per micro-batch: the dequantised weight
    (`compute_bytes`) at each of `matmuls_per_micro_batch`; bitsandbytes' int8 GEMMs read the
    int8 weight itself in forward (estimate/bnb_int8.py int8_weight_read_bytes)."""
    if base_quant == "int8-bnb":
        return int8_weight_read_bytes(checkpointing, compute_bytes)
    return matmuls_per_micro_batch(checkpointing) * compute_bytes
