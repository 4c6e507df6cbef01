"""FSDP1's root unit at the end of a full fine-tuning backward (estimate/fsdp_root_grad.py): the
head's gradient waits for the embedding's, then the flat gradient is made of both, beside the
root's gathered copy. Counted on a real FSDP1 wrap on CPU (FULL_SHARD over torch's fake process
group, world size 2, rank 0; use_orig_params as Lightning's FSDPStrategy sets it; no_sync as
litgpt's loop runs it), and by hand through the estimate."""

from __future__ import annotations

import dataclasses

import pytest

from gpuhours.estimate.fsdp_root_grad import fsdp1_root_backward_grad_bytes, root_params
from gpuhours.estimate.memory import training_memory
from gpuhours.estimate.params import count_params
from gpuhours.setup import Training

VOCAB, HIDDEN, SEQ = 8192, 256, 64


def _backward_peaks(micro_batches: int) -> tuple[list[int], int]:
    """Live storage at each backward's peak, bytes, and the root unit's parameter bytes."""
    torch = pytest.importorskip("torch")
    import torch.distributed as dist
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from gpuhours.torchkit.storage import LiveStorageTracker

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(HIDDEN, HIDDEN, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.linear(x)

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embedding = torch.nn.Embedding(VOCAB, HIDDEN)
            self.blocks = torch.nn.ModuleList([Block(), Block()])
            self.head = torch.nn.Linear(HIDDEN, VOCAB, bias=False)  # untied

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            x = self.embedding(idx)
            for block in self.blocks:
                x = block(x)
            return self.head(x)

    torch.manual_seed(0)
    model = Model().to(torch.bfloat16)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    peaks = []
    try:
        fsdp = FSDP(model, auto_wrap_policy=ModuleWrapPolicy({Block}), use_orig_params=True,
                    device_id=torch.device("cpu"),
                    sharding_strategy=ShardingStrategy.FULL_SHARD)
        idx = torch.randint(0, VOCAB, (1, SEQ))
        tracker = LiveStorageTracker("cpu")
        with tracker:
            for p in fsdp.parameters():
                tracker.track(p, preexisting=True)
            for _ in range(micro_batches):
                with fsdp.no_sync():
                    loss = fsdp(idx).float().sum()
                    tracker.peak_bytes = 0
                    loss.backward()
                    del loss
                    peaks.append(tracker.peak_bytes)
    finally:
        dist.destroy_process_group()
    return peaks, 2 * VOCAB * HIDDEN * 2


def test_the_root_units_gradient_is_assembled_beside_its_views_gradients() -> None:
    peaks, root = _backward_peaks(3)
    blocks = 2 * HIDDEN * HIDDEN * 2
    # the rank's shards (half of everything), the root's gathered copy (whole), the head's and
    # the embedding's gradients and the flat gradient made of them (two roots); from the second
    # micro-batch on, no_sync's accumulated unsharded gradients (the root's and the blocks')
    first = root / 2 + blocks / 2 + root + 2 * root
    later = first + root + blocks
    # within 3% (the logits' gradients, the blocks' transients and the padding aside)
    assert peaks[0] == pytest.approx(first, rel=0.03)
    assert peaks[1] == pytest.approx(later, rel=0.03)
    assert peaks[2] == peaks[1]  # accumulating in place: no growth


def _training(tiny, **kw: object) -> Training:
    arch = dataclasses.replace(tiny, vocab_size=VOCAB, tie_embeddings=False)
    return Training.model_validate({"arch": arch, "method": "full", "precision": "bf16",
                                    "micro_batch": 1, "seq_len": SEQ, "zero_stage": 3,
                                    "grad_accum": 4, "fsdp_grad_accum": "no-sync", **kw})


def test_the_estimate_counts_two_root_gradients_under_fsdp1_only(tiny) -> None:
    t = _training(tiny)
    counts = count_params(t.arch)
    root = root_params(counts)
    assert root == 2 * VOCAB * tiny.hidden_size + counts.final_norm
    # bf16 flat parameters: two root-sized gradients of 2 bytes
    assert fsdp1_root_backward_grad_bytes(counts, t, 4) == 2 * root * 2
    # not on one GPU, not for FSDP2, DeepSpeed's ZeRO-3 or LoRA (a frozen root)
    assert fsdp1_root_backward_grad_bytes(counts, t, 1) == 0.0
    assert fsdp1_root_backward_grad_bytes(counts, _training(tiny, fsdp_api="fsdp2"), 4) == 0.0
    assert fsdp1_root_backward_grad_bytes(
        counts, _training(tiny, zero3_engine="deepspeed", fsdp_grad_accum="reduce-scatter"),
        4) == 0.0


def test_the_root_phase_is_the_peak_for_a_large_vocabulary(tiny) -> None:
    # a 256k vocabulary on a small model at 8 tokens: the root dwarfs a layer and the logits,
    # so the end of backward (no_sync's whole gradient, the root's gathered copy, two root
    # gradients) is the peak
    arch = dataclasses.replace(tiny, vocab_size=256_000, tie_embeddings=False)
    t = _training(tiny, arch=arch, seq_len=8)
    m = training_memory(arch, t, num_gpus=4)
    counts = count_params(arch)
    root = root_params(counts)
    assert m.peak_phase.startswith("end of backward")
    parts = dict(m.peak_parts)
    assert parts["root_unit_gradients_bytes"] == 2 * root * 2
    assert parts["gathered_bytes"] == pytest.approx(root * 2)
    assert parts["no_sync_gradients_bytes"] == pytest.approx(counts.total * 2)


def test_under_fsdp1_the_root_unit_outgrows_the_loss_for_llama_3_1_8b() -> None:
    # full, bf16, 1 x 2048 on 8 GPUs: two 1.05B-parameter root gradients (2 x 128,256 x 4,096
    # + 4,096) at 2 bytes outweigh the loss's working set; no layer's gradient is alive then
    t = Training(model="llama-3.1-8b", zero_stage=3, checkpointing=True, precision="bf16")
    m = training_memory(t.arch, t, 8)
    parts = dict(m.peak_parts)
    assert m.peak_phase.startswith("end of backward")
    assert parts["root_unit_gradients_bytes"] == 2 * (2 * 128_256 * 4_096 + 4_096) * 2
    assert "gathered_gradients_bytes" not in parts and "logits_bytes" not in parts
    assert sum(parts.values()) == pytest.approx(m.tensors_bytes)
