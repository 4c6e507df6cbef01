"""The host's operators per micro-batch by kernel path (estimate/host.py, issue 14): counts worked
by hand from the per-layer tables, the fused-qkv adapters peft really creates, the quantised
base's extra operators, and the option on the command line."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.errors import FieldError
from gpuhours.estimate.host import adapters_per_layer, host_ops_per_micro_batch, linears_per_layer
from gpuhours.resolve import resolve_model
from gpuhours.setup import Training


def _training(model: str, **kw: object) -> Training:
    arch, _ = resolve_model(model)
    return Training.model_validate(dict(arch=arch, model=model, **kw))


def test_default_path_is_eager() -> None:
    assert _training("llama-3.2-3b").kernels == "eager"


def test_eager_lora_by_hand() -> None:
    # Llama-3.2-3B, 28 layers, LoRA on all 7 linears under autocast, no checkpointing:
    # forward 55 + 7 x 8.6 = 115.2; backward 89 + 7 x (7.1 - 1) = 131.7 (the frozen base drops
    # its weight-gradient matmul); 28 x 246.9 = 6913.2, + 32 outside the layers (no LoRA
    # backward there) = 6945.2
    t = _training("llama-3.2-3b", method="lora", precision="bf16-mixed")
    assert host_ops_per_micro_batch(t.arch, t) == pytest.approx(6945.2)


def test_qwen1_linears_and_adapters() -> None:
    qwen = resolve_model("qwen-1.8b")[0]
    llama = resolve_model("llama-3.2-3b")[0]
    # Qwen-1: c_attn (q, k, v fused), attn.c_proj, w1, w2, mlp.c_proj; peft's suffix match on
    # "c_attn, c_proj, w1, w2" adapts all five
    assert linears_per_layer(qwen) == 5
    assert linears_per_layer(llama) == 7
    assert adapters_per_layer(qwen, _training("qwen-1.8b", method="lora")) == 5
    # no q_proj or v_proj to adapt alone in a fused c_attn: refused, as for Phi-3
    with pytest.raises(FieldError, match="fuses q, k and v"):
        adapters_per_layer(qwen, _training("qwen-1.8b", method="lora", lora_targets="qv"))
    assert adapters_per_layer(llama, _training("llama-3.2-3b", method="lora")) == 7


def test_flash_attn_lora_checkpointed_by_hand() -> None:
    # Qwen-1.8B (24 layers), Qwen's README setup: LoRA on the 5 linears, pure bf16, checkpointing.
    # forward: 16 + 5 linears x 2 + 5 adapters x 8.0 = 66
    # backward: 24 + 5 x 2 (input and weight gradients) + 5 x (8.4 - 1) = 71, + the recomputed
    # forward 66 = 137; 24 x (66 + 137) = 4872, + 32 outside = 4904
    t = _training("qwen-1.8b", method="lora", precision="bf16", checkpointing=True,
                  kernels="flash-attn")
    assert host_ops_per_micro_batch(t.arch, t) == pytest.approx(4904.0)
    eager = t.model_copy(update={"kernels": "eager"})
    # the eager (transformers Llama-shaped) layer with Qwen-1's 5 adapters (c_attn fused):
    # 24 x (45 + 5 x 8 + 73 + 5 x 7.4 + 85) + 32
    assert host_ops_per_micro_batch(eager.arch, eager) == pytest.approx(24 * 280 + 32)


def test_flash_attn_full_autocast_by_hand() -> None:
    # full fine-tuning under autocast, no checkpointing: forward 16 + 5 x 3 = 31; backward
    # 24 + 5 x 3 = 39, + c_attn's bias gradient (one bias for the fused q, k, v: 2) = 41;
    # 24 x 72 = 1728, + 32 + 24 outside (embedding and head train) = 1784
    t = _training("qwen-1.8b", precision="bf16-mixed", kernels="flash-attn")
    assert host_ops_per_micro_batch(t.arch, t) == pytest.approx(1784.0)


def test_gptq_base_adds_its_unpacking() -> None:
    # auto-gptq's torch path: 9 more forward operators per quantised linear, none in backward;
    # 5 linears a layer, forward twice under checkpointing: 24 x 9 x 5 x 2 = 2160 more
    lora = _training("qwen-1.8b", method="lora", precision="fp16", checkpointing=True,
                     kernels="flash-attn")
    gptq = lora.model_copy(update={"method": "qlora", "base_quant": "gptq-int4"})
    assert host_ops_per_micro_batch(gptq.arch, gptq) - host_ops_per_micro_batch(
        lora.arch, lora) == pytest.approx(2160.0)


def test_cli_kernels_option() -> None:
    args = ["estimate", "--model", "qwen-1.8b", "--gpu", "a100-80gb", "--method", "lora",
            "--batch", "1", "--seq", "256", "--grad-accum", "8", "--checkpointing", "--precision",
            "bf16", "--json"]
    runner = CliRunner()
    eager = runner.invoke(app, args)
    fused = runner.invoke(app, [*args, "--kernels", "flash-attn"])
    assert eager.exit_code == 0 and fused.exit_code == 0, eager.output + fused.output
    def host_s(out: str) -> float:
        return float(json.loads(out)["step_time_breakdown_s"]["host_s"]["value"])

    # 8 micro-batches x 4904 operators x 32 us = 1.255 s (the flash-attn path); eager's more
    assert host_s(fused.output) == pytest.approx(8 * 4904 * 32e-6)
    assert host_s(eager.output) == pytest.approx(8 * 6752 * 32e-6)
    bad = runner.invoke(app, [*args, "--kernels", "triton"])
    assert bad.exit_code == 2
    assert "--kernels" in bad.output and "flash-attn" in bad.output


PLAN = """
project: t
hardware: {{gpu: a100-80gb}}
phases:
  - name: sft
    kind: finetune
    model: qwen-1.8b
    method: lora
    precision: bf16
    gpus: 1
    tokens: 1.0e+8
    seq_len: 256
    micro_batch: 1
    grad_accum: 8
    checkpointing: true
    kernels: {kernels}
