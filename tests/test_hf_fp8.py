"""transformers' FP8Linear in generate (estimate/hf_fp8.py): a device sync after every linear,
so host and GPU add up; the block-fp8 GEMM's grid of ceil(N / 128) programs at decode.
Numbers worked by hand; the linear count held to transformers' own modules."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.estimate import assumptions as A
from gpuhours.estimate import hf_fp8
from gpuhours.resolve import resolve_model

runner = CliRunner()


def test_the_grid_is_one_program_per_128_columns_and_row_block() -> None:
    assert hf_fp8.programs(1, 4096) == 32          # BLOCK_M 16: one row block
    assert hf_fp8.programs(16, 4097) == 33          # a partial column block counts
    assert hf_fp8.programs(300, 1024) == 3 * 8      # BLOCK_M 128 from M = 128


def test_a_decode_gemm_reads_its_weights_through_its_programs_share_of_the_sms() -> None:
    # 4096 x 4096 fp8 weights (16.8 MB) at M = 1: 32 programs of 78 SMs, 1.9 TB/s
    t = hf_fp8.block_gemm_s(4096, 4096, 1, 1.9e12, 100e12, 78)
    assert t == pytest.approx(4096 * 4096 / (1.9e12 * 32 / 78))   # 21.5 us
    # a wide one fills the SMs: 12,288 columns = 96 programs
    assert hf_fp8.block_gemm_s(4096, 12288, 1, 1.9e12, 100e12, 78) == pytest.approx(
        4096 * 12288 / 1.9e12)
    # at a 6,144-token prefill the FLOPs bound it: 2 x 6144 x 4096^2 at 100 TFLOP/s
    assert hf_fp8.block_gemm_s(4096, 4096, 6144, 1.9e12, 100e12, 78) == pytest.approx(
        2 * 6144 * 4096 * 4096 / 100e12)


@pytest.mark.parametrize(("model", "per_layer", "layers"), [
    ("qwen3-0.6b", 7, 28),   # q, k, v, o, gate, up, down
    ("phi-3-mini", 4, 32),   # phi3's fused qkv_proj and gate_up_proj, o_proj, down_proj
])
def test_the_linears_are_the_ones_transformers_converts(model: str, per_layer: int,
                                                        layers: int) -> None:
    """The FP8Linears of a forward are the nn.Linear modules transformers builds inside the
    layers (meta device): their count and their weights (the LM head is not converted:
    modules_to_not_convert)."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from gpuhours import catalog

    arch, _ = resolve_model(model)
    shapes = hf_fp8.layer_linear_shapes(arch)
    assert hf_fp8.count(shapes) == per_layer * layers
    _, config = catalog.model(model)
    with torch.device("meta"):
        built = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**config))
    linears = [m for name, m in built.named_modules()
               if isinstance(m, torch.nn.Linear) and ".layers." in name]
    assert len(linears) == per_layer * layers
    assert hf_fp8.weight_bytes(shapes) == sum(m.weight.numel() for m in linears)


