"""torch.compile's saved set (estimate/compiled.py) against the real partition, on CPU.

A decoder layer built by transformers (random weights) is compiled as torchtune compiles each
layer, through AOTAutograd with Inductor's own partitioner (torch/_inductor/compile_fx.py
partition_fn: its joint-graph passes, then the min-cut rematerialization partition) and
Inductor's decompositions; the forward and backward graphs are kept as they come (no C++
code generation, so a test takes about a second). The tensors the compiled backward takes,
tangents, parameters and the rotary tables left out, are what the compiled layer saves: the
formula must give their bytes exactly (it leaves nothing out, unlike the eager count).
Checked once against real Inductor (C++ code generation with this machine's gcc, caches off):
the same saved tensors as the no-op compilers' partition for the first case.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cli_json import LLAMA_3B_FULL, estimate_json
from gpuhours.cli import app
from gpuhours.estimate.arch import from_hf_config
from gpuhours.estimate.compiled import (
    compiled_activation_bytes_per_token_layer,
    compiled_logits_bytes,
    compiled_loss_backward_bytes,
)

# torch's compile stack imports modules that warn of their own deprecation (torch.jit), and
# AOTAutograd warns of the unboxed graphs these tests keep
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning")]

BATCH, SEQ = 3, 40  # 120 tokens: no weight of the shapes below has a dimension of 120

LLAMA = dict(model_type="llama", hidden_size=256, intermediate_size=512, num_hidden_layers=1,
             num_attention_heads=8, head_dim=48, num_key_value_heads=2, vocab_size=1000,
             max_position_embeddings=512)
QWEN3 = dict(LLAMA, model_type="qwen3")  # per-head RMSNorms on q and k
QWEN2 = dict(model_type="qwen2", hidden_size=256, intermediate_size=704, num_hidden_layers=1,
             num_attention_heads=4, num_key_value_heads=1, vocab_size=1000,
             max_position_embeddings=512)


def _backend(graphs: dict):
    """AOTAutograd with Inductor's partitioner and decompositions; the graphs kept, run as they
    are."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    from torch._inductor import compile_fx
    from torch._inductor.decomposition import select_decomp_table

    def keep(name):
        def compiler(gm, _inputs):
            graphs[name] = gm
            return make_boxed_func(gm)
        return compiler

    return aot_autograd(fw_compiler=keep("fw"), bw_compiler=keep("bw"),
                        partition_fn=compile_fx.partition_fn,
                        decompositions=select_decomp_table())


def compiled_saved_bytes_per_token(config: dict, dtype: str, lora: object = None,
                                   half_adapters: bool = False) -> float:
    """Bytes per token the compiled first layer saves for backward: the backward graph's
    inputs whose leading dimensions are the tokens (batch, or batch x seq flattened)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    torch_dtype = getattr(torch, dtype)
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.for_model(**config)).to(torch_dtype)
    base = model
    if lora is not None:
        peft = pytest.importorskip("peft")
        model = peft.get_peft_model(model, peft.LoraConfig(r=8, target_modules=lora))
        base = model.base_model.model
        if half_adapters:  # adapters in the model's dtype (torchtune's LoRALinear is bf16)
            model = model.to(torch_dtype)
    model.train()
    layer = base.model.layers[0]
    captured: dict = {}
    hook = layer.register_forward_pre_hook(
        lambda _m, args, kwargs: captured.update(args=args, kwargs=dict(kwargs)),
        with_kwargs=True)
    ids = torch.randint(0, config["vocab_size"], (BATCH, SEQ))
    base.model(input_ids=ids)
    hook.remove()
    kwargs = captured["kwargs"]
    x = captured["args"][0] if captured["args"] else kwargs.pop("hidden_states")
    x = x.detach().requires_grad_(True)
    graphs: dict = {}
    torch._dynamo.reset()
    out = torch.compile(layer, backend=_backend(graphs))(x, **kwargs)
    (out[0] if isinstance(out, tuple) else out).float().sum().backward()
    tokens = BATCH * SEQ
    total = 0
    for node in graphs["bw"].graph.nodes:
        if node.op != "placeholder" or node.name.startswith("tangents"):
            continue
        val = node.meta["val"]
        per_token = val.shape[0] == tokens or (val.shape[0] == BATCH and SEQ in val.shape)
        if per_token:
            total += val.numel() * val.element_size()
    return total / tokens


#: config, dtype, peft targets, adapters in the model's dtype, method, targets, fp32 inputs
CASES = [
    (LLAMA, "bfloat16", None, False, "full", "all-linear", False),
    (QWEN2, "float32", None, False, "full", "all-linear", False),
    (LLAMA, "bfloat16", ["q_proj", "v_proj"], False, "lora", "qv", True),
    (QWEN2, "bfloat16", "all-linear", False, "lora", "all-linear", True),
    (LLAMA, "bfloat16", "all-linear", True, "lora", "all-linear", False),
    (QWEN3, "bfloat16", None, False, "full", "all-linear", False),
]


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
@pytest.mark.parametrize(("config", "dtype", "lora", "half", "method", "targets", "fp32_in"),
                         CASES)
def test_formula_is_the_real_partition(config, dtype, lora, half, method, targets, fp32_in):
    real = compiled_saved_bytes_per_token(config, dtype, lora, half)
    arch = from_hf_config(config, "tiny")
    a = 4 if dtype == "float32" else 2
    predicted = compiled_activation_bytes_per_token_layer(arch, a, method, targets, 8, fp32_in)
    assert predicted == real


def test_hand_count_of_a_compiled_llama_layer():
    """Llama 3.2 3B (d 3072, 24 heads of 128, 8 kv heads, f 8192), bf16, full: 2 x (4 d + 2 q +
    2 kv + 3 f) + 8 + 4 x 24 = 2 x 45,056 + 104 = 90,216 bytes per token."""
    arch = from_hf_config(dict(model_type="llama", hidden_size=3072, intermediate_size=8192,
                               num_hidden_layers=28, num_attention_heads=24,
                               num_key_value_heads=8, vocab_size=128256), "llama-3.2-3b")
    assert compiled_activation_bytes_per_token_layer(arch, 2, "full", "all-linear", 8,
                                                     False) == 90_216


def test_hand_count_of_the_fused_kernels_bytes():
    """Llama 3.2 3B (d 3072, q 3072, kv 1024, f 8192), bf16, full, no checkpointing: forward
    2 (9 d + 2 (q + kv) + 3 f) = 2 x 60,416 = 120,832, backward 2 (8 d + 2 (q + kv) + 6 f +
    2 q) = 2 x 88,064 = 176,128: 296,960 bytes per token and layer; checkpointing runs the
    forward's kernels once more (+120,832)."""
    from gpuhours.estimate.compiled import compiled_elementwise_bytes_per_token_layer
    from gpuhours.setup import Training

    arch = from_hf_config(dict(model_type="llama", hidden_size=3072, intermediate_size=8192,
                               num_hidden_layers=28, num_attention_heads=24,
                               num_key_value_heads=8, vocab_size=128256), "llama-3.2-3b")
    t = Training(arch=arch, method="full", precision="bf16", compile=True)
    assert compiled_elementwise_bytes_per_token_layer(arch, t, 2) == 296_960
    ckpt = t.model_copy(update={"checkpointing": True})
    assert compiled_elementwise_bytes_per_token_layer(arch, ckpt, 2) == 296_960 + 120_832


