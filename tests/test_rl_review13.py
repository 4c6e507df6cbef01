"""Issue 13's second review of the rl plan phase and `gpuhours generation`: each defect it found,
worked by hand (tests/rl_plan.py's GRPO plan as the base)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuhours.errors import InputError
from gpuhours.plan.load import load_plan
from rl_plan import grpo_plan, run_rl_phase, write_rl_plan

BASE: dict[str, Any] = grpo_plan("review13")
#: a 448 x 448 image: 32 x 32 patches of 14 px, merged 2 x 2 into 16 x 16 = 256 language-model
#: tokens (Qwen2.5-VL's 28 px a merged token)
VLM = dict(model="qwen2.5-vl-7b", images_per_example=1, image_pixels=448 * 448)


def test_update_packing_counts_the_image_tokens(tmp_path: Path) -> None:
    """verl packs input_ids, image pads included, up to 16,384 tokens a GPU: a 256 + 512-token
    text with a 256-token image is 1,024 tokens, so 16 sequences a micro-batch, not the
    16,384 // 768 = 21 of the text alone (32 x 8 = 256 sequences over 8 ranks: 32 a rank, not
    the bound)."""
    d = run_rl_phase(tmp_path, BASE, **VLM, prompt_tokens=256, response_tokens=512).details
    assert d["update_micro_batch"] == 16_384 // (256 + 512 + 256) == 16
    text = run_rl_phase(tmp_path, BASE, prompt_tokens=256, response_tokens=512).details
    assert text["update_micro_batch"] == 16_384 // 768 == 21


def test_the_context_check_counts_the_image_tokens(tmp_path: Path) -> None:
    """2,000 + 1,000 text tokens and 500 images of 256 tokens: 131,000 positions against
    Qwen2.5-VL-7B's 128,000 (max_position_embeddings), refused naming the images first (the
    largest part); 480 images (125,880 tokens) pass the check."""
    with pytest.raises(InputError, match=r"131,000 tokens\) exceed .*128,000") as caught:
        run_rl_phase(tmp_path, BASE, **{**VLM, "images_per_example": 500}, prompt_tokens=2000,
                     response_tokens=1000, cp=8)
    assert "'images_per_example'" in caught.value.where
    assert caught.value.where.index("images_per_example") < caught.value.where.index(
        "prompt_tokens")
    run_rl_phase(tmp_path, BASE, **{**VLM, "images_per_example": 480}, prompt_tokens=2000,
                 response_tokens=1000, cp=8)


@pytest.mark.parametrize("field", ["steps", "prompts"])
def test_rl_steps_and_prompts_are_whole(tmp_path: Path, field: str) -> None:
    """10.5 steps (or 100.5 prompts) are refused naming the field, as `estimate --steps 10.5`
    is; 1e3 (a whole number written as a float) passes."""
    extra = {"epochs": 1, "steps": None} if field == "prompts" else {}
    phase = {**extra, field: 100.5 if field == "prompts" else 10.5}
    plan = write_rl_plan(tmp_path, BASE, **phase)
    if field == "prompts":  # steps or epochs, not both: drop the base's steps
        plan.write_text(plan.read_text().replace("    steps: null\n", ""))
    with pytest.raises(InputError, match="whole number") as caught:
        load_plan(plan)
    assert field in caught.value.where
    load_plan(write_rl_plan(tmp_path, BASE, steps=1e3))


@pytest.mark.parametrize(("args", "flag"), [
    (["--output-tokens", "0"], "--output-tokens"),
    (["--sequences", "1.5"], "--sequences"),
    (["--engine", "vllm", "--hf-transformers-version", "4.40"], "--hf-transformers-version"),
])
def test_generation_refuses_what_it_cannot_cost(args: list[str], flag: str) -> None:
    """No output tokens (a prefill, not a generation), half a sequence, and hf-generate's
    transformers release on vLLM: each refused naming its flag, exit 2, no traceback."""
    from typer.testing import CliRunner

    from gpuhours.cli import app

    r = CliRunner().invoke(app, ["generation", "--model", "qwen2.5-0.5b", "--gpu", "h100-sxm",
                                 *args])
    assert r.exit_code == 2, r.output
    assert flag in r.output and "Traceback" not in r.output
    ok = CliRunner().invoke(app, ["generation", "--model", "qwen2.5-0.5b", "--gpu", "h100-sxm",
                                  "--sequences", "1e4", "--engine", "hf-generate",
                                  "--hf-transformers-version", "4.40", "--batch", "8"])
    assert ok.exit_code == 0, ok.output


def test_generation_cost_leaves_out_instances_a_replica_cannot_span() -> None:
    """A TP-4 replica of Llama-3.1-70B on H100s: no row billed as several instances smaller
    than 4 GPUs (1- and 2-GPU shapes joined over the network) is costed; those rows are named
    as left out, and the 4- and 8-GPU shapes stay. TP 2 keeps the 2-GPU shapes."""
    import json

    from typer.testing import CliRunner

    from gpuhours.cli import app

    def run(tp: str) -> dict[str, Any]:
        r = CliRunner().invoke(app, ["generation", "--model", "llama-3.1-70b", "--gpu",
                                     "h100-sxm", "--tensor-parallel", tp, "--batch", "8",
                                     "--sequences", "1e4", "--weight-bytes-per-param", "1",
                                     "--json"])
        assert r.exit_code == 0, r.output
        return json.loads(r.output)

    d = run("4")
    assert d["cost_usd"] and all(c["gpus_per_instance"] >= 4 for c in d["cost_usd"])
    assert d["cost_rows_left_out"]["rows"]
    assert all("instances of 1 GPU" in r or "instances of 2 GPU" in r
               for r in d["cost_rows_left_out"]["rows"])
    two = run("2")
    assert any(c["gpus_per_instance"] == 2 for c in two["cost_usd"])
    assert all("instances of 1 GPU" in r for r in two["cost_rows_left_out"]["rows"])


@pytest.mark.parametrize(("phase", "field", "match"), [
    (dict(placement="actor", actor_gpus=4), "placement", "HF generate.*vllm \\(the default\\)"),
    (dict(placement="actor", actor_gpus=4, engine="sglang"), "engine", "sglang"),
    # 512 + 1,024 tokens (the base's lengths): a budget of 1,000 holds none
    (dict(scoring_tokens_per_gpu=1000), "scoring_tokens_per_gpu", "1,536 tokens"),
])
def test_conflicting_rl_fields_are_refused(tmp_path: Path, phase: dict[str, Any], field: str,
                                           match: str) -> None:
    with pytest.raises(InputError, match=match) as caught:
        run_rl_phase(tmp_path, BASE, **phase)
    assert f"'{field}'" in caught.value.where


def test_a_rule_reward_naming_a_model_is_refused(tmp_path: Path) -> None:
    """(Refused by the plan's schema since the reward's host time landed on main.)"""
    with pytest.raises(InputError, match="kind is `rule`") as caught:
        load_plan(write_rl_plan(tmp_path, BASE, reward={"kind": "rule",
                                                        "model": "llama-3.1-8b"}))
    assert "reward" in caught.value.where


def test_a_scoring_budget_of_one_sequence_passes(tmp_path: Path) -> None:
    d = run_rl_phase(tmp_path, BASE, scoring_tokens_per_gpu=1536).details
    assert d["step_time_s"] > 0


def test_later_epochs_without_old_log_probs_are_warned(tmp_path: Path) -> None:
    warned = run_rl_phase(tmp_path, BASE, policy_epochs=2, old_logprob_pass=False).warnings
    assert any("policy_epochs 2 with old_logprob_pass false" in w for w in warned)
    quiet = run_rl_phase(tmp_path, BASE, policy_epochs=2).warnings
    assert not any("old_logprob_pass false" in w for w in quiet)


def test_a_derived_accumulation_names_the_fields_it_comes_from(tmp_path: Path) -> None:
    """1e9 prompts x 8 responses over 8 ranks: 1e9 sequences a rank, 16,384 // 1,536 = 10 a
    micro-batch, so the derived grad_accum 1e8 exceeds the 1e6 limit: the error names
    prompts_per_step (the line the user wrote), not the grad_accum they never set."""
    with pytest.raises(InputError, match="derived grad_accum 100000000") as caught:
        run_rl_phase(tmp_path, BASE, prompts_per_step=1_000_000_000)
    assert "'prompts_per_step'" in caught.value.where
    assert "'grad_accum'" not in caught.value.where


def test_a_share_too_small_names_the_share_first(tmp_path: Path) -> None:
    """rollout_memory_utilisation 0.05 of an A100-80GB cannot hold Qwen2.5-7B's 15.2 GB: the
    verdict's line is the share's, which it names first."""
    from gpuhours.errors import DoesNotFit

    plan = write_rl_plan(tmp_path, BASE, rollout_memory_utilisation=0.05)
    line = next(i for i, text in enumerate(plan.read_text().splitlines(), 1)
                if "rollout_memory_utilisation" in text)
    from gpuhours.plan.budget import evaluate

    with pytest.raises(DoesNotFit) as caught:
        evaluate(load_plan(plan))
    assert f"line {line}," in caught.value.where
    assert caught.value.where.split("phase 'grpo', ")[1].startswith(
        "field 'rollout_memory_utilisation'")


def test_weight_sync_to_engines_on_another_node_crosses_the_network(tmp_path: Path) -> None:
    """Qwen2.5-7B (7.62e9 parameters, 15.23 GB in bf16) to dedicated engines: rank 0's
    broadcast lasts the bytes over the slowest link at collective efficiency 0.75. On one node
    of 8 A100s (4 train, 4 engines) that is NVLink's 300 GB/s a direction; on 2 nodes (8 + 8)
    some engines sit on the other node: 25 GB/s a GPU, 12x longer."""
    from gpuhours.estimate import assumptions as A

    weights = 7_615_616_512 * 2
    eff = A.COLLECTIVE_EFFICIENCY.value
    assert eff == 0.75
    one = run_rl_phase(tmp_path, BASE, placement="dedicated", rollout_gpus=4).details
    assert one["weight_sync_s"] == pytest.approx(weights / (300e9 * eff), rel=1e-3)
    two_nodes = {**BASE, "hardware": {**BASE["hardware"], "nodes": 2}}
    two = run_rl_phase(tmp_path, two_nodes, placement="dedicated", rollout_gpus=8).details
    assert two["weight_sync_s"] == pytest.approx(weights / (25e9 * eff), rel=1e-3)


def test_each_rl_detail_carries_its_own_basis(tmp_path: Path) -> None:
    """In JSON the engine's default share is an assumption, a share the plan gives its input,
    the steps the plan's input; the weight sync and the reference pass say what makes them,
    not the rollout roofline of the whole phase."""
    def details(**phase: Any) -> dict[str, Any]:
        return run_rl_phase(tmp_path, BASE, **phase).model_dump(mode="json")["details"]

    d = details()
    assert d["rollout_memory_utilisation"]["basis"] == "assumed"
    assert "colocated_rollout_memory_utilisation" in d["rollout_memory_utilisation"]["source"]
    assert d["steps"]["basis"] == "input"
    for key in ("weight_sync_s", "reference_model_s"):
        assert d[key]["basis"] == "formula"
        assert "generation roofline" not in d[key]["source"], key
    assert "weights" in d["weight_sync_s"]["source"]
    assert "generation roofline" in d["rollout_generation_s"]["source"]
    given = details(rollout_memory_utilisation=0.4)
    assert given["rollout_memory_utilisation"]["basis"] == "input"
    assert given["rollout_memory_utilisation"]["value"] == 0.4


def test_a_tensor_parallel_engine_batch_is_named_per_engine(tmp_path: Path) -> None:
    """Engines of 2 GPUs: the basis gives the running sequences per engine (the paged replay's
    peak, details.rollout_peak_running_sequences), not 'per GPU'."""
    r = run_rl_phase(tmp_path, BASE, rollout_tensor_parallel=2)
    peak = r.details["rollout_peak_running_sequences"]
    assert f"up to {peak} running per engine of 2 GPUs" in r.basis
    assert "per GPU in" not in r.basis


@pytest.mark.parametrize("engine", ["vllm", "sglang", "hf-generate"])
def test_the_plans_assumptions_are_the_ones_its_phases_used(tmp_path: Path,
                                                           engine: str) -> None:
    """An rl phase lists its own engine's decode constants (not vLLM's for every plan), the
    colocated share and the 16,384-token budget it took by default, and the collective
    efficiency of its weight sync; a plan of a finetune phase alone lists no engine's."""
    from gpuhours.plan.budget import evaluate

    budget = evaluate(load_plan(write_rl_plan(tmp_path, BASE, engine=engine)))
    names = {a.split(" = ")[0] for a in budget.assumptions}
    assert f"decode_host_step_s.{engine}" in names
    assert {f"decode_host_step_s.{e}" for e in ("vllm", "sglang", "hf-generate")} & names == {
        f"decode_host_step_s.{engine}"}
    assert {"rl_update_tokens_per_micro_batch", "collective_efficiency"} <= names
    assert "colocated_rollout_memory_utilisation" in names  # the engine's share, defaulted
    given = evaluate(load_plan(write_rl_plan(tmp_path, BASE, engine=engine,
                                             rollout_memory_utilisation=0.4,
                                             update_tokens_per_gpu=8192)))
    names = {a.split(" = ")[0] for a in given.assumptions}
    assert "colocated_rollout_memory_utilisation" not in names
    assert "rl_update_tokens_per_micro_batch" not in names
    ft = {"project": "ft", "hardware": BASE["hardware"],
          "phases": [{"name": "sft", "kind": "finetune", "model": "qwen2.5-0.5b",
                      "method": "full", "seq_len": 512, "micro_batch": 4, "tokens": 1e7}]}
    import yaml

    f = tmp_path / "ft.yaml"
    f.write_text(yaml.safe_dump(ft))
    names = {a.split(" = ")[0] for a in evaluate(load_plan(f)).assumptions}
    assert not any(n.startswith("decode_") for n in names)


