"""What an RL step's scoring passes and its periodic validation add (plan/rl_scoring.py,
plan/rl_validation.py; issue 13): a reference model streamed from the host (`ref_offload`),
a vision-language policy's tower in each scoring forward, a validation pass inside the step;
worked by hand, through a plan file, and bad values named by field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.errors import InputError
from gpuhours.estimate.offload import PCIE_COPY_EFFICIENCY
from gpuhours.plan import rl_scoring as S
from gpuhours.plan.budget import evaluate
from gpuhours.plan.load import load_plan
from rl_plan import run_rl_phase, write_rl_plan

#: Qwen2.5-7B's parameters (embeddings and LM head untied), counted from its config
QWEN7B_PARAMS = 7_615_616_512
#: PCIe 4.0 x16, one way (A100's host link), x the copy efficiency
A100_LINK = 31.5e9 * PCIE_COPY_EFFICIENCY.value

BASE: dict[str, Any] = {
    "project": "rl-scoring-test",
    "hardware": {"gpu": "a100-80gb", "gpus_per_node": 8, "nodes": 1},
    "defaults": {"model": "qwen2.5-7b", "method": "lora", "checkpointing": True},
    "phases": [{"name": "grpo", "kind": "rl", "steps": 100, "prompts_per_step": 32,
                "generations_per_prompt": 8, "prompt_tokens": 128, "response_tokens": 256,
                "reward": {"kind": "rule"}}],
}


def _write(tmp_path: Path, **phase: Any) -> Path:
    return write_rl_plan(tmp_path, BASE, **phase)


def run(tmp_path: Path, **phase: Any) -> Any:
    return run_rl_phase(tmp_path, BASE, **phase).details


#: BASE with the host's operators at 1e-6 us each: the scoring passes' GPU work alone, which the
#: hand counts below work out (the host's part: tests/test_rl_scoring_host.py)
GPU_ONLY: dict[str, Any] = {**BASE, "hardware": {**BASE["hardware"], "host_us_per_op": 1e-6}}


def run_gpu_only(tmp_path: Path, **phase: Any) -> Any:
    return run_rl_phase(tmp_path, GPU_ONLY, **phase).details


def test_ref_stream_by_hand():
    """1B parameters over 4 shards: 0.5 GB of bf16 a rank. 10 sequences of 1,000 tokens in
    micro-batches of 4,096 tokens: 4 a micro-batch, 3 micro-batches, 1.5 GB up at 25 GB/s =
    0.06 s; behind 0.05 s of compute 0.01 s shows, behind 0.1 s none."""
    assert S.scoring_micro_batches(10, 1000, 4096) == 3
    assert S.scoring_micro_batches(10, 5000, 4096) == 10  # one sequence a micro-batch at least
    assert S.ref_shard_bytes(1e9, 4) == pytest.approx(0.5e9)
    copy, added, micro = S.ref_offload_s(params=1e9, shards=4, sequences_per_gpu=10,
                                         tokens_per_sequence=1000, budget_tokens=4096,
                                         link_bytes_per_s=25e9, compute_s=0.05)
    assert (micro, copy, added) == (3, pytest.approx(0.06), pytest.approx(0.01))
    assert S.ref_stream_s(0.5e9, 3, 25e9, 0.1) == (pytest.approx(0.06), 0.0)


def test_ref_offload_in_a_plan_by_hand(tmp_path):
    """Qwen2.5-7B's reference on 8 A100s, 256 sequences of 128 + 256 tokens: 32 a GPU. With
    micro-batches of one sequence (scoring_tokens_per_gpu 384) each GPU copies its 2P/8 bytes
    up 32 times: 32 x 2 x 7,615,616,512 / 8 = 60.9 GB at 25.2 GB/s = 2.42 s, more than the
    pass's compute, so the pass takes the copies' time; with 16,384-token micro-batches (42
    sequences each: one micro-batch) a single copy hides behind the compute. (The GPU work
    alone, GPU_ONLY; with the host issuing 32 micro-batches' forwards at the assumed 32 us an
    operator the pass outlasts the copies, which then hide behind it.)"""
    off = run_gpu_only(tmp_path)
    tight = run_gpu_only(tmp_path, ref_offload=True, scoring_tokens_per_gpu=384)
    copy = 32 * 2 * QWEN7B_PARAMS / 8 / A100_LINK
    assert tight["ref_offload_copy_s"] == pytest.approx(copy, rel=1e-9)
    assert copy > off["reference_model_s"]
    assert tight["reference_model_s"] == pytest.approx(copy, rel=1e-9)
    hosted = run(tmp_path, ref_offload=True, scoring_tokens_per_gpu=384)
    assert hosted["reference_model_s"] > copy
    assert hosted["ref_offload_copy_s"] == pytest.approx(copy, rel=1e-9)
    assert tight["step_time_s"] == pytest.approx(
        off["step_time_s"] + copy - off["reference_model_s"], rel=1e-9)
    packed = run_gpu_only(tmp_path, ref_offload=True)
    assert packed["ref_offload_copy_s"] == pytest.approx(copy / 32, rel=1e-9)
    assert packed["reference_model_s"] == pytest.approx(off["reference_model_s"], rel=1e-12)
    assert off["ref_offload_copy_s"] == 0.0


def test_the_vision_tower_runs_in_each_scoring_pass(tmp_path):
    """Qwen2.5-VL-7B, one 262,144-pixel image a prompt (504 x 504 after the processor: 1,296
    patches, 324 tokens). The tower's forward per image, counted by hand from its config
    (depth 32, hidden 1,280, MLP 3,420, 4 full-attention blocks, 112-pixel windows):
    patch embedding 2 x 1,296 x 1,176 x 1,280; blocks 32 x 2 x 1,296 x (4 x 1,280^2 + 3 x
    1,280 x 3,420); merger 2 x 324 x (5,120^2 + 5,120 x 3,584); attention 4 x 1,280 x (28 x
    73,984 + 4 x 1,296^2), the windows of 64, 32 and 16 patches (16, 8 and 1 of them) summing
    73,984 squared: 1.7107 TFLOP. Each of the two scoring passes runs it over the 256
    sequences' images, split over 8 GPUs, at the tower's GEMM rate."""
    from gpuhours.catalog import gpu as catalog_gpu
    from gpuhours.estimate.generation import scoring_time_s
    from gpuhours.estimate.timing import gemm_efficiency, peak_flops
    from gpuhours.resolve import resolve_model

    per_image = (2 * 1296 * 1176 * 1280 + 32 * 2 * 1296 * (4 * 1280**2 + 3 * 1280 * 3420)
                 + 2 * 324 * (5120**2 + 5120 * 3584) + 4 * 1280 * (28 * 73_984 + 4 * 1296**2))
    assert per_image == pytest.approx(1.7107e12, rel=1e-4)
    vlm = dict(model="qwen2.5-vl-7b", images_per_example=1, image_pixels=262_144)
    d = run_gpu_only(tmp_path, **vlm)
    gpu = catalog_gpu("a100-80gb")
    tower = 256 * per_image / (peak_flops(gpu, "bf16") * gemm_efficiency(gpu, 1280)) / 8
    arch, _ = resolve_model("qwen2.5-vl-7b")
    decoder = scoring_time_s(arch, 256, 128 + 256 + 324, gpu, "bf16") / 8
    assert d["old_policy_log_probs_s"] == pytest.approx(decoder + tower, rel=1e-6)
    assert d["reference_model_s"] == pytest.approx(decoder + tower, rel=1e-6)


def test_a_validation_pass_inside_the_step(tmp_path):
    """A validation set as large as the step's batch (256 prompts, one response each) is one
    more rollout of the step's shape: every 4 steps, each step carries (its rollouts + the
    weight sync before them) / 4."""
    off = run(tmp_path, max_response_tokens=1024)
    on = run(tmp_path, max_response_tokens=1024, validation_every_steps=4,
             validation_prompts=256)
    share = (off["rollout_generation_s"] + off["weight_sync_s"]) / 4
    assert on["validation_s"] == pytest.approx(share, rel=1e-9)
    assert on["step_time_s"] == pytest.approx(off["step_time_s"] + share, rel=1e-9)
    assert off["validation_s"] == 0.0


@pytest.mark.parametrize(("phase", "field"), [
    ({"ref_offload": "sometimes"}, "ref_offload"),
    ({"ref_offload": True, "reference_model": False}, "ref_offload"),
    ({"validation_prompts": 100}, "validation_every_steps"),
    ({"validation_every_steps": 0, "validation_prompts": 100}, "validation_every_steps"),
    ({"scoring_tokens_per_gpu": -4}, "scoring_tokens_per_gpu"),
])
def test_bad_values_exit_2_naming_the_field(tmp_path, phase, field):
    f = _write(tmp_path, **phase)
    result = CliRunner().invoke(app, ["plan", str(f)])
    assert result.exit_code == 2, result.output
    assert field in result.output and "plan.yaml" in result.output
    assert "Traceback" not in result.output


def test_ref_offload_on_a_gpu_without_a_host_link_figure_names_the_field(tmp_path):
    plan = {**BASE, "hardware": {"gpu": "gb200", "gpus_per_node": 4, "nodes": 1},
            "phases": [{**BASE["phases"][0], "ref_offload": True}]}
    f = tmp_path / "plan.yaml"
    f.write_text(yaml.safe_dump(plan, sort_keys=False))
    with pytest.raises(InputError, match="host link") as caught:
        evaluate(load_plan(f))
    assert "ref_offload" in caught.value.where and "plan.yaml" in caught.value.where


def test_images_through_the_single_controller_by_hand(tmp_path):
    """Qwen2.5-VL-7B, one 262,144-pixel image a prompt (786,432 bytes decoded, RGB), 32
    prompts x 8 generations on 8 ranks. The rollouts move each prompt's image twice (out with
    the prompt, back with its responses, one chunk a prompt): 2 x 32 x 786,432 bytes. After the
    batch is balanced, a prompt's 8 generations land on 8 x (1 - (7/8)^8) = 5.2511 of the 8
    chunks on average, and each chunk pickles the image once: 32 x 786,432 x 5.2511 bytes for
    the old-log-prob pass, the reference pass and the update each. The token tensors are
    rl_driver's, with Qwen2.5-VL's M-RoPE position_ids as 4 rows a sequence; everything at the
    driver's rate."""
    from gpuhours.estimate import assumptions as A
    from gpuhours.plan import rl_driver as d

    assert d.distinct_ranks(5, 8) == pytest.approx(8 * (1 - 0.512908935546875))
    assert d.distinct_ranks(1, 8) == pytest.approx(1.0)
    rate = A.RL_DRIVER_BYTES_PER_S.value
    got = run(tmp_path, model="qwen2.5-vl-7b", images_per_example=1, image_pixels=262_144,
              single_controller=True)
    image = 262_144 * 3
    spread = 32 * image * 5.251128673553467
    assert got["driver_rollout_generation_s"] == pytest.approx(
        (d.rollout_return_bytes(256, 128, 256, 4) + 2 * 32 * image) / rate, rel=1e-9)
    assert got["driver_old_policy_log_probs_s"] == pytest.approx(
        (d.scoring_pass_bytes(256, 128, 256, 2, 4) + spread) / rate, rel=1e-9)
    assert got["driver_reference_model_s"] == pytest.approx(
        (d.scoring_pass_bytes(256, 128, 256, 1, 4) + spread) / rate, rel=1e-9)
    assert got["driver_policy_update_s"] == pytest.approx(
        (d.update_bytes(256, 128, 256, True, 4) + spread) / rate, rel=1e-9)
    # a text model's batch carries no images
    text = run(tmp_path, single_controller=True)
    assert text["driver_old_policy_log_probs_s"] == pytest.approx(
        d.scoring_pass_bytes(256, 128, 256, 2) / rate, rel=1e-9)


