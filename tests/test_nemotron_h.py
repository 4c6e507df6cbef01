"""Nemotron-H, Nemotron Nano 2 and Nemotron 3 (model_type nemotron_h, issue 13): one kind of
layer each (hybrid_override_pattern: M Mamba-2, * attention, - MLP, E MoE), each with its own
pre-norm. Parameters held to transformers 5.23 (`sum(p.numel())` on the meta device), the
Nemotron-3-Nano-30B-A3B row's parts, KV cache, recurrent state and activations by hand.

Hand numbers use Nemotron-3-Nano-30B-A3B (the catalog row): hidden 2,688, 52 layers (23 M, 23 E,
6 *); Mamba-2 64 heads of 64 (inner 4,096), 8 groups of state 128 (conv_dim 4,096 + 2 x 8 x 128
= 6,144), conv 4, chunk 128; attention 32 q / 2 kv heads of 128; 128 non-gated experts of 1,856,
top-6, a shared expert of 3,712; vocabulary 131,072, untied.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuhours import catalog
from gpuhours.errors import FieldError, InputError
from gpuhours.estimate.arch import from_hf_config
from gpuhours.estimate.flops import attention_forward_flops_per_token, generation_flops_per_token
from gpuhours.estimate.generation import kv_cache_bytes_per_token, state_bytes_per_sequence_per_gpu
from gpuhours.estimate.memory import activation_bytes_per_token_layer
from gpuhours.estimate.params import count_params
from gpuhours.resolve import resolve_model

NONE_IDS = dict(eos_token_id=None, bos_token_id=None, pad_token_id=None)
SMALL_BASE: dict[str, Any] = dict(model_type="nemotron_h", hidden_size=64, num_attention_heads=4,
                                  num_key_value_heads=2, head_dim=16, intermediate_size=96,
                                  vocab_size=500, mamba_num_heads=8, mamba_head_dim=12,
                                  ssm_state_size=16, n_groups=2)
SMALL: list[dict[str, Any]] = [
    # dense: M, *, - only (Nemotron-H 8B/56B, Nano 2); attention heads wider than hidden / heads
    dict(SMALL_BASE, hybrid_override_pattern="M-M*-M-", head_dim=24),
    # MoE with a dense MLP layer too, two router groups (no parameters)
    dict(SMALL_BASE, hybrid_override_pattern="MEM*EME-", n_routed_experts=4,
         num_experts_per_tok=2, moe_intermediate_size=32, moe_shared_expert_intermediate_size=48,
         n_group=2, topk_group=1),
    # the legacy layer names, biases on the mixers and MLPs, no conv bias, conv 3, old field
    # spellings; tie_word_embeddings is not honoured by NemotronHForCausalLM (5.23)
    dict(SMALL_BASE, layers_block_type=["mamba", "attention", "mlp", "mamba"], use_bias=True,
         mlp_bias=True, mamba_conv_bias=False, mamba_d_conv=3, mamba_n_groups=1,
         tie_word_embeddings=True),
    # NemotronHConfig's own default pattern (M, E, *, -) and MoE sizes with small widths
    dict(SMALL_BASE, moe_intermediate_size=24, moe_shared_expert_intermediate_size=40),
]


def _built_count(config: dict[str, Any]) -> int:
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    fields = {k: v for k, v in config.items() if k not in ("architectures", "torch_dtype")}
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**fields))
    return int(sum(p.numel() for p in model.parameters()))


@pytest.mark.parametrize("variant", SMALL)
def test_small_variants_are_exact(variant: dict[str, Any]) -> None:
    config = {**NONE_IDS, **variant}
    assert count_params(from_hf_config(config, "small")).total == _built_count(config)


@pytest.mark.parametrize("path", ["examples/configs/nemotron-h-8b-base.json",
                                  "examples/configs/nemotron-nano-9b-v2.json"])
def test_example_configs_are_exact(path: str) -> None:
    """The two configs kept out of the catalog (their published totals are rounded beyond its
    1% check) are counted exactly all the same: 8,100,852,736 and 8,888,227,328."""
    config = json.loads((Path(__file__).parent.parent / path).read_text())
    real = _built_count(config)
    assert count_params(from_hf_config(config, path)).total == real
    assert real == {"examples/configs/nemotron-h-8b-base.json": 8_100_852_736,
                    "examples/configs/nemotron-nano-9b-v2.json": 8_888_227_328}[path]


def test_nano_parameters_by_hand() -> None:
    """Per Mamba-2 layer: in_proj 2688 x (4096 + 6144 + 64), out_proj 4096 x 2688, conv 6144 x 4
    and its bias, dt_bias, A_log and D (64 each), the gated norm (4096). Per attention layer:
    q and o 2688 x 4096, k and v 2688 x 256. Per MoE layer: 128 experts of up and down 2688 x
    1856, the router 128 x 2688, the shared expert up and down 2688 x 3712. One norm a layer,
    the final norm, the embedding and the untied head 131072 x 2688."""
    d = 2688
    mamba = d * 10304 + 4096 * d + 6144 * 5 + 3 * 64 + 4096
    attention = 2 * d * 4096 + 2 * d * 256
    moe = 128 * 2 * d * 1856 + 128 * d + 2 * d * 3712
    arch, _ = resolve_model("nemotron-3-nano-30b-a3b")
    counts = count_params(arch)
    assert counts.total == (23 * mamba + 6 * attention + 23 * moe + 52 * d + d
                            + 2 * 131072 * d) == 31_577_937_344
    # a token's matmul weights: the mixers' projections, attention, 6 experts, the router, the
    # shared expert, the head
    active = (23 * (d * 10304 + 4096 * d) + 6 * attention
              + 23 * (6 * 2 * d * 1856 + 128 * d + 2 * d * 3712) + 131072 * d)
    assert counts.matmul_active == active == 3_226_804_224


def test_nano_kv_cache_and_state_by_hand() -> None:
    """KV only on the 6 attention layers: 2 x 6 x 2 x 128 x 2 bytes = 6,144 B a token. The state
    of a sequence on the 23 Mamba-2 layers: 64 x 64 x 128 in float32 (NemotronHConfig's
    mamba_ssm_cache_dtype default, which vLLM's NemotronH hook takes) and the conv window 6,144 x
    3 in the KV dtype: 23 x (2,097,152 + 36,864) = 49,082,368 B; bf16 when the config says so."""
    arch, _ = resolve_model("nemotron-3-nano-30b-a3b")
    assert (arch.attention_layer_count, arch.ssm_layers, arch.moe_layers) == (6, 23, 23)
    assert kv_cache_bytes_per_token(arch, 2.0) == 6_144
    assert state_bytes_per_sequence_per_gpu(arch, 2.0, 1) == 49_082_368
    _, cfg = catalog.model("nemotron-3-nano-30b-a3b")
    half = from_hf_config({**cfg, "mamba_ssm_cache_dtype": "bfloat16"}, "bf16 state")
    assert state_bytes_per_sequence_per_gpu(half, 2.0, 1) == 23 * (64 * 64 * 128 + 6144 * 3) * 2


def test_nano_flops_by_hand() -> None:
    """The scan on 23 layers (SSD with chunk 128: 2 x (8 x 128 x 128 + 64 x (128 x 64 + 2 x 128 x
    64)) + 2 x 6144 x 4 = 3,457,024 a layer) and causal attention on 6: 4 x 4096 x 6 per key. A
    decode step: 4 x 64 x 64 x 128 + 2 x 6144 x 4 a Mamba layer, the 6 layers' keys."""
    arch, _ = resolve_model("nemotron-3-nano-30b-a3b")
    scan = 2 * (8 * 128 * 128 + 64 * (128 * 64 + 2 * 128 * 64)) + 2 * 6144 * 4
    assert scan == 3_457_024
    assert attention_forward_flops_per_token(arch, 4095) == 23 * scan + 4 * 4096 * 6 * 2048
    step = 4 * 64 * 64 * 128 + 2 * 6144 * 4
    assert generation_flops_per_token(arch, 1000) == (2 * 3_226_804_224 + 4 * 4096 * 6 * 1000
                                                      + 23 * step)


def test_nano_activations_are_means_over_the_layer_kinds() -> None:
    """bf16-mixed full fine-tuning, flash attention, by the conventions of
    estimate/memory.py: per token, one pre-norm a layer (its fp32 input and the normed tensor in
    bf16: 4d + 2d); attention's q, k, v, output and the q/k/v and o_proj inputs (2 (q + 2 kv) +
    2q + 2d + 2q) on 6 layers; the mixer's in_proj output (inner + conv_dim + heads) and the
    in/out_proj inputs (d + inner) on 23; on the 23 MoE layers 6 experts (relu2's output, its
    input to down_proj and the expert's input: 2 (f + f + d), and the expert output 2d), fp32
    router probabilities (4 x 128) and the shared expert 2 (f_s + f_s + d). The M and * layers
    have no MLP: the MoE bytes are not averaged with a dense MLP there."""
    arch, _ = resolve_model("nemotron-3-nano-30b-a3b")
    d, q, kv, f, fs = 2688, 4096, 256, 1856, 3712
    norm = 4 * d + 2 * d
    attention = 2 * (q + 2 * kv) + 2 * q + 2 * d + 2 * q
    mixer = 2 * (4096 + 6144 + 64) + 2 * (d + 4096)
    moe = 6 * (2 * (2 * f + d) + 2 * d) + 4 * 128 + 2 * (2 * fs + d)
    tensors, scores = activation_bytes_per_token_layer(arch, "bf16-mixed", True, 4096)
    assert scores == 0
    assert tensors == pytest.approx(norm + (6 * attention + 23 * mixer + 23 * moe) / 52)


def test_latent_moe_and_bad_patterns_are_refused() -> None:
    with pytest.raises(FieldError, match="moe_latent_size"):
        from_hf_config({**SMALL[1], "moe_latent_size": 32}, "latent")
    with pytest.raises(InputError, match="hybrid_override_pattern"):
        from_hf_config({**SMALL_BASE, "hybrid_override_pattern": "MX*"}, "bad")
    with pytest.raises(InputError, match="mamba_ssm_cache_dtype"):
        from_hf_config({**SMALL[0], "mamba_ssm_cache_dtype": "int8"}, "bad")


def test_cli_refuses_a_bad_pattern_with_exit_2(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gpuhours.cli import app

    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({**SMALL_BASE, "hybrid_override_pattern": "M?-"}))
    result = CliRunner().invoke(app, ["estimate", "--model", str(bad), "--gpu", "h100"],
                                env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 2, result.output
    assert "hybrid_override_pattern" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("args", [
    ("estimate", "--model", "nemotron-3-nano", "--gpu", "h100", "--gpus", "8", "--zero", "3",
     "--seq", "4096", "--checkpointing", "--json"),
    ("estimate", "--model", "nemotron-h-56b", "--gpu", "h100", "--method", "lora",
     "--lora-targets", "attention", "--gpus", "8", "--zero", "3", "--checkpointing", "--json"),
    ("generation", "--model", "nemotron-3-nano", "--gpu", "h100", "--engine", "vllm", "--json"),
])
def test_cli_estimates_and_generates(args: tuple[str, ...]) -> None:
    from typer.testing import CliRunner

    from gpuhours.cli import app

    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)
