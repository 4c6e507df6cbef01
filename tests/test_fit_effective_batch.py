"""fit with --effective-batch (walk p9, minor): a batch the GPUs cannot split still gets the
fastest setup at the nearest batch they make, said in its row; remedy rows run the
accumulation the batch needs on their own GPUs, not 1 x 1."""

from __future__ import annotations

from gpuhours import catalog
from gpuhours.estimate.fit import fit
from gpuhours.resolve import resolve_model
from gpuhours.setup import Hardware, Training


def _hw(gpus: int) -> Hardware:
    return Hardware(gpu=catalog.gpu("a100-80gb"), num_gpus=gpus)


def test_an_unsplittable_batch_gets_the_nearest_one_and_says_so() -> None:
    arch, _ = resolve_model("qwen2.5-7b")
    t = Training(arch=arch, method="lora", seq_len=2048)
    r = fit(t, _hw(2), effective_batch=7)
    assert "nearest: 6 or 8" in r.effective_batch_note
    f = r.fastest
    assert f is not None
    made = f.micro_batch * f.grad_accum * f.data_parallel
    assert made in (6, 8) and made % 2 == 0
    assert f"effective batch {made} (the nearest these GPUs make; not 7)" in f.change


def test_remedy_rows_accumulate_to_the_effective_batch() -> None:
    arch, _ = resolve_model("qwen2.5-7b")
    t = Training(arch=arch, method="full", seq_len=4096)
    r = fit(t, _hw(1), effective_batch=32, bigger_gpus=[catalog.gpu("b200")])
    assert r.largest_micro_batch is None and r.alternatives
    for c in r.alternatives:
        # micro-batch 1 on each row's data-parallel ranks: 32 / ranks micro-batches a step
        assert c.micro_batch == 1
        assert c.grad_accum * c.data_parallel == 32, c.change
    assert {c.grad_accum for c in r.alternatives} >= {32, 8}  # 1 GPU and 4 GPUs
