"""The loss kernel (Training.loss_kernel): logits memory, logits traffic and LM-head FLOPs of
each kernel, worked by hand, and held to the torchtune runs of finetune_runs.csv."""

from __future__ import annotations

import dataclasses

import pytest

from gpuhours.estimate import assumptions as A
from gpuhours.estimate.estimator import estimate_training
from gpuhours.estimate.flops import training_flops_per_token
from gpuhours.estimate.memory import (
    fused_linear_chunk_tokens,
    lm_head_backward_bytes,
    logits_bytes,
    loss_backward_bytes,
    training_memory,
)
from gpuhours.estimate.timing import training_step_time
from gpuhours.setup import CHOICE_FIELDS, Hardware, Training

# tiny (tests/conftest.py): hidden 64, vocab 1000, untied head. micro-batch 2 x seq 128 = 256
# tokens; bf16-mixed: the logits are 2 bytes per element.
TOKENS, VOCAB, HIDDEN = 256, 1000, 64


def _t(tiny, kernel: str, **kw: object) -> Training:
    return Training.model_validate({"arch": tiny, "micro_batch": 2, "seq_len": 128,
                                    "loss_kernel": kernel, **kw})


def test_default_is_hf_and_is_a_choice(tiny):
    from gpuhours.setup import loss_kernel_of

    assert Training(arch=tiny).loss_kernel is None  # left to the kernel path
    assert loss_kernel_of(Training(arch=tiny)) == "hf"
    assert "loss_kernel" in CHOICE_FIELDS
    assert "logits_fp32" not in Training.model_fields  # folded into loss_kernel="hf"


@pytest.mark.parametrize(("kernel", "forward", "backward"), [
    # hf: bf16 logits 2 + fp32 upcast 4 + log-softmax output 4; backward three fp32 tensors 12
    ("hf", TOKENS * VOCAB * (2 + 4 + 4), TOKENS * VOCAB * 12),
    # chunked, 8 chunks: bf16 logits 2 + every chunk's fp32 log-softmax output 4 + one chunk's
    # upcast 4/8; backward: saved outputs 4 + one chunk's two fp32 gradients and bf16 cast 10/8
    ("chunked", TOKENS * VOCAB * (2 + 4 + 0.5), TOKENS * VOCAB * (4 + 1.25)),
    # fused-linear: ceil(1000/64) = 16, ceil(256/16) = 16 tokens a chunk (a power of two):
    # chunk logits 16 x 1000 x 2 + input gradient 256 x 64 x 2 + fp32 loss 256 x 4;
    # backward only scales the input gradient (and the loss stays)
    ("fused-linear", 16 * 1000 * 2 + 256 * 64 * 2 + 256 * 4, 256 * 64 * 2 + 256 * 4),
    # cut-ce: fp32 log-sum-exp and loss per token 8 x 256; backward adds the input gradient
    ("cut-ce", 8 * 256, 256 * 64 * 2 + 8 * 256),
])
def test_logits_working_set_by_hand(tiny, kernel, forward, backward):
    t = _t(tiny, kernel)
    assert logits_bytes(tiny, t) == pytest.approx(forward)
    assert loss_backward_bytes(tiny, t) == pytest.approx(backward)


def test_fp32_logits_by_hand(tiny):
    # no upcast copy in fp32: hf 3 x 4 = 12 per element (as before loss_kernel existed);
    # chunked 4 (logits) + 4 (saved outputs) + 4/8 (one chunk's working copy)
    assert logits_bytes(tiny, _t(tiny, "hf", precision="fp32")) == TOKENS * VOCAB * 12
    assert logits_bytes(tiny, _t(tiny, "chunked", precision="fp32")) == TOKENS * VOCAB * 8.5
    # backward of chunked in fp32: 4 + (8 + 4)/8 = 5.5
    assert loss_backward_bytes(tiny, _t(tiny, "chunked", precision="fp32")) == (
        TOKENS * VOCAB * 5.5)


