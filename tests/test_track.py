"""Tracking: ledger round trip, batched writes, a failed and a killed run, plan-against-actual,
and the Hugging Face callback on a tiny Trainer run."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import time
from contextlib import closing
from pathlib import Path

import pytest

from gpuhours.track import ledger as L
from gpuhours.track import track_run
from gpuhours.track.ledger import Ledger
from gpuhours.track.loop import count_tokens
from gpuhours.track.runs import (
    StepRecord,
    actuals_by_phase,
    add_steps,
    get_run,
    list_runs,
    run_steps,
    start_run,
)


def _count_rows(path: Path) -> int:
    with closing(sqlite3.connect(path)) as db:
        return int(db.execute("SELECT COUNT(*) FROM run_steps").fetchone()[0])


def test_new_ledger_has_runs_tables(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "l.sqlite") as book:
        assert book.schema_version() == L.SCHEMA_VERSION == 3
    with closing(sqlite3.connect(tmp_path / "l.sqlite")) as db:
        cols = {r[1] for r in db.execute("PRAGMA table_info(run_steps)")}
    assert {"data_wait_s", "compute_s", "save_bytes", "tokens_real", "peak_memory_bytes"} <= cols


def test_round_trip_with_batched_writes(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    path = tmp_path / "l.sqlite"
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    batches = [{"input_ids": torch.zeros(2, 4, dtype=torch.long), "attention_mask": mask}] * 7

    def slow_loader():  # type: ignore[no-untyped-def]
        for b in batches:
            time.sleep(0.01)
            yield b

    with track_run(project="p", phase="sft", planned_steps=7, config={"micro_batch": 2},
                   ledger=path, flush_every=3, flush_every_s=1e9) as run:
        for i, _batch in enumerate(run.batches(slow_loader())):
            with run.compute():
                time.sleep(0.002)
            with run.optimizer():
                pass
            if i == 3:  # step 4 is open; steps 1-3 were flushed as one batch
                assert _count_rows(path) == 3
            if run.step == 5:
                with run.save(path=tmp_path / "ckpt.bin"):
                    (tmp_path / "ckpt.bin").write_bytes(b"x" * 1234)
        rid = run.run_id
    with Ledger.open(path) as book:
        r = get_run(book, rid)
        recs = run_steps(book, rid)
    assert r.status == "finished" and r.planned_steps == 7 and r.config["micro_batch"] == 2
    assert [s.step for s in recs] == list(range(1, 8))
    assert all(s.data_wait_s >= 0.009 and s.compute_s >= 0.0015 for s in recs)
    assert all(s.tokens_real == 5 and s.tokens_computed == 8 and s.samples == 2 for s in recs)
    assert [s.save_bytes for s in recs] == [0, 0, 0, 0, 1234, 0, 0]
    assert all(s.memory_basis == "process-peak-rss" and s.peak_memory_bytes for s in recs)
    # wall time covers the phases
    assert all(s.wall_s >= s.data_wait_s + s.compute_s + s.optimizer_s for s in recs)
    assert r.summary["steps"] == 7


def test_exception_marks_run_failed_and_keeps_steps(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    with pytest.raises(RuntimeError, match="boom"), \
            track_run(project="p", phase="sft", ledger=path) as run:
        for i in range(4):
            run.start_step()
            if i == 3:
                raise RuntimeError("boom")
    with Ledger.open(path) as book:
        (r,) = list_runs(book)
        assert r.status == "failed" and len(run_steps(book, r.id)) == 4


def test_killed_process_leaves_a_consistent_ledger(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    script = textwrap.dedent(f"""
        import os
        from gpuhours.track import track_run
        with track_run(project="p", phase="sft", ledger={str(path)!r}, flush_every=5,
                       flush_every_s=1e9) as run:
            for i in range(12):
                run.start_step()
            os._exit(9)  # killed: no flush, no finish
    """)
    done = subprocess.run([sys.executable, "-c", script], timeout=60)
    assert done.returncode == 9
    with Ledger.open(path) as book:
        assert book.integrity_ok()
        (r,) = list_runs(book)
        assert r.status == "running"
        assert [s.step for s in run_steps(book, r.id)] == list(range(1, 11))


def test_count_tokens_from_labels_and_mask() -> None:
    torch = pytest.importorskip("torch")
    labels = torch.tensor([[5, -100, -100], [1, 2, -100]])
    assert count_tokens({"input_ids": labels.clamp(min=0), "labels": labels}) == (2, 3, 6)
    assert count_tokens({"x": 1}) == (None, None, None)
    assert count_tokens([1, 2]) == (None, None, None)


def test_actuals_by_phase(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "l.sqlite") as book:
        a = start_run(book, project="proj", phase="sft", name="a", device_kind="cuda",
                      device_name="H100", planned_steps=1000, config={"num_gpus": 2})
        b = start_run(book, project="proj", phase="sft", name="b", device_kind="cuda",
                      device_name="H100", planned_steps=None, config={"num_gpus": 2})
        c = start_run(book, project="other", phase="sft", name="c", device_kind="cpu",
                      device_name="x", planned_steps=5, config={})
        add_steps(book, a, [StepRecord(step=i, started_s=i, wall_s=36.0) for i in range(100)])
        add_steps(book, b, [StepRecord(step=i, started_s=i, wall_s=18.0) for i in range(100)])
        add_steps(book, c, [StepRecord(step=1, started_s=0, wall_s=1.0)])
        got = actuals_by_phase(book, "proj")
    sft = got["sft"]
    # (100 x 36 + 100 x 18) s x 2 GPUs / 3600 = 3.0 GPU h over 200 steps; 1000 planned -> 15
    assert sft.runs == 2 and sft.steps_done == 200 and sft.steps_planned == 1000
    assert sft.gpu_hours_spent == pytest.approx(3.0)
    assert sft.projected_gpu_hours == pytest.approx(15.0)


def test_hf_callback_on_a_tiny_trainer(tmp_path: Path) -> None:
    pytest.importorskip("accelerate")
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from gpuhours.track import hf_callback

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
                                   num_hidden_layers=1, num_attention_heads=2,
                                   num_key_value_heads=2, max_position_embeddings=16)
    model = transformers.LlamaForCausalLM(cfg)
    ids = torch.randint(3, 64, (24, 16))
    mask = torch.ones_like(ids)
    mask[:, 12:] = 0
    data = [{"input_ids": ids[i], "attention_mask": mask[i],
             "labels": ids[i].masked_fill(mask[i] == 0, -100)} for i in range(24)]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=2,
        gradient_accumulation_steps=2, max_steps=6, save_steps=3, save_strategy="steps",
        logging_steps=100, report_to=[], use_cpu=True, disable_tqdm=True,
        dataloader_num_workers=0, save_only_model=True)
    path = tmp_path / "l.sqlite"
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data,
                                   callbacks=[hf_callback(project="p", phase="hf",
                                                          ledger=path)])
    trainer.train()
    with Ledger.open(path) as book:
        (r,) = list_runs(book)
        recs = run_steps(book, r.id)
    assert r.status == "finished" and r.planned_steps == 6
    assert r.config["micro_batch"] == 2 and r.config["grad_accum"] == 2
    assert r.config["model_config"]["hidden_size"] == 16
    assert [s.step for s in recs] == list(range(1, 7))
    # 2 micro-batches of 2 sequences x 16 positions, 12 real each
    assert all(s.tokens_computed == 64 and s.tokens_real == 48 for s in recs)
    assert all(s.compute_s > 0 and s.optimizer_s > 0 for s in recs)
    saved = [s.step for s in recs if s.save_s > 0 and s.save_bytes > 0]
    assert saved == [3, 6]


def test_runs_of_another_setup_are_not_projected(tmp_path: Path) -> None:
    """A CPU smoke test of a 1M-parameter model under the 8B H100 phase's name was once
    projected as a 9% overrun of that phase: it is counted apart, with the reasons."""
    planned = {"hidden_size": 4096, "num_layers": 32, "vocab_size": 128256, "method": "full",
               "gpu": "h100-sxm"}
    tiny = {"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 512}
    real = {"hidden_size": 4096, "num_hidden_layers": 32, "vocab_size": 128256}
    with Ledger.open(tmp_path / "l.sqlite") as book:
        smoke = start_run(book, project="p", phase="sft", name="smoke", device_kind="cpu",
                          device_name="AMD EPYC", planned_steps=1000,
                          config={"num_gpus": 1, "model_config": tiny, "method": "full"})
        other_gpu = start_run(book, project="p", phase="sft", name="a100", device_kind="cuda",
                              device_name="NVIDIA A100-SXM4-80GB", planned_steps=1000,
                              config={"num_gpus": 1, "model_config": real})
        lora = start_run(book, project="p", phase="sft", name="lora", device_kind="cuda",
                         device_name="NVIDIA H100 80GB HBM3", planned_steps=1000,
                         config={"num_gpus": 1, "model_config": real, "method": "lora"})
        good = start_run(book, project="p", phase="sft", name="real", device_kind="cuda",
                         device_name="NVIDIA H100 80GB HBM3", planned_steps=1000,
                         config={"num_gpus": 1, "model_config": real, "method": "full"})
        for run in (smoke, other_gpu, lora, good):
            add_steps(book, run, [StepRecord(step=i, started_s=i, wall_s=3.6) for i in range(10)])
        got = actuals_by_phase(book, "p", {"sft": planned})["sft"]
        unfiltered = actuals_by_phase(book, "p")["sft"]
    assert got.runs == 1 and got.steps_done == 10
    assert got.gpu_hours_spent == pytest.approx(10 * 3.6 / 3600)
    assert got.projected_gpu_hours == pytest.approx(1.0)
    assert got.other_setup_runs == 3
    reasons = " | ".join(got.other_setup_reasons)
    assert "model hidden_size 64 (planned 4096)" in reasons
    assert "ran on a100-80gb (planned h100-sxm)" in reasons
    assert "method lora (planned full)" in reasons
    assert unfiltered.runs == 4  # without a plan to compare with, every run counts


RANKS = textwrap.dedent("""
    import sys, torch, torch.distributed as dist, torch.multiprocessing as mp
    from gpuhours.track import track_run

    def work(rank, ledger, init):
        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
        with track_run(project="p", phase="ddp", ledger=ledger) as run:
            for _ in range(3):
                with run.compute():
                    dist.all_reduce(torch.ones(4))
                run.end_step()
        print(rank, run.run_id, flush=True)
        dist.destroy_process_group()

    if __name__ == "__main__":
        mp.spawn(work, args=(sys.argv[1], sys.argv[2]), nprocs=2)
