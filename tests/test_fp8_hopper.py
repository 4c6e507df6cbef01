"""fp8-mixed training (Transformer Engine / torchao style) and the Hopper validation split
(issue 14, item 5). Expected numbers are counted by hand from the shape below."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gpuhours import catalog
from gpuhours.cli import app
from gpuhours.errors import FieldError
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.arch import ModelArch
from gpuhours.estimate.estimator import estimate_training
from gpuhours.estimate.flops import training_flops
from gpuhours.estimate.memory import activation_bytes_per_token_layer, training_memory
from gpuhours.estimate.timing import training_step_time
from gpuhours.setup import Hardware, Training, torch_precision
from gpuhours_dev.validation import _rows, hopper_comparisons
from gpuhours_dev.validation.hopper import (
    FIT_GRID,
    HopperRow,
    fit_hopper,
    hopper_rows,
    split_halves,
)

# d 1024, 2 layers, 8 heads of 128 (no GQA), plain GELU MLP of 4096, vocabulary 1000, untied:
#   per layer: q, k, v, o = 4 x 1024^2 = 4,194,304; MLP 2 x 1024 x 4096 = 8,388,608
#   -> 12,582,912 matmul weights per layer, 25,165,824 in the two layers; LM head 1,024,000
ARCH = ModelArch(name="hand-2L", model_type="llama", hidden_size=1024, num_layers=2,
                 num_heads=8, num_kv_heads=8, head_dim=128, intermediate_size=4096,
                 vocab_size=1000, tie_embeddings=False, gated_mlp=False)
LAYER_WEIGHTS = 2 * 12_582_912
HEAD_WEIGHTS = 1_024_000
H100 = catalog.gpu("h100-sxm")  # dense bf16 989.5, fp8 1979 TFLOPS, 3350 GB/s


def _training(precision: str, **kw: object) -> Training:
    return Training.model_validate(dict(arch=ARCH, precision=precision, micro_batch=2,
                                        seq_len=1024, **kw))


def _step(t: Training):  # type: ignore[no-untyped-def]
    mem = training_memory(ARCH, t)
    return training_step_time(ARCH, t, Hardware(gpu=H100), training_flops(t),
                              mem.trainable_params)


def test_fp8_matmul_time_by_hand() -> None:
    """The layers' 6 x 25,165,824 FLOPs per token at the fp8 peak and fp8 efficiency, the LM
    head's 6 x 1,024,000 at the bf16 peak and bf16 efficiency, both x width 1024/1152."""
    tokens = 2 * 1024
    width = 1024 / (1024 + 128)
    e16 = A.GEMM_EFFICIENCY_BY_GENERATION["hopper"].value * width
    e8 = A.FP8_GEMM_EFFICIENCY_BY_GENERATION["hopper"].value * width
    expected = tokens * (6 * HEAD_WEIGHTS / (989.5e12 * e16)
                         + 6 * LAYER_WEIGHTS / (1979e12 * e8))
    st = _step(_training("fp8-mixed"))
    assert st.matmul_s == pytest.approx(expected, rel=1e-9)
    # bf16-mixed: everything at the bf16 rate; fp8 is faster by the share in fp8 layers
    bf16 = _step(_training("bf16-mixed"))
    assert bf16.matmul_s == pytest.approx(
        tokens * 6 * (HEAD_WEIGHTS + LAYER_WEIGHTS) / (989.5e12 * e16), rel=1e-9)
    # attention kernels stay bf16: the same time
    assert st.attention_s == pytest.approx(bf16.attention_s, rel=1e-12)


def test_fp8_memory_bound_traffic_by_hand() -> None:
    """Per token and layer, fp8 casts move 4 bytes per element of the linear inputs (q/k/v
    1024, o 1024, MLP in 1024, down 4096) and output gradients (q + 2 kv 3072, o 1024, up 4096,
    down 1024): 16,384 elements = 65,536 B; the fp8 copies kept for backward shrink the saved
    linear inputs by 1 byte each, 7,168 B, read and written 4 times: -28,672 B. Net +36,864 B
    per token and layer at 80% of 3350 GB/s."""
    tokens = 2 * 1024
    delta = _step(_training("fp8-mixed")).memory_bound_s - _step(_training(
        "bf16-mixed")).memory_bound_s
    assert delta == pytest.approx(tokens * 2 * 36_864 / (3350e9 * 0.8), rel=1e-9)


