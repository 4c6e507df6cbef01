"""The transformers release as a choice of the hf-generate engine (issue 13): the KV-cache passes
and 4.38's causal-mask bytes per release counted by hand, 5.x's grouped SDPA checked on a real
decode step of a tiny Llama on this CPU, and a bad release refused by the CLI and a plan."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from cache_bytes import CACHE_BYTES_PER_TOKEN, PAST, TINY_LLAMA, decode_step_cache_bytes
from gpuhours import catalog
from gpuhours.cli import app
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.arch import from_hf_config
from gpuhours.estimate.generation import (
    estimate_generation,
    hf_generate_kv_cache_passes,
    hf_generate_mask_bytes_per_sequence,
)
from gpuhours.resolve import resolve_model
from gpuhours.setup import Generation

runner = CliRunner()


def test_passes_per_release_by_hand() -> None:
    """4.x (SDPA, repeat_kv): cat 2 + repeat 1 + n + attention n; 5.x (grouped SDPA): 2 + 1."""
    qwen, _ = resolve_model("qwen2.5-7b")      # 28 query heads on 4 KV heads: n = 7
    llama, _ = resolve_model("llama-2-7b")     # MHA: n = 1, repeat_kv returns its input
    for release in ("4.36", "4.38.2", "4.46.0", "4.51.3", "4.57"):
        assert hf_generate_kv_cache_passes(qwen, release) == 2 + (1 + 7) + 7 == 17
        assert hf_generate_kv_cache_passes(llama, release) == 3
    for release in ("5.0", "5.17.0", "5.23"):
        assert hf_generate_kv_cache_passes(qwen, release) == 2 + 1 == 3
        assert hf_generate_kv_cache_passes(llama, release) == 3
    # the default is the release the constants were fitted on
    assert Generation(arch=qwen).hf_transformers_version == "4.46"


def test_4_38_mask_bytes_by_hand() -> None:
    """Llama-2 (max_position_embeddings 4,096) at 1,536 tokens: repeat 1 + to(bf16) 3 + x min 4,
    the padding fill 14 x 1536/4096, SDPA's fix-up 10, times 4096^2."""
    llama, _ = resolve_model("llama-2-7b")
    assert llama.max_positions == 4096
    by_hand = (1 + 3 + 4 + 14 * 1536 / 4096 + 10) * 4096 ** 2
    assert by_hand == 390_070_272
    assert hf_generate_mask_bytes_per_sequence(llama, "4.38", 1536) == by_hand
    assert hf_generate_mask_bytes_per_sequence(llama, "4.38.2", 1536) == by_hand
    # past the buffer the mask doubles to 8,192 positions
    assert hf_generate_mask_bytes_per_sequence(llama, "4.38", 5000) == (
        (18 + 14 * 5000 / 8192) * 8192 ** 2)
    # 4.39 sizes the mask to the cache, 4.37 to the sequence; Qwen2 in 4.38 had no such buffer
    assert hf_generate_mask_bytes_per_sequence(llama, "4.39", 1536) == 0
    assert hf_generate_mask_bytes_per_sequence(llama, "4.37", 1536) == 0
    qwen, _ = resolve_model("qwen2.5-7b")
    assert hf_generate_mask_bytes_per_sequence(qwen, "4.38", 1536) == 0


def test_the_4_38_mask_adds_its_bytes_to_a_decode_step_by_hand() -> None:
    """Llama-2-7B, batch 8 at 2,047 tokens on an A100, device-bound: 4.38's step is 4.46's plus
    8 masks at the copies' rate on the A100's SMs (108 x 1,410 MHz x the fitted bytes a cycle)."""
    arch, _ = resolve_model("llama-2-7b")
    gpu = catalog.gpu("a100-80gb")
    steps = {}
    for release in ("4.46", "4.38"):
        g = Generation(arch=arch, prompt_tokens=2047, output_tokens=1, batch=8,
                       engine="hf-generate", hf_transformers_version=release)
        e = estimate_generation(g, gpu)
        # at 8 x 2,047 tokens of MHA cache (8.6 GB) the copies outlast the 13.5 GB of weights
        # read once at the bandwidth
        assert e.decode_bound == "KV-cache copies (SMs x clock)"
        steps[release] = e.decode_step_s_first
    mask = (18 + 14 * 2047 / 4096) * 4096 ** 2
    rate = 108 * 1410e6 * A.HF_KV_COPY_BYTES_PER_SM_CYCLE.value
    assert steps["4.38"] - steps["4.46"] == pytest.approx(8 * mask / rate, rel=1e-9)