def test_compiled_cross_entropy_keeps_its_input_and_two_values_per_token():
    """`F.cross_entropy(logits.float())` compiled (torchtune's compute_cross_entropy): the
    backward takes the bf16 logits, two fp32 values per token and the labels; it returns the
    gradient in bf16. So a compiled chunk keeps N V a + 8 N, where eager's log-softmax keeps
    an fp32 N V 4."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F  # noqa: N812

    graphs: dict = {}
    torch._dynamo.reset()

    def ce(logits, labels):
        return F.cross_entropy(logits.float(), labels, reduction="sum")

    tokens, vocab = 96, 1000
    x = torch.randn(tokens, vocab, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, vocab, (tokens,))
    torch.compile(ce, backend=_backend(graphs))(x, labels).backward()
    saved = [n.meta["val"] for n in graphs["bw"].graph.nodes
             if n.op == "placeholder" and not n.name.startswith("tangents")]
    float_bytes = sum(v.numel() * v.element_size() for v in saved if v.is_floating_point())
    assert float_bytes == compiled_logits_bytes(tokens, vocab, 2, "chunked")
    assert x.grad is not None and x.grad.dtype == torch.bfloat16
    # the first chunk's backward: its saved chunks and one chunk's bf16 gradient
    assert compiled_loss_backward_bytes(tokens, vocab, 2, "chunked", 8) == pytest.approx(
        tokens * vocab * 2 * (1 + 1 / 8) + 8 * tokens)


runner = CliRunner()


def _estimate(*args: str) -> dict:
    return estimate_json(*LLAMA_3B_FULL, *args)


def test_compile_reaches_memory_time_and_basis():
    eager, compiled = _estimate(), _estimate("--compile")
    # 28 layers x 8,192 tokens x (137,216 - 90,216) bytes per token fewer activations
    drop = eager["memory"]["activations_bytes"]["value"] - compiled["memory"][
        "activations_bytes"]["value"]
    assert drop == pytest.approx(28 * 8192 * (137_216 - 90_216), rel=1e-6)
    assert compiled["step_time_s"]["value"] < eager["step_time_s"]["value"]
    # the basis says what compile changed, the eager setup says nothing of it
    assert any(line.startswith("compile: a compiled layer saves 90,216 bytes per token")
               for line in compiled["assumptions"])
    assert not any(line.startswith("compile:") for line in eager["assumptions"])
    assert _estimate("--eager") == eager


def test_a_torchtune_config_with_compile_sets_it(tmp_path):
    from gpuhours.importers import read_setup
    from test_importers import TORCHTUNE

    compiled, eager = tmp_path / "compiled.yaml", tmp_path / "eager.yaml"
    compiled.write_text(TORCHTUNE.replace("compile: False", "compile: True"))
    eager.write_text(TORCHTUNE)
    assert read_setup(compiled).fields["compile"] is True
    assert "compile" not in read_setup(eager).fields


PLAN = """\
project: compile in a plan
hardware:
  gpu: h100-sxm
  gpus_per_node: 1
phases:
  - name: tune
    kind: finetune
    model: llama-3.1-8b
    method: lora
    precision: bf16
    examples: 1000
    seq_len: 1024
    micro_batch: 4
{compile}"""


def _plan_hours(tmp_path, line: str) -> float:
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN.format(compile=line))
    result = runner.invoke(app, ["plan", str(path), "--no-doc", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["phases"][0]["gpu_hours_per_run_base"]["value"]


def test_a_plan_file_sets_compile(tmp_path):
    assert _plan_hours(tmp_path, "    compile: true\n") < _plan_hours(tmp_path, "")
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN.format(compile="    compile: sometimes\n"))
    result = runner.invoke(app, ["plan", str(path), "--no-doc"])
    assert result.exit_code == 2
    assert "compile" in result.output and "Traceback" not in result.output
