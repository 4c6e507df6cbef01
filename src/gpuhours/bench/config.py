"""What a benchmark runs (BenchSetup) and when it stops timing (StopRule). No torch here."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpuhours.errors import InputError

#: fp32: everything fp32; bf16: the model and optimizer state in bf16 (`model.to(bfloat16)`);
#: bf16-amp / fp16-amp: fp32 weights with torch.autocast (fp16 adds a GradScaler). The names are
#: those of gpuhours.estimate.workload.Precision, so a measurement maps onto an estimate.
BenchPrecision = Literal["fp32", "bf16", "bf16-amp", "fp16-amp"]
BenchMethod = Literal["full", "lora"]
BenchOptimizer = Literal["adamw", "sgd", "sgd-momentum"]
#: foreach: torch's default multi-tensor kernels; fused: fused=True (AdamW); per-parameter:
#: foreach=False, a loop over parameters
BenchOptimizerImpl = Literal["foreach", "fused", "per-parameter"]
DeviceChoice = Literal["auto", "cuda", "mps", "cpu"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BenchSetup(_Strict):
    """One configuration to benchmark: the model and how it trains. Sizes per device."""

    #: catalog name, config.json path, or the name a user gave their own model (Python API)
    model: str
    #: Hugging Face config fields set on top of the model's config (`--set num_hidden_layers=2`)
    config_overrides: dict[str, int | float | str | bool] = Field(default_factory=dict)
    method: BenchMethod = "full"
    precision: BenchPrecision = "fp32"
    micro_batch: int = Field(default=1, ge=1, le=1_000_000)
    seq_len: int = Field(default=512, ge=1, le=10_000_000)
    grad_accum: int = Field(default=1, ge=1, le=100_000)
    checkpointing: bool = False
    compiled: bool = False
    optimizer: BenchOptimizer = "adamw"
    optimizer_impl: BenchOptimizerImpl = "foreach"
    lora_rank: int = Field(default=16, ge=1, le=65536)
    lora_targets: Literal["all-linear", "attention", "qv"] = "all-linear"
    learning_rate: float = Field(default=1e-4, gt=0, le=10)

    @model_validator(mode="after")
    def _check(self) -> BenchSetup:
        if self.optimizer_impl == "fused" and self.optimizer != "adamw":
            raise InputError("--optimizer-impl", "fused is available for adamw only.")
        return self

    def label(self, with_model: bool = True) -> str:
        """Short text naming the configuration, for tables and progress bars."""
        parts = [self.model] if with_model else []
        parts += [self.method, self.precision, f"b{self.micro_batch}", f"s{self.seq_len}"]
        if self.grad_accum > 1:
            parts.append(f"ga{self.grad_accum}")
        if self.checkpointing:
            parts.append("ckpt")
        if self.compiled:
            parts.append("compile")
        if self.optimizer != "adamw" or self.optimizer_impl != "foreach":
            parts.append(f"{self.optimizer}/{self.optimizer_impl}")
        return " ".join(parts)

    @property
    def tokens_per_step(self) -> int:
        return self.micro_batch * self.seq_len * self.grad_accum


class StopRule(_Strict):
    """Warm-up, then timed steps until the step time is stable or a cap is reached.

    Stable: the coefficient of variation (std / mean) of all timed steps is below `target_cv`
    after at least `min_steps`. Caps: `max_steps` timed steps, or `max_time_s` of timed steps
    (after `min_steps`). On a noisy machine the cap is reached and the spread is reported as it
    was measured; it is never claimed to be smaller."""

    warmup_steps: int = Field(default=3, ge=1, le=10_000)
    min_steps: int = Field(default=5, ge=2, le=100_000)
    max_steps: int = Field(default=50, ge=2, le=100_000)
    target_cv: float = Field(default=0.02, gt=0, lt=1)
    max_time_s: float = Field(default=60.0, gt=0)

    @model_validator(mode="after")
    def _check(self) -> StopRule:
        if self.min_steps > self.max_steps:
            raise InputError("--min-steps/--max-steps",
                             f"--min-steps {self.min_steps} exceeds --max-steps {self.max_steps}.")
        return self


#: sweep key (as typed) -> BenchSetup field, and how to read its values
SWEEP_KEYS: dict[str, str] = {
    "batch": "micro_batch",
    "micro-batch": "micro_batch",
    "seq": "seq_len",
    "grad-accum": "grad_accum",
    "checkpointing": "checkpointing",
    "compile": "compiled",
    "method": "method",
    "precision": "precision",
    "optimizer": "optimizer",
    "optimizer-impl": "optimizer_impl",
    "lora-rank": "lora_rank",
    "lora-targets": "lora_targets",
}

_BOOL_WORDS = {"on": True, "off": False, "true": True, "false": False, "yes": True, "no": False,
               "1": True, "0": False}


def parse_sweep_value(field: str, text: str, where: str) -> Any:
    """One value of a sweep, typed for its field: ints, on/off for booleans, names otherwise."""
    kind = BenchSetup.model_fields[field].annotation
    if kind is bool:
        if text.lower() not in _BOOL_WORDS:
            raise InputError(where, f"expected on or off, got {text!r}.")
        return _BOOL_WORDS[text.lower()]
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise InputError(where, f"expected whole numbers, got {text!r}.") from None
    return text
