"""What a benchmark runs (BenchSetup: a Training of gpuhours.setup, plus compile and the learning
rate) and when it stops timing (StopRule). No torch here."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpuhours.errors import FieldError, InputError
from gpuhours.setup import (
    CHOICE_FIELDS,
    Training,
    check_runs_in_torch,
    nest_training,
    torch_precision,
)

DeviceChoice = Literal["auto", "cuda", "mps", "cpu"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BenchSetup(_Strict):
    """One configuration to benchmark: a Training (sizes per device) and how the bench runs it.

    Precisions run as gpuhours.setup.torch_precision says: fp32 as is; bf16/fp16 with the model
    cast; -amp with torch.autocast over fp32 weights (fp16 adds a GradScaler); -mixed like -amp
    for full fine-tuning (no single-process torch equivalent keeps fp32 master weights beside
    half-precision ones) and exactly for LoRA (a half-precision base under autocast)."""

    training: Training
    compiled: bool = False
    learning_rate: float = Field(default=1e-4, gt=0, le=10)

    @model_validator(mode="before")
    @classmethod
    def _flat(cls, data: Any) -> Any:
        return nest_training(data, ("compiled", "learning_rate"))

    @model_validator(mode="after")
    def _check(self) -> BenchSetup:
        t = self.training
        check_runs_in_torch(t, "the bench")
        if t.method == "qlora":
            raise FieldError("method", "qlora needs bitsandbytes and a CUDA device, which the "
                                       "bench does not drive yet; use full or lora.")
        return self

    @property
    def model(self) -> str:
        assert self.training.model is not None  # checked above
        return self.training.model

    def label(self, with_model: bool = True) -> str:
        """Short text naming the configuration, for tables and progress bars."""
        return self.training.label(with_model) + (" compile" if self.compiled else "")

    def record(self) -> dict[str, Any]:
        """Flat JSON-ready data of the configuration: what the ledger stores as its setup."""
        t = self.training
        # bf16-mixed full fine-tuning runs as bf16-amp here: what calibration must compare with
        as_run = torch_precision(t.precision, t.method).analytic_precision
        return {**t.choices(), "precision_as_run": as_run, "compiled": self.compiled,
                "learning_rate": self.learning_rate}

    @property
    def tokens_per_step(self) -> int:
        return self.training.tokens_per_step


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
            raise FieldError(("min_steps", "max_steps"),
                             f"at least {self.min_steps} timed steps exceeds at most "
                             f"{self.max_steps}.")
        return self


#: sweep key (as typed) -> the field it sets: a Training choice, or `compiled` of BenchSetup
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
assert all(f in CHOICE_FIELDS or f == "compiled" for f in SWEEP_KEYS.values())

_BOOL_WORDS = {"on": True, "off": False, "true": True, "false": False, "yes": True, "no": False,
               "1": True, "0": False}


def parse_sweep_value(field: str, text: str, where: str) -> Any:
    """One value of a sweep, typed for its field: ints, on/off for booleans, names otherwise."""
    model = BenchSetup if field == "compiled" else Training
    kind = model.model_fields[field].annotation
    if kind in (bool, "bool"):
        if text.lower() not in _BOOL_WORDS:
            raise InputError(where, f"expected on or off, got {text!r}.")
        return _BOOL_WORDS[text.lower()]
    if kind in (int, "int"):
        try:
            return int(text)
        except ValueError:
            raise InputError(where, f"expected whole numbers, got {text!r}.") from None
    return text


def with_values(base: BenchSetup, values: dict[str, Any]) -> BenchSetup:
    """`base` with sweep values set (Training choices, or `compiled`), validated again."""
    training = {k: v for k, v in values.items() if k != "compiled"}
    t = base.training
    if training:
        t = Training.model_validate({**t.model_dump(exclude={"arch"}), "arch": t.arch,
                                     **training})
    return BenchSetup(training=t, compiled=values.get("compiled", base.compiled),
                      learning_rate=base.learning_rate)
