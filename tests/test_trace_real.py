"""The trace against a real step: on real CPU tensors, the peak of live storage that the CPU
allocator reports (torch.profiler's memory events, which do not use our tracker at all) must
equal the traced peak of the same step on fake tensors within 1%.

The same model (built by gpuhours.trace.build from the same config, but with real weights),
the same batch, the same patches that make CPU operators behave as on a GPU, and two steps of
the same optimizer; the traced peak is that of the second step, the measured one the maximum
over both (the second has the optimizer state, so it is the larger).

What the profiler sees and the trace does not: memory a CPU kernel allocates for itself without
an operator output. The one case met: bf16 matmul backward during a checkpointed layer's
recomputation (LoRA, tiny Llama) took 362 KB of scratch on top of 7.9 MB of tensors, which our
tracker run on the same real tensors also leaves out; on a GPU, cuBLAS takes such scratch from
its own preallocated workspace. That case is left out here; bf16 is covered without it.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from torch.profiler import ProfilerActivity, profile  # noqa: E402

from gpuhours.estimate.arch import from_hf_config  # noqa: E402
from gpuhours.setup import torch_precision  # noqa: E402
from gpuhours.trace.build import build_fake_model  # noqa: E402
from gpuhours.trace.patches import as_on_gpu  # noqa: E402
from gpuhours.trace.setup import TraceSetup  # noqa: E402
from gpuhours.trace.step import make_batch, make_optimizer, one_step, run_steps  # noqa: E402

LLAMA = dict(model_type="llama", hidden_size=256, intermediate_size=688, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
             max_position_embeddings=512, tie_word_embeddings=False)
MOE = dict(model_type="mixtral", hidden_size=128, intermediate_size=256, num_hidden_layers=2,
           num_attention_heads=4, num_key_value_heads=2, vocab_size=1000, num_local_experts=4,
           num_experts_per_tok=2, max_position_embeddings=512, tie_word_embeddings=False)
BERT = dict(model_type="bert", hidden_size=128, intermediate_size=512, num_hidden_layers=2,
            num_attention_heads=4, vocab_size=1000, max_position_embeddings=128,
            type_vocab_size=2, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)


def measured_peak_bytes(cfg: dict, setup: TraceSetup) -> int:
    """Peak of live CPU storage during `setup.steps` real steps, from the profiler's allocator
    events, plus what was allocated before (weights, buffers, the batch)."""
    torch.manual_seed(0)
    built = build_fake_model(cfg, setup, None, "test model")
    model = built.model
    batch = make_batch(built, setup)
    params = list(dict.fromkeys(model.parameters()))
    trainable = [p for p in params if p.requires_grad]
    optimizer = make_optimizer(trainable, setup)
    before = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
              for t in [*params, *model.buffers(), *batch.values()]}
    autocast = torch_precision(setup.training.precision, setup.training.method).autocast_dtype
    with as_on_gpu(setup.training.flash_attention, autocast is not None), \
            profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        for step in range(setup.steps):
            one_step(model, batch, optimizer, trainable, None, step, autocast,
                     setup.training.grad_accum)
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    live = peak = 0
    for e in sorted(events, key=lambda e: e.start_ns()):
        live += e.nbytes()
        peak = max(peak, live)
    return sum(before.values()) + peak


CASES = [
    pytest.param(LLAMA, dict(precision="fp32"), id="llama-full-fp32"),
    pytest.param(LLAMA, dict(precision="fp32", method="lora", checkpointing=True, lora_rank=8),
                 id="llama-lora-fp32-checkpointing"),
    pytest.param(LLAMA, dict(precision="bf16", method="lora", lora_rank=8, lora_targets="qv"),
                 id="llama-lora-bf16-qv"),
    pytest.param(LLAMA, dict(precision="bf16-amp", micro_batch=4), id="llama-full-autocast"),
    pytest.param(MOE, dict(precision="bf16"), id="moe-full-bf16"),
    pytest.param(BERT, dict(precision="fp32", flash_attention=False,
                            optimizer_impl="per-parameter"), id="bert-eager-dropout"),
]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(("cfg", "options"), CASES)
def test_traced_peak_equals_the_real_step(cfg, options):
    setup = TraceSetup(model="test model", arch=from_hf_config(cfg, name="test model"),
                       micro_batch=options.pop("micro_batch", 2), seq_len=64, steps=2, **options)
    traced = run_steps(cfg, setup, "test model").log.peak_bytes
    real = measured_peak_bytes(cfg, setup)
    assert traced == pytest.approx(real, rel=0.01)


def test_one_step_with_an_optimizer_warm_up_has_the_same_peak_as_two():
    """`steps=1` makes the optimizer state with a step on zero gradients instead of a whole
    training step: the traced step must peak exactly as the second of two real ones."""
    arch = from_hf_config(LLAMA, name="m")
    two = run_steps(LLAMA, TraceSetup(model="m", arch=arch, precision="bf16", micro_batch=2,
                                      seq_len=64, steps=2), "m")
    one = run_steps(LLAMA, TraceSetup(model="m", arch=arch, precision="bf16", micro_batch=2,
                                      seq_len=64, steps=1), "m")
    assert one.log.peak_bytes == two.log.peak_bytes
    assert one.log.peak_place is not None and one.log.peak_place.step == 0
