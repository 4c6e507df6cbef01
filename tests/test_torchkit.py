"""gpuhours.torchkit, the toolkit bench and trace share: attention and grouped-GEMM formulas by
hand, the MFU convention against the analytic estimator, MoE FLOPs counted alike by bench (real
steps) and trace (fake tensors) and by a hand count, and the storage-identity core.

No timing assertions."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuhours.torchkit.formulas import (
    attention_backward_flops,
    attention_forward_flops,
    grouped_mm_flops,
    score_pairs,
)

# --- formulas (no torch) ----------------------------------------------------------------------


@pytest.mark.parametrize("s_q, s_k", [(1, 1), (7, 7), (64, 64), (3, 8), (8, 3)])
def test_causal_pairs_equal_the_mask_count(s_q: int, s_k: int) -> None:
    """torch's is_causal keeps query i's keys 0..i (the top-left triangle of S_q x S_k)."""
    kept = sum(1 for i in range(s_q) for j in range(s_k) if j <= i)
    assert score_pairs(s_q, s_k, causal=True) == kept
    assert score_pairs(s_q, s_k, causal=False) == s_q * s_k


def test_mfu_attention_is_the_estimators_causal_half() -> None:
    """Per token and layer the estimator counts 4 x H x D x (S+1)/2 forward and twice that
    backward (estimate/flops.py); the "mfu" convention gives exactly that for a causal call,
    and torch's convention 4 x H x D x S forward, 10 x H x D x S backward."""
    b, h, hkv, s, d = 2, 8, 2, 64, 16
    q, kv = (b, h, s, d), (b, hkv, s, d)
    tokens = b * s
    fwd = attention_forward_flops(q, kv, kv, True, "mfu")
    bwd = attention_backward_flops(q, kv, kv, True, "mfu")
    assert fwd == pytest.approx(tokens * 4 * h * d * (s + 1) / 2, rel=1e-12)
    assert bwd == 2 * fwd
    assert attention_forward_flops(q, kv, kv, True, "torch") == 4 * b * h * s * s * d
    assert attention_backward_flops(q, kv, kv, True, "torch") == 10 * b * h * s * s * d
    # no causal mask (an encoder): the full matrix in both, backward still 2x vs 2.5x
    assert attention_forward_flops(q, kv, kv, False, "mfu") == 4 * b * h * s * s * d
    assert attention_backward_flops(q, kv, kv, False, "mfu") == 8 * b * h * s * s * d


@pytest.mark.parametrize("a_shape, b_shape, by_loop", [
    # (tokens x k) @ (experts x k x n), tokens split 5 / 4 / 3 over three experts
    ((12, 8), (3, 8, 4), sum(2 * m * 8 * 4 for m in (5, 4, 3))),
    # weight gradient (k x tokens) @ (tokens x n) -> (experts x k x n), tokens split 5 / 4 / 3
    ((8, 12), (12, 4), sum(2 * 8 * m * 4 for m in (5, 4, 3))),
    # (experts x m x k) @ (k x n_total), n split 2 / 6 / 4
    ((3, 5, 8), (8, 12), sum(2 * 5 * 8 * n for n in (2, 6, 4))),
    # batched (experts x m x k) @ (experts x k x n)
    ((3, 5, 8), (3, 8, 4), 3 * 2 * 5 * 8 * 4),
])
def test_grouped_mm_layouts_against_a_loop_over_groups(a_shape: tuple[int, ...],
                                                       b_shape: tuple[int, ...],
                                                       by_loop: int) -> None:
    assert grouped_mm_flops(a_shape, b_shape) == by_loop


