"""The `rl` phase of a plan against published RL step times (data/rl_steps.csv).

    python -m gpuhours_dev.validation.rl        (from scripts/; prints a Markdown table)

Each expressible row becomes a one-phase plan; every setting not stated by the source is an
assumption written beside the row (ASSUMED). Rows whose model, GPU or parallel layout gpuhours
cannot express are listed with the reason. Nothing here was fitted: these rows were read after
the RL step model was written, and no constant was set from them.
"""

from __future__ import annotations

import csv
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

DATA = Path(__file__).parent / "data" / "rl_steps.csv"


@dataclass(frozen=True)
class Case:
    row: int             # 0-based row of rl_steps.csv
    gpu: str
    phase: dict[str, Any]
    settings: dict[str, Any]
    assumed: str


_NEMO_8B = dict(prompts_per_step=64, generations_per_prompt=32, reference_model=True,
                reward={"kind": "rule"}, prompt_tokens=256)
_NEMO_ASSUMED = ("prompt 256 tokens (OpenMathInstruct-2 prompts; not stated); the table's "
                 "'G-Average Seq len' taken as the mean response; longest = 4096 - prompt; "
                 "Megatron's model parallelism as ZeRO-3")
_ORLHF = dict(prompts_per_step=1024, generations_per_prompt=1, prompt_tokens=1024,
              response_tokens=1024, max_response_tokens=1024, reference_model=True,
              critic=True, placement="dedicated")
_ORLHF_ASSUMED = ("A800 as an A100-80GB (same compute and HBM; NVLink 400 not 600 GB/s); "
                  "responses all 1,024 tokens (the benchmark's max; means not given); reward "
                  "model = the actor's size; vLLM on 2 of the GPUs (the table's role ratio)")

CASES = [
    Case(0, "h100-sxm", {**_NEMO_8B, "response_tokens": 1019, "max_response_tokens": 3840},
         {"model": "llama-3.1-8b", "method": "full", "gpus": 16, "checkpointing": True,
          "zero_stage": 3},
         _NEMO_ASSUMED),
    Case(1, "h100-sxm", {**_NEMO_8B, "response_tokens": 1123, "max_response_tokens": 3840,
                         "placement": "dedicated", "rollout_gpus": 8, "async_rollout": True},
         {"model": "llama-3.1-8b", "method": "full", "gpus": 16, "checkpointing": True,
          "zero_stage": 3},
         _NEMO_ASSUMED),
    Case(6, "gb200", {**_NEMO_8B, "response_tokens": 1066, "max_response_tokens": 3840},
         {"model": "llama-3.1-8b", "method": "full", "gpus": 8, "checkpointing": True,
          "zero_stage": 3},
         _NEMO_ASSUMED),
    Case(7, "gb200", {**_NEMO_8B, "response_tokens": 1107, "max_response_tokens": 3840,
                      "placement": "dedicated", "rollout_gpus": 4, "async_rollout": True},
         {"model": "llama-3.1-8b", "method": "full", "gpus": 8, "checkpointing": True,
          "zero_stage": 3},
         _NEMO_ASSUMED),
    Case(27, "a100-80gb", {**_ORLHF, "rollout_gpus": 2, "reward": {"kind": "model",
                                                                    "model": "llama-2-7b"}},
         {"model": "llama-2-7b", "method": "full", "gpus": 8, "checkpointing": True,
          "zero_stage": 3}, _ORLHF_ASSUMED),
    Case(30, "a100-80gb", {**_ORLHF, "rollout_gpus": 2, "reward": {"kind": "model",
                                                                    "model": "llama-2-13b"}},
         {"model": "llama-2-13b", "method": "full", "gpus": 8, "checkpointing": True,
          "zero_stage": 3}, _ORLHF_ASSUMED),
    Case(32, "a100-80gb", {**_ORLHF, "rollout_gpus": 4, "rollout_tensor_parallel": 4,
                           "reward": {"kind": "model", "model": "llama-2-70b"}},
         {"model": "llama-2-70b", "method": "full", "gpus": 16, "checkpointing": True,
          "zero_stage": 3},
         _ORLHF_ASSUMED + "; one vLLM engine of tensor parallel 4 on 4 of the 16 GPUs; does "
         "not fit as expressed: ZeRO-3 over the 12 training GPUs leaves the actor's AdamW "
         "state alone at 94 GB per GPU, and the source does not say how it held it (offload "
         "is not modelled)"),
]


def rows() -> list[dict[str, str]]:
    with DATA.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def predict(case: Case) -> tuple[float | None, str]:
    """(predicted step time in s, or None; the bottleneck or the error)."""
    from gpuhours.errors import InputError
    from gpuhours.plan.budget import evaluate
    from gpuhours.plan.load import load_plan

    plan = {"project": f"rl-row-{case.row}",
            "hardware": {"gpu": case.gpu, "gpus_per_node": 8,
                         "nodes": max(1, case.settings["gpus"] // 8)},
            "phases": [{"name": "rl", "kind": "rl", "steps": 1, **case.settings, **case.phase}]}
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "plan.yaml"
        f.write_text(yaml.safe_dump(plan, sort_keys=False))
        try:
            p = evaluate(load_plan(f)).phases[0]
        except InputError as e:  # DoesNotFit included: the reason, without the temporary path
            return None, f"not expressed: {e.message}"
    return float(p.details["step_time_s"]), p.bottleneck


def report() -> str:
    data = rows()
    lines = ["| row | framework | model | GPUs | placement | measured step | predicted | error "
             "| bottleneck | assumed |", "|---|---|---|---|---|---|---|---|---|---|"]
    errors = []
    for c in CASES:
        r = data[c.row]
        measured = float(r["step_time_s"])
        predicted, why = predict(c)
        err = "" if predicted is None else f"{predicted / measured - 1:+.0%}"
        if predicted is not None:
            errors.append(predicted / measured - 1)
        lines.append(f"| {c.row + 2} | {r['framework'][:30]} | {r['model']} | {r['n_gpus']} x "
                     f"{r['gpu'][:14]} | {r['placement'][:40]} | {measured:,.1f} s | "
                     f"{'-' if predicted is None else f'{predicted:,.1f} s'} | {err} | "
                     f"{why} | {c.assumed} |")
    if errors:
        within = sum(abs(e) <= 0.25 for e in errors)
        lines.append(f"\n{within} of {len(errors)} within 25%; "
                     f"{sum(e < -0.5 or e > 1.0 for e in errors)} off by more than 2x.")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())