"""


def test_a_plan_phase_sets_the_kernel_path() -> None:
    from gpuhours.plan.budget import evaluate
    from gpuhours.plan.load import parse_plan

    def hours(kernels: str) -> float:
        return evaluate(parse_plan(PLAN.format(kernels=kernels), "t.yaml")).phases[
            0].gpu_hours_per_run

    # host-bound at 256 tokens a micro-batch: fewer operators, fewer hours
    assert hours("flash-attn") < 0.8 * hours("eager")


def test_trace_and_bench_run_the_eager_path_only() -> None:
    from gpuhours.errors import FieldError
    from gpuhours.setup import check_runs_in_torch

    check_runs_in_torch(_training("qwen2.5-0.5b"), "the bench")  # eager: runs
    with pytest.raises(FieldError) as e:
        check_runs_in_torch(_training("qwen2.5-0.5b", kernels="flash-attn"), "the bench")
    assert e.value.fields == ("kernels",) and "eager" in str(e.value)


def test_flash_attn_layer_structure_counted_on_cpu() -> None:
    """The flash-attn path's per-layer counts, checked where torch can run them: one decoder
    layer written as Qwen-1's QWenBlock computes it (modeling_qwen.py), with flash-attn's CUDA
    kernels replaced by stand-ins of one operator each (the fused RMSNorm forward and backward,
    the rotary kernel, flash_attn's forward and backward) and everything around them real:
    the casts, the contiguous copies of the sliced cos/sin cache, ApplyRotaryEmb.backward's
    clone, the split of c_attn's output, the residual adds, the gradient sums. count_ops then
    counts what autograd really issues: the table's 16 + 2 per linear forward and 24 + 2 per
    linear backward (5 linears, weights trained, biases and norms frozen): 26 and 34."""
    import torch

    from gpuhours.estimate.host import FLASH_ATTN_LAYER_OPS, FLASH_ATTN_LINEAR_OPS
    from gpuhours.torchkit.ops import count_ops

    class Norm(torch.autograd.Function):  # dropout_add_ln_fwd / _bwd: one kernel each way
        @staticmethod
        def forward(ctx, x, w):  # type: ignore[no-untyped-def, override]
            ctx.save_for_backward(w)
            return x * w

        @staticmethod
        def backward(ctx, g):  # type: ignore[no-untyped-def, override]
            (w,) = ctx.saved_tensors
            return g * w, None

    class Rotary(torch.autograd.Function):  # flash_attn.layers.rotary.ApplyRotaryEmb
        @staticmethod
        def forward(ctx, x, cos, sin):  # type: ignore[no-untyped-def, override]
            cos, sin = cos.contiguous(), sin.contiguous()  # apply_rotary's copies
            ctx.save_for_backward(cos, sin)
            return torch.ops.aten.mul(x, 1.0)  # the Triton kernel: one launch

        @staticmethod
        def backward(ctx, g):  # type: ignore[no-untyped-def, override]
            cos, sin = ctx.saved_tensors
            g = g.clone()  # ApplyRotaryEmb.backward: do.clone()
            cos, sin = cos.t().contiguous(), sin.t().contiguous()  # apply_rotary again
            return torch.ops.aten.mul(g, 1.0), None, None

    class Flash(torch.autograd.Function):  # flash_attn_func: fwd and bwd one op each
        @staticmethod
        def forward(ctx, q, k, v):  # type: ignore[no-untyped-def, override]
            return torch.ops.aten.mul(v, 1.0)

        @staticmethod
        def backward(ctx, g):  # type: ignore[no-untyped-def, override]
            return torch.ops.aten.cat([g, g, g], -1).split(g.shape[-1], -1)

    torch.manual_seed(0)
    d, heads, seq, f = 32, 4, 8, 48
    bf = torch.bfloat16
    c_attn = torch.nn.Linear(d, 3 * d).to(bf)
    c_attn.bias.requires_grad_(False)
    attn_proj, w1, w2 = (torch.nn.Linear(d, d, bias=False).to(bf),
                         torch.nn.Linear(d, f, bias=False).to(bf),
                         torch.nn.Linear(d, f, bias=False).to(bf))
    mlp_proj = torch.nn.Linear(f, d, bias=False).to(bf)
    ln1, ln2 = torch.ones(d, dtype=bf), torch.ones(d, dtype=bf)
    cache = torch.randn(2 * seq, d // heads)  # fp32 cos/sin cache, sliced: not contiguous
    cos, sin = cache[:seq, : d // heads // 2], cache[:seq, : d // heads // 2]

    def rope(t: torch.Tensor) -> torch.Tensor:  # apply_rotary_pos_emb with flash-attn
        return Rotary.apply(t.float(), cos, sin).type_as(t)

    def layer(x: torch.Tensor) -> torch.Tensor:  # QWenBlock.forward
        q, k, v = c_attn(Norm.apply(x, ln1)).split(d, dim=2)
        q, k, v = (t.view(1, seq, heads, d // heads) for t in (q, k, v))
        a = Flash.apply(rope(q), rope(k), v).reshape(1, seq, d)
        h = attn_proj(a) + x
        m = Norm.apply(h, ln2)
        return h + mlp_proj(w1(m) * torch.nn.functional.silu(w2(m)))

    x = torch.randn(1, seq, d, dtype=bf, requires_grad=True)
    held: dict[str, torch.Tensor] = {}
    fwd = sum(count_ops(lambda: held.__setitem__("y", layer(x))).values())
    grad = torch.ones_like(held["y"])
    bwd = sum(count_ops(lambda: held["y"].backward(grad)).values())
    lf, lb = FLASH_ATTN_LINEAR_OPS["half"]
    assert (fwd, bwd) == (26, 34)
    assert (fwd, bwd) == (FLASH_ATTN_LAYER_OPS[0] + 5 * lf, FLASH_ATTN_LAYER_OPS[1] + 5 * lb)


def test_lora_dropout_adds_its_operators() -> None:
    # 0.05 dropout on each of the 5 adapters' inputs: +1 forward and +1 backward each, the
    # forward again under checkpointing: 24 layers x 5 x 3 = 360 more
    t = _training("qwen-1.8b", method="lora", precision="bf16", checkpointing=True,
                  kernels="flash-attn")
    dropped = t.model_copy(update={"lora_dropout": 0.05})
    assert host_ops_per_micro_batch(dropped.arch, dropped) - host_ops_per_micro_batch(
        t.arch, t) == pytest.approx(360.0)


def test_lora_dropout_counted_on_cpu() -> None:
    """peft's adapter with and without dropout, counted: backward one operator more (the mask's
    product); forward three more on a CPU (bernoulli_, div_, mul), where CUDA fuses them into
    one native_dropout (ATen's is_fused_kernel_acceptable), the figure the estimate uses."""
    import warnings

    import torch
    from peft import LoraConfig, get_peft_model

    from gpuhours.estimate.host import OPS_PER_LORA_DROPOUT
    from gpuhours.torchkit.ops import count_ops

    class One(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q = torch.nn.Linear(16, 16, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.q(x)

    def counts(p: float) -> tuple[int, int]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = get_peft_model(One().to(torch.bfloat16), LoraConfig(
                r=4, lora_alpha=8, lora_dropout=p, target_modules=["q"]))
        m.train()
        x = torch.randn(1, 8, 16, dtype=torch.bfloat16, requires_grad=True)
        held: dict[str, torch.Tensor] = {}
        f = count_ops(lambda: held.__setitem__("y", m(x)))
        b = count_ops(lambda: held["y"].sum().backward())
        return sum(f.values()), sum(b.values())

    (f0, b0), (f1, b1) = counts(0.0), counts(0.05)
    assert (f1 - f0, b1 - b0) == (3, 1)
    assert OPS_PER_LORA_DROPOUT == (1.0, 1.0)  # forward: the one fused CUDA operator


def test_adapters_per_layer_are_the_modules_peft_adapts() -> None:
    from gpuhours.resolve import resolve_model

    def adapters(model: str) -> float:
        arch, _ = resolve_model(model)
        return adapters_per_layer(arch, _training(model, method="lora"))

    # Phi-3 fuses q/k/v (qkv_proj) and gate/up (gate_up_proj): qkv, o, gate_up, down
    assert adapters("phi-3-mini") == 4
    assert linears_per_layer(resolve_model("phi-3-mini")[0]) == 4
    # Mixtral under peft 0.21: q, k, v, o, the router, and the fused experts' gate_up and down
    # tensors once a layer each (not once per expert)
    assert adapters("mixtral-8x7b") == 7


def test_megatron_full_fp8_by_hand() -> None:
    # Llama-2-7B (32 layers, no q/k norms), Megatron-Core with TE, fp8, full fine-tuning:
    # per layer forward 12 + 2 fp8 input casts = 14, backward 19 + 4 output-gradient casts = 23;
    # 32 x 37 = 1184, + 32 + 24 outside (embedding and head train) = 1240
    t = _training("llama-2-7b", precision="fp8-mixed", kernels="megatron")
    assert host_ops_per_micro_batch(t.arch, t) == pytest.approx(1240.0)
    # the same step in transformers' eager code under autocast: 32 x (55 + 89) + 56 = 4664
    eager = t.model_copy(update={"kernels": "eager"})
    assert host_ops_per_micro_batch(eager.arch, eager) == pytest.approx(4664.0)


def test_megatron_lora_and_qk_norms_by_hand() -> None:
    # Megatron-Bridge's default LoRA (linear_qkv, linear_proj, linear_fc1, linear_fc2: 4 adapters
    # a layer, 4 forward and 5 backward kernels each), bf16, checkpointing on, Qwen3-8B (36
    # layers, q and k norms: 2 x (1, 2) more): forward 12 + 2 + 16 = 30; backward 19 + 4 + 20
    # = 43, + the recomputed forward 30 = 73; 36 x 103 = 3708, + 32 outside (no LoRA backward)
    t = _training("qwen3-8b", method="lora", precision="bf16", checkpointing=True,
                  kernels="megatron")
    assert host_ops_per_micro_batch(t.arch, t) == pytest.approx(3740.0)
    # lora_targets attention: linear_qkv and linear_proj, 2 adapters fewer, each 4 forward,
    # 5 backward and 4 recomputed: 36 x 2 x 13 = 936
    attn = t.model_copy(update={"lora_targets": "attention"})
    assert host_ops_per_micro_batch(t.arch, t) - host_ops_per_micro_batch(
        attn.arch, attn) == pytest.approx(936.0)


def test_cli_megatron_path() -> None:
    # Qwen-1.8B (24 layers, no q/k norms), full, bf16, 2 micro-batches: 24 x (12 + 19) + 32 +
    # 24 = 800 operators each, x 2 x 32 us
    args = ["estimate", "--model", "qwen-1.8b", "--gpu", "h100-sxm", "--batch", "1", "--seq",
            "512", "--grad-accum", "2", "--precision", "bf16", "--kernels", "megatron", "--json"]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    host = json.loads(out.output)["step_time_breakdown_s"]["host_s"]["value"]
    assert float(host) == pytest.approx(2 * 800 * 32e-6)


@pytest.mark.parametrize(("choice", "flag", "field"), [
    ({"method": "qlora", "precision": "bf16"}, "--method", "method"),
    ({"zero_stage": 3, "zero3_engine": "deepspeed"}, "--zero3-engine", "zero3_engine"),
    ({"method": "lora", "lora_dropout": 0.05}, "--lora-dropout", "lora_dropout")])
def test_megatron_path_refuses_host_costs_it_does_not_count(
        choice: dict[str, object], flag: str, field: str, tmp_path: object) -> None:
    # the megatron path counts Megatron-Core's operators alone: a 4-bit base's dequantisation,
    # DeepSpeed's ZeRO-3 hooks and LoRA dropout would be dropped, so each is refused by name
    with pytest.raises(FieldError) as err:
        _training("qwen-1.8b", kernels="megatron", **choice)
    assert set(err.value.fields) == {"kernels", field}
    _training("qwen-1.8b", kernels="eager", **choice)  # the eager path counts them
    args = ["estimate", "--model", "qwen-1.8b", "--gpu", "h100-sxm", "--batch", "1", "--seq",
            "512", "--kernels", "megatron"]
    for k, v in choice.items():
        args += ["--" + k.replace("_", "-").replace("zero-stage", "zero"), str(v)]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 2, out.output
    assert "--kernels" in out.output and flag in out.output and "Traceback" not in out.output
    from pathlib import Path
    plan = Path(str(tmp_path)) / "plan.yaml"
    lines = "".join(f"    {k}: {v}\n" for k, v in choice.items())
    plan.write_text("project: t\nhardware:\n  gpu: h100-sxm\nphases:\n  - name: sft\n"
                    "    kind: finetune\n    model: qwen-1.8b\n    tokens: 1000000\n"
                    f"    gpus: 8\n    kernels: megatron\n{lines}")
    out = CliRunner().invoke(app, ["plan", str(plan), "--no-doc"])
    assert out.exit_code == 2, out.output
    assert str(plan) in " ".join(out.output.split()) and "line " in out.output


def test_interleaved_stages_that_do_not_divide_the_layers() -> None:
    # Llama 3.1 405B: 126 layers on pp 8 x vp 8, as Megatron-Bridge runs it (the embedding and
    # the loss counted as a layer each: 128 = 64 chunks of 2); the stages are stage_layers':
    # 16 each less two, the last stage (LM head) and then the first giving one: 15, 16 x 6, 15
    from gpuhours.estimate.parallel import stage_layers
    t = _training("llama-3.1-405b", tp=8, pp=8, cp=2, virtual_stages=8, grad_accum=64)
    assert t.virtual_stages == 8
    assert stage_layers(t.arch, 8) == (15, 16, 16, 16, 16, 16, 16, 15)


def test_megatron_moe_allgather_router_and_dispatcher_by_hand() -> None:
    # Qwen3-30B-A3B (48 layers, all MoE, q and k norms), full, bf16, no recompute, as NeMo-RL's
    # grpo_math_1B.yaml routes it (allgather dispatcher, unfused permute, fp64 router): per
    # layer forward 12 + 2 (q/k norms) + 39 (router 15, dispatch 19, combine 5) = 53, backward
    # 19 + 4 + 26 = 49; 48 x 102 = 4896, + 32 + 24 outside = 4952
    from gpuhours.estimate.host import host_forward_ops_per_micro_batch

    t = _training("qwen3-30b-a3b", precision="bf16", kernels="megatron",
                  moe_dispatch="allgather-unfused")
    assert t.arch.moe_layers == t.arch.num_layers == 48
    assert host_ops_per_micro_batch(t.arch, t) == pytest.approx(4952.0)
    # a scoring forward: 48 x 53 + 32 = 2576
    assert host_forward_ops_per_micro_batch(t.arch, t) == pytest.approx(2576.0)
    # the default, fused (Megatron-Bridge's all-to-all with fused permute), EP 1 and its
    # default bf16 router: the dense layer's 48 x (14 + 23) + 56 = 1832, plus per MoE layer
    # forward the router 11, the per-expert sum 1, tokens_per_expert's copy to the host 1, the
    # fused permute's 4 Triton launches, the chunk sort there and back (128 local experts: 4)
    # and the unpermute 1: 22; backward the router 8, the permute 1, the sorts 2, the
    # unpermute 1, the branch's sum and the weighted SwiGLU's reduction 2: 14.
    # 1832 + 48 x 36 = 3560
    fused = t.model_copy(update={"moe_dispatch": "fused", "moe_router_dtype": None})
    assert host_ops_per_micro_batch(fused.arch, fused) == pytest.approx(3560.0)
    # a dense model has no router: the setting adds nothing
    dense = _training("qwen3-8b", precision="bf16", kernels="megatron",
                      moe_dispatch="allgather-unfused")
    assert host_ops_per_micro_batch(dense.arch, dense) == pytest.approx(
        host_ops_per_micro_batch(dense.arch, dense.model_copy(
            update={"moe_dispatch": "fused"})))


def test_moe_dispatch_needs_the_megatron_path() -> None:
    with pytest.raises(FieldError) as err:
        _training("qwen3-30b-a3b", moe_dispatch="allgather-unfused")
    assert set(err.value.fields) == {"moe_dispatch", "kernels"}
    out = CliRunner().invoke(app, ["estimate", "--model", "qwen3-30b-a3b", "--gpu", "h100-sxm",
                                   "--moe-dispatch", "allgather-unfused"])
    assert out.exit_code == 2, out.output
    assert "--moe-dispatch" in out.output and "--kernels" in out.output
    assert "Traceback" not in out.output


def test_grace_superchips_issue_operators_at_their_measured_ratio() -> None:
    """TransformerEngine issue #2053: a torch Linear forward's CPU time is 37.08 us on a GB200's
    Grace and 13.48 us on an H100 DGX's Xeon: 37.08 / 13.48 = 2.751 -> 2.75, so a GB200 (and a
    GB300, the same CPU assumed) issues an operator in 2.75 x 32 us = 88 us; a B200 (an x86
    DGX host) keeps 32 us, and a machine's own measured figure wins over both."""
    from gpuhours import catalog
    from gpuhours.estimate import assumptions as A
    from gpuhours.estimate.timing import host_s_per_op
    from gpuhours.setup import Hardware

    assert 37.08 / 13.48 == pytest.approx(2.75, abs=0.005)
    assert A.HOST_S_PER_OP.value == pytest.approx(32e-6)
    assert host_s_per_op(Hardware(gpu="gb200")) == pytest.approx(88e-6)
    assert host_s_per_op(Hardware(gpu="gb300")) == pytest.approx(88e-6)
    assert host_s_per_op(Hardware(gpu="b200")) == pytest.approx(32e-6)
    assert host_s_per_op(Hardware(gpu="gb200", host_us_per_op=40.0)) == pytest.approx(40e-6)
    assert "2053" in catalog.gpu("gb200").host_op_time_source


def test_a_host_ratio_needs_its_source() -> None:
    from pydantic import ValidationError

    from gpuhours import catalog

    spec = catalog.gpu("b200").model_dump()
    spec["host_op_time_ratio"] = 2.0
    with pytest.raises(ValidationError, match="host_op_time_source"):
        type(catalog.gpu("b200")).model_validate(spec)


def test_te_grouped_gemm_calls_per_local_expert_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 16: TE's grouped GEMM issues one cuBLASLt call per local expert from C++
    # (cublaslt_gemm.cu multi_stream_cublas_gemm). Qwen3-30B-A3B, 48 MoE layers, 128 experts
    # at EP 8: 16 local experts; fc1 and fc2 each forward, input gradient and weight gradient:
    # 48 x 16 x 2 x 3 = 4608 calls a micro-batch
    from gpuhours import catalog
    from gpuhours.estimate import assumptions as A
    from gpuhours.estimate.assumptions import Assumption
    from gpuhours.estimate.estimator import estimate_training
    from gpuhours.estimate.host import megatron_expert_gemm_calls_per_micro_batch as calls
    from gpuhours.setup import Hardware

    t = _training("qwen3-30b-a3b", precision="bf16", kernels="megatron", ep=8, micro_batch=1,
                  seq_len=4096, grad_accum=2, zero_stage=1)
    assert calls(t.arch, t) == pytest.approx(4608.0)
    # full recomputation runs the forward's two again: 48 x 16 x 2 x 4 = 6144
    assert calls(t.arch, t.model_copy(update={"checkpointing": True})) == pytest.approx(6144.0)
    # frozen experts (LoRA) issue no weight-gradient GEMM: 48 x 16 x 2 x 2 = 3072
    assert calls(t.arch, t.model_copy(update={"method": "lora"})) == pytest.approx(3072.0)
    # EP 32: 4 local experts, a quarter
    assert calls(t.arch, t.model_copy(update={"ep": 32})) == pytest.approx(1152.0)
    # graphs that leave the experts eager keep them; graphs that capture them, the op fuser's
    # fused grouped MLP, the eager path and a dense model issue none
    partial = t.model_copy(update={"cuda_graph_scope": ("attn", "moe_router")})
    assert calls(partial.arch, partial) == pytest.approx(4608.0)
    for update in ({"cuda_graph_scope": ("full_iteration",)}, {"cuda_graph_scope": ("moe",)},
                   {"moe_fused_mlp": True}, {"kernels": "eager"}):
        other = t.model_copy(update=update)
        assert calls(other.arch, other) == 0.0
    dense = _training("qwen3-8b", precision="bf16", kernels="megatron")
    assert calls(dense.arch, dense) == 0.0
    # in the step: on a B200 (x86 host, ratio 1) 2 micro-batches x 4608 x 10 us = 92.16 ms of
    # host time more than with the per-call figure at 0
    hw = Hardware(gpu=catalog.gpu("b200"), num_gpus=8)

    def host_s() -> float:
        e = estimate_training(t, hw, "catalog")
        return e.step_time_breakdown_s["host_s"].value

    with_calls = host_s()
    old = A.CUBLASLT_GEMM_HOST_S
    monkeypatch.setattr(A, "CUBLASLT_GEMM_HOST_S",
                        Assumption(old.name, 0.0, old.unit, old.basis))
    assert with_calls - host_s() == pytest.approx(2 * 4608 * 10e-6, rel=1e-9)
