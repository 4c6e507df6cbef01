"""Blackwell's attention rates (issues 14/16): the assumptions' derivations from the published
kernel figures, worked by hand, and which Blackwell parts they apply to. Expected numbers are
counted by hand from the shape below and the TFLOPS quoted in assumptions.py."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpuhours import catalog
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.arch import ModelArch
from gpuhours.estimate.flops import training_flops
from gpuhours.estimate.memory import training_memory
from gpuhours.estimate.timing import attention_efficiency, gemm_efficiency, training_step_time
from gpuhours.setup import Hardware, Training

# d 1024, 2 layers, 8 heads of 128 (no GQA): causal attention over 1024 tokens is
# 2 x 2 x (8 x 128) x (1024 + 1) / 2 = 2,099,200 FLOPs per token and layer forward, x 3 with
# the backward, x 2 layers = 12,595,200 per token.
ARCH = ModelArch(name="hand-2L", model_type="llama", hidden_size=1024, num_layers=2,
                 num_heads=8, num_kv_heads=8, head_dim=128, intermediate_size=4096,
                 vocab_size=1000, tie_embeddings=False, gated_mlp=False)
ATTENTION_FLOPS_PER_TOKEN = 12_595_200


def test_cudnn_gb200_figures_give_the_blackwell_entry_by_hand() -> None:
    """cuDNN 9.22 on a GB200 (2,500 TFLOPS dense bf16), causal, head dim 128: forward /
    backward TFLOPS at 2k, 4k, 8k, 16k tokens. The backward's TFLOPS count 2.5x the forward's
    FLOPs, the estimate 2x, so per model FLOP e = 3 / (2500/fwd + 2.5 x 2500/bwd):
      2,048: 3 / (2.2789 + 7.0621) = 0.3212     4,096: 3 / (1.7756 + 5.4443) = 0.4155
      8,192: 3 / (1.5883 + 4.6922) = 0.4777    16,384: 3 / (1.4637 + 4.7063) = 0.4862
    mean 0.4251 -> 0.43."""
    assert catalog.gpu("gb200").dense_tflops.bf16 == 2500
    per_length = [3 / (2.2789 + 7.0621), 3 / (1.7756 + 5.4443), 3 / (1.5883 + 4.6922),
                  3 / (1.4637 + 4.7063)]
    assert per_length == pytest.approx([0.3212, 0.4155, 0.4777, 0.4862], abs=1e-4)
    # the terms above from the quoted TFLOPS
    assert 2500 / 1097 == pytest.approx(2.2789, abs=1e-4)
    assert 2.5 * 2500 / 885 == pytest.approx(7.0621, abs=1e-4)
    assert 2.5 * 2500 / 1332 == pytest.approx(4.6922, abs=1e-4)
    assert 2.5 * 2500 / 1328 == pytest.approx(4.7063, abs=1e-4)
    mean = sum(per_length) / 4
    assert mean == pytest.approx(0.4251, abs=1e-4)
    assert A.ATTENTION_EFFICIENCY_BY_GENERATION["blackwell"].value == round(mean, 2) == 0.43
    # PyTorch SDPA runs the same cuDNN kernels on compute capability 10.x (recent cuDNN)
    assert A.SDPA_ATTENTION_EFFICIENCY_BY_GENERATION["blackwell"].value == 0.43
    # the FlashAttention-4 cross-check on a B200 (2,250): 1418 / 1209 TFLOPS at 8,192 tokens
    assert 3 / (2250 / 1418 + 2.5 * 2250 / 1209) == pytest.approx(0.4808, abs=1e-4)


def test_cudnn_gb300_figures_give_the_blackwell_ultra_entry_by_hand() -> None:
    """The same release's runs on a GB300 (cuDNN 9.22, the same shape; catalog gb300's 2,500
    TFLOPS dense bf16), forward / backward TFLOPS 1373 / 967 at 2,048 tokens, 1703 / 1248 at
    4,096, 1856 / 1435 at 8,192, 1915 / 1507 at 16,384; e = 3 / (2500/fwd + 2.5 x 2500/bwd):
      2,048: 3 / (1.8208 + 6.4633) = 0.3621     4,096: 3 / (1.4680 + 5.0080) = 0.4632
      8,192: 3 / (1.3470 + 4.3554) = 0.5261    16,384: 3 / (1.3055 + 4.1473) = 0.5502
    mean 0.4754 -> 0.48."""
    assert catalog.gpu("gb300").dense_tflops.bf16 == 2500
    per_length = [3 / (1.8208 + 6.4633), 3 / (1.4680 + 5.0080), 3 / (1.3470 + 4.3554),
                  3 / (1.3055 + 4.1473)]
    assert per_length == pytest.approx([0.3621, 0.4632, 0.5261, 0.5502], abs=1e-4)
    assert 2500 / 1373 == pytest.approx(1.8208, abs=1e-4)
    assert 2.5 * 2500 / 967 == pytest.approx(6.4633, abs=1e-4)
    assert 2500 / 1915 == pytest.approx(1.3055, abs=1e-4)
    assert 2.5 * 2500 / 1507 == pytest.approx(4.1473, abs=1e-4)
    mean = sum(per_length) / 4
    assert mean == pytest.approx(0.4754, abs=1e-4)
    assert (A.ATTENTION_EFFICIENCY_BY_GENERATION["blackwell-ultra"].value
            == round(mean, 2) == 0.48)
    assert A.SDPA_ATTENTION_EFFICIENCY_BY_GENERATION["blackwell-ultra"].value == 0.48


@pytest.mark.parametrize("name", ["b200", "gb200", "b300", "gb300"])
@pytest.mark.parametrize("fused", [True, False])
def test_data_centre_blackwell_attention_time_by_hand(name: str, fused: bool) -> None:
    """B200 / GB200 (compute capability 10.0): 2 x 1024 tokens x 12,595,200 FLOPs at 0.43 of
    the bf16 peak, fused (Transformer Engine's cuDNN) or PyTorch SDPA (cuDNN first); B300 /
    GB300 (Blackwell Ultra, 10.3: the same major) at 0.48, their own cuDNN figure."""
    gpu = catalog.gpu(name)
    ultra = name.endswith("300")
    assert gpu.compute_capability == ("10.3" if ultra else "10.0")
    e = 0.48 if ultra else 0.43
    assert attention_efficiency(gpu, 1024, fused=fused) == e
    t = Training(arch=ARCH, precision="bf16-mixed", micro_batch=2, seq_len=1024,
                 fused_attention=fused)
    st = training_step_time(ARCH, t, Hardware(gpu=gpu), training_flops(t),
                            training_memory(ARCH, t).trainable_params)
    peak = {"b200": 2250e12, "gb200": 2500e12, "b300": 2250e12, "gb300": 2500e12}[name]
    assert st.attention_s == pytest.approx(2 * 1024 * ATTENTION_FLOPS_PER_TOKEN / (peak * e),
                                           rel=1e-9)


def test_blackwell_ultra_estimate_lists_its_own_assumption() -> None:
    """The estimate of a GB300 names the Blackwell Ultra entry among the assumptions it used,
    a GB200's the Blackwell one."""
    from gpuhours.estimate.estimator import estimate_training
    t = Training(arch=ARCH, precision="bf16-mixed", micro_batch=2, seq_len=1024,
                 fused_attention=True)
    for name, used in (("gb300", "attention_efficiency.blackwell_ultra"),
                       ("gb200", "attention_efficiency.blackwell")):
        e = estimate_training(t, Hardware(gpu=catalog.gpu(name)))
        names = [a.split(" = ")[0] for a in e.assumptions]
        assert used in names
        assert not ({"attention_efficiency.blackwell_ultra", "attention_efficiency.blackwell"}
                    - {used}) & set(names)


def test_blackwell_ultra_entry_keeps_the_major_check() -> None:
    """The 10.3 key is the exact compute capability, and the major check comes first: a GB300
    recorded at 12.0 keeps the GEMM share (of 12.x's GEMM figure, 1.04), as the RTX 5090
    does."""
    assert A.ATTENTION_TABLE_BY_COMPUTE_CAPABILITY == {"10.3": "blackwell-ultra"}
    gpu = catalog.gpu("gb300").model_copy(update={"compute_capability": "12.0"})
    width = 1024 / (1024 + A.GEMM_HALF_WIDTH.value)
    assert attention_efficiency(gpu, 1024, fused=True) == pytest.approx(1.04 * width * 0.35,
                                                                        rel=1e-12)


@pytest.mark.parametrize("fused", [True, False])
def test_geforce_blackwell_keeps_the_gemm_share(fused: bool) -> None:
    """The RTX 5090 (compute capability 12.0) runs neither cuDNN's sm100 kernels nor
    FlashAttention-4: 0.35 x its GEMM efficiency, GeForce Blackwell's 1.04 (derived from its
    matmul microbenchmarks, assumptions.GEMM_EFFICIENCY_BY_SM_MAJOR) x 1024 / (1024 + half
    width)."""
    gpu = catalog.gpu("rtx-5090")
    assert gpu.generation == "blackwell" and gpu.compute_capability == "12.0"
    width = 1024 / (1024 + A.GEMM_HALF_WIDTH.value)
    expected = 1.04 * width * 0.35
    assert gemm_efficiency(gpu, 1024) == pytest.approx(1.04 * width, rel=1e-12)
    assert attention_efficiency(gpu, 1024, fused=fused) == pytest.approx(expected, rel=1e-12)


def test_blackwell_part_without_compute_capability_keeps_the_gemm_share() -> None:
    """A Blackwell part whose compute capability is not recorded is not assumed to be 10.x."""
    gpu = catalog.gpu("gb200").model_copy(update={"compute_capability": None,
                                                   "compute_capability_source": ""})
    width = 1024 / (1024 + A.GEMM_HALF_WIDTH.value)
    assert attention_efficiency(gpu, 1024, fused=True) == pytest.approx(0.70 * width * 0.35,
                                                                        rel=1e-12)


def test_hopper_entries_need_no_compute_capability() -> None:
    """Hopper has one kernel family: its entries hold without a recorded compute capability."""
    h100 = catalog.gpu("h100-sxm")
    assert "hopper" not in A.ATTENTION_TABLE_SM_MAJOR
    assert attention_efficiency(h100, 1024, fused=True) == 0.43
    assert attention_efficiency(h100, 1024, fused=False) == 0.25


def test_compute_capability_needs_its_source() -> None:
    row = catalog.gpu("b200").model_dump()
    row["compute_capability_source"] = ""
    with pytest.raises(ValidationError, match="compute_capability_source"):
        type(catalog.gpu("b200")).model_validate(row)
    row = catalog.gpu("b200").model_dump()
    row["compute_capability"] = "sm100"
    with pytest.raises(ValidationError, match="compute_capability"):
        type(catalog.gpu("b200")).model_validate(row)
