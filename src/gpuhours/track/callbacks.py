"""Tracking a Hugging Face Trainer run: a TrainerCallback that writes each optimizer step to the
ledger, in batches.

    from gpuhours.track import hf_callback

    trainer = Trainer(model=model, args=args, train_dataset=ds,
                      callbacks=[hf_callback(project="demo", phase="sft")])
    trainer.train()

How the Trainer's events map to a step (transformers 5.x, Trainer._inner_training_loop): the
micro-batches of an optimizer step are fetched before its first `on_step_begin`, so the time from
the end of the previous step (after its logging, evaluation and save) to that event is the wait
for data; `on_step_begin` -> `on_pre_optimizer_step` is forward + backward of all micro-batches;
`on_pre_optimizer_step` -> `on_step_end` is the optimizer step, scheduler and zero_grad;
evaluation ends at `on_evaluate` and a checkpoint at `on_save` (they run in that order after
`on_step_end`). Tokens are counted by a forward pre-hook on the model (input_ids, attention_mask,
labels of each training forward). transformers is imported only when the callback is made.
"""

from __future__ import annotations

import time
from typing import Any

from gpuhours.track.ledger import Ledger, ledger_path
from gpuhours.track.loop import TrackedRun, _Device, _torch_threads, count_tokens, path_bytes
from gpuhours.track.runs import start_run


def hf_callback(*, project: str, phase: str, name: str = "", ledger: Any = None,
                planned_steps: int | None = None, flush_every: int = 1000,
                flush_every_s: float = 10.0,
                sync: bool | None = None) -> Any:
    """A transformers TrainerCallback tracking the run into the ledger (see the module doc).
    planned_steps defaults to the Trainer's max_steps for this run."""
    from transformers import TrainerCallback

    class GpuhoursCallback(TrainerCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.run: TrackedRun | None = None
            self._mark = 0.0
            self._in_step = False
            self._hook: Any = None

        def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None,
                           **kwargs: Any) -> None:
            device = _Device(sync)
            book = ledger if isinstance(ledger, Ledger) else Ledger.open(ledger_path(ledger))
            config: dict[str, Any] = {
                "micro_batch": args.per_device_train_batch_size,
                "grad_accum": args.gradient_accumulation_steps,
                "num_workers": args.dataloader_num_workers,
                "save_steps": args.save_steps if str(args.save_strategy).endswith("steps")
                else None,
                "eval_steps": args.eval_steps, "bf16": bool(args.bf16), "fp16": bool(args.fp16),
                "num_gpus": max(1, int(getattr(args, "world_size", 1) or 1)),
                "threads": _torch_threads(), "source": "hf-trainer-callback",
            }
            if model is not None and getattr(model, "config", None) is not None:
                config["model_config"] = model.config.to_dict()
            run_id = start_run(book, project=project, phase=phase,
                               name=name or f"{project}/{phase}", device_kind=device.kind,
                               device_name=device.name,
                               planned_steps=planned_steps or state.max_steps or None,
                               config=config)
            self.run = TrackedRun(book, run_id, device, flush_every,
                                  owns_ledger=not isinstance(ledger, Ledger),
                                  flush_every_s=flush_every_s)
            if model is not None:
                self._hook = model.register_forward_pre_hook(self._count, with_kwargs=True)
            self._mark = time.perf_counter()

        def _count(self, module: Any, args: Any, kwargs: dict[str, Any]) -> None:
            if self.run is not None and module.training and self._in_step:
                self.run.count(kwargs)

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.run is None or self._in_step:
                return  # a later micro-batch of the same optimizer step
            rec = self.run.start_step()
            now = time.perf_counter()
            rec.data_wait_s = now - self._mark
            self._mark = now
            self._in_step = True

        def on_pre_optimizer_step(self, args: Any, state: Any, control: Any,
                                  **kwargs: Any) -> None:
            if self.run is None or self.run._current is None:
                return
            self.run._device.sync()
            now = time.perf_counter()
            self.run._current.compute_s += now - self._mark
            self._mark = now

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.run is None or self.run._current is None:
                return
            self.run._device.sync()
            now = time.perf_counter()
            self.run._current.optimizer_s += now - self._mark
            self._mark = now
            self._in_step = False

        def on_log(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            # logging is part of the step's 'other' time; evaluation and saving follow it
            if self.run is not None and self.run._current is not None and not self._in_step:
                self._mark = time.perf_counter()

        def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.run is None or self.run._current is None:
                return
            now = time.perf_counter()
            self.run._current.eval_s += now - self._mark
            self._mark = now

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.run is None or self.run._current is None:
                return
            now = time.perf_counter()
            rec = self.run._current
            rec.save_s += now - self._mark
            folder = f"{args.output_dir}/checkpoint-{state.global_step}"
            rec.save_bytes += path_bytes(folder)
            self._mark = time.perf_counter()

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self._hook is not None:
                self._hook.remove()
            if self.run is not None:
                self.run.close()
                self.run = None

    return GpuhoursCallback()


__all__ = ["hf_callback", "count_tokens"]
