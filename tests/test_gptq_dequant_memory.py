"""auto-gptq's torch-path dequantisation as memory (estimate/quant.py
gptq_dequant_transient_bytes, memory.py gptq_dequant_bytes, fragmentation.py dequant_linear):
held to hand counts for Llama-2-7B (q, k, v, o: 4096 x 4096 = 16,777,216 weights each; gate,
up, down: 4096 x 11008 = 45,088,768 each) and to the bytes real CPU tensors hold when the
same sequence of torch operators (qlinear_cuda_old.py's 4-bit torch path, AutoGPTQ v0.4.2
62187bf8 and v0.5.1 ddbfb04c, rewritten here from its description) unpacks a weight, and to
what autograd keeps of the matmul that follows."""

from __future__ import annotations

import pytest

from gpuhours.estimate.fragmentation import dequant_linear
from gpuhours.estimate.memory import (
    gptq_dequant_bytes,
    gptq_layer_weights_in_order,
    gptq_saved_weight_bytes_per_layer,
    training_memory,
)
from gpuhours.estimate.quant import (
    GPTQ_DEQUANT_WEIGHT_BYTES,
    GPTQ_UNPACK_PEAK_BYTES,
    gptq_dequant_transient_bytes,
)
from gpuhours.setup import Training
from gpuhours.trace.allocator import Allocator

QKVO, MLP = 4096 * 4096, 4096 * 11008


def _t(**kw) -> Training:
    base = dict(model="llama-2-7b", method="qlora", base_quant="gptq-int4", precision="fp16",
                micro_batch=1, seq_len=1024, lora_rank=8, lora_targets="qv",
                checkpointing=True)
    return Training(**{**base, **kw})


def test_unpack_transient_by_hand() -> None:
    """5 bytes a weight while unpacking (int32 4 + int8 1), 2 left (the fp16 weight). Recording
    for backward, linear k's excess over the layer's kept 2 x sum(w) is 5 w_k - 2 sum_{j>=k} w_j:
    down (last) 3 x 45,088,768 = 135,266,304; up 5 w - 2 (2 w) = 45,088,768; q 5 x 16.8M - 2 x
    202.4M < 0. In the no-grad pass nothing is kept: 5 x 45,088,768 = 225,443,840."""
    assert GPTQ_UNPACK_PEAK_BYTES == 5.0 and GPTQ_DEQUANT_WEIGHT_BYTES == 2.0
    t = _t()
    order = gptq_layer_weights_in_order(t.arch)
    assert order == [QKVO] * 4 + [MLP] * 3
    assert gptq_dequant_bytes(t.arch, t, keeps_weights=True) == 135_266_304
    assert gptq_dequant_bytes(t.arch, t, keeps_weights=False) == 225_443_840
    # a layer whose first linear dwarfs the rest: its own excess wins (500 - 2 x 102 = 296)
    assert gptq_dequant_transient_bytes([100, 1, 1], True) == 296
    assert gptq_dequant_transient_bytes([], True) == 0
    # no term off the torch path: below 128 tokens (the CUDA kernel), or another base
    assert gptq_dequant_bytes(t.arch, _t(seq_len=64), keeps_weights=True) == 0
    assert gptq_dequant_bytes(t.arch, _t(base_quant="nf4"), keeps_weights=True) == 0


