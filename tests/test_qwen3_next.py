"""Qwen3-Next and Qwen3.5 (issue 13, RL row 41): Gated DeltaNet linear attention in three layers
of four, gated full attention in the fourth, Qwen3.5's vision tower. Parameters held to
transformers 5.23 (`sum(p.numel())` on the meta device), the 9B's parts, the delta rule's FLOPs,
the recurrent state and the KV cache by hand, the vision tower against a small real one.

Hand numbers use Qwen3.5-9B (the catalog row; Qwen3_5TextConfig's defaults): hidden 4,096, 32
layers (24 DeltaNet, 8 attention), DeltaNet 16 q/k heads and 32 v heads of 128 (key_dim 2,048,
value_dim 4,096, conv_dim 8,192), conv 4; attention 16 q / 4 kv heads of 256; FFN 12,288.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuhours.estimate.arch import from_hf_config
from gpuhours.estimate.flops import attention_forward_flops_per_token, generation_flops_per_token
from gpuhours.estimate.generation import kv_cache_bytes_per_token, state_bytes_per_sequence_per_gpu
from gpuhours.estimate.lora import lora_params
from gpuhours.estimate.params import count_params
from gpuhours.estimate.ssm import hybrid_layer_bytes
from gpuhours.estimate.vision import (
    ImageGrid,
    image_grid,
    vision_activation_bytes,
    vision_forward_flops,
    vision_params,
    vision_tower_from_config,
)
from gpuhours.resolve import resolve_model
from vision_tower import GRID_H, GRID_W, forward_flops_and_params, saved_bytes

NONE_IDS = dict(eos_token_id=None, bos_token_id=None, pad_token_id=None)
SMALL_TEXT = dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, intermediate_size=96, vocab_size=500,
                  linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
                  linear_value_head_dim=8, **NONE_IDS)
SMALL_VISION = dict(depth=2, hidden_size=32, intermediate_size=48, num_heads=2,
                    out_hidden_size=64, num_position_embeddings=16, patch_size=8)
SMALL: list[dict[str, Any]] = [
    # MoE with dense layers by mlp_only_layers and decoder_sparse_step, biased attention,
    # value heads of another width than the keys, conv 3
    dict(model_type="qwen3_next", hidden_size=64, num_hidden_layers=6, num_attention_heads=4,
         num_key_value_heads=2, head_dim=16, intermediate_size=96, vocab_size=500,
         num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
         shared_expert_intermediate_size=48, linear_num_key_heads=2, linear_num_value_heads=4,
         linear_key_head_dim=8, linear_value_head_dim=12, linear_conv_kernel_dim=3,
         mlp_only_layers=[0], decoder_sparse_step=2, attention_bias=True, **NONE_IDS),
    # no experts (a dense MLP everywhere), layer_types given, tied
    dict(model_type="qwen3_next", hidden_size=64, num_hidden_layers=5, num_attention_heads=4,
         num_key_value_heads=4, head_dim=16, intermediate_size=96, vocab_size=500,
         num_experts=0, num_experts_per_tok=2, linear_num_key_heads=4, linear_num_value_heads=4,
         linear_key_head_dim=8, linear_value_head_dim=8, tie_word_embeddings=True,
         layer_types=["full_attention", "linear_attention", "full_attention",
                      "linear_attention", "linear_attention"], **NONE_IDS),
    dict(model_type="qwen3_5_text", **{**SMALL_TEXT, "linear_num_value_heads": 6,
                                       "linear_value_head_dim": 16},
         full_attention_interval=2),
    dict(model_type="qwen3_5_moe_text", **{**SMALL_TEXT, "num_experts": 4,
                                           "num_experts_per_tok": 2,
                                           "moe_intermediate_size": 32,
                                           "shared_expert_intermediate_size": 48}),
    dict(model_type="qwen3_5", text_config=SMALL_TEXT, vision_config=SMALL_VISION,
         tie_word_embeddings=True),
    # the outer config's tie_word_embeddings decides (absent: False), not text_config's
    dict(model_type="qwen3_5", text_config={**SMALL_TEXT, "tie_word_embeddings": True},
         vision_config=SMALL_VISION),
    dict(model_type="qwen3_5_moe", vision_config=SMALL_VISION,
         text_config={**SMALL_TEXT, "num_experts": 4, "num_experts_per_tok": 2,
                      "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48}),
]


def _built(config: dict[str, Any]) -> int:
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    hf = transformers.AutoConfig.for_model(**config)
    with torch.device("meta"):
        if config["model_type"] in ("qwen3_5", "qwen3_5_moe"):
            model = transformers.AutoModelForImageTextToText.from_config(hf)
        else:
            model = transformers.AutoModelForCausalLM.from_config(hf)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("config", SMALL, ids=[str(i) for i in range(len(SMALL))])
def test_small_variants_are_exact(config: dict[str, Any]) -> None:
    assert count_params(from_hf_config(config, "small")).total == _built(config)


def test_qwen35_9b_parameters_by_hand() -> None:
    """A DeltaNet mixer: in_proj 4096 x (2 x 2048 + 2 x 4096 + 2 x 32), out_proj 4096 x 4096,
    conv 8192 x 4 (no bias), dt_bias and A_log (32 each), the gated norm (128): 67,403,968.
    A gated attention layer: q_proj 4096 x 8192 (query and gate), k and v 4096 x 1024, o 4096 x
    4096, q/k norms 2 x 256: 58,720,768. MLP 3 x 4096 x 12288; two norms a layer; embedding
    and untied head 248,320 x 4,096; the final norm. The vision tower: 27 blocks of 15,239,504,
    the merger 40,119,040, the biased patch Conv3d (1,536 x 1,152 + 1,152) and the learned
    position table (2,304 x 1,152)."""
    arch, _ = resolve_model("qwen3.5-9b")
    assert (arch.ssm_layers, arch.attention_layer_count) == (24, 8)
    mixer, attention, mlp = 67_403_968, 58_720_768, 3 * 4096 * 12288
    assert arch.ssm is not None and arch.ssm.params(4096) == mixer
    language = 24 * mixer + 8 * attention + 32 * (mlp + 2 * 4096) + 2 * 248320 * 4096 + 4096
    assert language == 8_953_803_264
    assert arch.vision is not None
    tower = 1536 * 1152 + 1152 + 2304 * 1152 + 27 * 15_239_504 + 40_119_040
    assert vision_params(arch.vision) == tower == 456_010_480
    counts = count_params(arch)
    assert counts.total == language + tower
    # matmul weights of a token: the mixers' projections, attention, MLP and the LM head
    mixer_w = 4096 * 12352 + 4096 * 4096
    attention_w = 4096 * (8192 + 2048) + 4096 * 4096
    assert counts.matmul_active == 24 * mixer_w + 8 * attention_w + 32 * mlp + 248320 * 4096


def test_delta_rule_flops_state_and_kv_by_hand() -> None:
    """Per value head and token with chunk C = 64, dk = dv = 128: beta K K^T 2 C dk (16,384),
    the triangular inverse 2 C^2 / 3 (2,730.67), w and u 2 C (dk + dv) (32,768), the state pass
    4 dk dv (65,536), the output 2 dk dv + 2 C dk + 2 C dv (65,536): 182,954.67; x 32 heads
    plus the conv 2 x 8192 x 4 = 5,920,085.33 FLOPs a layer. A decode step 7 dk dv x 32 + the
    conv: 3,735,552. The state per sequence: 24 x (32 x 128 x 128 + 8192 x 3) elements, the
    recurrent part in fp32 as the config's mamba_ssm_dtype says (24 x 524,288 x 4 B) and the
    conv windows in bf16 (24 x 24,576 x 2 B): 51,511,296 B whatever the length; KV only on the
    8 attention layers: 2 x 4 x 256 x 8 x 2 = 32,768 B a token."""
    arch, _ = resolve_model("qwen3.5-9b")
    s = arch.ssm
    assert s is not None
    assert s.scan_flops_per_token == pytest.approx(32 * (16384 + 8192 / 3 + 32768 + 65536
                                                         + 65536) + 65536)
    assert s.scan_flops_per_token == pytest.approx(5_920_085.33, abs=0.01)
    assert s.decode_flops_per_token == 3_735_552
    assert arch.ssm_state_elements == 24 * (32 * 128 * 128 + 8192 * 3)
    assert state_bytes_per_sequence_per_gpu(arch, 2.0, 1) == 51_511_296
    # without mamba_ssm_dtype (Qwen3-Next's config) the state takes the KV dtype
    nxt, _ = resolve_model("qwen3-next-80b-a3b")
    assert nxt.ssm_state_bytes is None
    assert state_bytes_per_sequence_per_gpu(nxt, 2.0, 1) == 36 * (32 * 128 * 128 + 8192 * 3) * 2
    assert kv_cache_bytes_per_token(arch, 2.0) == 32_768
    # attention scores on the 8 attention layers only (16 heads x 256 = 4096 wide queries),
    # the scans on the 24 others whatever the length
    assert arch.score_flops_per_key == 4 * 4096 * 8
    assert attention_forward_flops_per_token(arch, 4096, causal=True) == pytest.approx(
        4 * 4096 * 8 * 4097 / 2 + 24 * s.scan_flops_per_token)
    matmul = count_params(arch).matmul_active
    assert generation_flops_per_token(arch, 1000) == pytest.approx(
        2 * matmul + 4 * 4096 * 8 * 1000 + 24 * 3_735_552)


def test_activations_and_lora_by_hand() -> None:
    """What a mixer keeps (assumed from fla's kernels): the conv input and the kernel's q, k, v
    (2 x 8192), z and the kernel output for the gated norm (2 x 4096), A (64 per value head)
    and beta (32): 26,656 elements, and 3 x 32 fp32; full fine-tuning adds in_proj's and
    out_proj's inputs (4096 + 4096). LoRA all-linear: q_proj is 4096 -> 8192 (query and gate);
    Qwen3.5 keeps four in_proj linears."""
    arch, _ = resolve_model("qwen3.5-9b")
    a = 2
    mixer = a * 26_656 + 4 * 96
    assert hybrid_layer_bytes(arch, 0.0, 0.0, a, full=False) == pytest.approx(24 * mixer / 32)
    assert hybrid_layer_bytes(arch, 0.0, 0.0, a, full=True) == pytest.approx(
        24 * (mixer + a * 8192) / 32)
    r = 8
    attention = (4096 + 8192) + 2 * (4096 + 1024) + (4096 + 4096)
    mixer_lora = (4096 + 8192) + (4096 + 4096) + 2 * (4096 + 32) + (4096 + 4096)
    mlp = 3 * (4096 + 12288)
    assert lora_params(arch, r, "all-linear") == r * (8 * attention + 24 * mixer_lora
                                                      + 32 * mlp)


def _small_tower(torch: Any, transformers: Any) -> Any:
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5VisionModel

    cfg = transformers.models.qwen3_5.Qwen3_5VisionConfig(**SMALL_VISION)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    return Qwen3_5VisionModel._from_config(cfg)


def test_vision_flops_and_params_equal_a_real_small_tower() -> None:
    """FlopCounterMode over a small real Qwen3.5 tower (8 x 12 patches): the patch Conv3d, the
    blocks' linears and attention (full in every block), the merger."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    flops, params = forward_flops_and_params(torch, _small_tower(torch, transformers),
                                             3 * 2 * 8 * 8)
    v = vision_tower_from_config(SMALL_VISION, "small", "qwen3_5")
    assert flops == vision_forward_flops(v, ImageGrid(GRID_H, GRID_W, 2)).total
    assert vision_params(v) == params


