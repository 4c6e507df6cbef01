"""Issue 16's second review of the plain question as `estimate` answers it: a full-training
question that gives nothing of the batch is answered with the chosen setup even where the
defaults fit (as the validation harness asks it: at_scale.py chosen_setup), a layout typed by
hand runs on the kernel path that runs layouts, and the answers that split a small model or
leave most of a step to the pipeline bubble say so."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.estimate.estimator import estimate_training
from gpuhours.estimate.fit import chosen_setup
from gpuhours.setup import Hardware, Training

runner = CliRunner()


def _json(args: list[str]) -> dict:
    result = runner.invoke(app, ["estimate", *args, "--json", "--no-calibrate"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_an_open_question_whose_defaults_fit_is_answered_with_the_chosen_setup():
    """Pythia-70M on 32 A100-40GB: micro-batch 1 fits, but 32 sequences a step is a batch
    nobody chose; the answer is chosen_setup's (the default 256 sequences: 0.5M tokens / 2,048),
    the same setup and hours the plain-question table reports."""
    args = ["--model", "pythia-70m", "--gpu", "a100-40gb", "--gpus", "32", "--seq", "2048",
            "--tokens", "300e9", "--precision", "fp16-mixed"]
    got = _json(args)
    setup = got["setup"]
    assert setup["micro_batch"] * setup["grad_accum"] * 32 == 256
    t = Training(model="pythia-70m", seq_len=2048, precision="fp16-mixed")
    hw = Hardware(gpu="a100-40gb", num_gpus=32)
    found = chosen_setup(t, hw, search_layouts=True)
    assert found is not None
    chosen, _ = found
    assert (setup["micro_batch"], setup["grad_accum"]) == (chosen.micro_batch, chosen.grad_accum)
    direct = estimate_training(chosen, hw, tokens=300e9)
    assert got["totals"]["gpu_hours"]["value"] == direct.totals.gpu_hours.value
    # a batch the user gave is kept: no choice
    kept = _json([*args, "--batch", "1", "--grad-accum", "1"])
    assert (kept["setup"]["micro_batch"], kept["setup"]["grad_accum"]) == (1, 1)


def test_a_layout_given_by_hand_runs_on_megatron_kernels_and_says_so():
    args = ["--model", "llama-2-7b", "--gpu", "h100", "--gpus", "8", "--seq", "4096",
            "--tokens", "1e9", "--tp", "2", "--batch", "1", "--grad-accum", "4", "--zero", "1"]
    got = _json(args)
    assert got["setup"]["kernels"] == "megatron"
    assert any("layout given" in w and "--kernels" in w for w in got["warnings"])
    eager = _json([*args, "--kernels", "eager"])
    assert eager["setup"]["kernels"] == "eager"
    assert not any("layout given" in w for w in eager["warnings"])


def test_a_step_that_is_mostly_bubble_is_warned():
    """pp 4 with one micro-batch a step: the bubble is (4 - 1)/1 = 3 ideal steps of the 4 the
    step takes, three quarters (less what else the step holds)."""
    got = _json(["--model", "llama-2-13b", "--gpu", "h100", "--gpus", "8", "--seq", "4096",
                 "--tokens", "1e9", "--pp", "4", "--batch", "1", "--grad-accum", "1",
                 "--zero", "1"])
    bubble = [w for w in got["warnings"] if w.startswith("the pipeline bubble is")]
    assert bubble and "4 stages run 1 micro-batch a step" in bubble[0]
    share = int(bubble[0].split("is ")[1].split("%")[0])
    assert 50 <= share <= 75


def test_a_small_model_split_only_to_make_the_default_batch_is_told():
    """Qwen3-0.6B on 1,024 H100s: the 0.5M-token default (128 sequences of 4,096) needs 8
    GPUs a replica, though one GPU holds the model: the sentence says so and how to use them."""
    got = _json(["--model", "qwen3-0.6b", "--gpu", "h100", "--gpus", "1024", "--seq", "4096",
                 "--tokens", "1e12"])
    chosen = next(w for w in got["warnings"] if w.startswith("setup chosen by gpuhours"))
    assert "fewer sequences than the 1024 GPUs" in chosen
    assert "--global-batch 1024" in chosen
    assert "the defaults did not fit" not in chosen


def test_context_parallel_groups_may_span_nodes():
    """Llama 3's 128K stage ran TP 8 x CP 16 over 8-GPU nodes: a tp x cp group of whole nodes
    is a candidate layout; one that would split a node unevenly is not."""
    from gpuhours.estimate.fit import candidate_layouts

    t = Training(model="llama-3.1-70b", seq_len=131072)
    layouts = candidate_layouts(t, Hardware(gpu="h100", num_gpus=1024, gpus_per_node=8))
    assert any(x["tp"] == 8 and x["cp"] == 8 for x in layouts)
    assert all((x["tp"] * x["cp"]) % 8 == 0 for x in layouts if x["tp"] * x["cp"] > 8)