def test_liger_chunk_size_matches_its_worked_example():
    # Liger-Kernel ops/fused_linear_cross_entropy.py comment: BT = 4096*4, V = 32000, H = 4096
    # -> inc_factor 8, chunk_size 2048
    assert fused_linear_chunk_tokens(4096 * 4, 32000, 4096) == 2048
    # rounded up to a power of two: ceil(1000 / 16) = 63 -> 64; never more than the tokens
    assert fused_linear_chunk_tokens(1000, 1000, 64) == 64
    assert fused_linear_chunk_tokens(3, 151936, 896) == 1


def test_fused_kernels_hold_the_head_gradient_with_their_working_set(tiny):
    head_grad = 64000 * 2.0
    fused = _t(tiny, "fused-linear")
    assert lm_head_backward_bytes(tiny, fused, head_grad) == (
        16 * 1000 * 2 + 256 * 64 * 2 + 256 * 4 + head_grad)
    cce = _t(tiny, "cut-ce")
    assert lm_head_backward_bytes(tiny, cce, head_grad) == 256 * 64 * 2 + 8 * 256 + head_grad
    # hf and chunked: the logits' bf16 gradient beside the head's gradient
    assert lm_head_backward_bytes(tiny, _t(tiny, "chunked"), head_grad) == (
        TOKENS * VOCAB * 2 + head_grad)


def test_peak_memory_changes_by_the_logits_term_only(tiny):
    hf = training_memory(tiny, _t(tiny, "hf"))
    chunked = training_memory(tiny, _t(tiny, "chunked"))
    assert hf.peak_phase == chunked.peak_phase
    assert hf.peak_phase.startswith("start of backward")
    # hf's peak logits term is its backward 12/element; chunked's its forward 6.5/element
    assert hf.tensors_bytes - chunked.tensors_bytes == pytest.approx(TOKENS * VOCAB * (12 - 6.5))


def test_logits_traffic_by_kernel(tiny, toy_gpu):
    hw = Hardware(gpu=toy_gpu)
    bw = 1000e9 * A.BANDWIDTH_EFFICIENCY.value
    times = {}
    for kernel in ("hf", "chunked", "fused-linear", "cut-ce"):
        t = _t(tiny, kernel)
        f = training_flops_per_token(tiny, 128, loss_kernel=kernel)
        times[kernel] = training_step_time(tiny, t, hw, f, 202048).memory_bound_s
    # bytes per logit at bf16: hf 30, chunked 30 (the same passes a chunk at a time),
    # fused-linear 8, cut-ce 0
    assert times["chunked"] == pytest.approx(times["hf"])
    assert times["hf"] - times["fused-linear"] == pytest.approx(TOKENS * VOCAB * 22 / bw)
    assert times["hf"] - times["cut-ce"] == pytest.approx(TOKENS * VOCAB * 30 / bw)


def test_cut_ce_recomputes_the_lm_head_and_liger_does_not(tiny):
    hf = training_flops_per_token(tiny, 128)
    liger = training_flops_per_token(tiny, 128, loss_kernel="fused-linear")
    cce = training_flops_per_token(tiny, 128, loss_kernel="cut-ce")
    assert liger == hf  # Liger makes the head's gradients in its forward: same FLOPs
    # Cut Cross-Entropy recomputes the logits in backward: one head forward, 2 x 1000 x 64
    assert cce.recompute_matmul == 2 * 64000
    assert cce.model_flops_per_token == hf.model_flops_per_token  # MFU unchanged, HFU up
    assert cce.hardware_flops_per_token == hf.hardware_flops_per_token + 128000
    # with checkpointing the layers' recompute and the head's add up
    both = training_flops_per_token(tiny, 128, checkpointing=True, loss_kernel="cut-ce")
    ckpt = training_flops_per_token(tiny, 128, checkpointing=True)
    assert both.recompute_matmul == ckpt.recompute_matmul + 128000


def test_estimate_lists_the_kernel_assumptions(tiny, toy_gpu):
    e = estimate_training(_t(tiny, "chunked"), Hardware(gpu=toy_gpu))
    text = " ".join(e.assumptions)
    assert "chunked_ce_chunks = 8" in text
    assert "logits_traffic_bytes_per_element.chunked = 30" in text