""")


def test_a_distributed_job_is_one_run_from_rank_0(tmp_path: Path) -> None:
    """Two gloo processes each call track_run: rank 0 registers the run, rank 1 times its
    steps and writes nothing, so the job's GPU hours are counted once."""
    pytest.importorskip("torch")
    script = tmp_path / "ranks.py"
    script.write_text(RANKS)
    path = tmp_path / "l.sqlite"
    done = subprocess.run([sys.executable, str(script), str(path),
                           f"file://{tmp_path / 'init'}"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    ids = dict(line.split() for line in done.stdout.splitlines())
    assert ids["0"] != "None" and ids["1"] == "None"
    with Ledger.open(path) as book:
        (r,) = list_runs(book)
        assert [s.step for s in run_steps(book, r.id)] == [1, 2, 3]
    # the job's GPUs from its world size, said so: counted once, for both processes
    assert r.config["num_gpus"] == 2 and "world size" in r.config["num_gpus_basis"]


def test_hf_callback_records_nothing_on_other_processes(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from types import SimpleNamespace

    from gpuhours.track import hf_callback

    path = tmp_path / "l.sqlite"
    Ledger.open(path).close()
    cb = hf_callback(project="p", phase="hf", ledger=path)
    state = SimpleNamespace(is_world_process_zero=False, max_steps=4, global_step=0)
    args = SimpleNamespace(per_device_train_batch_size=1, gradient_accumulation_steps=1,
                           dataloader_num_workers=0, save_strategy="no", save_steps=0,
                           eval_steps=None, bf16=False, fp16=False, world_size=2,
                           output_dir=str(tmp_path))
    cb.on_train_begin(args, state, None)
    cb.on_step_begin(args, state, None)
    cb.on_step_end(args, state, None)
    cb.on_train_end(args, state, None)
    with Ledger.open(path) as book:
        assert list_runs(book) == []


@pytest.mark.parametrize("value", ["eight", -8, 0, 0.5, True])
def test_a_run_with_a_bad_gpu_count_is_refused_before_training(tmp_path: Path,
                                                                 value: object) -> None:
    from gpuhours.errors import InputError

    with pytest.raises(InputError, match="track config num_gpus: expected a whole number"), \
            track_run(project="p", phase="sft", ledger=tmp_path / "l.sqlite",
                      config={"num_gpus": value}):
        pass


def test_a_stored_bad_gpu_count_is_an_error_naming_the_run_and_one_not_stored_is_said(
        tmp_path: Path) -> None:
    from gpuhours.errors import InputError

    with Ledger.open(tmp_path / "l.sqlite") as book:
        a = start_run(book, project="p", phase="sft", name="a", device_kind="cuda",
                      device_name="H100", planned_steps=10, config={})
        add_steps(book, a, [StepRecord(step=1, started_s=0, wall_s=3600.0)])
        assert "assumed: 1 GPU for run(s) #1" in actuals_by_phase(book, "p")["sft"].basis
        # a ledger written before the check: a whole number as a float or digits is taken;
        # anything else puts that run apart, named, and the plan goes on
        for stored, spent in (('{"num_gpus": 8.0}', 8.0), ('{"num_gpus": "8"}', 8.0)):
            with book.transaction() as db:
                db.execute("UPDATE runs SET config_json = ? WHERE id = ?", (stored, a))
            assert actuals_by_phase(book, "p")["sft"].gpu_hours_spent == pytest.approx(spent)
        with book.transaction() as db:
            db.execute("UPDATE runs SET config_json = ? WHERE id = ?",
                       ('{"num_gpus": "eight"}', a))
        sft = actuals_by_phase(book, "p")["sft"]
        assert sft.runs == 0 and sft.other_setup_runs == 1
        assert "run #1: expected a whole number of GPUs" in sft.other_setup_reasons[0]
    with pytest.raises(InputError, match="expected a whole number"):  # doctor's one run
        from gpuhours.track.runs import run_gpus

        run_gpus({"num_gpus": "eight"}, "run #1 config num_gpus")


def test_a_plan_on_a_measured_cpu_device_counts_its_cpu_runs() -> None:
    from gpuhours.track.runs import setup_mismatches

    planned = {"method": "full", "gpu": "cpu-amd-epyc-7b13-2t"}
    run = {"device_kind": "cpu", "device_name": "AMD EPYC 7B13",
           "config": {"num_gpus": 1, "threads": 2, "method": "full"}}
    assert setup_mismatches(run, planned) == []
    four = {**run, "config": {**run["config"], "threads": 4}}
    assert setup_mismatches(four, planned) == [
        "ran on cpu-amd-epyc-7b13-4t (planned cpu-amd-epyc-7b13-2t)"]
    other = {**run, "device_name": "Intel Xeon 8480"}
    assert setup_mismatches(other, planned) == [
        "ran on cpu-intel-xeon-8480-2t (planned cpu-amd-epyc-7b13-2t)"]
    assert setup_mismatches({**run, "device_kind": "cuda", "device_name": "NVIDIA H100"},
                            {"gpu": "h100-sxm"}) == []


def test_a_tracked_run_of_a_grid_is_compared_with_one_experiment(tmp_path: Path) -> None:
    """A grid phase's tracked run is one of its experiments: a run planned for 43,210 steps at
    the grid's own GPU hours per step is on budget, not a 300% overrun of the mean experiment
    (the review's case), and far from the whole grid's hours."""
    from gpuhours.plan.budget import evaluate
    from gpuhours.plan.load import load_plan

    plan = load_plan(Path(__file__).resolve().parents[1] / "examples"
                     / "qwen2-0.5b-experiments.yaml")
    rows = evaluate(plan).grids["experiments"].rows
    trained = [r for r in rows if r.steps]
    per_step = sum(r.gpu_hours for r in trained) / sum(r.steps for r in trained)
    assert all(round(r.steps) != 43210 for r in trained)
    with Ledger.open(tmp_path / "l.sqlite") as book:
        run = start_run(book, project="Qwen2-0.5B experiments", phase="experiments", name="x",
                        device_kind="cuda", device_name="NVIDIA GeForce RTX 4090",
                        planned_steps=43210, config={"num_gpus": 1})
        wall = per_step * 3600  # one GPU at the grid's rate
        add_steps(book, run, [StepRecord(step=i + 1, started_s=wall * i, wall_s=wall)
                              for i in range(1000)])
        b = evaluate(plan, ledger=book)
    (phase,) = [p for p in b.phases if p.name == "experiments"]
    a = phase.actual
    assert a is not None and a.projected_gpu_hours == pytest.approx(43210 * per_step)
    assert a.budgeted_gpu_hours == pytest.approx(43210 * per_step)
    assert a.overrun_gpu_hours == pytest.approx(0.0, abs=1e-9)
    assert "43,210 steps of the grid" in a.budgeted_basis
    assert a.budgeted_gpu_hours < phase.gpu_hours_per_run


def test_a_grid_runs_budget_is_its_experiment_or_the_grids_rate() -> None:
    from gpuhours.plan.budget import grid_run_budget
    from gpuhours.plan.results import GridRow, GridSchedule

    rows = [GridRow(name="a", priority=1, gpu_hours=2.0, basis="", steps=100),
            GridRow(name="b", priority=1, gpu_hours=6.0, basis="", steps=300),
            GridRow(name="eval", priority=1, gpu_hours=1.0, basis="")]
    grid = GridSchedule(rows=rows, schedule_gpus=1, makespan_hours=9.0, days=0.4,
                        hours_per_day=24.0, reduced_priority=1, reduced_gpu_hours=9.0,
                        reduced_makespan_hours=9.0, reduced_days=0.4)
    assert grid_run_budget(grid, 300)[0] == 6.0                   # experiment b
    assert grid_run_budget(grid, 50)[0] == pytest.approx(1.0)     # 50 x 8/400 GPU h a step
    assert grid_run_budget(grid, None)[0] == pytest.approx(3.0)   # the mean of the three


def test_runs_a_plan_leaves_out_by_their_tags_are_said(tmp_path: Path) -> None:
    from gpuhours.track.runs import unmatched_runs

    with Ledger.open(tmp_path / "l.sqlite") as book:
        for project, phase in (("Proj", "sft"), ("Proj", "stf"), ("proj ", "sft"),
                               ("other", "sft")):
            start_run(book, project=project, phase=phase, name="x", device_kind="cpu",
                      device_name="cpu", planned_steps=None, config={})
        said = unmatched_runs(book, "Proj", ["sft", "rl"])
    assert said == ["1 tracked run(s) of this project under phase 'stf', which the plan does "
                    "not have (phases: sft, rl)",
                    "1 tracked run(s) of project 'proj ', phase 'sft': not counted, the plan's "
                    "project is 'Proj'"]
