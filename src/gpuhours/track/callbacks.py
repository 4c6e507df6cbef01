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

from gpuhours.track.loop import TrackedRun, count_tokens, start_tracking


def hf_callback(*, project: str, phase: str, name: str = "", ledger: Any = None,
                planned_steps: int | None = None, flush_every: int = 1000,
                flush_every_s: float = 10.0,
                sync: bool | None = None) -> Any:
    """A transformers TrainerCallback tracking the run into the ledger (see the module doc).
    planned_steps defaults to the Trainer's max_steps for this run."""
    from transformers import TrainerCallback

    from gpuhours.extras import warn_untested_versions

    warn_untested_versions()

    class GpuhoursCallback(TrainerCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.run: TrackedRun | None = None
            self._mark = 0.0
            self._in_step = False
            self._hook: Any = None

        def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None,
                           **kwargs: Any) -> None:
            if not getattr(state, "is_world_process_zero", True):
                return  # every process gets the callback: one run a job, from process 0
            config: dict[str, Any] = {
                "micro_batch": args.per_device_train_batch_size,
                "grad_accum": args.gradient_accumulation_steps,
                "num_workers": args.dataloader_num_workers,
                "save_steps": args.save_steps if str(args.save_strategy).endswith("steps")
                else None,
                "eval_steps": args.eval_steps, "bf16": bool(args.bf16), "fp16": bool(args.fp16),
                "num_gpus": max(1, int(getattr(args, "world_size", 1) or 1)),
                "source": "hf-trainer-callback",
            }
            if model is not None and getattr(model, "config", None) is not None:
                config["model_config"] = model.config.to_dict()
            if model is not None:
                # what plan-vs-actual joins on: a LoRA run is not the full fine-tuning phase's
                quantised = bool(getattr(model, "is_loaded_in_4bit", False))
                config["method"] = ("qlora" if quantised and hasattr(model, "peft_config") else
                                    "lora" if hasattr(model, "peft_config") else "full")
            self.run = start_tracking(
                project=project, phase=phase, name=name, config=config, ledger=ledger,
                planned_steps=planned_steps or state.max_steps or None, flush_every=flush_every,
                flush_every_s=flush_every_s, sync=sync)
            if model is not None:
                self._hook = model.register_forward_pre_hook(self._count, with_kwargs=True)
            self._mark = time.perf_counter()

        def _count(self, module: Any, args: Any, kwargs: dict[str, Any]) -> None:
            if self.run is not None and module.training and self._in_step:
                self.run.count(kwargs)

        def _lap(self, phase: str, sync_first: bool = False) -> None:
            """Add the time since the last mark to `phase` of the open step; mark now."""
            if self.run is None or self.run.current_step is None:
                return
            if sync_first:
                self.run.sync_device()
            now = time.perf_counter()
            self.run.add_time(phase, now - self._mark)
            self._mark = now

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.run is None or self._in_step:
                return  # a later micro-batch of the same optimizer step
            self.run.start_step()
            self._lap("data_wait_s")
            self._in_step = True

        def on_pre_optimizer_step(self, args: Any, state: Any, control: Any,
                                  **kwargs: Any) -> None:
            self._lap("compute_s", sync_first=True)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.run is None or self.run.current_step is None:
                return
            self._lap("optimizer_s", sync_first=True)
            self._in_step = False

        def on_log(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            # logging is part of the step's 'other' time; evaluation and saving follow it
            if self.run is not None and self.run.current_step is not None and not self._in_step:
                self._mark = time.perf_counter()

        def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self._lap("eval_s")

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.run is None or self.run.current_step is None:
                return
            self._lap("save_s")
            self.run.add_save_bytes(f"{args.output_dir}/checkpoint-{state.global_step}")
            self._mark = time.perf_counter()

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self._hook is not None:
                self._hook.remove()
            if self.run is not None:
                self.run.close()
                self.run = None

    return GpuhoursCallback()


__all__ = ["hf_callback", "count_tokens"]
