"""fit reaches the effective batch exactly, or says it cannot and what is nearest (issue 16).

Hand-worked: a batch is micro-batch x accumulation x data-parallel ranks, the ranks being
GPUs / (tp x pp x cp). 31 on 2 ranks: 31 is odd, so no split; nearest 30 (15 x 2) or 32
(16 x 2). 257 on 64 ranks: 257 = 4 x 64 + 1; nearest 256 (4 x 64) or 320 (5 x 64), and 256
is the nearer. 257 on 64 GPUs at tp 8: 8 ranks, 257 = 32 x 8 + 1; nearest 256 or 264.
7 on 64 ranks: not even one sequence a rank; the fewest they make is 64."""

from __future__ import annotations

from typer.testing import CliRunner

from gpuhours import catalog
from gpuhours.api import fit_training
from gpuhours.cli import app
from gpuhours.estimate.candidate import Candidate
from gpuhours.resolve import resolve_model
from gpuhours.setup import Hardware, Training


def _made(c: Candidate) -> int:
    return c.micro_batch * c.grad_accum * c.data_parallel


def _70b(**kw: object) -> Training:
    arch, _ = resolve_model("llama-3.1-70b")
    return Training(arch=arch, seq_len=4096, **kw)


H100_64 = Hardware(gpu=catalog.gpu("h100-sxm"), num_gpus=64)


def test_an_odd_batch_on_two_gpus_is_the_nearest_not_a_false_does_not_fit() -> None:
    # micro-batch 1 of LoRA without checkpointing does not fit a 40 GB A100 (48 GiB as given):
    # once "no setup fits" (exit 1), as 31 sequences cannot be split over 2 ranks
    args = ["fit", "--model", "qwen2.5-7b", "--gpu", "a100-40gb", "--method", "lora",
            "--seq", "4096", "--gpus", "2", "--effective-batch", "31"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "No setup of this model and method fits" not in r.output
    assert "nearest: 30 or 32" in " ".join(r.output.split())
    arch, _ = resolve_model("qwen2.5-7b")
    res = fit_training(Training(arch=arch, method="lora", seq_len=4096),
                       Hardware(gpu=catalog.gpu("a100-40gb"), num_gpus=2), effective_batch=31)
    assert res.fits and res.largest_micro_batch is None
    assert res.fastest is not None and res.fastest.checkpointing
    assert _made(res.fastest) in (30, 32)
    assert f"effective batch {_made(res.fastest)} (the nearest" in res.fastest.change


def test_257_on_64_ranks_gets_the_fastest_setup_at_256_and_says_so() -> None:
    # once fits False, fastest None, effective_batch_note '' (the layout given: tp 1)
    res = fit_training(_70b(), H100_64, effective_batch=257)
    assert res.fits
    assert res.fastest is not None and _made(res.fastest) == 256
    assert res.fastest.data_parallel == 64
    assert "nearest: 256 or 320" in res.effective_batch_note
    assert "64 data-parallel ranks" in res.effective_batch_note
    assert "the fastest row makes 256" in res.effective_batch_note


def test_remedy_rows_run_the_nearest_batch_and_name_it() -> None:
    res = fit_training(_70b(), H100_64, effective_batch=257)
    assert res.alternatives
    for c in res.alternatives:
        # micro-batch 1 on 64 ranks: 4 micro-batches a step, 256 sequences, said in the row
        assert (c.micro_batch, c.grad_accum, c.data_parallel) == (1, 4, 64), c.change
        assert "effective batch 256 (the nearest 64 data-parallel ranks make; not 257)" \
            in c.change
    few = fit_training(_70b(), H100_64, effective_batch=7)
    assert few.fits and few.fastest is not None and _made(few.fastest) == 64
    for c in few.alternatives:
        assert _made(c) == 64 and "effective batch 64" in c.change and "not 7" in c.change


def test_an_exact_batch_on_another_layout_is_not_called_unreachable() -> None:
    # layouts searched: 257 is prime, so only one data-parallel rank (tp x pp = 64) makes it
    res = fit_training(_70b(zero_stage=3, checkpointing=True), H100_64, effective_batch=257,
                       search_layouts=True)
    assert res.fastest is not None and _made(res.fastest) == 257
    assert res.fastest.data_parallel == 1
    note = res.effective_batch_note
    assert note.startswith("as given, ") and "64 data-parallel ranks" in note
    assert "the fastest row makes it exactly on another layout" in note


def test_the_ranks_of_a_tensor_parallel_layout_are_named_not_the_gpus() -> None:
    res = fit_training(_70b(zero_stage=3, checkpointing=True, tp=8), H100_64,
                       effective_batch=257)
    note = res.effective_batch_note
    assert "8 data-parallel ranks (64 GPUs / tp 8)" in note and "nearest: 256 or 264" in note
    assert "over 8 GPUs" not in note
    assert res.fastest is not None and _made(res.fastest) == 256


def test_the_exact_split_line_counts_data_parallel_ranks() -> None:
    # 8 sequences on 8 GPUs at tp 2: 4 ranks, 2 sequences a rank -> micro-batch 2 x 1 x 4
    args = ["fit", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--gpus", "8", "--tp", "2",
            "--seq", "4096", "--zero", "1", "--effective-batch", "8"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    out = " ".join(r.output.split())
    assert "Effective batch 8: micro-batch 2 x accumulation 1 x 4 data-parallel ranks" in out
