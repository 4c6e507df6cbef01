"""DeepSpeed ZeRO-3's set-up and step through the caching allocator (estimate/deepspeed_replay.py),
worked by hand from stage3.py @ v0.12.3's order of allocations."""

import pytest

from gpuhours.estimate.deepspeed_replay import (
    Zero3Layout,
    zero3_layout,
    zero3_replayed,
    zero3_setup,
    zero3_step,
)
from gpuhours.estimate.deepspeed_step import (
    deepspeed_zero3_sub_groups,
    hf_auto_reduce_bucket_elements,
)
from gpuhours.estimate.memory import training_memory
from gpuhours.estimate.step_replay import STEP_REPLAY_TERM, reserved_training_memory
from gpuhours.setup import Training
from gpuhours.trace.allocator import Allocator

MI = 1 << 20


def test_sub_groups_by_hand() -> None:
    # whole parameters until the running count reaches the size (>=), the rest one group
    assert deepspeed_zero3_sub_groups([3, 4, 5, 6], 7) == [7, 11]
    assert deepspeed_zero3_sub_groups([3, 4, 5, 6], 8) == [12, 6]
    assert deepspeed_zero3_sub_groups([3, 4, 5, 6], 18) == [18]
    assert deepspeed_zero3_sub_groups([3, 4, 5, 6], 100) == [18]
    assert deepspeed_zero3_sub_groups([], 7) == []


def _qwen18(**kw: object) -> Training:
    base = dict(model="qwen-1.8b", method="full", precision="bf16-mixed", micro_batch=1,
                seq_len=256, grad_accum=8, checkpointing=True, zero_stage=3,
                zero3_engine="deepspeed", optimizer_impl="fused")
    return Training(**{**base, **kw})


def test_qwen_18b_sub_groups_by_hand() -> None:
    """Qwen-1.8B on one GPU: the embedding (151,936 x 2,048 = 311,164,928), 13 layers of
    50,604,032 (969,017,344), then layer 14's parameters until 1e9 is reached: its norms and
    bias (10,240), q, k, v, o (4 x 2,048^2) and the MLP's first two linears (2 x 2,048 x
    5,504) make 1,008,349,184. The rest is the second group."""
    t = _qwen18()
    m = training_memory(t.arch, t, 1)
    z = zero3_layout(t, m, 1)
    assert z.sub_groups[0] == 969_017_344 + 10_240 + 4 * 2048**2 + 2 * 2048 * 5504
    assert z.sub_groups[0] == 1_008_349_184
    assert sum(z.sub_groups) == 1_836_828_672
    assert len(z.sub_groups) == 2
    # transformers' "auto" bucket: hidden^2
    assert z.bucket_elements == hf_auto_reduce_bucket_elements(2048) == 4_194_304
    assert (z.weight_bytes_per_element, z.grad_bytes_per_element) == pytest.approx((2.0, 2.0))
    assert (z.master_bytes_per_element, z.moment_bytes_per_element) == pytest.approx((4.0, 4.0))


def _toy() -> Zero3Layout:
    # elements in MiB units so that every request is a multiple of 2 MiB (no rounding); two
    # sub groups of 104 Mi, the second larger than half the first, as Qwen-1.8B's (1.01e9,
    # 0.83e9)
    return Zero3Layout(root_first=(64 * MI,), layers=((40 * MI,), (40 * MI,)),
                       root_last=(64 * MI,),
                       sub_groups=tuple(deepspeed_zero3_sub_groups([64 * MI, 40 * MI, 40 * MI,
                                                                   64 * MI], 100 * MI)),
                       weight_bytes_per_element=2.0, grad_bytes_per_element=2.0,
                       master_bytes_per_element=4.0, moment_bytes_per_element=4.0,
                       temporary_sets=0, bucket_elements=1 * MI)


def test_setup_by_hand() -> None:
    """208 Mi parameters in sub groups of 104 and 104 Mi: weights 416 MiB; sub group 0's copy
    (208, a new block A) then master (416), the copy freed; sub group 1's copy in A, its
    master (416) new; gradient_buffer 416 (A is too small: new, D), the moments 4 x 416
    (new), D freed; the bucket (2 MiB) best-fits in A, the gradient partitions (416) in D.
    Reserved: 416 + 208 + 416 + 416 + 416 + 4 x 416; A's 206 MiB stay idle."""
    al = Allocator()
    z = _toy()
    assert z.sub_groups == (104 * MI, 104 * MI)
    zero3_setup(al, z)
    assert al.reserved == (416 + 208 + 416 + 416 + 416 + 4 * 416) * MI
    assert al.allocated == (416 + 2 * 416 + 4 * 416 + 2 + 416) * MI


def test_step_by_hand() -> None:
    """The norm's float64 copies (8 B: 512, 320, 320, 512 MiB) take one new 512 segment (A
    has 206 free); sub group 0's flat copy (208) fits only there, its fp32 gradient (416) is
    a new segment; sub group 1's copy (208) and fp32 gradient (416) find those two blocks."""
    al = Allocator()
    z = _toy()
    zero3_setup(al, z)
    before, allocated = al.reserved, al.allocated
    zero3_step(al, z)
    assert al.reserved == before + (512 + 416) * MI
    assert al.peak_allocated == allocated + (208 + 416) * MI
    assert al.allocated == allocated
    zero3_step(al, z)  # the second step finds every block it needs
    assert al.reserved == before + (512 + 416) * MI


def test_replay_takes_deepspeed_path() -> None:
    """Full fine-tuning under DeepSpeed's engine is laid out by this module (the state made at
    set-up, before any activation); the same setup under FSDP, and LoRA, are not."""
    t = _qwen18()
    assert zero3_replayed(t)
    assert not zero3_replayed(_qwen18(zero3_engine="fsdp", optimizer_impl="foreach"))
    assert not zero3_replayed(_qwen18(method="lora"))
    m = reserved_training_memory(t, 1)
    assert any(x.startswith(STEP_REPLAY_TERM) for x in m.setup_terms)
    # the set-up's idle blocks and the step's new segments (the embedding's float64 norm copy,
    # the first sub group's fp32 gradient) are reserve beyond the live tensors
    assert m.allocator_reserve_bytes > 1.5 * 2**30


def test_partitions_over_gpus() -> None:
    """On two GPUs each parameter's partition is half of it, rounded up (_partition_param), so
    are the sub groups; autograd's gradient is still the whole parameter's (`gpus`)."""
    t = _qwen18()
    m1 = training_memory(t.arch, t, 1)
    one = zero3_layout(t, m1, 1)
    two = zero3_layout(t, training_memory(t.arch, t, 2), 2)
    assert two.gpus == 2 and one.gpus == 1
    assert two.params == [-(-n // 2) for n in one.params]
    assert sum(two.sub_groups) == sum(two.params)
