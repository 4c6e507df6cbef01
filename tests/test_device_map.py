"""hf-generate over several GPUs by device_map (estimate/device_map.py): the split worked by
hand and checked against accelerate's own placement, the hooks counted on a real model, the
step and the peak worked by hand, and bad input refused naming the flag."""

from __future__ import annotations

import json
import types
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.errors import FieldError
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.arch import from_hf_config
from gpuhours.estimate.device_map import (
    balanced_max_memory,
    device_map_hook_calls,
    device_map_split,
    hooks_per_layer,
)
from gpuhours.estimate.generation import estimate_generation, generation_summary
from gpuhours.resolve import resolve_gpu
from gpuhours.setup import Generation

runner = CliRunner()

#: Qwen2.5-72B-Instruct's config.json (the shape of generation_published.csv rows 47-50)
QWEN72: dict[str, Any] = {
    "model_type": "qwen2", "hidden_size": 8192, "num_hidden_layers": 80,
    "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
    "intermediate_size": 29568, "vocab_size": 152064, "tie_word_embeddings": False,
    "hidden_act": "silu"}
#: Qwen2.5-0.5B's: a tied LM head
QWEN05: dict[str, Any] = {
    "model_type": "qwen2", "hidden_size": 896, "num_hidden_layers": 24,
    "num_attention_heads": 14, "num_key_value_heads": 2, "head_dim": 64,
    "intermediate_size": 4864, "vocab_size": 151936, "tie_word_embeddings": True,
    "hidden_act": "silu"}

# by hand, bf16 (2 bytes a parameter), Qwen2.5-72B:
#   a layer: q 8192 x 8192 + 8192 bias, k and v 8192 x 1024 + 1024 each, o 8192 x 8192,
#   MLP 3 x 8192 x 29568, 2 norms of 8192: 877,684,736 parameters = 1,755,369,472 bytes
#   embedding and LM head: 152,064 x 8,192 = 1,245,708,288 parameters = 2,491,416,576 bytes each
#   final norm 16,384 bytes; the model 145,412,407,296 bytes
LAYER_B = 1_755_369_472
TABLE_B = 2_491_416_576
#: an A100 80GB (85,899,345,920 bytes) less the 512 MiB CUDA context: what mem_get_info says
FREE_B = 85_899_345_920 - 536_870_912


def test_the_split_of_qwen72_over_two_a100s_worked_by_hand() -> None:
    arch = from_hf_config(QWEN72, "qwen72")
    # get_balanced_memory: the model / 2 + 1.25 x the largest no-split block (a layer)
    per_gpu = 145_412_407_296 // 2 + int(1.25 * LAYER_B)
    assert per_gpu == 74_900_415_488
    assert balanced_max_memory(arch, 2.0, 2, FREE_B) == [per_gpu, FREE_B]
    # GPU 0 keeps room for the largest block still to place (the LM head, 2.49 GB):
    # (74,900,415,488 - 2,491,416,576 - 2,491,416,576) / 1,755,369,472 = 39.8 -> 39 layers
    first, second = device_map_split(arch, 2.0, 2, FREE_B)
    assert (first.embedding, first.first_layer, first.layers, first.head) == (True, 0, 39, False)
    assert first.weights_bytes == TABLE_B + 39 * LAYER_B
    # the last GPU takes the rest: 41 layers, the norm and the head (74.5 GB of 85.4 free)
    assert (second.first_layer, second.layers, second.head) == (39, 41, True)
    assert second.weights_bytes == 41 * LAYER_B + 16_384 + TABLE_B


def test_a_tied_head_rides_with_the_embedding_on_the_first_gpu() -> None:
    arch = from_hf_config(QWEN05, "qwen05")
    first, second = device_map_split(arch, 2.0, 2, FREE_B)
    assert first.embedding and first.head and not second.head
    assert first.layers + second.layers == 24


