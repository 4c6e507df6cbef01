"""What a trace runs: a Training (gpuhours.setup) and how many steps. No torch here.

How our precision names run in torch is gpuhours.setup.torch_precision (shared with bench).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpuhours.errors import FieldError
from gpuhours.setup import Training, check_runs_in_torch, nest_training


class TraceSetup(BaseModel):
    """One training step to trace: a Training, per GPU, in one process (ZeRO sharding divides
    state over processes and is not traced), for `steps` steps."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    training: Training
    #: training steps to trace; the second has the optimizer state the first made. With 1, an
    #: optimizer step on zero gradients makes that state before the traced step (half the time)
    steps: int = Field(default=2, ge=1, le=10)

    @model_validator(mode="before")
    @classmethod
    def _flat(cls, data: Any) -> Any:
        return nest_training(data, ("steps",))

    @model_validator(mode="after")
    def _check(self) -> TraceSetup:
        t = self.training
        check_runs_in_torch(t, "the trace")
        if t.grad_accum > 64:
            raise FieldError("grad_accum", f"the trace runs every micro-batch; at most 64, got "
                                           f"{t.grad_accum}.")
        return self
