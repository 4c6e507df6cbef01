"""A bitsandbytes LLM.int8() base under LoRA (base_quant "int8-bnb"; issue 14).

What runs: transformers' `load_in_8bit=True` (axolotl's `load_in_8bit: true`) replaces each
decoder linear with bitsandbytes' Linear8bitLt holding Int8Params, frozen
(has_fp16_weights=False), with transformers' default llm_int8_threshold 6.0. Read at
bitsandbytes 0.49.1 (the release axolotl pins at 067b021c, pyproject.toml
"bitsandbytes==0.49.1"; bitsandbytes-foundation/bitsandbytes tag 0.49.1):

- stored (nn/modules.py Int8Params, autograd/_functions.py MatmulLtState): CB, the int8 weight
  (1 byte a weight), and SCB, one fp32 absmax per output row (4 bytes a row):
  `int8_linears_bytes`.
- forward (MatMul8bitLt.forward): Linear8bitLt.forward passes x as it comes (no cast); the
  input is cast to fp16 and quantised row-wise (int8_vectorwise_quant: int8 CA, fp32 SCA, the
  outlier columns above the threshold), and int8_mixed_scaled_mm multiplies CA by CB in int8,
  dequantises to the input's dtype and adds the outlier columns (subA, fp16) times their
  dequantised weights. The weight is never dequantised in forward.
- saved: whenever the input or the weight needs a gradient, `ctx.tensors = (CAt, subA, A)`:
  CAt is None on this path (the frozen weight needs no gradient), subA the outlier columns, A
  the input itself. A plain ctx attribute, held with the graph: each int8 linear keeps its
  input, shared where the inputs are one tensor (q, k and v; gate and up), as bitsandbytes'
  4-bit MatMul4Bit did before 0.43.2 (estimate/memory.py quantised_base_bytes_per_token_layer).
  subA (a few outlier columns a layer at threshold 6) is not counted.
- backward (MatMul8bitLt.backward, the input's gradient): `CB.to(dtype_A, copy=True)
  .mul_(SCB / 127)`, a dequantised copy of the whole weight in the input's dtype, then
  torch.matmul: `int8_dequant_bytes_per_weight`; that copy is a one-layer transient, not
  counted in the memory.

Time (estimate/timing.py): the int8 GEMMs are counted at the half-precision matmul rate (the
int8 tensor-core rate is not modelled); the memory-bound work adds the backward's
dequantisation, the weight reads (int8 in forward, the dequantised copy in backward) and each
linear's quantisation of its input (`int8_input_quant_bytes`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuhours.estimate.arch import ModelArch

#: SCB: one fp32 absmax per output row of each int8 weight
INT8_SCALE_BYTES_PER_ROW = 4
#: the weight is dequantised once per micro-batch, in backward for the input's gradient (the
#: forward, and the recomputed forward under checkpointing, multiply in int8)
INT8_DEQUANTS_PER_MICRO_BATCH = 1


def int8_linears_bytes(arch: ModelArch, quantised_params: int,
                       block_linears: list[tuple[int, int, int]]) -> float:
    """Bytes of the int8 linears of the whole model: 1 byte a weight (CB) and 4 bytes an output
    row (SCB), per block linear (in, out, how many); anything else counted as quantised (a
    mixed-shape model's layers, a vision tower) at 1 byte a weight."""
    per_block = sum(n * (i * o + INT8_SCALE_BYTES_PER_ROW * o) for i, o, n in block_linears)
    in_blocks = arch.num_layers * sum(n * i * o for i, o, n in block_linears)
    if arch.mixed or in_blocks > quantised_params:
        return float(quantised_params)
    return arch.num_layers * per_block + (quantised_params - in_blocks)


def int8_dequant_bytes_per_weight(compute_bytes: float) -> float:
    """DRAM bytes per weight of backward's dequantisation, up to the copy written: the copy to
    the input's dtype reads 1 byte and writes `compute_bytes`, the in-place multiply by the row
    scales reads and writes it again: 1 + 3c (7 bytes for bf16)."""
    return 1.0 + 3.0 * compute_bytes


def int8_weight_read_bytes(checkpointing: bool, compute_bytes: float) -> float:
    """Bytes per weight the matmuls read per micro-batch: the int8 weight in forward (and in
    the recomputed forward), the dequantised copy in backward."""
    return (2.0 if checkpointing else 1.0) + compute_bytes


def int8_input_quant_bytes(arch: ModelArch, base_quant: str, checkpointing: bool,
                           activation_bytes: float) -> float:
    """Bytes per token and layer that the int8 linears' input quantisation moves (0 for other
    bases): every call casts its input to fp16 (read a, write 2) and quantises it (read 2, write
    the int8 row, 1): a + 5 bytes per input element, for each linear's own input (q, k, v each
    quantise theirs: 3 d + q for attention, 2 d + f for a gated MLP, per routed expert), in the
    forward and again in the recomputed forward."""
    if base_quant != "int8-bnb":
        return 0.0
    d, f = arch.hidden_size, arch.moe_intermediate_size if arch.is_moe else arch.intermediate_size
    experts = arch.experts_per_token if arch.is_moe else 1
    mlp_inputs = (2 if arch.gated_mlp else 1) * d + f
    elements = 3 * d + arch.q_dim + experts * mlp_inputs
    return elements * (activation_bytes + 5.0) * (2 if checkpointing else 1)
