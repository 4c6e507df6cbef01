"""transformers' weight-only quantised linears in `generate`: GPTQModel's Marlin, AutoAWQ's GEMM.

A GPTQ or AWQ checkpoint loaded by `from_pretrained` replaces every nn.Linear of the decoder
layers (not the LM head) by the quantised library's own module; `generate` then runs it
eagerly, one host dispatch after another, as a bf16 model (DECODE_HOST_PER_LAYER_S). What each
module adds, read in the releases the published rows ran (PyPI sdists and wheel):

- **GPTQModel 2.2.0** (`hf_quant_linear="gptqmodel-2.2.0"`): transformers 4.51.3's
  quantizers/quantizer_gptq.py hands the model to optimum's GPTQQuantizer.convert_model (1.24
  and 1.25 alike), which calls gptqmodel.utils.importer.hf_select_quant_linear with pack=False
  (optimum#2138: a checkpoint that is only loaded needs no packing). With device_map "auto" (as
  the benchmark's script loads; normalize_device_device_map -> None -> CUDA) BACKEND.AUTO tries,
  in order, MarlinQuantLinear (4 and 8 bits, symmetric only, any desc_act; needs the compiled
  gptqmodel_marlin_kernels, which a "+cu128torch2.6" wheel holds, and compute capability 8.0+),
  then Exllama v2 and v1 (4-bit only), TritonV2, Torch. An 8-bit symmetric checkpoint (Qwen's
  GPTQ-Int8: group 128, desc_act false, sym true, assumed as the hub config ships) so runs
  MarlinQuantLinear.forward: one gptq_marlin_gemm call (vLLM's gptq_marlin kernel, ported in
  gptqmodel_ext/marlin: three allocations and one launch, the weights dequantised in
  registers, fp32 reduce) where a bf16 linear makes one F.linear. Its GPU side is costed as
  vLLM's Marlin is (DEQUANT_WEIGHTS_PER_SM_CYCLE, and QUANTISED_GEMM_FIXED_S a GEMM: one per
  linear here, 7 a layer, none fused). Its host time beyond a bf16 linear is not a figure the
  code gives: HF_GPTQMODEL_LINEAR_HOST_S is fitted to ONE row, and reads far more than one
  extension call explains (a TorchQuantLinear fallback, ~11 operators a linear, would match).
- **AutoAWQ 0.2.9** (`hf_quant_linear="autoawq-0.2.9"`, with AutoAWQ_kernels' awq_ext, as the
  benchmark installed it): transformers' integrations/awq.py replace_with_awq_linear puts
  awq.modules.linear.gemm.WQLinear_GEMM in place of each linear for a config of version
  "gemm"; fused modules only when the config sets do_fuse or modules_to_fuse (AwqConfig's
  do_fuse defaults to whether modules_to_fuse is given; Qwen's AWQ configs give neither:
  assumed; fused modules are not modelled). WQLinear_GEMM.forward calls
  WQLinearMMFunction.apply, which below 1,024 tokens (x.shape[0] * x.shape[1]) runs
  awq_ext.gemm_forward_cuda(x, qweight, scales, qzeros, 8): one kernel writing 8 split-k
  partial outputs and `.sum(0)` of them (casper-hansen/AutoAWQ_kernels@16c5fe16
  awq_ext/quantization/gemm_cuda_gen.cu), one operator more than F.linear; at 1,024 tokens or
  more awq_ext.dequantize_weights_cuda writes the whole weight in fp16 and torch.matmul reads
  it back (one operator more, 2 + 2 bytes a weight). Its host cost is derived, not fitted: the
  extra operator x hf-generate's host time per operator (DECODE_HOST_PER_LAYER_S over the 79
  operators a bf16 layer dispatches, gpuhours_dev.validation.hf_op_count), as accelerate's
  hooks are costed.

Memory: AutoAWQ's partials and its dequantised weight are transients a bf16 linear does not
hold, counted in generate's peak (layer_transient_elements, hf_generate_memory.py).

Refused (the field named): either library under another engine, tensor parallelism or a
device_map split; bit widths other than the rows' (GPTQModel 8-bit, AutoAWQ 4-bit); fp8
matmuls; MoE models, latent attention, state-space mixers, vision towers and architectures
whose projections are not separate nn.Linear modules; transformers 5.x (not read), and
GPTQModel before transformers 4.49 (its integration, transformers#35012, came in 4.49).
Act-order (desc_act) is not a field: Marlin takes it with one more kernel a linear
(permute_cols), not counted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuhours.errors import FieldError
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.hf_fp8 import SEPARATE_TYPES, layer_linear_shapes

if TYPE_CHECKING:
    from gpuhours.estimate.arch import ModelArch

GPTQMODEL = "gptqmodel-2.2.0"
AUTOAWQ = "autoawq-0.2.9"

#: AutoAWQ 0.2.9 WQLinearMMFunction.forward: FP16_MATMUL_HEURISTIC_CONDITION, x.shape[0] *
#: x.shape[1] >= 1024 -> dequantise the whole weight, then torch.matmul
AWQ_DEQUANT_MIN_TOKENS = 1024
#: ... below it awq_ext.gemm_forward_cuda(..., split_k_iters=8): 8 partial outputs, summed
AWQ_SPLIT_K = 8
#: operators a WQLinear_GEMM forward dispatches beyond F.linear's one: the split-k sum
#: (below 1,024 tokens) or the dequantisation kernel (1,024 tokens or more)
AWQ_EXTRA_OPS = 1

#: bytes per weight each library's checkpoint holds with its group-128 scales (and zeros),
#: (low, high, what): GPTQ int8 1 + 2/128; AWQ int4 0.5 + (2 + 0.5)/128
BYTES_RANGE = {GPTQMODEL: (1.0, 1.125, "8-bit"), AUTOAWQ: (0.5, 0.625, "4-bit")}


def check_covered(kernel: str, arch: ModelArch, engine: str, release: tuple[int, int],
                  tensor_parallel: int, device_map_gpus: int, weight_bytes_per_param: float,
                  matmul_precision: str) -> None:
    """Refuse what this model does not describe, naming the field."""
    if engine != "hf-generate":
        raise FieldError(("hf_quant_linear", "engine"),
                         f"{kernel} is a transformers integration: it runs under hf-generate "
                         f"only, not {engine}.", "Leave it out for vLLM, SGLang "
                         "and TensorRT-LLM (their GPTQ/AWQ path is costed as Marlin's).")
    low, high, bits = BYTES_RANGE[kernel]
    if not low <= weight_bytes_per_param <= high:
        raise FieldError(("weight_bytes_per_param", "hf_quant_linear"),
                         f"{kernel} is modelled for {bits} weights ({low:g}-{high:g} bytes a "
                         f"weight with scales), as the published rows ran it; got "
                         f"{weight_bytes_per_param:g}.")
    if matmul_precision != "bf16":
        raise FieldError(("matmul_precision", "hf_quant_linear"),
                         f"{kernel} runs 16-bit matmuls on dequantised weights; fp8 is "
                         "transformers' FP8Linear (leave the library out).")
    if tensor_parallel != 1 or device_map_gpus != 1:
        raise FieldError(("tensor_parallel", "device_map_gpus"),
                         f"{kernel} under transformers' generate is modelled on one GPU.")
    if (arch.is_moe or arch.mla is not None or arch.ssm is not None or arch.vision is not None
            or arch.encoder or arch.model_type not in SEPARATE_TYPES):
        raise FieldError("hf_quant_linear",
                         f"{kernel} is modelled for dense decoders whose projections are "
                         f"separate nn.Linear modules ({', '.join(sorted(SEPARATE_TYPES))}), "
                         f"without MoE layers, latent attention, state-space mixers or a "
                         f"vision tower; {arch.name} ({arch.model_type}) is not.")
    if release >= (5, 0):
        raise FieldError(("hf_transformers_version", "hf_quant_linear"),
                         f"{kernel} is modelled under transformers 4.x (4.51.3 read); "
                         f"5.x is not.")
    if kernel == GPTQMODEL and release < (4, 49):
        raise FieldError(("hf_transformers_version", "hf_quant_linear"),
                         "transformers loads GPTQ checkpoints through GPTQModel from 4.49 "
                         "(transformers#35012); earlier releases use auto-gptq, not modelled.")


def linear_count(arch: ModelArch) -> int:
    """The quantised linears of one forward: q, k, v, o, gate, up, down on every layer (the LM
    head stays 16-bit)."""
    return sum(c for _, _, c in layer_linear_shapes(arch))


def op_host_s() -> float:
    """Host seconds of one dispatched operator in hf-generate's eager step: the fitted time per
    layer over the operators a layer dispatches (DECODE_HOST_PER_LAYER_S /
    assumptions.HF_DECODE_OPS_PER_LAYER, as accelerate's hooks are costed)."""
    return A.DECODE_HOST_PER_LAYER_S["hf-generate"].value / A.HF_DECODE_OPS_PER_LAYER


def host_s_per_linear(kernel: str) -> float:
    """Host seconds one quantised linear takes beyond a bf16 linear's, per forward: GPTQModel's
    Marlin the fitted HF_GPTQMODEL_LINEAR_HOST_S; AutoAWQ's GEMM its extra operator
    (AWQ_EXTRA_OPS) x op_host_s()."""
    if kernel == GPTQMODEL:
        return A.HF_GPTQMODEL_LINEAR_HOST_S.value
    return AWQ_EXTRA_OPS * op_host_s()


def extra_bytes(kernel: str, arch: ModelArch, tokens: float) -> float:
    """Bytes one forward of `tokens` tokens moves beyond reading the quantised weights, over
    all its linears: AutoAWQ below AWQ_DEQUANT_MIN_TOKENS writes 8 split-k partial outputs and
    the sum reads them back (2 x 8 x tokens x N x 2 bytes a linear, beyond the output a GEMM
    writes anyway); at or above it, each weight written in fp16 and read back (4 bytes a
    weight). GPTQModel's Marlin dequantises in registers: 0."""
    if kernel != AUTOAWQ:
        return 0.0
    shapes = layer_linear_shapes(arch)
    if tokens >= AWQ_DEQUANT_MIN_TOKENS:
        return sum(4.0 * k * n * c for k, n, c in shapes)
    return sum(2.0 * AWQ_SPLIT_K * tokens * n * 2.0 * c for _, n, c in shapes)


def layer_transient_elements(kernel: str, arch: ModelArch, tokens: float) -> tuple[float, str]:
    """The most 16-bit elements a decoder layer's quantised linears hold at once in one forward
    of `tokens` tokens (x.shape[0] * x.shape[1]), beyond the layer's input and the residual
    stream, and what they are; (0, "") for GPTQModel (Marlin dequantises in registers; its
    workspace is a few KB). AutoAWQ 0.2.9 (awq/modules/linear/gemm.py WQLinearMMFunction
    .forward, the PyPI sdist): below AWQ_DEQUANT_MIN_TOKENS, awq_ext.gemm_forward_cuda writes
    its 8 split-k partials (8 x tokens x N) and returns their sum (tokens x N), both alive
    until the sum is done; at or above it, dequantize_weights_cuda writes the whole weight in
    fp16 (K x N) and torch.matmul writes its output beside it. Each moment of the layer's
    forward is counted with what else is alive then (a gated MLP,
    `down_proj(act_fn(gate_proj(x)) * up_proj(x))`: act(gate) beside up_proj; the product
    beside down_proj); the larger of those and the attention projections' (alone) is taken."""
    if kernel != AUTOAWQ:
        return 0.0, ""
    t, d, f = float(tokens), float(arch.hidden_size), float(arch.intermediate_size)
    dequant = tokens >= AWQ_DEQUANT_MIN_TOKENS

    def linear(k: float, n: float) -> float:
        """Alive during one WQLinear_GEMM forward: its output and the partials or the weight."""
        return k * n + t * n if dequant else (AWQ_SPLIT_K + 1) * t * n

    moments = [linear(float(k), float(n)) for k, n, _ in layer_linear_shapes(arch)[:4]]
    if arch.gated_mlp:
        moments += [t * f + linear(d, f),          # up_proj beside act(gate)
                    3.0 * t * f,                   # act(gate), up and their product
                    t * f + linear(f, d)]          # down_proj beside the product
    else:
        moments += [linear(d, f), 2.0 * t * f, t * f + linear(f, d)]
    what = ("AutoAWQ's dequantised fp16 weight beside its matmul"
            if dequant else "AutoAWQ's 8 split-k partial outputs beside their sum")
    return max(moments), what


def marlin_gemms(kernel: str, arch: ModelArch) -> int:
    """Marlin GEMMs a forward runs (QUANTISED_GEMM_FIXED_S each): every quantised linear under
    GPTQModel; 0 under AutoAWQ (its own kernel)."""
    return linear_count(arch) if kernel == GPTQMODEL else 0


def note(kernel: str) -> str:
    """What the estimate's basis says of the quantised linears."""
    if kernel == GPTQMODEL:
        return ("; GPTQModel 2.2.0's MarlinQuantLinear under transformers "
                "(estimate/hf_quant.py): weights at their bytes and the Marlin dequantisation "
                "rate, quantised_gemm_fixed_s a linear, hf_gptqmodel_linear_host_s of host a "
                "linear (fitted to one row)")
    return ("; AutoAWQ 0.2.9's WQLinear_GEMM under transformers (estimate/hf_quant.py): one "
            "operator more a linear on the host (the split-k sum; at 1,024 tokens or more the "
            "dequantisation, which writes and reads each weight in fp16); fused modules off")
