"""What a trace runs: the model, the method and the batch of one training step, and how our
precision names map onto what torch can run on fake CPU tensors. No torch here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpuhours.errors import InputError

TraceMethod = Literal["full", "lora", "qlora"]
TracePrecision = Literal["fp32", "bf16", "fp16", "bf16-mixed", "fp16-mixed", "bf16-amp", "fp16-amp"]
TraceOptimizer = Literal["adamw", "sgd", "sgd-momentum"]
TraceOptimizerImpl = Literal["foreach", "fused", "per-parameter"]
TraceTargets = Literal["all-linear", "attention", "qv"]


class TraceSetup(BaseModel):
    """One training step to trace. Mirrors gpuhours.estimate.workload.Training, per GPU, without
    data parallelism (a trace is one process: ZeRO sharding is not traced)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: catalog name or path to a config.json
    model: str
    method: TraceMethod = "full"
    precision: TracePrecision = "bf16"
    optimizer: TraceOptimizer = "adamw"
    #: foreach is what torch picks on CUDA; on CPU it would pick per-parameter, so we set it
    optimizer_impl: TraceOptimizerImpl = "foreach"
    micro_batch: int = Field(default=1, ge=1, le=1_000_000)
    seq_len: int = Field(default=2048, ge=1, le=10_000_000)
    checkpointing: bool = False
    #: attention through torch's scaled_dot_product_attention (a flash kernel: no S x S scores
    #: kept); False runs transformers' eager attention, which keeps the score matrices
    flash_attention: bool = True
    lora_rank: int = Field(default=16, ge=1, le=65536)
    lora_targets: TraceTargets = "all-linear"
    #: micro-batches per optimizer step (gradients persist across them)
    grad_accum: int = Field(default=1, ge=1, le=64)
    #: training steps to trace; the second has the optimizer state the first made. With 1, an
    #: optimizer step on zero gradients makes that state before the traced step (half the time)
    steps: int = Field(default=2, ge=1, le=10)

    @model_validator(mode="after")
    def _check(self) -> TraceSetup:
        if self.method == "qlora" and self.precision == "fp32":
            raise InputError("--method/--precision", "qlora computes in bf16 or fp16 on a 4-bit "
                                                     "base; --precision fp32 conflicts with it.")
        if self.optimizer_impl == "fused" and self.optimizer != "adamw":
            raise InputError("--optimizer-impl", f"fused is an AdamW implementation; "
                                                 f"{self.optimizer} has none.")
        return self


@dataclass(frozen=True)
class TorchPrecision:
    """How a precision of ours runs in torch: parameter dtype, autocast dtype, and what that
    means beside what the name promises (`note`, empty when it is exact)."""

    param_dtype: str
    autocast_dtype: str | None
    #: the precision the analytic estimator should use to describe what was traced
    analytic_precision: str
    note: str


def torch_precision(precision: str, method: str = "full") -> TorchPrecision:
    """Map our precision names onto a torch setup that runs on fake CPU tensors.

    - fp32: fp32 weights, no autocast. bf16 / fp16 (pure): the model cast to that dtype
      (`model.to(torch.bfloat16)`), AdamW state in the same dtype.
    - bf16-amp / fp16-amp: fp32 weights under torch.autocast (HF Trainer's bf16=True).
    - bf16-mixed / fp16-mixed (DeepSpeed, Megatron, FSDP: half-precision weights with fp32 master
      weights in the optimizer) have no single-process torch equivalent; the closest real one,
      autocast over fp32 weights, is traced instead, and the note says so. With LoRA (nothing
      of the base trains, so there is no master copy) it is exact: a model loaded in half
      precision, peft's fp32 adapters, and autocast (the HF Trainer with bf16=True).
    Autocast here is CPU autocast: it casts the same matmuls (linear, bmm, baddbmm, matmul) as
    CUDA autocast, and keeps the loss's softmax in fp32 as CUDA's does.
    """
    half = "bfloat16" if precision.startswith("bf16") else "float16"
    if precision == "fp32":
        return TorchPrecision("float32", None, "fp32", "")
    if precision in ("bf16", "fp16"):
        return TorchPrecision(half, None, precision, "")
    amp = precision.replace("-mixed", "-amp")
    if precision.endswith("-amp"):
        return TorchPrecision("float32", half, amp, "")
    if precision.endswith("-mixed") and method != "full":
        return TorchPrecision(half, half, precision, "")
    if precision.endswith("-mixed"):
        return TorchPrecision(
            "float32", half, amp,
            f"{precision} (half-precision weights + fp32 master weights, as DeepSpeed/FSDP keep "
            f"them) has no single-process torch equivalent; traced as {amp}: fp32 weights, "
            f"gradients and AdamW moments under torch.autocast({half}), the closest real setup.")
    raise InputError("--precision", f"unknown precision {precision!r}.")


def lora_target_modules(targets: str) -> str | list[str]:
    """peft's `target_modules` for our LoRA target names (llama-style module names)."""
    if targets == "all-linear":
        return "all-linear"
    if targets == "attention":
        return ["q_proj", "k_proj", "v_proj", "o_proj"]
    return ["q_proj", "v_proj"]
