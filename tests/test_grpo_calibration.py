"""A GRPO step measured by `gpuhours bench --workload grpo` carries into a plan's `rl` phase on the
same device (issue 13): each part of the phase's step is the physics' time times measured /
physics for the measured step, and the phase's basis names the ledger row. A plan may name the
measured device (a CPU here) as its GPU, as `estimate` may (issue 17).

The ledger is made by real runs on this CPU: a training bench (which also records the device's
matmul and bandwidth probes) and one GRPO step of a tiny Qwen2-shaped policy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app

pytest.importorskip("torch")
pytest.importorskip("transformers")

runner = CliRunner()
TINY_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": True,
    "torch_dtype": "float32"}
PARTS = {"rollout generation": "rollout_generation_s",
         "old-policy log-probs": "old_policy_log_probs_s",
         "reference model": "reference_model_s", "policy update": "policy_update_s"}


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict, str]:
    """(directory, ledger, the GRPO row's measured parts, the device key)."""
    from gpuhours.track.ledger import Ledger

    root = tmp_path_factory.mktemp("grpo")
    (root / "tiny.json").write_text(json.dumps(TINY_CONFIG))
    ledger = root / "ledger.sqlite"
    common = ["--model", str(root / "tiny.json"), "--precision", "fp32", "--threads", "1",
              "--ledger", str(ledger), "--json"]
    r = runner.invoke(app, ["bench", *common, "--batch", "2", "--seq", "16", "--min-steps",
                            "3", "--max-steps", "3"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["bench", *common, "--workload", "grpo", "--method", "full",
                            "--prompts", "2", "--generations", "3", "--prompt-tokens", "8",
                            "--output-tokens", "8", "--batch", "2"])
    assert r.exit_code == 0, r.output
    with Ledger.open(ledger, create=False) as book:
        (row,) = [m for m in book.measurements() if m.kind == "grpo"]
    return root, ledger, row.results["parts_s"], row.device_key


def _plan(root: Path, device: str, name: str, prompts: int = 2, method: str = "full") -> Path:
    path = root / f"{name}.yaml"
    path.write_text(f"""project: tiny-grpo
hardware:
  gpu: {device}
  gpus_per_node: 1
defaults:
  model: {root / 'tiny.json'}
  method: {method}
  precision: fp32
  micro_batch: 2
phases:
  - name: grpo
    kind: rl
    steps: 100
    prompts_per_step: {prompts}
    generations_per_prompt: 3
    prompt_tokens: 8
    response_tokens: 8
    reference_model: true
    reward: {{kind: rule}}
    engine: hf-generate
""")
    return path


def _phase(plan: Path, *args: str) -> dict:
    r = runner.invoke(app, ["plan", str(plan), "--no-doc", "--json", *args])
    assert r.exit_code == 0, r.output
    (phase,) = json.loads(r.stdout)["phases"]
    # the details' quantities are figures in JSON: their values here
    phase["details"] = {k: v["value"] if isinstance(v, dict) and "value" in v else v
                        for k, v in phase["details"].items()}
    return phase


def test_a_plan_of_the_measured_step_gives_the_measured_parts(measured) -> None:  # type: ignore[no-untyped-def]
    root, ledger, parts, device = measured
    phase = _phase(_plan(root, device, "same"), "--ledger", str(ledger))
    for part, key in PARTS.items():
        assert phase["details"][key] == pytest.approx(parts[part], rel=1e-9), part
    assert phase["details"]["grpo_calibration_ledger_id"] is not None
    assert "one GRPO step of" in phase["basis"] and "measured / physics" in phase["basis"]
    # the step is the measured parts, less the reward rule (Python's time, not carried), plus
    # the weight refresh the physics adds
    step = phase["details"]["step_time_s"]
    assert sum(parts[p] for p in PARTS) < step < sum(parts.values()) + 1e-3


def test_a_larger_step_moves_as_the_physics_does(measured) -> None:  # type: ignore[no-untyped-def]
    """Doubling the prompts: each calibrated part changes by the analytic ratio (the scale is
    the measured step's, carried over)."""
    root, ledger, _, device = measured
    small, large = _plan(root, device, "small"), _plan(root, device, "large", prompts=4)
    cal = [_phase(p, "--ledger", str(ledger))["details"] for p in (small, large)]
    # without calibration (a ledger is still needed to know the device), both analytic
    raw = [_phase(p, "--ledger", str(ledger), "--no-calibrate")["details"]
           for p in (small, large)]
    assert raw[0]["grpo_calibration_ledger_id"] is None
    for key in PARTS.values():
        if key == "policy_update_s":
            continue
        assert cal[1][key] / cal[0][key] == pytest.approx(raw[1][key] / raw[0][key], rel=1e-6)
    # the update is one optimizer step over 3 or 6 micro-batches of 2 (walk F10: each
    # micro-batch was counted as an optimizer step of its own, 2x exactly either way). The
    # ledger's training row also calibrates the host per operator (this tiny model's step is
    # host-led), so the calibrated update grows nearly as its micro-batches' operators, (6 + an
    # optimizer step's) / (3 + its), and the uncalibrated physics, where the optimizer step
    # weighs more, by less
    update = [c["policy_update_s"] for c in cal]
    assert raw[1]["policy_update_s"] / raw[0]["policy_update_s"] < update[1] / update[0] < 2.0
    assert raw[1]["policy_update_s"] / raw[0]["policy_update_s"] < 1.95
    # the scoring passes are compute-bound: twice the sequences, twice the time
    assert raw[1]["reference_model_s"] == pytest.approx(2 * raw[0]["reference_model_s"])


def test_a_grpo_step_of_another_method_calibrates_nothing(measured) -> None:  # type: ignore[no-untyped-def]
    root, ledger, _, device = measured
    phase = _phase(_plan(root, device, "lora", method="lora"), "--ledger", str(ledger))
    assert phase["details"]["grpo_calibration_ledger_id"] is None
    assert "one GRPO step" not in phase["basis"]


def test_a_measured_device_needs_the_ledger_that_measured_it(measured) -> None:  # type: ignore[no-untyped-def]
    root, _, _, device = measured
    r = runner.invoke(app, ["plan", str(_plan(root, device, "noledger")), "--no-doc",
                            "--ledger", str(root / "other.sqlite")])
    assert r.exit_code == 2 and "Traceback" not in r.output
    empty = root / "empty"
    empty.mkdir()
    r = runner.invoke(app, ["plan", str(_plan(root, device, "noledger")), "--no-doc"],
                      env={"GPUHOURS_LEDGER": str(empty / "none.sqlite")})
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "line 3, hardware.gpu" in r.output and "measured by `gpuhours bench`" in r.output


def test_the_measured_parts_are_labelled_measured(measured) -> None:  # type: ignore[no-untyped-def]
    """In JSON the parts the GRPO row scales (and the step they sum to) are `measured`, the
    engine's default share `assumed`, the weight refresh (not measured) a formula; the tiny
    model's MFU is given in two figures, not rounded to 0%."""
    root, ledger, _, device = measured
    r = runner.invoke(app, ["plan", str(_plan(root, device, "labels")), "--no-doc", "--json",
                            "--ledger", str(ledger)])
    assert r.exit_code == 0, r.output
    (phase,) = json.loads(r.stdout)["phases"]
    d = phase["details"]
    for key in (*PARTS.values(), "step_time_s"):
        assert d[key]["basis"] == "measured", key
    assert d["weight_sync_s"]["basis"] == "formula"
    assert d["rollout_memory_utilisation"]["basis"] == "assumed"
    assert phase["basis"].startswith("measured:")
    assert " at 0% MFU" not in phase["basis"]