def test_fp8_memory_by_hand() -> None:
    """bf16-mixed's state (2 + 2 + 4 + 8 bytes per parameter) plus the fp8 rowwise and
    columnwise copies of the layers' weights (2 x 25,165,824 B); linear inputs kept in fp8."""
    fp8 = training_memory(ARCH, _training("fp8-mixed"))
    bf16 = training_memory(ARCH, _training("bf16-mixed"))
    assert fp8.autocast_weight_copies_bytes == 2 * LAYER_WEIGHTS
    assert bf16.autocast_weight_copies_bytes == 0
    for part in ("weights_bytes", "gradients_bytes", "master_weights_bytes", "optimizer_bytes"):
        assert getattr(fp8, part) == getattr(bf16, part), part
    kept = [activation_bytes_per_token_layer(ARCH, p, True, 1024, "full", "all-linear", 16)[0]
            for p in ("bf16-mixed", "fp8-mixed")]
    assert kept[0] - kept[1] == 1024 + 1024 + 1024 + 4096
    # a frozen LoRA base keeps no linear inputs for weight gradients: nothing to shrink
    lora = [activation_bytes_per_token_layer(ARCH, p, True, 1024, "lora", "all-linear", 16)[0]
            for p in ("bf16-mixed", "fp8-mixed")]
    assert lora[0] == lora[1]


@pytest.mark.parametrize("gpu", ["a100-80gb", "v100-16gb", "t4", "mi250x", "tpu-v5p"])
def test_fp8_refused_without_fp8_tensor_cores(gpu: str) -> None:
    with pytest.raises(FieldError, match="has no fp8 tensor cores"):
        estimate_training(_training("fp8-mixed"), Hardware(gpu=catalog.gpu(gpu)))


