"""peft's LoRA branch as memory traffic (estimate/lora_traffic.py): the bytes per element held to
a hand count, to an independent count of the bytes that the branch's operators read and write on
real CPU tensors (peft v0.5's Linear.forward under bf16 autocast, rewritten here from its
description), and the step time held to the bytes' difference at the achievable bandwidth."""

from __future__ import annotations

import pytest

from gpuhours.catalog import gpu as get_gpu
from gpuhours.errors import FieldError
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.flops import training_flops
from gpuhours.estimate.lora_traffic import (
    branch_bytes_per_element,
    generic_lora_saved_bytes_per_token_layer,
    lora_branch_bytes_per_token_layer,
    lora_branch_of,
)
from gpuhours.estimate.timing import training_step_time
from gpuhours.setup import Hardware, Training


def test_branch_bytes_by_hand() -> None:
    """bf16 activations (a = 2), fp32 adapters, dropout, checkpointing. Forward per fan-in
    element: cast 2 + 4, dropout 4 + 4 + 1 (mask), autocast's half copy 4 + 2, A reads 2: 23;
    per fan-out element: B writes 2, x scaling 2 + 2, += 2 + 2 + 2: 12. Backward per fan-out:
    scaling 2 + 2, B's two gradient matmuls read 2 + 2: 8; per fan-in: A's input gradient 2 and
    weight gradient 2, the half copy's backward 2 + 4, dropout's 4 + 1 + 4, the cast's 4 + 2,
    the sum with the base gradient 2 + 2 + 2: 31. Checkpointing runs the forward twice."""
    assert branch_bytes_per_element(2, True, True, True) == (23 * 2 + 31, 12 * 2 + 8)
    assert branch_bytes_per_element(2, True, True, False) == (23 + 31, 12 + 8)
    # half adapters, no dropout: A reads 2 forward; backward 2 + 2 and the sum 6
    assert branch_bytes_per_element(2, False, False, False) == (2 + 10, 12 + 8)
    # half adapters with dropout: + 2 + 2 + 1 forward and backward
    assert branch_bytes_per_element(2, False, True, False) == (7 + 15, 20)


