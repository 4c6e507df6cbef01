"""An MoE layer's expert GEMMs and token routing (estimate/moe_gemm.py, issues 14 and 16).
Expected numbers are worked by hand below; the shape model is held to DeepGEMM's published
grouped GEMMs, which no constant was fitted on."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuhours import catalog
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.estimator import estimate_training
from gpuhours.estimate.moe_gemm import (
    expert_gemm_slowdown,
    expert_matmul_flops_per_token,
    expert_shapes,
    gemm_time_s,
    recompute_bytes_per_token_layer,
    routing_bytes_per_token_layer,
    unfused_expert_bytes_per_token_layer,
)
from gpuhours.resolve import resolve_model
from gpuhours.setup import Hardware, Training
from gpuhours_dev.validation.grouped_gemm import (
    fit_k_half_depth,
    predicted_tflops,
    rows,
    tuning_rows,
)
from op_bytes import byte_counter

QWEN3_30B, _ = resolve_model("qwen3-30b-a3b")  # d 2048, 48 MoE layers, 128 experts top-8, f 768
NO_MEMORY = 1e30  # bytes/s: the weight-read term vanishes


def test_gemm_time_tiles_and_waves_by_hand() -> None:
    # M 1024 x N 4096 x K 7168 on 132 SMs: 1024/128 = 8 row tiles x 4096/128 = 32 column tiles =
    # 256 tiles, 2 waves of 132 -> 256/264 of the SMs busy; depth 7168/(7168 + 375)
    flops = 2 * 1024 * 4096 * 7168
    expected = flops / (1e15 * 0.5 * (256 / 264) * (7168 / 7543))
    assert gemm_time_s(1024, 4096, 7168, 1, 1e15, 0.5, NO_MEMORY, 1.0, 132) == \
        pytest.approx(expected, rel=1e-12)
    # 4 groups of M 200: each rounded up to 2 row tiles (200 of 256 rows used); 4 x 2 x 32 = 256
    # tiles, again 2 waves; depth K 2048: 2048/2423
    flops4 = 4 * 2 * 200 * 4096 * 2048
    expected4 = flops4 / (1e15 * 0.5 * (200 / 256) * (256 / 264) * (2048 / 2423))
    assert gemm_time_s(200, 4096, 2048, 4, 1e15, 0.5, NO_MEMORY, 1.0, 132) == \
        pytest.approx(expected4, rel=1e-12)
    # 48 rows: one 64-row tile (48/64 used)
    expected48 = 2 * 48 * 4096 * 2048 / (1e15 * 0.5 * (48 / 64) * (32 / 132) * (2048 / 2423))
    assert gemm_time_s(48, 4096, 2048, 1, 1e15, 0.5, NO_MEMORY, 1.0, 132) == \
        pytest.approx(expected48, rel=1e-12)


def test_gemm_time_weight_read_combines_as_a_2_norm() -> None:
    # M 256 x N 4096 x K 7168, fp8 (1 byte): operands and output 256*7168 + 7168*4096 + 256*4096
    # bytes at 1e12 B/s; compute 2 tiles x 32 = 64 tiles (one wave of 132: 64/132 busy)
    mem = (256 * 7168 + 7168 * 4096 + 256 * 4096) / 1e12
    comp = 2 * 256 * 4096 * 7168 / (1e15 * 0.5 * (64 / 132) * (7168 / 7543))
    assert A.GEMM_ROOFLINE_P.value == 2.0
    assert gemm_time_s(256, 4096, 7168, 1, 1e15, 0.5, 1e12, 1.0, 132) == \
        pytest.approx((comp ** 2 + mem ** 2) ** 0.5, rel=1e-12)


def test_expert_shapes_by_hand() -> None:
    # 4096 tokens x top-8 x ep 8 ranks' copies over 128 experts = 2048 per expert, 16 on a rank;
    # gate and up fused: N 2 x 768, K 2048; down: N 2048, K 768
    s = expert_shapes(QWEN3_30B, 4096, ep=8, tp=1)
    assert (s.tokens_per_expert, s.local_experts, s.fc1, s.fc2) == (2048, 16, (1536, 2048),
                                                                    (2048, 768))
    assert expert_shapes(QWEN3_30B, 4096, ep=8, tp=2).fc2 == (2048, 384)


def test_expert_flops_by_hand() -> None:
    # 3 x 2048 x 768 weights per expert x top-8 x 48 layers = 1,811,939,328 active; 6 x that
    # trained, 4 x frozen (input gradient only), 8 x trained with recomputation
    active = 3 * 2048 * 768 * 8 * 48
    assert expert_matmul_flops_per_token(QWEN3_30B, True, False) == 6 * active
    assert expert_matmul_flops_per_token(QWEN3_30B, False, False) == 4 * active
    assert expert_matmul_flops_per_token(QWEN3_30B, True, True) == 8 * active


def test_routing_bytes_one_layer_by_hand() -> None:
    # megatron (TE fused permute), bf16, k 8, d 2048, 128 experts: forward (3 x 8 + 1) x 2048 x 2
    # = 102,400 + router 4 x 128 x 4 = 2,048; backward (3 x 8 + 2) x 2048 x 2 = 106,496 + 2,048
    fwd, bwd = 102_400 + 2_048, 106_496 + 2_048
    assert routing_bytes_per_token_layer(QWEN3_30B, "megatron", 2.0, False) == fwd + bwd
    assert routing_bytes_per_token_layer(QWEN3_30B, "megatron", 2.0, True) == 2 * fwd + bwd
    # eager (transformers' loop): 7 k forward, 8 k backward: 15 x 8 x 2048 x 2 + 2 x 2048
    assert routing_bytes_per_token_layer(QWEN3_30B, "eager", 2.0, False) == 491_520 + 4_096


def test_small_expert_gemms_are_slower_and_large_ones_are_not() -> None:
    h100 = catalog.gpu("h100-sxm")
    bw = h100.memory_bw_gb_per_s * 1e9 * 0.8
    # gpt-oss-120b's experts (d = f = 2880, top-4 of 128) at pipeline 4 x ep 8: 1024 tokens per
    # expert; the weight gradient's K is those 1024 tokens, 1024/1399 of its large-K rate
    arch, _ = resolve_model("gpt-oss-120b")
    small = expert_shapes(arch, 4096, ep=8, tp=1)
    assert small.tokens_per_expert == 1024
    slow = expert_gemm_slowdown(small, True, 989e12, 0.6, bw, 2.0, h100.sm_count)
    assert 1.05 < slow < 1.2
    # 32,768 tokens per expert: only the two launches' wave rounding differs (within 3%)
    big = expert_shapes(arch, 4 * 4096 * 8, ep=8, tp=1)
    assert expert_gemm_slowdown(big, True, 989e12, 0.6, bw, 2.0, h100.sm_count) == \
        pytest.approx(1.0, abs=0.03)


def test_dense_model_step_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    # llama-3-8b, bf16-mixed, micro-batch 2 x 4096, megatron kernels, 8 H100s: the step time the
    # estimator gave at commit b5a18f2, before MoE expert GEMMs and routing were costed. Then
    # every setup's loss was transformers' (hf); the megatron path now defaults to
    # Megatron-Core's (setup.loss_kernel_of), so hf is given as it ran; and Hopper's constants
    # were GEMM 0.70 and attention 0.50 fused / 0.29 SDPA (2026-11-24: 0.71, 0.43, 0.25, their
    # source's backward FLOPs read at 2.5x), so those are given as they were
    import dataclasses

    from gpuhours.estimate import assumptions as A

    for table, value in ((A.GEMM_EFFICIENCY_BY_GENERATION, 0.70),
                         (A.ATTENTION_EFFICIENCY_BY_GENERATION, 0.50),
                         (A.SDPA_ATTENTION_EFFICIENCY_BY_GENERATION, 0.29)):
        monkeypatch.setitem(table, "hopper", dataclasses.replace(table["hopper"], value=value))
    arch, _ = resolve_model("llama-3-8b")
    t = Training(arch=arch, precision="bf16-mixed", micro_batch=2, seq_len=4096,
                 kernels="megatron", loss_kernel="hf")
    e = estimate_training(t, Hardware(gpu=catalog.gpu("h100-sxm"), num_gpus=8))
    assert e.step_time_s.value == pytest.approx(0.9838136577937516, rel=1e-9)


def test_deepgemm_rows_tuned_and_held_out() -> None:
    data = rows()
    # the fit reproduces the constants in use
    e, k_half, rms = fit_k_half_depth(data)
    assert (e, k_half) == (0.72, A.GROUPED_GEMM_K_HALF_DEPTH.value) and rms < 0.05
    # the ten grouped GEMMs (contiguous and masked: the MoE kernels), held out, within 10%
    grouped = [r for r in data if r["kernel"] != "normal"]
    assert len(grouped) == 10 and not set(map(id, grouped)) & set(map(id, tuning_rows(data)))
    for r in grouped:
        assert predicted_tflops(r) == pytest.approx(float(r["tflops"]), rel=0.105), r


def test_allgather_unfused_routing_bytes_by_hand() -> None:
    # NeMo-RL's allgather dispatcher, unfused permute, fp64 router; bf16, k 8, d 2048, EP 8:
    # per direction 2,048 x (5 x 8 x 2 + 8 x (2 x 2 + 8) + 2 + 8) = 2,048 x 186 = 380,928
    # (index_select 32, zeros over the 8 gathered rows 16, scatter_add_ 48, the fp64 casts
    # 8 x 10 + 10), + the router's 4 passes over 128 fp64 logits, 4,096: 385,024 each way
    one = 2048 * 186 + 4 * 128 * 8
    assert routing_bytes_per_token_layer(QWEN3_30B, "megatron", 2.0, False,
                                         "allgather-unfused", 8) == 2 * one
    assert routing_bytes_per_token_layer(QWEN3_30B, "megatron", 2.0, True,
                                         "allgather-unfused", 8) == 3 * one
    # 3.6x the fused path's 212,992 (test_routing_bytes_one_layer_by_hand)
    fused = routing_bytes_per_token_layer(QWEN3_30B, "megatron", 2.0, False)
    assert fused == 212_992 and 2 * one / fused == pytest.approx(3.615, abs=0.001)


GPT_OSS_120B, _ = resolve_model("gpt-oss-120b")  # d 2880, f 2880, 128 experts top-4, clamp 7


def test_gpt_oss_reads_its_clamp() -> None:
    assert GPT_OSS_120B.glu_clamp == 7.0 and GPT_OSS_120B.expert_bias
    assert QWEN3_30B.glu_clamp is None and not QWEN3_30B.expert_bias


def test_unfused_expert_bytes_by_hand() -> None:
    # gpt-oss-120b, bf16, per routed copy: the clamp over f = 2880, forward 8 x 2 = 16 bytes,
    # backward 11 x 2 + 8 masks = 30; the fc2 bias over d = 2880, forward 6 x 2 = 12, backward
    # 8 x 2 = 16: (46 + 28) x 2880 = 213,120 bytes a copy, x 4 copies = 852,480 a token
    assert unfused_expert_bytes_per_token_layer(GPT_OSS_120B, "megatron", 2.0, False) == 852_480
    # full recomputation runs the forwards twice: (62 + 40) x 2880 x 4 = 1,175,040
    assert unfused_expert_bytes_per_token_layer(GPT_OSS_120B, "megatron", 2.0, True) == \
        1_175_040
    # the op fuser's fused ops, another kernel path, or a model without clamp or expert bias
    assert unfused_expert_bytes_per_token_layer(GPT_OSS_120B, "megatron", 2.0, False,
                                                fused_mlp=True) == 0.0
    assert unfused_expert_bytes_per_token_layer(GPT_OSS_120B, "eager", 2.0, False) == 0.0
    assert unfused_expert_bytes_per_token_layer(QWEN3_30B, "megatron", 2.0, False) == 0.0


def test_unfused_expert_passes_counted_on_real_tensors() -> None:
    """Megatron-LM@2a75ac12's two eager pieces restated on CPU bf16 tensors, forward and
    backward under a dispatch mode counting each operator's bytes: the clamp of
    weighted_bias_quick_geglu_impl (chunk, clamp max on the gate half, clamp both ways on the
    linear half, cat) and _apply_bias (per local expert `t + b * p` on the split output, cat,
    `.to` its own dtype). Less the incoming gradient's creation and the per-expert biases and
    probabilities (d and 1 wide), the bytes per element are CLAMP_PASSES' and
    FC2_BIAS_PASSES' (the function's per-copy bytes: 46 per f, 28 per d)."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    n, f, d, experts = 512, 96, 80, 4
    y = torch.randn(n, 2 * f, dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(n, 2 * f, dtype=torch.bfloat16)
    counter = byte_counter(torch)
    with counter:
        gate, linear = y.chunk(2, -1)
        z = torch.cat((gate.clamp(min=None, max=7.0), linear.clamp(min=-7.0, max=7.0)), -1)
        torch.autograd.grad(z, y, grad)  # y is the fc1 output: no .grad accumulated
    clamp = (counter.total - 2 * 2) / (n * f)  # two 0-d zeros of the where()s
    t = torch.randn(n, d, dtype=torch.bfloat16, requires_grad=True)
    biases = [torch.randn(d, dtype=torch.bfloat16, requires_grad=True) for _ in range(experts)]
    probs = torch.rand(n, 1, dtype=torch.bfloat16, requires_grad=True)
    splits = [n // experts] * experts
    grad_out = torch.randn(n, d, dtype=torch.bfloat16)
    counter = byte_counter(torch)
    with counter:
        out = torch.cat([ti + b * pi for ti, b, pi in zip(
            torch.split(t.view(-1, d), splits), biases, torch.split(probs, splits),
            strict=True)])
        torch.autograd.grad(out.view(n, d).to(t.dtype), [t, *biases, probs], grad_out)
    # the small operands: each product reads b (d) and p (its rows), its gradients read them
    # again and write b's (d, summed) and p's (rows, summed; then a cat of the rows)
    small = experts * 2 * (3 * d + 1) + 2 * 3 * n * 2
    bias = (counter.total - small) / (n * d)
    per_copy = unfused_expert_bytes_per_token_layer(
        replace(GPT_OSS_120B, moe_intermediate_size=f, hidden_size=d), "megatron", 2.0,
        False) / GPT_OSS_120B.experts_per_token
    assert clamp == pytest.approx(46.0, abs=0.05)
    assert bias == pytest.approx(28.0, abs=0.05)
    assert per_copy == 46 * f + 28 * d


def test_gpt_oss_step_grows_by_the_unfused_passes() -> None:
    # 8 B200s, ep 8, micro-batch 4 x 4096 x 5, bf16: the unfused passes' bytes over the GPU's
    # bandwidth, the op fuser's step without them
    b200 = catalog.gpu("b200")
    common = dict(arch=GPT_OSS_120B, precision="bf16-mixed", micro_batch=4, seq_len=4096,
                  grad_accum=5, kernels="megatron", ep=8, zero_stage=1)
    hw = Hardware(gpu=b200, num_gpus=8)
    unfused = estimate_training(Training(**common), hw)
    fused = estimate_training(Training(**common, moe_fused_mlp=True), hw)
    extra = 4 * 4096 * 5 * 36 * 852_480 / (b200.memory_bw_gb_per_s * 1e9
                                           * A.BANDWIDTH_EFFICIENCY.value)
    key = "memory_bound_s"
    assert (unfused.step_time_breakdown_s[key].value - fused.step_time_breakdown_s[key].value
            == pytest.approx(extra, rel=1e-9))


def test_the_op_fuser_is_refused_where_it_does_not_run() -> None:
    from gpuhours.errors import FieldError

    llama, _ = resolve_model("llama-3-8b")
    with pytest.raises(FieldError, match="kernel path is not megatron"):
        Training(arch=GPT_OSS_120B, moe_fused_mlp=True)
    with pytest.raises(FieldError, match="has no experts"):
        Training(arch=llama, kernels="megatron", moe_fused_mlp=True)


def test_selective_recompute_bytes_by_hand() -> None:
    # gpt-oss-120b, bf16, moe_act on the unfused MLP: per routed copy the fused activation's
    # forward (read 2 f, write f: 3 x 2 = 6 bytes per f) and the clamp's (8 x 2 = 16):
    # 22 x 2880 x 4 copies = 253,440; layernorm: the pre-MLP norm, read and write d: 2 x 2880
    # x 2 = 11,520
    def recompute(modules: tuple[str, ...] | None, fused: bool = False) -> float:
        return recompute_bytes_per_token_layer(GPT_OSS_120B, "megatron", 2.0, modules, fused)

    assert recompute(("moe_act",)) == 253_440
    assert recompute(("layernorm",)) == 11_520
    assert recompute(("layernorm", "moe_act")) == 264_960
    # the op fuser's activation recomputes inside its fused kernel; none named; eager path
    assert recompute(("layernorm", "moe_act"), fused=True) == 11_520
    assert recompute(None) == 0.0 and recompute(()) == 0.0
    assert recompute_bytes_per_token_layer(GPT_OSS_120B, "eager", 2.0, ("moe_act",)) == 0.0
    # Qwen3-30B-A3B (no clamp): the activation's 3 elements of f = 768 over 8 copies
    assert recompute_bytes_per_token_layer(QWEN3_30B, "megatron", 2.0, ("moe_act",)) == \
        3 * 2 * 768 * 8


def test_selective_recompute_choices_checked() -> None:
    from gpuhours.errors import FieldError

    with pytest.raises(FieldError, match="kernel path is not megatron"):
        Training(arch=GPT_OSS_120B, recompute_modules=("moe_act",))
    with pytest.raises(FieldError, match="not both"):
        Training(arch=GPT_OSS_120B, kernels="megatron", checkpointing=True,
                 recompute_modules=("moe_act",))
    with pytest.raises(FieldError, match="named twice"):
        Training(arch=GPT_OSS_120B, kernels="megatron", recompute_modules="moe_act,moe_act")
    t = Training(arch=GPT_OSS_120B, kernels="megatron", recompute_modules="layernorm, moe_act")
    assert t.recompute_modules == ("layernorm", "moe_act")


def test_selective_recompute_says_its_memory_is_an_upper_bound() -> None:
    # the recomputation is timed but what it frees is not taken off the activations: the
    # memory must be the same as without it, and the estimate must say so
    from gpuhours import catalog
    from gpuhours.estimate.estimator import estimate_training
    from gpuhours.setup import Hardware

    hw = Hardware(gpu=catalog.gpu("h100-sxm"), num_gpus=64)
    base = Training(arch=GPT_OSS_120B, kernels="megatron", seq_len=4096, ep=8, pp=4,
                    zero_stage=1)
    plain = estimate_training(base, hw)
    selective = estimate_training(base.model_copy(update={"recompute_modules":
                                                          ("layernorm", "moe_act")}), hw)
    assert selective.memory.total_bytes == plain.memory.total_bytes
    assert any("memory is an upper bound" in w for w in selective.warnings)
    assert not any("memory is an upper bound" in w for w in plain.warnings)
    assert selective.step_time_s.value > plain.step_time_s.value