def _accelerate_split(cfg: dict[str, Any], gpus: int) -> list[tuple[int, int, bool, bool]]:
    """(first layer, layers, embedding, LM head) per GPU as the installed accelerate places a
    meta-device model built by the installed transformers (transformers' from_pretrained
    path: get_balanced_memory, then infer_auto_device_map)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    accelerate = pytest.importorskip("accelerate")
    import accelerate.utils.modeling as modeling

    class _Torch:  # accelerate asks torch.device(int) its type: "cuda", with no GPU here
        def __getattr__(self, name: str) -> Any:
            return getattr(torch, name)

        @staticmethod
        def device(d: Any) -> Any:
            return types.SimpleNamespace(type="cuda") if isinstance(d, int) else torch.device(d)

    config = transformers.Qwen2Config(**{k: v for k, v in cfg.items()
                                         if k not in ("model_type", "hidden_act")})
    with accelerate.init_empty_weights():
        model = transformers.Qwen2ForCausalLM._from_config(config, dtype=torch.bfloat16)
    model.tie_weights()
    saved = modeling.torch
    modeling.torch = _Torch()
    try:
        memory: dict[Any, int] = {i: int(FREE_B) for i in range(gpus)}
        memory["cpu"] = 10**12
        memory = modeling.get_balanced_memory(model, max_memory=memory, dtype=torch.bfloat16,
                                              no_split_module_classes=["Qwen2DecoderLayer"])
        placed = modeling.infer_auto_device_map(model, max_memory=memory, dtype=torch.bfloat16,
                                                no_split_module_classes=["Qwen2DecoderLayer"])
    finally:
        modeling.torch = saved
    out = []
    for g in range(gpus):
        names = [n for n, d in placed.items() if d == g]
        layers = [int(n.split(".")[2]) for n in names if n.startswith("model.layers.")]
        out.append((min(layers), len(layers), "model.embed_tokens" in names, "lm_head" in names))
    return out


@pytest.mark.parametrize(("cfg", "gpus"), [(QWEN72, 2), (QWEN72, 3), (QWEN72, 4), (QWEN05, 2)])
def test_the_split_is_accelerates_own(cfg: dict[str, Any], gpus: int) -> None:
    arch = from_hf_config(cfg, "m")
    # a tied head is the embedding's table: accelerate puts lm_head beside it
    ours = [(s.first_layer, s.layers, s.embedding, s.head)
            for s in device_map_split(arch, 2.0, gpus, FREE_B)]
    assert ours == _accelerate_split(cfg, gpus)


def test_the_hooks_are_counted_as_a_real_dispatched_model_calls_them() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    accelerate = pytest.importorskip("accelerate")
    hooks = pytest.importorskip("accelerate.hooks")

    cfg = dict(hidden_size=64, intermediate_size=96, num_attention_heads=4,
               num_key_value_heads=2, vocab_size=80, max_position_embeddings=64,
               num_hidden_layers=3)
    model = transformers.Qwen2ForCausalLM._from_config(transformers.Qwen2Config(**cfg)).eval()
    device_map = {"model.embed_tokens": "cpu", **{f"model.layers.{i}": "cpu" for i in range(3)},
                  "model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": "cpu"}
    accelerate.dispatch_model(model, device_map=device_map, main_device="cpu", force_hooks=True,
                              skip_keys=model._skip_keys_device_placement)
    calls = []
    pre = hooks.AlignDevicesHook.pre_forward

    def counted(self: Any, module: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(module)
        return pre(self, module, *args, **kwargs)

    hooks.AlignDevicesHook.pre_forward = counted
    try:
        with torch.no_grad():
            model(torch.randint(0, 80, (1, 4)))
    finally:
        hooks.AlignDevicesHook.pre_forward = pre
    arch = from_hf_config({"model_type": "qwen2", "head_dim": 16, "hidden_act": "silu",
                           "tie_word_embeddings": False, **cfg}, "tiny")
    assert hooks_per_layer(arch) == 12
    assert len(calls) == device_map_hook_calls(arch) == 3 * 12 + 5


def _row47(**update: Any) -> Generation:
    return Generation(arch=from_hf_config(QWEN72, "qwen72"), engine="hf-generate",
                      prompt_tokens=1, output_tokens=2048, batch=1, device_map_gpus=2,
                      hf_transformers_version="4.46", **update)


def test_the_decode_step_and_the_gpu_hours_worked_by_hand() -> None:
    gpu = resolve_gpu("a100-80gb")
    g = _row47()
    e = estimate_generation(g, gpu)
    # the host leads: 80 layers x 0.88 ms of launches + (80 x 12 + 5) hook calls x 3.04
    # operators' time (0.88 ms / 79 operators) = 70.4 + 32.68 ms, over the GPUs' reads in
    # sequence: 142.9 GB (all but the embedding) at 2,039 GB/s x 0.8 x 8192 / 8692 = 93.0 ms
    hook_s = 3.04 * 0.88e-3 / 79
    assert A.ACCELERATE_HOOK_HOST_S.value == pytest.approx(hook_s)
    host = 80 * 0.88e-3 + 965 * hook_s
    assert e.decode_step_s_first == pytest.approx(1e-3 + host, rel=1e-9)
    assert e.hooks_s == pytest.approx(965 * hook_s)
    assert 142.9e9 / (2039e9 * 0.8 * 8192 / 8692) < host
    # GPU hours: the wall time x both GPUs
    summary = generation_summary(e, g, gpu, sequences=100)
    assert summary["gpu_hours"]["value"] == pytest.approx(100 * e.batch_time_s / 3600 * 2)


def test_the_peak_is_the_gpu_with_the_head_worked_by_hand() -> None:
    e = estimate_generation(_row47(), resolve_gpu("a100-80gb"))
    # GPU 1 at the last decode step: 41 layers' weights, norm and head; their cache, 41 layers x
    # 4,096 bytes (K and V of 8 heads of 128) x 2,049 tokens; the largest transient, repeat_kv's
    # 8 copies of one layer's K and V (8 x 2,049 x 4,096 bytes; the sampler is on GPU 0)
    weights = 41 * LAYER_B + 16_384 + TABLE_B
    tensors = weights + 41 * 4096 * 2049 + 8 * 2049 * 4096
    assert e.peak_memory_bytes == pytest.approx(tensors * 1.05 + 536_870_912, rel=1e-12)
    # the KV cache per GPU: the GPU with the most layers (41 of 80)
    assert e.kv_cache_bytes == pytest.approx(80 * 4096 * 2049 * 41 / 80)


def test_device_map_is_refused_where_it_does_not_apply() -> None:
    arch = from_hf_config(QWEN72, "qwen72")
    with pytest.raises(FieldError, match="hf-generate"):
        Generation(arch=arch, engine="vllm", device_map_gpus=2)
    with pytest.raises(FieldError, match="give one of them"):
        Generation(arch=arch, engine="hf-generate", device_map_gpus=2, tensor_parallel=2)


@pytest.mark.parametrize(("args", "flags"), [
    (["--engine", "vllm", "--device-map-gpus", "2"], "--device-map-gpus/--engine"),
    (["--engine", "hf-generate", "--device-map-gpus", "2", "--tensor-parallel", "2"],
     "--device-map-gpus/--tensor-parallel"),
    (["--engine", "hf-generate", "--device-map-gpus", "0"], "--device-map-gpus"),
    (["--engine", "hf-generate", "--device-map-gpus", "2", "--model", "qwen3-30b-a3b"],
     "--device-map-gpus"),
])
def test_bad_input_exits_2_naming_the_flag(args: list[str], flags: str) -> None:
    model = [] if "--model" in args else ["--model", "qwen2.5-32b"]
    result = runner.invoke(app, ["generation", "--gpu", "a100-80gb", *model, *args])
    assert result.exit_code == 2, result.output
    assert flags in result.output
    assert "Traceback" not in result.output


def test_a_split_that_does_not_fit_is_a_verdict_naming_the_flag() -> None:
    result = runner.invoke(app, ["generation", "--model", "llama-3.1-70b", "--gpu", "l4",
                                 "--engine", "hf-generate", "--device-map-gpus", "2", "--json"])
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert data["fits"] is False and "offloaded to the CPU" in data["reason"]
    assert data["setup"]["device_map_gpus"] == 2


def test_the_cli_reports_the_split_and_its_gpus() -> None:
    result = runner.invoke(app, ["generation", "--model", "qwen2.5-32b", "--gpu", "a100-80gb",
                                 "--engine", "hf-generate", "--device-map-gpus", "2",
                                 "--batch", "1", "--sequences", "10", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["gpus"]["value"] == 2
    assert "GPU 0: embedding + layers 0-30" in data["hooks_s"]["source"]
    assert "accelerate_hook_host_s" in [a["name"] for a in data["assumptions"]]
