"""The batch of the Qwen README's "LoRA (multinode)" rows (#146-#151), read on their memory.

    cd scripts && python -m gpuhours_dev.validation.qwen_multinode

The README sums the rows' memory over the 4 GPUs, so the throughput comparison does not use it;
divided by 4 (ZeRO-2 keeps nearly the same on every rank) it is a second measurement of the
same runs. What grows with the sequence length is the activations, which the micro-batch
multiplies: the growth from 256 to 8192 tokens is compared with the estimate's device reading
at micro-batch 1 and 2 (finetune.py QWEN_MULTINODE_MICRO_BATCH), and, as a control, the
single-GPU Qwen-7B LoRA rows (#125-#130, batch 1 as the README states, no DeepSpeed). A fixed
offset between the README's reading and the estimate (the context, about 2 GB on these rows)
cancels in the growth. Nothing is fitted.
"""

from __future__ import annotations

from gpuhours_dev.validation.finetune import device_reading_bytes, finetune_rows, mapped_rows, qwen_multinode

GB = 1e9


def _per_gpu_measured_gb(notes: str, n: int, reserved: str) -> float:
    """The README's 'memory (GB)' per GPU: the row's own column, or its cell's sum / n."""
    if reserved:
        return float(reserved)
    cell = notes.split("cell '")[1].split("G /")[0]
    return float(cell) / n


def main() -> None:
    lines = []
    for m, r in zip(mapped_rows(), finetune_rows(), strict=True):
        multi = qwen_multinode(r, m.source)
        single = (m.source == "Qwen" and r["model"] == "Qwen-7B" and r["method"] == "lora"
                  and m.num_gpus == 1)
        if not (multi or single) or m.training is None:
            continue
        measured = _per_gpu_measured_gb(r["notes"], m.num_gpus, r["peak_mem_reserved_gb"])
        at = {b: device_reading_bytes(m.training.model_copy(update={"micro_batch": b}),
                                      m.num_gpus, m.gpu) / GB for b in (1, 2)}
        lines.append((m.label, m.num_gpus, m.training.seq_len, measured, at[1], at[2]))
    print(f"{'row':28} {'GPUs':>4} {'seq':>5} {'README/GPU':>10} {'est. b=1':>9} "
          f"{'est. b=2':>9}   (GB per GPU)")
    for label, n, seq, meas, b1, b2 in lines:
        print(f"{label:28} {n:>4} {seq:>5} {meas:>10.2f} {b1:>9.2f} {b2:>9.2f}")
    for n in (1, 4):
        group = [x for x in lines if x[1] == n]
        first, last = group[0], group[-1]
        print(f"{n} GPU(s), growth {first[2]} -> {last[2]} tokens: README "
              f"{last[3] - first[3]:.1f} GB, estimate at batch 1 {last[4] - first[4]:.1f}, "
              f"at batch 2 {last[5] - first[5]:.1f}")


if __name__ == "__main__":
    main()
