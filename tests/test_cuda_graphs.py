"""Decode steps with and without CUDA graphs (issue 13, estimate/cuda_graphs.py): eager and graph
step times worked by hand, the engines' capture limits switching at their boundary batch and
length, the fitted constant against its pair of published rows, and bad input from the CLI and
a plan file."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpuhours import catalog
from gpuhours.cli import app
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.arch import from_hf_config
from gpuhours.estimate.cuda_graphs import eager_kernels_per_forward
from gpuhours.estimate.generation import FUSED_MOE_ROUTING_KERNELS, estimate_generation
from gpuhours.resolve import resolve_model
from gpuhours.setup import Generation

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]

# GPT-2 (openai-community/gpt2 config.json): 12 layers of width 768
GPT2 = from_hf_config({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
                       "vocab_size": 50257, "n_positions": 1024, "tie_word_embeddings": True},
                      "gpt2")


def _gen(arch_name: str, **fields: object) -> Generation:
    arch, _ = resolve_model(arch_name)
    return Generation.model_validate({"arch": arch, **fields})


def test_the_constant_is_the_one_the_hand_numbers_use() -> None:
    # 30 us a kernel (fitted on one pair; test_the_constant_is_its_pairs_fit checks the fit)
    assert A.EAGER_HOST_S_PER_KERNEL.value == 30e-6
    assert A.DECODE_HOST_STEP_S["vllm"].value == 2.3e-3


def test_kernels_counted_by_hand() -> None:
    # GPT-2: 12 dense layers x 10 kernels
    assert eager_kernels_per_forward(GPT2, 1, FUSED_MOE_ROUTING_KERNELS, 0) == 120
    # Qwen3-30B-A3B on a TP-4 engine: 48 layers x (10 + 2 all-reduces) + 48 MoE layers x 8
    # routing kernels = 576 + 384
    moe, _ = resolve_model("qwen3-30b-a3b")
    assert eager_kernels_per_forward(moe, 4, FUSED_MOE_ROUTING_KERNELS, 0) == 960
    # fp8 W8A8 adds 4 input-quantisation kernels a layer: Llama-2-7B, 32 x (10 + 4)
    llama, _ = resolve_model("llama-2-7b")
    assert eager_kernels_per_forward(llama, 1, FUSED_MOE_ROUTING_KERNELS, 4) == 448


def test_an_eager_step_of_a_small_model_is_its_launches() -> None:
    """GPT-2 on an H200 at batch 1: its weights (~0.25 GB) read in ~0.1 ms, so an eager step is
    the host step + the launches: 2.3 ms + 120 x 30 us = 5.9 ms; with a graph 2.3 ms + the
    reads, under 2.5 ms."""
    gpu = catalog.gpu("h200")
    g = Generation(arch=GPT2, prompt_tokens=128, output_tokens=32, batch=1)
    graph = estimate_generation(g, gpu)
    eager = estimate_generation(g.model_copy(update={"cuda_graphs": "off"}), gpu)
    assert graph.decode_step_s_first < 2.5e-3
    assert eager.decode_step_s_first == pytest.approx(5.9e-3)
    assert eager.eager_launch_s_first == pytest.approx(3.6e-3)
    assert graph.eager_launch_s_first == 0.0
    assert eager.decode_bound == "host (eager kernel launches)"
    assert eager.cuda_graphs.startswith("eager: cuda_graphs off")


def test_an_eager_step_of_a_large_model_hides_its_launches() -> None:
    """Qwen2.5-32B on one A100 at batch 1: 64 x 10 x 30 us = 19.2 ms of launches overlap ~35 ms
    of weight reads (65 GB at ~1.8 TB/s), so eager and graph steps are the same (vLLM 0.6.3's
    enforce_eager rows 41-43 of generation_published.csv: -1%, -0%, -0%)."""
    gpu = catalog.gpu("a100-80gb")
    g = _gen("qwen2.5-32b", prompt_tokens=1, output_tokens=64, batch=1)
    graph = estimate_generation(g, gpu)
    eager = estimate_generation(g.model_copy(update={"cuda_graphs": "off"}), gpu)
    assert eager.eager_launch_s_first == pytest.approx(19.2e-3)
    assert graph.decode_step_s_first - graph.host_step_s > 30e-3
    assert eager.decode_step_s_first == graph.decode_step_s_first
    assert eager.decode_bound == "memory bandwidth"


@pytest.mark.parametrize(("engine", "gpu", "extra", "limit", "name"), [
    ("vllm", "h100-sxm", {"max_num_seqs": 1024}, 512, "vLLM V1"),
    ("vllm-v0", "h100-sxm", {"max_num_seqs": 512}, 256, "vLLM V0"),
    ("sglang", "a100-80gb", {}, 160, "SGLang 0.4.6"),      # 81,920 MiB: not above 81,920
    ("sglang", "h100-sxm", {}, 160, "SGLang 0.4.6"),       # 81,559 MiB
    ("sglang", "h20", {}, 256, "SGLang 0.4.6"),            # 96 GB
    ("sglang", "rtx-4090", {}, 8, "SGLang 0.4.6"),         # 24 GB, tp 1
])
def test_the_capture_limit_switches_at_its_boundary_batch(
        engine: str, gpu: str, extra: dict[str, int], limit: int, name: str) -> None:
    spec = catalog.gpu(gpu)
    g = _gen("qwen2.5-0.5b", prompt_tokens=64, output_tokens=16, engine=engine, **extra)
    at = estimate_generation(g.model_copy(update={"batch": limit}), spec)
    above = estimate_generation(g.model_copy(update={"batch": limit + 1}), spec)
    assert at.cuda_graphs == f"CUDA graph: batch {limit} <= {name}'s largest captured batch {limit}"
    assert at.eager_launch_s_first == 0.0
    assert above.cuda_graphs == (f"eager: batch {limit + 1} > {name}'s largest captured batch "
                                 f"{limit}")
    # 24 layers x 10 kernels x 30 us
    assert above.eager_launch_s_first == pytest.approx(7.2e-3)
    # `on` replays a graph at any batch
    on = estimate_generation(g.model_copy(update={"batch": limit + 1, "cuda_graphs": "on"}),
                             spec)
    assert on.eager_launch_s_first == 0.0


def test_vllm_v1_captures_up_to_twice_max_num_seqs() -> None:
    from gpuhours.estimate.cuda_graphs import capture_rule

    assert capture_rule("vllm", "auto", 200, 80e9, 1).max_batch == 400
    assert capture_rule("vllm", "auto", 256, 80e9, 1).max_batch == 512
    assert capture_rule("vllm", "auto", 4096, 80e9, 1).max_batch == 512


def test_vllm_v0_falls_back_to_eager_beyond_8192_tokens() -> None:
    gpu = catalog.gpu("a100-80gb")
    g = _gen("qwen2.5-0.5b", engine="vllm-v0", batch=1, prompt_tokens=8000, output_tokens=192)
    within = estimate_generation(g, gpu)
    assert within.cuda_graphs.startswith("CUDA graph: batch 1")
    crossing = estimate_generation(g.model_copy(update={"output_tokens": 193}), gpu)
    assert crossing.cuda_graphs == ("CUDA graph up to context 8,192, eager beyond (vLLM V0's "
                                    "max_seq_len_to_capture)")
    assert crossing.decode_step_s_first < crossing.decode_step_s_last
    beyond = estimate_generation(g.model_copy(update={"prompt_tokens": 8193}), gpu)
    assert beyond.cuda_graphs == ("eager: context 8,193 > vLLM V0's max_seq_len_to_capture "
                                  "8,192")
    # vLLM V1 has no length limit
    v1 = estimate_generation(g.model_copy(update={"engine": "vllm", "prompt_tokens": 8193}), gpu)
    assert v1.eager_launch_s_first == 0.0


def test_the_constant_is_its_pairs_fit() -> None:
    from gpuhours_dev.validation import generation_published as gp

    # (1/207.7 - 1/766.6) s + ~0.1 ms of device time, over 120 kernels
    assert gp.fit_eager_per_kernel() == pytest.approx(A.EAGER_HOST_S_PER_KERNEL.value, rel=0.01)
    assert set(gp.EAGER_FIT_ROWS) <= set(gp.TUNED)


def test_the_summary_says_eager_or_graph_and_why() -> None:
    r = runner.invoke(app, ["generation", "--model", "qwen2.5-0.5b", "--gpu", "a100-80gb",
                            "--batch", "300", "--max-num-seqs", "300", "--engine", "vllm-v0",
                            "--json"])
    assert r.exit_code == 0, r.output
    assert "eager: batch 300 > vLLM V0's largest captured batch 256" in r.output
    assert "eager_host_s_per_kernel" in r.output


@pytest.mark.parametrize(("args", "option"), [
    (["--cuda-graphs", "maybe"], "--cuda-graphs"),
    (["--cuda-graphs", "on", "--engine", "hf-generate"], "--cuda-graphs/--engine"),
])
def test_bad_cuda_graphs_on_the_cli(args: list[str], option: str) -> None:
    r = runner.invoke(app, ["generation", "--model", "qwen2.5-0.5b", "--gpu", "a100-80gb",
                            *args])
    assert r.exit_code == 2, r.output
    assert option in r.output and "Traceback" not in r.output


def test_a_plan_with_a_bad_rollout_cuda_graphs_names_the_key_and_line(tmp_path: Path) -> None:
    plan = yaml.safe_load((ROOT / "examples" / "pixelis.yaml").read_text())
    rl = next(p for p in plan["phases"] if p.get("kind") == "rl")
    rl["rollout_cuda_graphs"] = "sometimes"
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    r = runner.invoke(app, ["plan", str(path), "--no-doc"])
    assert r.exit_code == 2, r.output
    line = path.read_text().splitlines().index("  rollout_cuda_graphs: sometimes") + 1
    assert f"line {line}" in r.output and "rollout_cuda_graphs" in r.output
    assert "'auto', 'on' or 'off'" in r.output and "Traceback" not in r.output


def test_an_rl_phase_runs_its_rollouts_eagerly_when_told() -> None:
    """verl's 30B-A3B colocated row (rl_steps.csv row 16, docs/rl.md row 18): its script's
    enforce_eager=True; with graphs the same phase's rollouts are shorter, nothing else moves."""
    from gpuhours_dev.validation import rl

    case = next(c for c in rl.CASES if c.row == 16)
    assert case.phase["rollout_cuda_graphs"] == "off"
    eager, _ = rl._details(case)
    graph, _ = rl._details(replace(case, phase={**case.phase, "rollout_cuda_graphs": "auto"}))
    assert eager is not None and graph is not None
    # 1.17x since the batch is replayed through vLLM's paged admission (plan/rl_paged.py):
    # its 256 sequences an engine run at once, their steps mostly longer than an eager
    # forward's launches; 2x and more under the wave rule, whose tail decoded the longest
    # response alone, launch-bound, for 8,192 steps
    assert eager["rollout_generation_s"] > 1.1 * graph["rollout_generation_s"]
    assert eager["policy_update_s"] == graph["policy_update_s"]


def _plan_with_eval(tmp_path: Path, **fields: str) -> Path:
    plan = yaml.safe_load((ROOT / "examples" / "pixelis.yaml").read_text())
    ev = next(p for p in plan["phases"] if p.get("kind") == "eval")
    ev.update(fields)
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


def test_an_eval_phase_takes_cuda_graphs_and_refuses_on_for_hf_generate(tmp_path: Path) -> None:
    path = _plan_with_eval(tmp_path, cuda_graphs="on", engine="hf-generate")
    r = runner.invoke(app, ["plan", str(path), "--no-doc"])
    assert r.exit_code == 2, r.output
    # the key's own line within the phase (a review's find: errors gave the phase's line)
    lines = path.read_text().splitlines()
    start = lines.index("- name: evaluation")
    line = next(i for i in range(start, len(lines))
                if lines[i].strip().startswith("cuda_graphs:")) + 1
    assert f"line {line}, phase 'evaluation', field 'cuda_graphs'" in r.output
    assert "hf-generate runs every step eagerly" in r.output and "Traceback" not in r.output