VERL = """data:
  train_batch_size: 32
  max_prompt_length: 1024
  max_response_length: 2048
actor_rollout_ref:
  model:
    path: Qwen/Qwen2.5-7B-Instruct
    use_remove_padding: true
  actor:
    ppo_mini_batch_size: 8
    use_dynamic_bsz: true
    ppo_max_token_len_per_gpu: 8192
    ppo_epochs: 2
  rollout:
    name: vllm
    n: 4
    tensor_model_parallel_size: 2
    gpu_memory_utilization: 0.6
  ref:
    fsdp_config:
      param_offload: true
trainer:
  n_gpus_per_node: 8
  nnodes: 1
"""


def test_a_verl_config_gives_an_rl_phase_its_rollout_settings(tmp_path: Path) -> None:
    """`from:` a verl config: its engine TP 2 at 0.6 of each GPU, 4 responses a prompt, the
    reference offloaded, 32 // 8 = 4 mini-batches, 2 epochs and an 8,192-token update budget
    become the phase's, where the phase leaves them unset; a field the phase sets itself
    (generations_per_prompt 8) stays and the note says so; no note speaks of `estimate`."""
    (tmp_path / "verl.yaml").write_text(VERL)
    base = {**BASE, "defaults": {"method": "full", "checkpointing": True}}
    phase = {k: v for k, v in BASE["phases"][0].items() if k != "generations_per_prompt"}
    base = {**base, "phases": [{**phase, "from": "verl.yaml"}]}
    r = run_rl_phase(tmp_path, base)
    d = r.details
    assert (d["rollout_tensor_parallel"], d["rollout_memory_utilisation"]) == (2, 0.6)
    assert d["ref_offload_copy_s"] > 0
    # 32 prompts x 4 = 128 sequences over 8 ranks and 4 mini-batches: 4 a rank, 1,536 tokens
    # each in 8,192-token micro-batches: 5 fit, the 4 a rank bound it
    assert d["update_micro_batch"] == 4
    assert "128 sequences" in r.formula
    assert not any("`estimate` prices" in w for w in r.warnings)
    taken = next(w for w in r.warnings if "rl fields from verl" in w)
    for text in ("rollout.tensor_model_parallel_size=2 -> rollout_tensor_parallel 2",
                 "ppo_max_token_len_per_gpu=8192 -> update_tokens_per_gpu 8192",
                 "actor.ppo_epochs=2 -> policy_epochs 2", "-> mini_batches 4"):
        assert text in taken, text
    own = run_rl_phase(tmp_path, {**base, "phases": [{**base["phases"][0],
                                                      "generations_per_prompt": 8}]})
    assert "256 sequences" in own.formula
    assert any("rollout.n=4 (the phase's generations_per_prompt 8 kept)" in w
               for w in own.warnings)


def test_a_verl_setting_the_phase_cannot_take_names_the_from_field(tmp_path: Path) -> None:
    """TP 3 is no engine width an rl phase takes: refused naming `from` and verl's key."""
    (tmp_path / "verl.yaml").write_text(VERL.replace("tensor_model_parallel_size: 2",
                                                     "tensor_model_parallel_size: 3"))
    base = {**BASE, "phases": [{**BASE["phases"][0], "from": "verl.yaml"}]}
    with pytest.raises(InputError, match="tensor_model_parallel_size=3") as caught:
        run_rl_phase(tmp_path, base)
    assert "'from'" in caught.value.where