@pytest.mark.parametrize("kernel", ["hf", "chunked"])
def test_working_set_matches_a_live_storage_count_on_real_tensors(tiny, kernel):
    """transformers' loss and torchtune's chunked loss run on real CPU bf16 tensors (1024 tokens,
    hidden 64, vocab 4096, 8 chunks); live storage bytes counted at the dispatcher
    (gpuhours.torchkit.storage, as bench does), the hidden states, head and labels left out."""
    torch = pytest.importorskip("torch")
    from gpuhours.torchkit.storage import LiveStorageTracker

    tokens, hidden, vocab = 1024, 64, 4096
    arch = dataclasses.replace(tiny, vocab_size=vocab)  # tiny's hidden size is 64
    t = Training(arch=arch, micro_batch=1, seq_len=tokens, precision="bf16",
                 loss_kernel=kernel)
    torch.manual_seed(0)
    h = torch.randn(tokens, hidden, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(vocab, hidden, dtype=torch.bfloat16, requires_grad=True)
    y = torch.randint(0, vocab, (tokens,))
    ce = torch.nn.functional.cross_entropy
    tracker = LiveStorageTracker("cpu")
    with tracker:
        for x in (h, w, y):
            tracker.track(x, preexisting=True)
        if kernel == "hf":  # transformers' ForCausalLMLoss: logits.float(), then the loss
            logits = [h @ w.T]
            loss = ce(logits[0].float(), y)
        else:  # torchtune: one head matmul per chunk; CEWithChunkedOutputLoss's loop
            logits = [c @ w.T for c in h.chunk(8)]
            total = torch.zeros((), dtype=torch.float32)
            for c, yc in zip(logits, y.chunk(8), strict=True):
                total = total + ce(c.float(), yc, reduction="sum")
            loss = total / tokens
        forward = tracker.peak_bytes
        del logits  # the training loop keeps only the loss
        tracker.peak_bytes = 0
        loss.backward()
        backward = tracker.peak_bytes
    before = h.nbytes + w.nbytes + y.nbytes
    assert forward - before == pytest.approx(logits_bytes(arch, t), rel=1e-3)
    assert backward - before == pytest.approx(loss_backward_bytes(arch, t), rel=1e-3)


# --- against measured runs ------------------------------------------------------------------
# pytorch/torchtune README.md 'Optimization flags' @ bd2a0fc7 (table added 1814feb17), rows of
# shared/reference/validation/finetune_runs.csv: Llama 3.2 3B full fine-tuning, pure bf16,
# batch 2 x 4096 packed, A100, torch AdamW, 'Peak Memory Active (GiB)'. No constant here was set
# from these rows (the chunk count is torchtune's default): all are held-out checks.
GIB = 2**30
LLAMA_3B = {"model": "llama-3.2-3b", "precision": "bf16", "micro_batch": 2, "seq_len": 4096}


def _peak_gib(**kw: object) -> float:
    t = Training.model_validate({**LLAMA_3B, **kw})
    return training_memory(t.arch, t).tensors_bytes / GIB


def test_torchtune_hf_loss_row():
    # '+ Packed Dataset': no compile, no chunked CE (torchtune's decoder upcasts the whole
    # output to fp32, as transformers does): 60.0 GiB measured
    assert _peak_gib(loss_kernel="hf") == pytest.approx(60.0, rel=0.05)


def test_torchtune_chunked_ce_saving():
    # '+ Compile' 51.0 GiB -> '+ Chunked Cross Entropy' 42.9 GiB: 8.1 GiB saved, measured under
    # torch.compile, which gpuhours does not model (compile alone took 60.0 -> 51.0 GiB; it can
    # keep bf16 inputs instead of fp32 softmax outputs). Predicted without compile: 8192 tokens x
    # 128256 x (12 - 6.5) bytes = 5.38 GiB, two thirds of the measured saving.
    saved = _peak_gib(loss_kernel="hf") - _peak_gib(loss_kernel="chunked")
    assert saved == pytest.approx(8192 * 128256 * 5.5 / GIB)
    assert 0.6 * 8.1 < saved < 8.1
