"""The spread of PEFT's MetaMathQA sample lengths that the reference LoRA run's mean reading
implies (finetune.PEFT_SAMPLE_TOKENS_STD): bisection on the spread until the bucket model of
run.py with the estimate at every padded batch (finetune.peft_mean_reading_bytes) reads that
run's accelerator_memory_reserved_avg. Prints each step and the result (a few minutes).

    cd scripts && python -m gpuhours_dev.validation.peft_spread
"""

from __future__ import annotations

from gpuhours_dev.validation.finetune import (
    PEFT_SPREAD_EXPERIMENT,
    Mapped,
    finetune_rows,
    map_row,
    peft_mean_reading_bytes,
)

#: the rows' mean tokens per sample (finetune.py: train total tokens over samples, less EOS)
MEAN_TOKENS = 208.9


def spread_run() -> tuple[Mapped, float, int]:
    """(The reference run's mapped row, its mean reading in bytes, its cap in tokens)."""
    rows = finetune_rows()
    i = next(n for n, r in enumerate(rows, start=1)
             if r["source"].startswith("huggingface/peft")
             and r["source"].split("results/")[1].startswith(PEFT_SPREAD_EXPERIMENT))
    r = rows[i - 1]
    measured = float(r["notes"].split("accelerator_memory_reserved_avg=")[1].split()[0])
    return map_row(i, r), measured, int(r["seq_len"])


def solve_spread(low: float = 50.0, high: float = 100.0, steps: int = 8) -> float:
    """The spread, tokens, at which the reference run's mean reading is met (bisection)."""
    m, measured, cap = spread_run()
    for _ in range(steps):
        mid = (low + high) / 2
        error = peft_mean_reading_bytes(m, MEAN_TOKENS, mid, cap) / measured - 1
        print(f"spread {mid:7.3f} tokens: mean reading {error:+.4f}", flush=True)
        if error < 0:
            low = mid
        else:
            high = mid
    return (low + high) / 2


if __name__ == "__main__":
    print(f"solved: {solve_spread():.1f} tokens")