def test_fp8_refusal_from_the_cli_and_from_trace() -> None:
    result = CliRunner().invoke(app, ["estimate", "--model", "qwen2-0.5b", "--gpu",
                                      "a100-80gb", "--precision", "fp8-mixed"],
                                env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 2, result.output
    assert "--precision" in result.stderr and "no fp8 tensor cores" in result.stderr
    assert "Traceback" not in result.output
    ok = CliRunner().invoke(app, ["estimate", "--model", "qwen2-0.5b", "--gpu", "h100",
                                  "--precision", "fp8-mixed"], env={"COLUMNS": "200"})
    assert ok.exit_code == 0, ok.output
    with pytest.raises(FieldError, match="fp8-mixed"):
        torch_precision("fp8-mixed")
    with pytest.raises(FieldError, match="qlora"):
        _training("fp8-mixed", method="qlora")


# --- the split ------------------------------------------------------------------------------

def _row(key: tuple[object, ...], split: str = "", measured: float = 1.0) -> HopperRow:
    return HopperRow(label=str(key), source="s", measured=measured, training=None,
                     hardware=None, setup="", skipped=None, config_key=key, split=split)


def test_split_is_frozen_by_the_data() -> None:
    rows = [_row(("a",), "tune"), _row(("b",), "held-out"), _row(("c",), "tune"),
            _row(("c",)),  # a re-measurement added later: goes with its configuration
            _row(("d",))]  # a configuration added later: held out
    rows.append(HopperRow("x", "s", 1.0, None, None, "", "skipped", ()))
    tune, held = split_halves(rows)
    assert [r.config_key for r in tune] == [("a",), ("c",), ("c",)]
    assert [r.config_key for r in held] == [("b",), ("d",)]
    # more rows sorted anywhere among them move nothing
    more = [_row((k,)) for k in ("0", "aa", "bb", "z")]
    tune2, _ = split_halves(more + rows)
    assert {r.config_key for r in tune2} == {("a",), ("c",)}
    with pytest.raises(ValueError, match="both ways"):
        split_halves([_row(("a",), "tune"), _row(("a",), "held-out")])


def test_held_out_rows_were_not_used_by_the_fit() -> None:
    """The report's held-out rows are the split's, disjoint from the tuning rows; refitting
    on the tuning rows alone gives the constants in assumptions.py."""
    rows = hopper_rows(_rows("throughput_h100.csv"))
    tune, held = split_halves(rows)
    assert tune and held
    assert not {r.config_key for r in tune} & {r.config_key for r in held}
    report = {c.label + c.setup: c.group for c in hopper_comparisons() if not c.skipped}
    assert {report[r.label + r.setup] for r in held} == {"held-out"}
    assert {report[r.label + r.setup] for r in tune} == {"tune"}
    fitted = fit_hopper(tune)
    assert fitted["bf16"] == A.GEMM_EFFICIENCY_BY_GENERATION["hopper"].value
    assert fitted["fp8"] == A.FP8_GEMM_EFFICIENCY_BY_GENERATION["hopper"].value
    # neither fit ends on the grid's bounds (a fit on a bound would say the rows are off for
    # reasons outside the GEMMs)
    assert min(FIT_GRID) < fitted["fp8"] < max(FIT_GRID)
    assert min(FIT_GRID) < fitted["bf16"] < max(FIT_GRID)


def test_hopper_attention_at_the_flash_attention_3_rate() -> None:
    """Causal attention of 8 x 128 heads over 1024 tokens: 2 x 2 x 1024 x 512.5 FLOPs per token
    and layer forward, 3x with backward, 2 layers = 12,595,200 per token, at 0.43 of the bf16
    peak with fused attention (cuDNN / FlashAttention-3 on H100), at 0.25 with PyTorch SDPA's
    FlashAttention-2 kernels (the default), whatever the precision of the GEMMs. Both from Shah
    et al. 2024's TFLOPS, whose backward counts 2.5x the forward's FLOPs: 3 / (989/620 + 2.5 x
    989/460) = 0.430 and 3 / (989/370 + 2.5 x 989/260) = 0.246."""
    tokens = 2 * 1024
    assert 3 / (989 / 620 + 2.5 * 989 / 460) == pytest.approx(0.43, abs=0.005)
    assert 3 / (989 / 370 + 2.5 * 989 / 260) == pytest.approx(0.25, abs=0.005)
    assert A.ATTENTION_EFFICIENCY_BY_GENERATION["hopper"].value == 0.43
    assert A.SDPA_ATTENTION_EFFICIENCY_BY_GENERATION["hopper"].value == 0.25
    for fused, rate in ((True, 0.43), (False, 0.25)):
        expected = tokens * 12_595_200 / (989.5e12 * rate)
        for precision in ("bf16-mixed", "fp8-mixed"):
            t = _training(precision, fused_attention=fused)
            assert _step(t).attention_s == pytest.approx(expected, rel=1e-9)


def test_expert_all_to_all_across_two_nodes_by_hand() -> None:
    """16 experts over ep 16 on two DGX-H100 nodes: per layer and micro-batch a GPU sends
    4 passes x 1024 tokens x top-2 x d 1024 x 2 bytes x 15/16 = 15,728,640 B, two layers:
    31,457,280 B, 8/15 of it (2^24 B) to the other node through its own 50 GB/s port and 7/15
    over NVLink (450 GB/s one way) at the same time; the slower part at 75% efficiency."""
    moe = ModelArch(name="hand-moe", model_type="mixtral", hidden_size=1024, num_layers=2,
                    num_heads=8, num_kv_heads=8, head_dim=128, intermediate_size=4096,
                    vocab_size=1000, tie_embeddings=False, gated_mlp=True, num_experts=16,
                    experts_per_token=2, moe_intermediate_size=512)
    t = Training(arch=moe, precision="bf16-mixed", micro_batch=1, seq_len=1024, ep=16)
    hw = Hardware(gpu=H100, num_gpus=16, gpus_per_node=8, inter_node_gb_per_s_one_way=50.0)
    mem = training_memory(moe, t, 16)
    st = training_step_time(moe, t, hw, training_flops(t), mem.trainable_params)
    a2a = next(c for c in st.collectives if c.name == "expert all-to-all")
    assert a2a.seconds == pytest.approx(2**24 / 50e9 / 0.75, rel=1e-9)
    assert a2a.exposed_s == a2a.seconds  # on the critical path (MODEL_PARALLEL_COMM_OVERLAP 0)


def test_nemo_gpt3_shapes_have_their_nominal_sizes() -> None:
    """The launcher configs' shapes count to the sizes in the models' names."""
    from gpuhours.estimate.params import count_params
    from gpuhours_dev.validation.hopper import nemo_gpt3

    for name, billions in (("GPT3-5B", 5), ("GPT3-20B", 20), ("GPT3-175B", 175)):
        assert count_params(nemo_gpt3(name)).total / 1e9 == pytest.approx(billions, rel=0.02)