@pytest.mark.parametrize("autocast", [True, False])
def test_branch_bytes_counted_on_real_tensors(autocast: bool) -> None:
    """peft v0.5's LoRA Linear (result = F.linear(x, W); x = x.to(fp32); result += B(A(x)) *
    scaling), fan-in 256, fan-out 384, rank 4, 512 tokens, bf16 base and input, fp32 adapters,
    under CPU bf16 autocast as HF Trainer runs it, dropout 0 (peft's nn.Identity: CPU dropout
    is not CUDA's fused kernel), forward and backward run under a dispatch mode that records
    each operator's operands (input storages read, outputs written). Less the frozen base
    linear's own bytes (its matmul reads x and W and writes the result; backward reads the
    gradient and W and writes x's gradient), the bytes per token equal the count within the
    rank-sized terms (r / fan-in: under 2%)."""
    torch = pytest.importorskip("torch")
    from torch.utils._python_dispatch import TorchDispatchMode

    views = {"aten.t.default", "aten.view.default", "aten._unsafe_view.default",
             "aten.transpose.int", "aten.alias.default", "aten.detach.default",
             "aten.expand.default", "aten.reshape.default"}

    class Bytes(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.total = 0.0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            out = func(*args, **(kwargs or {}))
            if str(func) in views:
                return out
            ins = [a for a in (*args, *(kwargs or {}).values()) if isinstance(a, torch.Tensor)]
            seen = set()
            for tns in ins:
                key = tns.untyped_storage().data_ptr()
                if key not in seen:
                    seen.add(key)
                    self.total += tns.untyped_storage().nbytes()
            for tns in (out if isinstance(out, (tuple, list)) else [out]):
                if isinstance(tns, torch.Tensor):
                    self.total += tns.numel() * tns.element_size()
            return out

    torch.manual_seed(0)
    tokens, fan_in, fan_out, rank = 512, 256, 384, 4
    w = torch.randn(fan_out, fan_in, dtype=torch.bfloat16)
    lora_a = torch.nn.Linear(fan_in, rank, bias=False)  # fp32, peft v0.5's default dtype
    lora_b = torch.nn.Linear(rank, fan_out, bias=False)
    # the layer's input (a leaf here: its producer's backward is not the branch's)
    x_in = torch.randn(tokens, fan_in, dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(tokens, fan_out, dtype=torch.bfloat16)
    counter = Bytes()
    with counter, torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        result = torch.nn.functional.linear(x_in, w)
        x = x_in.to(lora_a.weight.dtype)
        result += lora_b(lora_a(x)) * 2.0
        result.backward(grad)
    a = 2
    base = tokens * a * (fan_in + fan_out) + fan_in * fan_out * a  # forward matmul
    base += tokens * a * (fan_out + fan_in) + fan_in * fan_out * a  # x's gradient
    per_token = (counter.total - base) / tokens
    per_in, per_out = branch_bytes_per_element(a, True, False, False, autocast=autocast)
    expected = per_in * fan_in + per_out * fan_out
    assert per_token == pytest.approx(expected, rel=0.03)


def _t(**kw: object) -> Training:
    base = dict(model="llama-2-7b", method="lora", lora_rank=16, lora_targets="all-linear",
                precision="bf16", micro_batch=1, seq_len=2048, checkpointing=True,
                lora_dropout=0.05)
    return Training.model_validate({**base, **kw})


def test_the_default_branch_follows_the_stack() -> None:
    assert lora_branch_of(_t()) == "peft-fp32"
    assert lora_branch_of(_t(zero_stage=3)) == "peft-half"  # FSDP's flat parameters
    assert lora_branch_of(_t(deepspeed_reduce_bucket=200_000_000)) == "peft-half"
    assert lora_branch_of(_t(kernels="megatron", lora_dropout=0.0)) == "fused"
    assert lora_branch_of(_t(zero_stage=3, lora_branch="peft-fp32")) == "peft-fp32"
    assert lora_branch_bytes_per_token_layer(_t().arch, _t(lora_branch="fused"), 2) == 0.0


def test_llama_branch_bytes_per_token_layer_by_hand() -> None:
    """Llama-2-7B (d 4096, f 11008), q/k/v/o/gate/up/down adapted: fan-ins 6 d + f, fan-outs
    5 d + 2 f; peft-fp32 with dropout and checkpointing: 77 and 32 bytes per element under
    autocast (bf16-mixed); in pure bf16 the branch runs in fp32 after the cast: 67 and 62."""
    t = _t()
    d, f = 4096, 11008
    mixed = _t(precision="bf16-mixed")
    expected = 77 * (6 * d + f) + 32 * (5 * d + 2 * f)
    assert lora_branch_bytes_per_token_layer(mixed.arch, mixed, 2) == pytest.approx(expected)
    pure = 67 * (6 * d + f) + 62 * (5 * d + 2 * f)  # 5,018,880
    assert lora_branch_bytes_per_token_layer(t.arch, t, 2) == pytest.approx(pure)
    # the generic count it replaces: each adapter's kept input (4 bytes in pure bf16) and A's
    # output, per fan-in element and rank
    generic = 4 * ((6 * d + f) + 7 * 16)
    assert generic_lora_saved_bytes_per_token_layer(t.arch, t, 2, 4) == pytest.approx(generic)


def test_step_time_grows_by_the_branch_bytes() -> None:
    """The memory-bound part of a LoRA step: peft-fp32 minus fused is the branch's bytes less
    the generic passes over the adapters' saved inputs, at the achievable bandwidth."""
    hw = Hardware(gpu=get_gpu("a100-80gb"))
    peft, fused = _t(), _t(lora_branch="fused")
    st_peft = training_step_time(peft.arch, peft, hw, training_flops(peft), 10**6)
    st_fused = training_step_time(fused.arch, fused, hw, training_flops(fused), 10**6)
    bw = hw.gpu.memory_bw_gb_per_s * 1e9 * A.BANDWIDTH_EFFICIENCY.value
    passes = A.ELEMENTWISE_PASSES.value + 1.0
    per_layer = (lora_branch_bytes_per_token_layer(peft.arch, peft, 2)
                 - passes * generic_lora_saved_bytes_per_token_layer(peft.arch, peft, 2, 4))
    added = 2048 * 32 * per_layer / bw
    assert st_peft.memory_bound_s - st_fused.memory_bound_s == pytest.approx(added, rel=1e-9)
    assert st_peft.matmul_s == st_fused.matmul_s


def test_lora_branch_refused_without_adapters() -> None:
    with pytest.raises(FieldError, match="full fine-tuning has no adapters"):
        Training(model="llama-2-7b", method="full", lora_branch="fused")
    with pytest.raises(FieldError, match="half-precision adapters"):
        Training(model="llama-2-7b", method="lora", precision="fp32", lora_branch="peft-half")


def test_the_flash_attn_rate_is_the_fit_of_its_rows() -> None:
    """assumptions.FLASH_ATTN2_EFFICIENCY_BY_GENERATION["ampere"] is the least-rms value for the
    Qwen-1.8B 8192-token rows (#106, #112); held out, the other flash-attn rows do better with
    it than with the rate it replaces (ATTENTION_EFFICIENCY_RATIO x the GEMM efficiency)."""
    from gpuhours_dev.validation.finetune import TUNED_THROUGHPUT_ROWS
    from host_overhead import flash_fit  # scripts/ is on the test path

    best, after, before, rows = flash_fit()
    assert A.FLASH_ATTN2_EFFICIENCY_BY_GENERATION["ampere"].value == best
    held = [m.row for m in rows if m.row not in TUNED_THROUGHPUT_ROWS]
    assert len(held) == 70
    # with the Qwen rows' adapters in fp32 (peft 0.6.2 of the figures' date: peft-fp32) the fit
    # lands at 0.49 (0.47 before the half-amp loss's traffic), within Dao 2023's 50-73% forward
    # figure less a slower backward; costed as bf16 adapters it was 0.27. Held out, the other
    # rows do at least as well as at 0.26
    assert sum(abs(after[r]) <= 0.1 for r in held) >= sum(abs(before[r]) <= 0.1 for r in held)
    assert sum(abs(after[r]) <= 0.2 for r in held) >= sum(abs(before[r]) <= 0.2 for r in held)


def test_the_flash_attn_rate_is_for_its_kernel_path_only() -> None:
    from gpuhours.estimate.timing import attention_efficiency

    a100, h100 = get_gpu("a100-80gb"), get_gpu("h100-sxm")
    fa2 = A.FLASH_ATTN2_EFFICIENCY_BY_GENERATION["ampere"].value
    assert attention_efficiency(a100, 4096, False, "flash-attn") == fa2
    assert attention_efficiency(a100, 4096, False, "eager") != fa2
    # Hopper has no entry: the flash-attn path takes SDPA's FlashAttention-2 rate there
    assert (attention_efficiency(h100, 4096, False, "flash-attn")
            == A.SDPA_ATTENTION_EFFICIENCY_BY_GENERATION["hopper"].value)


def test_adapter_storage_and_branch_compute_agree() -> None:
    """Half adapters compute in half (their default branch is peft-half; an explicit peft-fp32
    beside them is refused), and the memory follows the branch: fp32 adapters that an engine
    casts (DeepSpeed's bucket, FSDP/ZeRO-3) keep their inputs in bf16, not an fp32 copy, so a
    LoRA layer's saved activations are smaller than peft-fp32's by 2 bytes per adapter input
    element (Llama-2-7B, r16 all-linear: q,k,v share d, gate,up share d, o d, down f)."""
    from gpuhours.estimate.lora_traffic import lora_branch_of
    from gpuhours.estimate.memory import activation_bytes

    half = Training(model="llama-2-7b", method="lora", precision="bf16", lora_adapter_dtype="half")
    assert lora_branch_of(half) == "peft-half"
    with pytest.raises(FieldError, match="half-precision adapters compute in half"):
        Training(model="llama-2-7b", method="lora", precision="bf16", lora_adapter_dtype="half",
                 lora_branch="peft-fp32")
    base = dict(model="llama-2-7b", method="lora", precision="bf16", micro_batch=1,
                seq_len=512, checkpointing=False)
    eager = Training(**base, lora_branch="peft-fp32")
    cast = Training(**base, lora_branch="peft-half")
    assert lora_branch_of(Training(**base, zero_stage=3)) == "peft-half"
    arch = eager.arch
    d, f = arch.hidden_size, arch.intermediate_size
    saved = (activation_bytes(arch, eager).per_token_per_layer
             - activation_bytes(arch, cast).per_token_per_layer)
    # peft-fp32: an fp32 copy of each of the 7 adapters' inputs (q, k, v, o, gate, up: d each;
    # down: f) and of its A output (r): 4 (6d + f) + 4 x 7r. peft-half: the inputs as they come,
    # q, k, v sharing one and gate, up one, o's kept by attention already: 2 (2d + f) + 2 x 7r
    r = eager.lora_rank
    per_token_layer = 4 * (6 * d + f) + 28 * r - (2 * (2 * d + f) + 14 * r)
    assert saved == pytest.approx(per_token_layer, rel=0.02)
