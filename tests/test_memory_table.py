"""The terminal's memory table adds up: the parts it prints sum to the peak of live tensors it
prints, and that peak, the allocator reserve and the CUDA context to the total. A reviewer found
ZeRO-3's gathered layers missing (the rows summed to 22.7 GiB under a 27.13 GiB peak); each
setup below brings one part the table once left out or printed beside the peak (gathered
layers, gradients kept across accumulation, autocast's weight copies, DeepSpeed buckets, the
optimizer step's temporaries, the layer recomputed after the loss)."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app

runner = CliRunner()

SETUPS = {
    "zero3 lora, gathered layers": ["--model", "llama-3-8b", "--gpu", "h100", "--gpus", "8",
                                    "--zero", "3", "--method", "lora", "--batch", "1",
                                    "--seq", "8192", "--checkpointing"],
    "full, peak at the optimizer step": ["--model", "llama-3-8b", "--gpu", "h100"],
    "accumulation: gradients kept": ["--model", "qwen2-0.5b", "--gpu", "h100", "--batch", "8",
                                     "--grad-accum", "4", "--method", "lora"],
    "fp16-amp: autocast copies": ["--model", "qwen2-0.5b", "--gpu", "a100-80gb",
                                  "--precision", "fp16-amp", "--batch", "4"],
    "deepspeed zero2 buckets": ["--model", "qwen2.5-1.5b", "--gpu", "a100-80gb", "--gpus", "4",
                                "--zero", "2", "--batch", "4", "--checkpointing",
                                "--deepspeed-reduce-bucket", "500000000"],
}


def _rows(out: str) -> list[tuple[str, float]]:
    """(label, GiB) of each row of the memory table, in order."""
    table = out.split("Memory per GPU")[1].split("at their own peak")[0].split("as the tools")[0]
    rows = []
    for line in table.splitlines():
        m = re.match(r"^[│ ]*(\S.*?)[│ ]+([\d,]+\.\d\d) GiB", line)
        if m:
            rows.append((m.group(1).strip(), float(m.group(2).replace(",", ""))))
    return rows


@pytest.mark.parametrize("name", list(SETUPS))
def test_printed_parts_add_up_to_the_printed_totals(name: str) -> None:
    args = ["estimate", *SETUPS[name], "--ignore-memory"]
    r = runner.invoke(app, args, env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert r.exit_code in (0, 1), r.output
    rows = _rows(r.output)
    labels = [label for label, _ in rows]
    peak_at = next(i for i, label in enumerate(labels) if label.startswith("peak of live"))
    parts = rows[:peak_at]
    peak = rows[peak_at][1]
    # each printed value is rounded to 0.01 GiB: the sum may be off by half of that per row
    assert sum(v for _, v in parts) == pytest.approx(peak, abs=0.005 * len(parts) + 1e-9)
    after = rows[peak_at + 1:]
    assert after[-1][0] == "total"
    assert peak + sum(v for _, v in after[:-1]) == pytest.approx(
        after[-1][1], abs=0.005 * len(after) + 1e-9)
    # and the JSON's parts at the peak add up to its peak exactly
    j = json.loads(runner.invoke(app, [*args, "--json"]).output)["memory"]
    assert sum(f["value"] for f in j["at_peak_bytes"].values()) == pytest.approx(
        j["tensors_bytes"]["value"], rel=1e-12)
    assert {f["unit"] for f in j["at_peak_bytes"].values()} == {"bytes"}


def test_gathered_layers_are_a_row_under_zero3() -> None:
    """The reviewer's case on a catalog model: the gathered layers (6.8 GiB on Jamba) are in
    the table, with the JSON's figure."""
    args = ["estimate", *SETUPS["zero3 lora, gathered layers"]]
    rows = dict(_rows(runner.invoke(app, args, env={"COLUMNS": "200"}).output))
    j = json.loads(runner.invoke(app, [*args, "--json"]).output)["memory"]
    assert j["gathered_bytes"]["value"] > 0
    assert rows["gathered layers (ZeRO-3/FSDP)"] == pytest.approx(
        j["gathered_bytes"]["value"] / 2**30, abs=0.005)


def test_each_setup_brings_its_part() -> None:
    """The setups above are not all alike: each named part appears at the peak somewhere."""
    seen: set[str] = set()
    for args in SETUPS.values():
        out = runner.invoke(app, ["estimate", *args, "--ignore-memory", "--json"]).output
        seen |= set(json.loads(out)["memory"]["at_peak_bytes"])
    assert {"gathered_bytes", "gradients_bytes", "autocast_weight_copies_bytes",
            "optimizer_temporaries_bytes", "activations_kept_bytes",
            "deepspeed_buckets_bytes"} <= seen
