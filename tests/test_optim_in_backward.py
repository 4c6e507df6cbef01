"""The optimizer step inside backward (torchtune's optimizer_in_bwd;
estimate/optim_in_backward.py).

A real tiny Llama on this CPU runs torchtune's scheme (one AdamW per parameter, stepped and
zeroed by a post-accumulate-grad hook): the gradients alive at any hook are that parameter's
alone, so the largest is the largest tensor's, which the estimate counts; then Llama 3.2 3B by
hand."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.errors import FieldError
from gpuhours.estimate.arch import from_hf_config
from gpuhours.estimate.memory import training_memory
from gpuhours.estimate.optim_in_backward import largest_trainable_tensor_params
from gpuhours.estimate.params import count_params
from gpuhours.resolve import resolve_model
from gpuhours.setup import Training

runner = CliRunner()

CONFIG = {"model_type": "llama", "vocab_size": 96, "hidden_size": 32,
          "intermediate_size": 160, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "max_position_embeddings": 64, "rms_norm_eps": 1e-6}


@pytest.mark.parametrize("tied", [False, True])
def test_real_hooks_hold_one_gradient_at_a_time(tied: bool) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(**{k: v for k, v in CONFIG.items() if k != "model_type"},
                                   tie_word_embeddings=tied)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    params = list(model.parameters())
    optims = {p: torch.optim.AdamW([p], lr=1e-3, foreach=True) for p in params}
    alive: list[int] = []
    fired: dict[int, int] = {}

    def step(p) -> None:  # torchtune's register_optim_in_bwd_hooks: step, then zero_grad
        alive.append(sum(q.grad.numel() for q in params if q.grad is not None))
        fired[id(p)] = fired.get(id(p), 0) + 1
        optims[p].step()
        optims[p].zero_grad()

    for p in params:
        p.register_post_accumulate_grad_hook(step)
    ids = torch.randint(0, CONFIG["vocab_size"], (2, 16))
    model(input_ids=ids, labels=ids).loss.backward()
    assert all(p.grad is None for p in params)  # no gradient left for a step after backward
    assert set(fired.values()) == {1} and len(fired) == len(params)  # tied: one hook, once
    largest = max(p.numel() for p in params)
    # at each hook only its own gradient exists: the largest alive is the largest tensor's
    assert max(alive) == largest
    arch = from_hf_config({**CONFIG, "tie_word_embeddings": tied}, "tiny")
    assert largest_trainable_tensor_params(arch, count_params(arch), "full", 16) == largest


def _3b(**kw: object) -> Training:
    arch, _ = resolve_model("llama-3.2-3b")
    return Training(arch=arch, method="full", precision="bf16", micro_batch=2, seq_len=4096,
                    checkpointing=True, loss_kernel="chunked", **kw)


def test_llama_3b_by_hand() -> None:
    """Llama 3.2 3B in bf16 with torch AdamW (foreach), torchtune's chunked loss: the step
    phase holds every gradient and a temporary per parameter (2 + 2 bytes x 3,212,749,824 =
    11.97 GiB); in backward the largest tensor is the tied embedding, 128,256 x 3,072 =
    394,002,432 parameters: its gradient and its one-tensor temporaries are 788,004,864 bytes
    each."""
    arch = _3b().arch
    plain = training_memory(arch, _3b())
    fused = training_memory(arch, _3b(optimizer_in_backward=True))
    assert plain.gradients_bytes == 3_212_749_824 * 2
    assert plain.peak_phase.startswith("optimizer step")
    assert fused.gradients_bytes == 788_004_864
    assert fused.optimizer_temporaries_bytes == 788_004_864
    assert fused.peak_phase.startswith("start of backward")
    # same weights and moments; the head's gradient (8192 x 128,256 x 2 logits' gradient +
    # 788,004,864) with its temporaries (3.68e9 bytes) stays below the chunked loss's working
    # set (6.83e9), so the peak is that of a step without temporaries after backward
    assert (fused.weights_bytes, fused.optimizer_bytes) == (plain.weights_bytes,
                                                            plain.optimizer_bytes)
    no_temps = training_memory(arch, _3b(optimizer_impl="fused"))
    assert no_temps.peak_phase.startswith("start of backward")
    assert fused.tensors_bytes == no_temps.tensors_bytes


def test_refused_with_accumulation() -> None:
    with pytest.raises(FieldError, match="accumulate"):
        _3b(optimizer_in_backward=True, grad_accum=2)
    bad = runner.invoke(app, ["estimate", "--model", "llama-3.2-3b", "--gpu", "a100-80gb",
                              "--grad-accum", "4", "--optimizer-in-backward"])
    assert bad.exit_code == 2 and "--optimizer-in-backward/--grad-accum" in bad.output
    assert "Traceback" not in bad.output
