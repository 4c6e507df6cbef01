"""The `gpuhours doctor` command. Registered on the main app by gpuhours.cli; this module must
not import torch at import time (imports go inside the command functions)."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from gpuhours.cli_common import (
    CkptOpt,
    MethodOpt,
    ModelOpt,
    PrecOpt,
    SeqOpt,
    ZeroOpt,
    defaults_of,
    user_errors,
)
from gpuhours.errors import InputError
from gpuhours.setup import Training

#: the setup options of --hf-log that default to the setup model's defaults: (parameter, field)
SETUP_OPTIONS = (("method", "method"), ("seq", "seq_len"), ("precision", "precision"),
                 ("checkpointing", "checkpointing"), ("zero", "zero_stage"))


def register(app: typer.Typer) -> None:
    """Add this capability's commands to `app`."""
    training = defaults_of(Training)

    @app.command()
    @user_errors
    def doctor(
        ctx: typer.Context,
        run: Annotated[str | None, typer.Argument(help="A tracked run's id in the ledger.")] = None,
        hf_log: Annotated[str | None, typer.Option(
            "--hf-log", help="Or: a Hugging Face trainer_state.json to read after the fact.")
        ] = None,
        wandb_run: Annotated[str | None, typer.Option(
            "--wandb-run", metavar="DIR", help="Or: a W&B run directory (wandb/offline-run-*/ "
            "or run-*/) of a Hugging Face Trainer run, read as --hf-log (the export extra).")
        ] = None,
        gpu: Annotated[str | None, typer.Option(
            "--gpu", "-g", help="Catalog GPU: judges efficiency and memory of a GPU run, "
                                "prices it, and computes the options table.")] = None,
        planned_steps: Annotated[int | None, typer.Option(
            help="Optimizer steps of the whole planned run (default: the tracker's).")] = None,
        usd_per_gpu_hour: Annotated[float | None, typer.Option(
            help="Price per GPU hour (default: the catalog's cheapest on-demand for --gpu).")
        ] = None,
        gpus: Annotated[int, typer.Option(
            "--gpus", help="With --hf-log: GPUs (processes) of the run; the log does not say.")
        ] = 1,
        elapsed_hours: Annotated[float | None, typer.Option(
            "--elapsed-hours", help="With --hf-log of an unfinished run and no other checkpoint "
                                    "beside it: the wall time of its steps so far.")] = None,
        model: ModelOpt = None,
        method: MethodOpt = training.method,
        batch: Annotated[int | None, typer.Option(
            help="With --hf-log: micro-batch per GPU, in sequences (default: the log's "
                 "train_batch_size, the Trainer's batch per process).")] = None,
        seq: SeqOpt = training.seq_len,
        grad_accum: Annotated[int | None, typer.Option(
            help="With --hf-log: gradient accumulation steps (default: the log's samples per "
                 "step / (micro-batch x GPUs); else 1, said as assumed).")] = None,
        precision: PrecOpt = training.precision,
        checkpointing: CkptOpt = training.checkpointing,
        zero: ZeroOpt = training.zero_stage,
        bench_data: Annotated[str | None, typer.Option(
            help="JSON of `gpuhours bench-data --json` for the input-bound fix.")] = None,
        ledger: Annotated[str | None, typer.Option(
            "--ledger", help="Ledger file (default: $GPUHOURS_LEDGER, else "
                             "./.gpuhours/ledger.sqlite).")] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    ) -> None:
        """Why a run is slow, and what each fix is worth in GPU hours and dollars."""
        from gpuhours.doctor.render import render

        if sum(x is not None for x in (run, hf_log, wandb_run)) != 1:
            raise InputError("RUN/--hf-log", "give a tracked run id or --hf-log FILE or "
                             "--wandb-run DIR (one).", "See `gpuhours doctor --help`.")
        if planned_steps is not None and planned_steps < 1:
            raise InputError("--planned-steps", f"expected a positive count, got {planned_steps}.")
        from gpuhours.resolve import catalog_gpu

        defaulted = [field for name, field in SETUP_OPTIONS if _not_given(ctx, name)]
        given = [f"--{name}" for name, field in SETUP_OPTIONS if field not in defaulted]
        given += [o for o, v in (("--batch", batch), ("--grad-accum", grad_accum)) if v is not None]
        if model is None and given:
            raise InputError("/".join(given), "set the setup that --hf-log compares with "
                             "physics, and need --model.", "Pass --model NAME (a catalog name "
                             "or a config.json) with --hf-log.")
        if run is not None and not _not_given(ctx, "gpus"):
            raise InputError("--gpus", "is for --hf-log and --wandb-run; a tracked run's GPUs "
                                       "are its config's num_gpus.",
                             "Leave --gpus out with a run id.")
        if run is not None and model is not None:
            raise InputError("--model", "is for --hf-log; a tracked run's model and setup are "
                             "in its config.", "Leave --model out with a run id.")
        spec = catalog_gpu(gpu) if gpu is not None else None
        if hf_log is not None or wandb_run is not None:
            from gpuhours.doctor.hflog import diagnose_hf_log

            choices: dict[str, object] = dict(
                method=method, seq_len=seq, precision=precision, checkpointing=checkpointing,
                zero_stage=zero)
            choices.update({k: v for k, v in (("micro_batch", batch), ("grad_accum", grad_accum))
                            if v is not None})
            if wandb_run is not None:
                from gpuhours.doctor.wandblog import diagnose_wandb_run

                result = diagnose_wandb_run(wandb_run, spec, usd_per_gpu_hour, planned_steps,
                                            None if _not_given(ctx, "gpus") else gpus,
                                            elapsed_hours, model, choices, defaulted)
            else:
                assert hf_log is not None
                result = diagnose_hf_log(hf_log, spec, usd_per_gpu_hour, planned_steps, gpus,
                                         elapsed_hours, model, choices, defaulted)
        else:
            from gpuhours.doctor.diagnose import diagnose, read_loader_rates, view_from_ledger
            from gpuhours.track.ledger import Ledger, ledger_path

            assert run is not None
            try:
                run_id = int(run)
            except ValueError:
                raise InputError("RUN", f"expected a run id (a number), got {run!r}.") from None
            path = ledger_path(ledger)
            if not path.exists():
                raise InputError("--ledger", f"no ledger at {path}.",
                                 "Track a run first (docs/doctor.md), or set --ledger.")
            rates = read_loader_rates(bench_data) if bench_data else None
            with Ledger.open(path, create=False) as book:
                view = view_from_ledger(book, run_id, planned_steps, usd_per_gpu_hour, spec)
            result = diagnose(view, spec, rates)
        if as_json:
            sys.stdout.write(json.dumps(result.model_dump(mode="json"), indent=2) + "\n")
        else:
            sys.stdout.write(render(result))


def _not_given(ctx: typer.Context, option: str) -> bool:
    """The option took its default: the user did not choose it."""
    source = ctx.get_parameter_source(option)
    return source is None or source.name in ("DEFAULT", "DEFAULT_MAP")
