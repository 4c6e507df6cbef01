"""Liger-Kernel's layer kernels (Training.liger_kernels, estimate/liger.py).

Liger's Triton kernels do not run on a CPU, so its side is held to a hand count of what each of
its autograd Functions passes to ctx.save_for_backward (linkedin/Liger-Kernel@0a62700,
src/liger_kernel/ops/rms_norm.py, swiglu.py, rope.py) and of the kernels it launches. The eager
side it replaces is held to a real CPU forward: the storage autograd saves for transformers'
LlamaRMSNorm, Qwen3's per-head norm, apply_rotary_pos_emb and the gated activation, and the
operators they issue (count_ops).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuhours.errors import FieldError
from gpuhours.estimate.arch import from_hf_config
from gpuhours.estimate.host import host_ops_per_micro_batch
from gpuhours.estimate.liger import (
    LIGER_REPLACED_EAGER_OPS,
    eager_replaced_saved_bytes_per_token_layer,
    liger_layer_applies,
    liger_moved_bytes_per_token_layer,
    liger_saved_bytes_per_token_layer,
)
from gpuhours.estimate.memory import activation_bytes
from gpuhours.setup import Training

LLAMA = dict(model_type="llama", hidden_size=256, intermediate_size=688, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, vocab_size=1000)
QWEN3 = dict(model_type="qwen3", hidden_size=256, intermediate_size=688, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, head_dim=64, vocab_size=1000)


def test_liger_saves_what_its_functions_pass_to_save_for_backward() -> None:
    # Llama, bf16 (a = r = 2), d 256, f 688, per token and layer:
    # LigerRMSNormFunction: X (2 x 256) + RSTD fp32 (4), twice: 2 x 516 = 1,032
    # LigerSiLUMulFunction: a and b (2 x 2 x 688) = 2,752; LigerRopeFunction: cos, sin only
    llama = from_hf_config(LLAMA, "tiny-llama")
    assert liger_saved_bytes_per_token_layer(llama, 2, 2) == 1032 + 2752
    # Qwen3 adds the per-head q and k norms (class-wide patch): X of q and k (2 x (256 + 128))
    # and an fp32 1/rms per head row (4 x (4 + 2))
    qwen3 = from_hf_config(QWEN3, "tiny-qwen3")
    assert liger_saved_bytes_per_token_layer(qwen3, 2, 2) == 1032 + 2752 + 768 + 24


def test_patched_on_a_built_model_the_per_head_norms_stay_eager() -> None:
    # apply_liger_kernel_to_qwen3(model=...) (the instance path: HF Trainer's use_liger_kernel)
    # patches base_model.norm, each layer's two norms and MLP, not self_attn.q_norm / k_norm
    arch = from_hf_config(QWEN3, "tiny-qwen3")
    classes = Training(arch=arch, method="full", precision="bf16", micro_batch=1, seq_len=64,
                       liger_kernels="classes")
    instance = classes.model_copy(update={"liger_kernels": "instance"})
    per_layer = activation_bytes(arch, instance).per_token_per_layer
    # the eager q/k norms keep fp32 copies and normed outputs: (4 + 2) x (256 + 128) = 2,304;
    # Liger's keep q and k and a 1/rms per head row: 768 + 24 = 792
    assert per_layer - activation_bytes(arch, classes).per_token_per_layer == 2304 - 792
    # the per-head norms' kernels (forward 2 x 2 x 384, backward 3 x 2 x 384) not counted
    assert (liger_moved_bytes_per_token_layer(arch, classes, 2, 2)
            - liger_moved_bytes_per_token_layer(arch, instance, 2, 2)) == 1536 + 2304


def test_the_eager_parts_replaced_by_hand() -> None:
    llama = from_hf_config(LLAMA, "tiny-llama")
    # full bf16: each RMSNorm an fp32 copy (4 x 256) and the normed input (2 x 256): 1,536,
    # twice; SiLU's input, its output and up's output: 3 x 2 x 688 = 4,128
    assert eager_replaced_saved_bytes_per_token_layer(llama, 2, 2, True) == 3072 + 4128
    # LoRA: the norm weights frozen, no normed copy
    assert eager_replaced_saved_bytes_per_token_layer(llama, 2, 2, False) == 2048 + 4128


# Qwen3 tiny (d 256, q 256, kv 128, f 688), full fine-tuning, per token and layer. Eager parts
# replaced: two block norms 2 (4 d + r d), the q/k norms 4 (q + kv) + a (q + kv), the gated
# activation 3 a f. Liger's saves: two norms 2 (r d + 4), the q/k norms a (q + kv) + 4 (4 + 2),
# SiLUMul 2 a f.
# bf16 (a = r = 2):      eager 3,072 + 2,304 + 4,128 = 9,504;   Liger 1,032 + 792 + 2,752 = 4,576
# fp32 (a = r = 4):      eager 4,096 + 3,072 + 8,256 = 15,424;  Liger 2,056 + 1,560 + 5,504 = 9,120
# bf16-amp (a 2, r 4):   eager 4,096 + 2,304 + 4,128 = 10,528;  Liger 2,056 + 792 + 2,752 = 5,600
@pytest.mark.parametrize(("precision", "saved_less"), [("bf16", 9504 - 4576),
                                                       ("fp32", 15424 - 9120),
                                                       ("bf16-amp", 10528 - 5600)])
def test_the_layer_saves_eager_less_the_replaced_plus_liger(precision: str,
                                                             saved_less: int) -> None:
    arch = from_hf_config(QWEN3, "tiny-qwen3")
    base = Training(arch=arch, method="full", precision=precision, micro_batch=1, seq_len=64)
    liger = base.model_copy(update={"liger_kernels": "classes"})
    eager_layer = activation_bytes(arch, base).per_token_per_layer
    assert eager_layer - activation_bytes(arch, liger).per_token_per_layer == saved_less
    assert activation_bytes(arch, liger).total < activation_bytes(arch, base).total


def test_liger_kernels_move_by_hand() -> None:
    llama = from_hf_config(LLAMA, "tiny-llama")
    t = Training(arch=llama, method="full", precision="bf16", liger_kernels="classes")
    # forward: 2 norms x 2 x 2 x 256 (2,048) + RoPE 2 x 2 x (256 + 128) (1,536) + SwiGLU
    # 3 x 2 x 688 (4,128) = 7,712; backward: 2 x 3 x 2 x 256 (3,072) + 1,536 + 5 x 2 x 688
    # (6,880) = 11,488
    assert liger_moved_bytes_per_token_layer(llama, t, 2, 2) == 7712 + 11488
    ckpt = t.model_copy(update={"checkpointing": True})
    assert liger_moved_bytes_per_token_layer(llama, ckpt, 2, 2) == 2 * 7712 + 11488


def test_liger_takes_operators_off_the_host() -> None:
    llama = from_hf_config(LLAMA, "tiny-llama")
    t = Training(arch=llama, method="full", precision="bf16", micro_batch=1, seq_len=64)
    liger = t.model_copy(update={"liger_kernels": "classes"})
    # per layer: eager 28 forward + 49 backward of those parts; Liger 4 + 8
    assert host_ops_per_micro_batch(arch=llama, t=t) - host_ops_per_micro_batch(
        arch=llama, t=liger) == 2 * ((28 - 4) + (49 - 8))


def test_where_liger_does_not_apply_the_eager_count_stays() -> None:
    gpt2 = from_hf_config(dict(model_type="gpt2", n_embd=256, n_layer=2, n_head=4,
                               vocab_size=1000), "tiny-gpt2")
    t = Training(arch=gpt2, method="full", precision="bf16", seq_len=512,
                 liger_kernels="classes")
    assert liger_layer_applies(gpt2, t) is not None
    assert activation_bytes(gpt2, t).total == activation_bytes(gpt2,
        t.model_copy(update={"liger_kernels": "none"})).total


@pytest.mark.parametrize("update, field", [({"compile": True}, "compile"),
                                            ({"kernels": "megatron"}, "kernels")])
def test_liger_with_another_kernel_path_is_refused(update: dict, field: str) -> None:
    arch = from_hf_config(LLAMA, "tiny-llama")
    with pytest.raises(FieldError, match="Liger's kernels are modelled") as e:
        Training(arch=arch, method="full", precision="bf16", liger_kernels="classes", **update)
    assert e.value.fields == ("liger_kernels", field)


# --- the eager side, on real modules on CPU ----------------------------------------------------

def _saved_bytes(fn, exclude) -> int:
    from saved_storage import saved_storages

    with saved_storages(exclude) as seen:
        out = fn()
    del out
    return sum(s.nbytes for s in seen.values())


@pytest.mark.parametrize("trains", [True, False])
def test_eager_rmsnorm_saves_what_the_replaced_count_says(trains: bool) -> None:
    torch = pytest.importorskip("torch")
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    d, tokens = 256, 32
    norm = LlamaRMSNorm(d).to(torch.bfloat16)
    norm.weight.requires_grad_(trains)
    x = torch.randn(1, tokens, d, dtype=torch.bfloat16, requires_grad=True)
    saved = _saved_bytes(lambda: norm(x), [x, norm.weight])
    # the fp32 copy and, with the weight trained, the normed input; the 1/rms per row (4 per
    # token) is the part the formula leaves out
    expected = tokens * (4 * d + (2 * d if trains else 0))
    assert saved == expected + 4 * tokens


def test_eager_gated_activation_and_rope_save_what_the_count_says() -> None:
    torch = pytest.importorskip("torch")
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    tokens, f = 32, 688
    gate = torch.randn(1, tokens, f, dtype=torch.bfloat16, requires_grad=True)
    up = torch.randn(1, tokens, f, dtype=torch.bfloat16, requires_grad=True)
    # gate (kept by SiLU), SiLU's output and up (kept by the product): 3 a f per token
    assert _saved_bytes(lambda: torch.nn.functional.silu(gate) * up, []) == tokens * 3 * 2 * f
    q = torch.randn(1, 4, tokens, 64, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(1, 2, tokens, 64, dtype=torch.bfloat16, requires_grad=True)
    cos = torch.randn(1, tokens, 64, dtype=torch.bfloat16)
    sin = torch.randn(1, tokens, 64, dtype=torch.bfloat16)
    # the rotary embedding keeps cos and sin only (shared by the layers)
    assert _saved_bytes(lambda: apply_rotary_pos_emb(q, k, cos, sin), [q, k, cos, sin]) == 0


def _fwd_bwd_ops(fn, inputs, autocast: bool = False) -> tuple[int, int]:
    import contextlib

    import torch

    from gpuhours.torchkit.ops import count_ops

    box: dict = {}
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with ctx:
        forward = count_ops(lambda: box.setdefault("out", fn()))
    outs = box["out"] if isinstance(box["out"], tuple) else (box["out"],)
    grads = [torch.ones_like(o) for o in outs]
    backward = count_ops(lambda: torch.autograd.grad(outs, inputs, grads))
    return sum(forward.values()), sum(backward.values())


@pytest.mark.parametrize("kind", ["fp32", "half", "autocast"])
def test_the_eager_operators_liger_replaces_are_counted(kind: str) -> None:
    torch = pytest.importorskip("torch")
    from transformers.models.llama.modeling_llama import LlamaRMSNorm, apply_rotary_pos_emb

    half = torch.bfloat16
    act = torch.float32 if kind == "fp32" else half  # q, k, gate, up
    residual = half if kind == "half" else torch.float32  # the norms' input, the rotary tables
    d, s = 64, 8
    norm = LlamaRMSNorm(d).to(residual)
    x = torch.randn(1, s, d, dtype=residual, requires_grad=True)
    q = torch.randn(1, 4, s, 16, dtype=act, requires_grad=True)
    k = torch.randn(1, 2, s, 16, dtype=act, requires_grad=True)
    cos, sin = torch.randn(1, s, 16, dtype=residual), torch.randn(1, s, 16, dtype=residual)
    gate = torch.randn(1, s, 96, dtype=act, requires_grad=True)
    up = torch.randn(1, s, 96, dtype=act, requires_grad=True)
    amp = kind == "autocast"
    n_fwd, n_bwd = _fwd_bwd_ops(lambda: norm(x), [x, norm.weight], amp)
    r_fwd, r_bwd = _fwd_bwd_ops(lambda: apply_rotary_pos_emb(q, k, cos, sin), [q, k], amp)
    m_fwd, m_bwd = _fwd_bwd_ops(lambda: torch.nn.functional.silu(gate) * up, [gate, up], amp)
    assert (2 * n_fwd + r_fwd + m_fwd, 2 * n_bwd + r_bwd + m_bwd) == LIGER_REPLACED_EAGER_OPS[kind]


# --- importers ----------------------------------------------------------------------------------

@pytest.mark.parametrize("flags, set_", [
    ("liger_rope: true\nliger_rms_norm: true\nliger_glu_activation: true\n", True),
    ("liger_rms_norm: true\n", False),
])
def test_axolotl_liger_flags(tmp_path, flags: str, set_: bool) -> None:
    from gpuhours.importers import read_setup

    path = tmp_path / "liger.yaml"
    path.write_text("base_model: Qwen/Qwen2.5-7B\nmicro_batch_size: 2\nsequence_len: 2048\n"
                    "bf16: true\nplugins:\n  - axolotl.integrations.liger.LigerPlugin\n"
                    + flags + "liger_layer_norm: true\n")
    got = read_setup(path)
    # LigerPlugin patches before the model is built (axolotl 067b021c plugin.py pre_model_load)
    assert got.fields.get("liger_kernels") == ("classes" if set_ else None)
    assert any(u.startswith("liger_layer_norm=true") for u in got.unused)
    if not set_:  # only some of the three: said, not set
        assert any(u.startswith("liger_rms_norm=true: only some") for u in got.unused)


def test_verl_use_liger_patches_the_built_actor(tmp_path) -> None:
    import yaml

    from gpuhours.importers import read_setup

    # verl's fsdp_workers: _apply_liger_kernel_to_instance(model=actor_module)
    fixture = Path(__file__).parent / "data" / "importers" / "verl_grpo_qwen2_5_3b_lora.yaml"
    cfg = yaml.safe_load(fixture.read_text())
    cfg["actor_rollout_ref"]["model"]["use_liger"] = True
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    got = read_setup(path)
    assert got.fields["liger_kernels"] == "instance"
    assert "loss_kernel" not in got.fields or got.fields["loss_kernel"] != "fused-linear"


@pytest.mark.parametrize("ckpt", [False, True])
def test_the_estimate_moves_liger_bytes_in_place_of_the_eager_passes(ckpt: bool) -> None:
    from cli_json import LLAMA_3B_FULL, estimate_json
    from gpuhours import catalog
    from gpuhours.estimate import assumptions as A
    from gpuhours.resolve import resolve_model

    args = (*LLAMA_3B_FULL, "--checkpointing" if ckpt else "--no-checkpointing")
    eager = estimate_json(*args)["step_time_breakdown_s"]["memory_bound_s"]["value"]
    liger = estimate_json(*args, "--liger-kernels", "classes")[
        "step_time_breakdown_s"]["memory_bound_s"]["value"]
    arch = resolve_model("llama-3.2-3b")[0]
    # Llama 3.2 3B (d 3072, q 3072, kv 1024, f 8192), full bf16, per token and layer: the eager
    # parts Liger replaces save 2 (4 d + 2 d) + 3 x 2 f = 86,016 bytes, each moved
    # ELEMENTWISE_PASSES times (once more when recomputed); Liger's kernels move forward
    # 2 x 2 x 2 d + 2 x 2 (q + kv) + 3 x 2 f = 90,112 and backward 2 x 3 x 2 d + 2 x 2 (q + kv)
    # + 5 x 2 f = 135,168 (the forward twice under checkpointing)
    liger_moved = 2 * 90112 + 135168 if ckpt else 90112 + 135168
    passes = A.ELEMENTWISE_PASSES.value + (1.0 if ckpt else 0.0)
    per_token_layer = 86016 * passes - liger_moved
    bw = catalog.gpu("a100-80gb").memory_bw_gb_per_s * 1e9 * A.BANDWIDTH_EFFICIENCY.value
    assert eager - liger == pytest.approx(2 * 4096 * arch.num_layers * per_token_layer / bw)