def test_unpack_on_real_tensors() -> None:
    """A 4-bit linear of 1024 x 512 (group 128) unpacked by the torch path's operators on CPU,
    counted by storage (torchkit LiveStorageTracker): the new storages peak at 5 bytes a weight
    (the int32 shift result beside its int8 cast) plus the unpacked int8 zero points (one byte
    per group and column: 1/128 of a byte a weight), in both auto-gptq's in-place
    (0.4.2) and out-of-place (0.5.1) `bitwise_and`; the fp16 weight (2 bytes a weight) is what
    is left. Then a matmul with an input that requires grad keeps that weight for backward and
    not the input (autograd's saved tensors: 2 bytes a weight)."""
    torch = pytest.importorskip("torch")
    from gpuhours.torchkit.storage import LiveStorageTracker

    inf, outf, group = 1024, 512, 128
    n = inf * outf
    qweight = torch.randint(-2**31, 2**31 - 1, (inf // 8, outf), dtype=torch.int32)
    qzeros = torch.randint(-2**31, 2**31 - 1, (inf // group, outf // 8), dtype=torch.int32)
    scales = torch.rand(inf // group, outf).half()
    wf = torch.arange(0, 32, 4, dtype=torch.int32).unsqueeze(0)

    def unpack(in_place: bool) -> torch.Tensor:
        zeros = torch.bitwise_right_shift(qzeros.unsqueeze(2).expand(-1, -1, 8),
                                          wf.unsqueeze(0)).to(torch.int8)
        zeros = torch.bitwise_and(zeros, 15, out=zeros) if in_place else zeros & 15
        zeros = (zeros + 1).reshape(-1, 1, outf)
        weight = torch.bitwise_right_shift(qweight.unsqueeze(1).expand(-1, 8, -1),
                                           wf.unsqueeze(-1)).to(torch.int8)
        weight = torch.bitwise_and(weight, 15, out=weight) if in_place else weight & 15
        weight = weight.reshape(-1, group, outf)
        weight = scales.reshape(-1, 1, outf) * (weight - zeros)
        return weight.reshape(inf, outf)

    for in_place in (True, False):
        with LiveStorageTracker("cpu") as tracker:
            for held in (qweight, qzeros, scales, wf):  # the layer's buffers: not new
                tracker.track(held, preexisting=True)
            before = tracker.live_bytes
            weight = unpack(in_place)
        assert weight.dtype == torch.float16
        zeros = (inf // group) * outf  # the unpacked int8 zero points, alive beside
        assert tracker.peak_bytes - before == GPTQ_UNPACK_PEAK_BYTES * n + zeros
        assert tracker.live_bytes - before == GPTQ_DEQUANT_WEIGHT_BYTES * n
    saved: list[int] = []

    def pack(x: torch.Tensor) -> torch.Tensor:
        saved.append(x.untyped_storage().nbytes())
        return x

    x = torch.rand(256, inf, dtype=torch.float32).half().requires_grad_()
    weight = unpack(True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        out = torch.matmul(x, weight)
    assert out.requires_grad and saved == [GPTQ_DEQUANT_WEIGHT_BYTES * n]


def test_peak_adds_the_recomputed_layers_unpacking() -> None:
    """With checkpointing the recomputed layer's backward carries the kept fp16 weights
    (2 x 202,375,168 = 404,750,336) and the unpacking excess (135,266,304) where that phase is
    the peak (1024 tokens of LoRA r8 on q, v: the logits of a 32,000 vocabulary are smaller)."""
    t = _t()
    m = training_memory(t.arch, t)
    parts = dict(m.peak_parts)
    assert parts["gptq_dequant_bytes"] == 135_266_304
    assert gptq_saved_weight_bytes_per_layer(t.arch, t) == 404_750_336
    # without checkpointing the excess sits at the forward's last linear, where the loss's
    # logits (1024 x 32,000 x 4 x 3 = 393,216,000 bytes) are not yet made: the loss side is
    # the larger, and the peak keeps every layer's weights beside it
    off = _t(checkpointing=False)
    m_off = dict(training_memory(off.arch, off).peak_parts)
    assert "gptq_dequant_bytes" not in m_off and m_off["logits_bytes"] == 393_216_000 > 135_266_304
    assert m_off["activations_kept_bytes"] > 32 * 404_750_336


def test_replay_unpacks_in_order() -> None:
    """fragmentation.dequant_linear on the allocator model: 5 w allocated at once (the int32
    and int8 copies), 2 w left (the fp16 weight) for w = 8 MiB weights."""
    al = Allocator()
    w = 8 * 2**20
    half = dequant_linear(al, w)
    assert al.peak_allocated == 5 * w
    assert al.allocated == 2 * w
    al.free(half)
    assert al.allocated == 0