def test_trained_vision_tower_activations_match_what_autograd_keeps() -> None:
    """fp32, SDPA: the storage autograd keeps in one forward of the small real tower
    (parameters and pixels excluded), within 5%."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    real = saved_bytes(torch, _small_tower(torch, transformers), 3 * 2 * 8 * 8)
    v = vision_tower_from_config(SMALL_VISION, "small", "qwen3_5")
    assert vision_activation_bytes(v, ImageGrid(GRID_H, GRID_W, 2), 4) == pytest.approx(
        real, rel=0.05)


def test_image_tokens_are_32_pixels_a_token() -> None:
    """Patch 16, merge 2: one token per 32 x 32 pixels; a 480,000-pixel square image (693 px)
    rounds to 704 x 704: 44 x 44 patches, 484 tokens."""
    arch, _ = resolve_model("qwen3.5-9b")
    assert arch.vision is not None
    grid = image_grid(arch.vision, 480_000)
    assert (grid.grid_h, grid.patches, grid.tokens) == (44, 1936, 484)


@pytest.mark.parametrize("args", [
    ("estimate", "--model", "qwen3.5-9b", "--gpu", "h100", "--gpus", "8", "--zero", "3",
     "--seq", "4096", "--checkpointing", "--json"),
    ("estimate", "--model", "qwen3-next-80b-a3b", "--gpu", "h100", "--gpus", "64", "--zero",
     "3", "--seq", "2048", "--checkpointing", "--json"),
    ("generation", "--model", "qwen3.5-9b", "--gpu", "h100", "--json"),
    ("generation", "--model", "qwen3-next-80b-a3b", "--gpu", "h100", "--tensor-parallel", "4",
     "--engine", "sglang", "--json"),
])
def test_cli_estimates_and_generates_the_hybrids(args: tuple[str, ...]) -> None:
    """`estimate` and `generation` answer for both catalog hybrids (exit 0, JSON out); a
    generation's cache holds KV for the attention layers and the mixers' state."""
    import json

    from typer.testing import CliRunner

    from gpuhours.cli import app

    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)


def test_qwen35_processor_bounds_are_its_own() -> None:
    """Qwen3.5's processor keeps images between 65,536 and 16,777,216 pixels (its
    preprocessor_config), not Qwen2-VL's 3,136 and 1,003,520: a 200 x 200 image is scaled up to
    256 x 256 (64 tokens of 32 px), a 2,000 x 2,000 one only rounded to 1,984 x 1,984 (3,844
    tokens; Qwen2-VL's bound would cap it near a megapixel)."""
    arch, _ = resolve_model("qwen3.5-9b")
    assert arch.vision is not None
    assert image_grid(arch.vision, 200 * 200).tokens == 64
    assert image_grid(arch.vision, 2000 * 2000).tokens == 62 * 62
    capped = image_grid(arch.vision, 2000 * 2000, max_pixels=28 * 28 * 1280)
    assert capped.patches * 16 * 16 <= 28 * 28 * 1280


def test_delta_rule_flops_equal_torchs_count_of_the_chunked_reference() -> None:
    """A small real Qwen3.5 mixer on transformers' torch path (torch_chunk_gated_delta_rule,
    chunks of 64) under FlopCounterMode, 128 tokens: the projections, the conv (which
    transformers runs over T + kernel - 1 positions and then slices) and the chunked matmuls
    (beta K K^T, Q K^T, the two reads of the state, the intra-chunk product, the state update:
    4 C dk + 6 dk dv + 2 C dv a value head and token) are counted exactly; the unit-triangular
    solves that make w and u (torch.linalg.solve_triangular, which FlopCounterMode does not
    count) are the rest of scan_flops_per_token: 2 C (dk + dv) + 2 C^2 / 3. That remainder is
    the code's own formula (subtracted here, not counted independently): only the matmul part
    of scan_flops_per_token is held to torch's count."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from torch.utils.flop_counter import FlopCounterMode
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5GatedDeltaNet

    text = dict(hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, intermediate_size=96, vocab_size=500,
                linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                linear_value_head_dim=32, linear_conv_kernel_dim=4,
                layer_types=["linear_attention"])
    mixer = Qwen3_5GatedDeltaNet(transformers.Qwen3_5TextConfig(**text), 0).eval()
    tokens, c, dk, dv, heads = 128, 64, 16, 32, 4
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        mixer(torch.randn(1, tokens, 64))
    s = from_hf_config({"model_type": "qwen3_5_text", **text}, "small").ssm
    assert s is not None
    solves = heads * (2 * c * (dk + dv) + 2 * c * c / 3) * tokens
    conv_padding = 2 * s.conv_dim * s.conv_kernel * (s.conv_kernel - 1)
    assert counter.get_total_flops() == pytest.approx(
        2 * s.params(64, weights_only=True) * tokens + s.scan_flops_per_token * tokens
        - solves + conv_padding)