def test_a_real_5x_sdpa_decode_step_reads_the_grouped_cache_once() -> None:
    """One decode step of a 2-layer Llama (4 query heads on 2 KV heads) with the installed
    transformers' default SDPA, no padding: the cat reads the old cache and writes the new one,
    attention reads it once; no repeat_kv. Every operator touching a cache-shaped tensor counted."""
    transformers = pytest.importorskip("transformers")
    if int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip("the grouped SDPA path is 5.x's")
    read, written = decode_step_cache_bytes("sdpa")

    past, new = PAST, PAST + 1
    one = CACHE_BYTES_PER_TOKEN
    assert read == one * (past + new)
    assert written == one * new
    arch = from_hf_config({"model_type": "llama", **TINY_LLAMA}, "tiny")
    assert hf_generate_kv_cache_passes(arch, transformers.__version__) == 3
    assert (read + written) / (one * new) == pytest.approx(3, abs=1 / new + 1e-12)


@pytest.mark.parametrize("bad", ["4.x", "4.35", "3.0", "6.0", "latest", ""])
def test_a_bad_release_is_refused_naming_the_option(bad: str) -> None:
    r = runner.invoke(app, ["generation", "--model", "llama-2-7b", "--gpu", "a100-80gb",
                            "--engine", "hf-generate", "--hf-transformers-version", bad])
    assert r.exit_code == 2, r.output
    assert "--hf-transformers-version" in r.output and "Traceback" not in r.output


def test_the_release_shows_in_the_output() -> None:
    r = runner.invoke(app, ["generation", "--model", "llama-2-7b", "--gpu", "a100-80gb",
                            "--engine", "hf-generate", "--batch", "8",
                            "--hf-transformers-version", "4.38.2", "--json"])
    assert r.exit_code == 0, r.output
    assert '"hf_transformers_version": "4.38.2"' in r.output
    assert "causal mask rebuilt every forward" in r.output


def test_a_plan_with_a_bad_rollout_release_names_the_key(tmp_path: Path) -> None:
    plan = yaml.safe_load((Path(__file__).resolve().parents[1] / "examples" / "pixelis.yaml")
                          .read_text())
    rl = next(p for p in plan["phases"] if p.get("kind") == "rl")
    rl["rollout_transformers_version"] = "four"
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    r = runner.invoke(app, ["plan", str(path), "--no-doc"])
    assert r.exit_code == 2, r.output
    assert "rollout_transformers_version" in r.output and "Traceback" not in r.output


def test_an_rl_phase_runs_its_rollouts_at_the_given_release() -> None:
    """DeepSpeed-Chat's Llama-2-7B row (rl_steps.csv row 23, docs/rl.md row 25: HF generate at
    8 sequences per GPU, transformers 4.38): the same phase at 4.46 has no causal mask to
    rebuild, so its rollouts are shorter and nothing else changes."""
    from dataclasses import replace

    from gpuhours_dev.validation import rl

    case = next(c for c in rl.CASES if c.row == 23)
    assert case.phase["rollout_transformers_version"] == "4.38"
    at_438, _ = rl._details(case)
    at_446, _ = rl._details(replace(case, phase={**case.phase,
                                                 "rollout_transformers_version": "4.46"}))
    assert at_438 is not None and at_446 is not None
    assert at_438["rollout_generation_s"] > at_446["rollout_generation_s"]
    assert at_438["policy_update_s"] == at_446["policy_update_s"]