def test_torchkit_imports_no_torch() -> None:
    """bench's runner imports torchkit at module level: the light path must stay light."""
    code = ("import sys, json; import gpuhours.torchkit.flops, gpuhours.torchkit.storage, "
            "gpuhours.torchkit.formulas; print(json.dumps('torch' in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) is False


# --- with torch -------------------------------------------------------------------------------

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from gpuhours.bench.config import BenchSetup, StopRule  # noqa: E402
from gpuhours.bench.device import cpu_backend  # noqa: E402
from gpuhours.bench.model import build  # noqa: E402
from gpuhours.bench.runner import Trainer, default_loss, make_optimizer, measure  # noqa: E402
from gpuhours.estimate.flops import training_flops_per_token  # noqa: E402
from gpuhours.torchkit.flops import count_flops, flop_registry  # noqa: E402
from gpuhours.torchkit.storage import LiveStorages  # noqa: E402
from gpuhours.trace.setup import TraceSetup  # noqa: E402
from gpuhours.trace.step import run_steps  # noqa: E402

aten = torch.ops.aten
B, S = 2, 32
#: Mixtral and Qwen2-MoE built small (random weights, this CPU): 4 experts, 2 per token, GQA
MIXTRAL = {"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 96,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "vocab_size": 256, "num_local_experts": 4, "num_experts_per_tok": 2,
           "max_position_embeddings": 128, "tie_word_embeddings": False}
QWEN2_MOE = {"model_type": "qwen2_moe", "hidden_size": 64, "intermediate_size": 128,
             "moe_intermediate_size": 48, "shared_expert_intermediate_size": 80,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "vocab_size": 256, "num_experts": 4, "num_experts_per_tok": 2,
             "max_position_embeddings": 128, "tie_word_embeddings": False}
QWEN2 = {"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "vocab_size": 256, "max_position_embeddings": 128, "tie_word_embeddings": False}


def active_matmul_weights(cfg: dict[str, Any]) -> int:
    """Weights one token multiplies with, from the config by hand: q, k, v, o; the router, the
    routed experts' gate/up/down and the shared expert with its gate (Qwen2-MoE), or the dense
    MLP; the LM head. Biases and norms are not matmuls; embeddings are lookups."""
    d, layers = cfg["hidden_size"], cfg["num_hidden_layers"]
    head_dim = d // cfg["num_attention_heads"]
    q = cfg["num_attention_heads"] * head_dim
    kv = cfg["num_key_value_heads"] * head_dim
    attention = d * q + 2 * d * kv + q * d
    experts = cfg.get("num_local_experts") or cfg.get("num_experts") or 0
    if experts:
        ffn = cfg.get("moe_intermediate_size") or cfg["intermediate_size"]
        mlp = d * experts + cfg["num_experts_per_tok"] * 3 * d * ffn
        shared = cfg.get("shared_expert_intermediate_size", 0)
        if shared:
            mlp += 3 * d * shared + d  # the shared expert and its sigmoid gate (d -> 1)
    else:
        mlp = 3 * d * cfg["intermediate_size"]
    return layers * (attention + mlp) + d * cfg["vocab_size"]


def hand_count(cfg: dict[str, Any], convention: str) -> int:
    """One training step of B x S tokens: 6 x active matmul weights x tokens, plus causal
    attention: per layer and head 2 x 2 x D x pairs forward; backward 2x forward ("mfu", pairs
    = S(S+1)/2) or 2.5x (torch's, pairs = S^2)."""
    tokens = B * S
    heads = cfg["num_attention_heads"]
    head_dim = cfg["hidden_size"] // heads
    if convention == "mfu":
        attention = 3 * 4 * B * heads * head_dim * (S * (S + 1) // 2)
    else:
        attention = (4 + 10) * B * heads * head_dim * S * S
    return 6 * active_matmul_weights(cfg) * tokens + cfg["num_hidden_layers"] * attention


def _config_json(cfg: dict[str, Any], tmp_path: Path) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def _bench_model(cfg: dict[str, Any], tmp_path: Path) -> Any:
    setup = BenchSetup(model=_config_json(cfg, tmp_path), micro_batch=B, seq_len=S,
                       precision="fp32")
    return build(setup, "cpu")


def _trainer(built: Any) -> Trainer:
    opt = make_optimizer([p for p in built.model.parameters() if p.requires_grad], "adamw",
                         "foreach", 1e-4)
    return Trainer(built.model, opt, built.make_batch, default_loss, cpu_backend(1), "fp32", 1)


@pytest.mark.parametrize("cfg", [MIXTRAL, QWEN2_MOE], ids=["mixtral", "qwen2_moe"])
def test_bench_counts_moe_experts_as_the_trace_and_the_hand_count(cfg: dict[str, Any],
                                                                  tmp_path: Path) -> None:
    """bench's count of a real step (torch's attention convention) equals the trace's count of
    the same step on fake tensors, and the hand count exactly: the experts' grouped GEMMs are in
    (before torchkit, bench counted them as zero: 19.6 of 47.9 MFLOP for the Mixtral here)."""
    built = _bench_model(cfg, tmp_path)
    trainer = _trainer(built)
    trainer.step()
    bench = count_flops(trainer.step)
    assert bench.by_op.get("aten._grouped_mm", 0) > 0
    setup = TraceSetup(model=_config_json(cfg, tmp_path), micro_batch=B, seq_len=S,
                       precision="fp32", steps=1)
    traced = run_steps(cfg, setup, "m")
    trace_total = sum(key[3] * calls for key, calls in traced.op_calls.items())
    assert bench.total_flops == trace_total == hand_count(cfg, "torch")


@pytest.mark.parametrize("cfg", [MIXTRAL, QWEN2_MOE, QWEN2], ids=["mixtral", "qwen2_moe", "qwen2"])
def test_bench_mfu_flops_are_the_estimators_model_flops(cfg: dict[str, Any],
                                                        tmp_path: Path) -> None:
    """`bench`'s model FLOPs (MFU's numerator, counted in the "mfu" convention) equal the hand
    count and gpuhours.estimate's model FLOPs per token x tokens, to 1e-9 (float rounding of
    the estimator's (S+1)/2): one MFU convention in both. Before, bench counted the full S x S
    with five backward attention matmuls, and no MoE experts."""
    built = _bench_model(cfg, tmp_path)
    result = measure(_trainer(built), cpu_backend(1), setup={}, peak=None, environment={},
                     rule=StopRule(warmup_steps=1, min_steps=2, max_steps=2), track_memory=False)
    estimator = training_flops_per_token(built.arch, S).model_flops_per_token * B * S
    assert result.model_flops_per_step == hand_count(cfg, "mfu")
    assert result.model_flops_per_step == pytest.approx(estimator, rel=1e-9)
    assert result.flops is not None and result.flops.convention == "mfu"
    assert "causal half" in result.model_flops_basis


def test_mfu_registry_replaces_torchs_cuda_attention_formulas() -> None:
    """The CUDA kernels a GPU bench runs: torch's formula (full S x S) under "torch", the causal
    half under "mfu" when the kernel is told is_causal, read from the kernel's own arguments."""
    b, h, s, d = 2, 4, 16, 8
    q = torch.empty(b, h, s, d, device="meta")
    flash = aten._scaled_dot_product_flash_attention
    efficient = aten._scaled_dot_product_efficient_attention
    torch_fwd, mfu_fwd = flop_registry("torch"), flop_registry("mfu")
    full, half = 4 * b * h * s * s * d, 4 * b * h * d * s * (s + 1) // 2
    assert torch_fwd[flash](q, q, q, 0.0, True, out_val=None) == full
    assert mfu_fwd[flash](q, q, q, 0.0, True, out_val=None) == half
    assert mfu_fwd[flash](q, q, q, 0.0, False, out_val=None) == full
    # is_causal is the 7th argument of the efficient kernel; given by keyword here
    assert mfu_fwd[efficient](q, q, q, None, False, is_causal=True, out_val=None) == half


def test_live_storages_free_a_uid_when_its_last_holder_goes() -> None:
    freed: list[int] = []
    live = LiveStorages(freed.append)
    a = torch.empty(16)
    live.add(a, 1)
    view = a[4:]
    assert live.uid_of(view) == 1 and view in live  # a view is its base's storage
    b = torch.empty(16)
    live.alias(b, 1)  # b took over a's bytes (an accumulated gradient)
    del a, view
    gc.collect()
    assert freed == [] and live.uid_of(b) == 1
    del b
    gc.collect()
    assert freed == [1]


# --- activation checkpointing across transformers releases ---------------------------------
class _Transformers517Model:
    """What transformers 5.17 offers (the H100 image's release): only the old method names."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None):
        self.calls.append(("enable", gradient_checkpointing_kwargs))

    def gradient_checkpointing_disable(self):
        self.calls.append(("disable", {}))


def test_checkpointing_uses_the_old_name_where_only_it_exists():
    from gpuhours.torchkit.checkpointing import set_checkpointing

    m = _Transformers517Model()
    set_checkpointing(m, True)
    set_checkpointing(m, False)
    assert m.calls == [("enable", {"use_reentrant": False}), ("disable", {})]


def test_checkpointing_on_a_real_model_recomputes_the_layers():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from gpuhours.torchkit.checkpointing import set_checkpointing

    cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=64)
    model = transformers.LlamaForCausalLM(cfg)
    model.train()
    calls = []
    layer = model.model.layers[0].mlp
    # a pre-hook: torch's non-reentrant recomputation stops early, once the tensors backward
    # needs exist again, so a module's post-forward hook need not run a second time
    layer.register_forward_pre_hook(lambda *a: calls.append(1))
    ids = torch.randint(0, 64, (1, 8))
    set_checkpointing(model, True)
    model(input_ids=ids, labels=ids).loss.backward()
    assert len(calls) == 2  # forward, then the recomputation in backward
    set_checkpointing(model, False)
    calls.clear()
    model(input_ids=ids, labels=ids).loss.backward()
    assert len(calls) == 1


# --- the operator counts the estimate's host floor uses (estimate/assumptions.py OPS_*) -----
@pytest.fixture(scope="module")
def op_counts():
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    import warnings

    from host_overhead import per_layer  # scripts/host_overhead.py (pytest pythonpath)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {(model, method, ckpt, prec): per_layer(model, method=method, checkpointing=ckpt,
                                                       precision=prec)
                for model in ("llama-3.2-3b", "qwen2.5-0.5b")
                for method, ckpt, prec in (("full", False, "bf16-mixed"),
                                           ("lora", False, "bf16-mixed"),
                                           ("full", True, "bf16-mixed"),
                                           ("full", False, "fp32"), ("full", False, "bf16"))}


def test_operator_counts_per_layer_match_the_estimate(op_counts):
    from gpuhours.estimate import assumptions as A

    for prec, kind in (("bf16-mixed", "autocast"), ("fp32", "fp32"), ("bf16", "half")):
        c = op_counts[("llama-3.2-3b", "full", False, prec)]
        assert (c["forward"]["per_layer"], c["backward"]["per_layer"]) == A.OPS_PER_LAYER[kind]
    # Qwen2's q, k and v biases add their gradients to the backward, nothing to the forward
    q = op_counts[("qwen2.5-0.5b", "full", False, "bf16-mixed")]
    assert q["forward"]["per_layer"] == 55
    assert q["backward"]["per_layer"] == 89 + 3 * A.OPS_PER_BIAS_GRAD
    assert q["forward"]["per_step"] == A.OPS_PER_MICRO_BATCH[0]
    assert q["backward"]["per_step"] == A.OPS_PER_MICRO_BATCH[1]
    assert q["optimizer"]["per_step"] == A.OPS_OPTIMIZER["foreach"]


def test_operator_counts_of_lora_and_checkpointing_match_the_estimate(op_counts):
    from gpuhours.estimate import assumptions as A

    full = op_counts[("llama-3.2-3b", "full", False, "bf16-mixed")]
    lora = op_counts[("llama-3.2-3b", "lora", False, "bf16-mixed")]
    a_fwd, a_bwd = A.OPS_PER_LORA_ADAPTER["autocast"]
    # 7 adapters (all-linear); the frozen base linears drop one weight-gradient matmul each
    assert lora["forward"]["per_layer"] == pytest.approx(55 + 7 * a_fwd, abs=0.5)
    assert lora["backward"]["per_layer"] == pytest.approx(89 + 7 * (a_bwd - 1), abs=0.5)
    # checkpointing issues the layer's forward again inside the backward (torch's early stop
    # skips the last few operators: the estimate counts the whole forward, within 10%)
    ckpt = op_counts[("llama-3.2-3b", "full", True, "bf16-mixed")]
    recomputed = ckpt["backward"]["per_layer"] - full["backward"]["per_layer"]
    assert recomputed == pytest.approx(full["forward"]["per_layer"], rel=0.10)