def test_padded_prompts_and_mrope_positions_through_the_driver_by_hand(tmp_path):
    """EasyR1 left-pads every prompt to data.max_prompt_length and carries Qwen2-VL's M-RoPE
    positions as 4 rows (verl/utils/dataset.py, vllm_rollout_spmd.py @8460e817). One sequence
    of a 2,048-token padded prompt and a 256-token response: int64 prompts 2,048, responses and
    response_mask 2 x 256, input_ids and attention_mask 2 x 2,304, position_ids 4 x 2,304:
    8 x (2,048 + 512 + 4,608 + 9,216) = 131,072 bytes (a text model's 1 row: 75,776)."""
    from gpuhours.estimate import assumptions as A
    from gpuhours.plan import rl_driver as d

    assert d.batch_bytes_per_sequence(2048, 256, 4) == 131_072
    assert d.batch_bytes_per_sequence(2048, 256) == 8 * (2048 + 512 + 3 * 2304) == 75_776
    rate = A.RL_DRIVER_BYTES_PER_S.value
    text = run(tmp_path, single_controller=True, padded_prompt_tokens=2048)
    assert text["driver_rollout_generation_s"] == pytest.approx(
        256 * d.batch_bytes_per_sequence(2048, 256) / rate, rel=1e-9)
    plain = run(tmp_path, single_controller=True)
    assert plain["driver_rollout_generation_s"] == pytest.approx(
        256 * d.batch_bytes_per_sequence(128, 256) / rate, rel=1e-9)
    f = _write(tmp_path, single_controller=True, padded_prompt_tokens=64)
    result = CliRunner().invoke(app, ["plan", str(f)])
    assert result.exit_code == 2 and "padded_prompt_tokens" in result.output
    assert "Traceback" not in result.output


def test_what_pickling_a_batch_of_images_moves():
    """The two facts the images' transfer rests on, checked on real objects: PIL pickles an
    image's decoded pixels, not its file (a blank 256 x 256 PNG of under 1 KB pickles to about
    256 x 256 x 3 bytes), and a numpy object array that repeats one image n times (as
    DataProto.repeat and vLLM's n do) pickles it once (pickle's memo), while n separate image
    objects pickle n times."""
    import io
    import pickle

    import numpy as np
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (256, 256), "white").save(buf, "PNG")
    assert len(buf.getvalue()) < 1_000

    def opened() -> Any:
        return Image.open(io.BytesIO(buf.getvalue()))

    decoded = 256 * 256 * 3
    assert len(pickle.dumps(opened())) == pytest.approx(decoded, rel=0.01)
    one = np.empty(1, dtype=object)
    one[0] = {"images": [opened()]}
    assert len(pickle.dumps(np.repeat(one, 5))) == pytest.approx(decoded, rel=0.01)
    apart = np.empty(5, dtype=object)
    for i in range(5):
        apart[i] = {"images": [opened()]}
    assert len(pickle.dumps(apart)) == pytest.approx(5 * decoded, rel=0.01)