def _step(model: str, precision: str) -> dict:
    r = runner.invoke(app, ["generation", "--model", model, "--gpu", "h20", "--engine",
                            "hf-generate", "--matmul-precision", precision, "--batch", "1",
                            "--prompt-tokens", "1", "--output-tokens", "16",
                            "--hf-transformers-version", "4.51", "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_host_and_gpu_add_up_under_the_sync() -> None:
    """Qwen3-8B on an H20 at batch 1. bf16: host-bound, the GPU's reads hidden under the
    launches. fp8: the host's launches (the same bf16 share) + 252 FP8Linears x the host time
    each + the GPU's linears at their grid's share (by hand below), in series."""
    bf16, fp8 = _step("qwen3-8b", "bf16"), _step("qwen3-8b", "fp8")
    assert bf16["decode_bound"] == "host (kernel launches)"
    assert fp8["decode_bound"].startswith("FP8Linear syncs")
    host_per_layer = A.DECODE_HOST_PER_LAYER_S["hf-generate"].value
    host = A.DECODE_HOST_STEP_S["hf-generate"].value + 36 * host_per_layer
    assert bf16["decode_step_s_first"]["value"] == pytest.approx(host, rel=1e-6)
    # per layer, at the H20's 1.9 TB/s x the bandwidth efficiency 0.8 (the grid share, not the
    # decode reads' width term, accounts for narrow GEMMs here) and 78 SMs: q and o
    # 4096 x 4096 at 32/78 of it, k and v 4096 x 1024 at 8/78, gate and up 4096 x 12288 at all
    # of it, down 12288 x 4096 at 32/78
    bw = 1.9e12 * 0.8
    layer = (2 * 4096 * 4096 / (bw * 32 / 78) + 2 * 4096 * 1024 / (bw * 8 / 78)
             + 2 * 4096 * 12288 / bw + 12288 * 4096 / (bw * 32 / 78))
    floor = host + 252 * A.HF_FP8_LINEAR_HOST_S.value + 36 * layer
    step = fp8["decode_step_s_first"]["value"]
    # and the rest of the GPU's work: the bf16 LM head (151,936 x 4096 x 2 bytes, 1.2 GB; not
    # tied) at the decode reads' bandwidth (x d / (d + 500)), the norms and the cache of one
    # token, a few megabytes
    head = 151936 * 4096 * 2 / (bw * 4096 / 4596)
    assert step == pytest.approx(floor + head, rel=1e-3)
    assert any(a["name"] == "hf_fp8_linear_host_s" for a in fp8["assumptions"])
    assert not any(a["name"] == "hf_fp8_linear_host_s" for a in bf16["assumptions"])


def test_each_looped_expert_pays_its_three_fp8_linears() -> None:
    """Qwen3-30B-A3B under 4.51 loops over all 128 experts of its 48 layers: fp8 adds at least
    48 x 128 x 3 FP8Linears' host time to the loop."""
    bf16, fp8 = _step("qwen3-30b-a3b", "bf16"), _step("qwen3-30b-a3b", "fp8")
    extra = fp8["decode_step_s_first"]["value"] - bf16["decode_step_s_first"]["value"]
    assert extra > 48 * 128 * 3 * A.HF_FP8_LINEAR_HOST_S.value


def test_a_vision_tower_is_refused_with_the_field() -> None:
    r = runner.invoke(app, ["generation", "--model", "qwen2.5-vl-3b", "--gpu", "h100",
                            "--engine", "hf-generate", "--matmul-precision", "fp8",
                            "--batch", "1", "--hf-transformers-version", "4.51"])
    assert r.exit_code == 2, r.output
    assert "matmul-precision" in r.stderr or "matmul_precision" in r.stderr
    assert "FP8Linear" in r.stderr and "Traceback" not in r.output


def _fp8(*extra: str, model: str = "qwen3-8b") -> object:
    return runner.invoke(app, ["generation", "--model", model, "--gpu", "h20", "--engine",
                               "hf-generate", "--matmul-precision", "fp8", "--batch", "1",
                               "--prompt-tokens", "1", "--output-tokens", "16", *extra])


@pytest.mark.parametrize(("extra", "model", "flag"), [
    ([], "qwen3-8b", "--hf-transformers-version"),      # the default 4.46: no FP8Linear yet
    (["--hf-transformers-version", "4.51", "--tensor-parallel", "2"], "qwen3-8b",
     "--tensor-parallel"),
    (["--hf-transformers-version", "4.51", "--weight-bytes-per-param", "0.5"], "qwen3-8b",
     "--weight-bytes-per-param"),
    (["--hf-transformers-version", "4.51"], "pythia-1b", "--matmul-precision"),  # fused qkv
    (["--hf-transformers-version", "5.0"], "qwen3-30b-a3b", "--hf-transformers-version"),
])
def test_what_the_count_does_not_describe_is_refused_with_its_field(extra, model, flag) -> None:
    r = _fp8(*extra, model=model)
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith(f"error {flag}:"), r.stderr
    assert "Traceback" not in r.output


def test_from_5_4_the_linears_no_longer_synchronise() -> None:
    """transformers#43349 (5.4) removed the sync: the same host work then overlaps the GPU's,
    the step the longer of the two, so shorter than 5.3's sum by the smaller."""
    def step(version: str) -> tuple[float, str]:
        r = _fp8("--hf-transformers-version", version, "--json")
        assert r.exit_code == 0, r.output
        d = json.loads(r.stdout)
        return d["decode_step_s_first"]["value"], d["decode_bound"]

    serial, bound_serial = step("5.3")
    overlapped, bound_overlapped = step("5.4")
    assert bound_serial.startswith("FP8Linear syncs")
    assert not bound_overlapped.startswith("FP8Linear syncs")
    assert overlapped < serial
    assert step("4.51")[0] == pytest.approx(serial, rel=0.02)  # the same sync a linear
