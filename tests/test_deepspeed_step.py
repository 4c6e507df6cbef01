"""DeepSpeed ZeRO-3's step, one sub group at a time (estimate/deepspeed_step.py), by hand."""

import pytest

from gpuhours.estimate.deepspeed_step import DEEPSPEED_SUB_GROUP_ELEMENTS, deepspeed_zero3_step_bytes
from gpuhours.estimate.memory import training_memory
from gpuhours.estimate.params import count_params
from gpuhours.setup import Training


def test_sub_group_working_set_by_hand() -> None:
    # Qwen-1.8B's 1.84e9 bf16 parameters on one GPU with DeepSpeed's FusedAdam: one 1e9-element
    # sub group's bf16 flat copy (2 B) beside its fp32 cast (4 B): 6e9 bytes, not 4 B x 1.84e9
    assert deepspeed_zero3_step_bytes(1.837e9, 2.0, 0) == pytest.approx(6e9)
    # torch's foreach AdamW (one temporary set) on the sub group's fp32 tensor: 4 + 4 B
    assert deepspeed_zero3_step_bytes(3.86e9, 2.0, 1) == pytest.approx(8e9)
    # torch 2.0's two sets: 4 + 8 B
    assert deepspeed_zero3_step_bytes(3.86e9, 2.0, 2) == pytest.approx(12e9)
    # a partition smaller than a sub group (LoRA adapters, fp32 gradients): the partition
    assert deepspeed_zero3_step_bytes(5e7, 4.0, 0) == pytest.approx(5e7 * 8)
    assert deepspeed_zero3_step_bytes(0.0, 2.0, 1) == 0.0
    assert DEEPSPEED_SUB_GROUP_ELEMENTS == 1e9


def _qwen18(**kw: object) -> Training:
    base = dict(model="qwen-1.8b", method="full", precision="bf16-mixed", micro_batch=1,
                seq_len=256, grad_accum=8, checkpointing=True, zero_stage=3)
    return Training(**{**base, **kw})


def test_deepspeed_zero3_step_in_the_breakdown() -> None:
    """The same setup under FSDP keeps torch's foreach temporaries over the whole shard
    (4 B per parameter); under DeepSpeed's engine one sub group's flat copies."""
    fsdp = _qwen18()
    n = count_params(fsdp.arch).total
    m = training_memory(fsdp.arch, fsdp, num_gpus=1)
    assert m.optimizer_temporaries_bytes == pytest.approx(4 * n)
    ds = _qwen18(zero3_engine="deepspeed", optimizer_impl="fused")
    m = training_memory(ds.arch, ds, num_gpus=1)
    assert n > 1e9
    assert m.optimizer_temporaries_bytes == pytest.approx(6 * 1e9)
    # on 8 GPUs the partition (n / 8 < 1e9) is the sub group: torch's foreach AdamW, 8 B each
    ds8 = _qwen18(zero3_engine="deepspeed")
    m8 = training_memory(ds8.arch, ds8, num_gpus=8)
    assert m8.optimizer_temporaries_bytes == pytest.approx(8 * n / 8)
    # offloaded optimizer: the step runs on the host, nothing on the GPU
    off = _qwen18(zero3_engine="deepspeed", offload="optimizer")
    assert training_memory(off.arch, off, num_gpus=8).optimizer_temporaries_bytes == 0
