"""Answer.AI's benchmark text states the allocated peak of two LoRA runs beside the table's
reserved one (finetune_runs.csv notes of rows 410 and 411: "peak allocated 8.28 GiB (512) vs
9.16 GiB (2048)"): the estimate's live tensors are held to those, apart from the allocator's
reserve. Half-precision adapters (peft of March 2024; FSDP use_orig_params=False flattens a
unit in one dtype) bring them within 3%; peft's fp32 adapters read 7-9% above."""

from __future__ import annotations

import re

import pytest

from gpuhours.estimate.memory import training_memory
from gpuhours.estimate.step_replay import reserved_training_memory
from gpuhours_dev.validation import _rows
from gpuhours_dev.validation.finetune import DATA, map_row

GIB = 2**30
_ALLOCATED = re.compile(r"peak allocated ([0-9.]+) GiB \(512\) vs ([0-9.]+) GiB \(2048\)")


@pytest.mark.parametrize(("row", "which"), [(410, 0), (411, 1)])
def test_answerai_stated_allocated_peaks(row: int, which: int) -> None:
    rows = _rows(DATA)
    r = rows[row - 1]
    found = _ALLOCATED.search(r["notes"])
    assert found is not None, r["notes"]
    allocated = float(found.group(1 + which)) * GIB
    m = map_row(row, r)
    t = m.training
    assert t is not None and t.lora_adapter_dtype == "half"
    tensors = training_memory(t.arch, t, m.num_gpus).tensors_bytes
    assert tensors == pytest.approx(allocated, rel=0.03)
    # peft's fp32 adapters read 3-6% above (8 bytes more per adapter parameter, halved by
    # FSDP's sharding of the adapters): outside the 3% that the half adapters meet
    fp32 = t.model_copy(update={"lora_adapter_dtype": "fp32"})
    assert training_memory(fp32.arch, fp32, m.num_gpus).tensors_bytes > allocated * 1.03


@pytest.mark.parametrize(("row", "which", "share"), [(410, 0, 0.75), (411, 1, 0.6)])
def test_answerai_reserve_from_the_step_replay(row: int, which: int, share: float) -> None:
    """The same two rows give the reserved peak too (the table's figure): reserved less
    allocated is 1.96 GiB at 1 x 512 and 1.06 GiB at 1 x 2048, where the flat 5% reserve
    with the load path's replay gave 1.49 and 0.47 GiB. The step replay (estimate/
    step_replay.py: the FSDP wrap's cache, then three steps through the allocator model) gives
    1.57 and 0.69 GiB, 80% and 65% of the stated gap, and the reserved figure within 6% (-5.6%
    and -3.0%: 0.15 GiB lower since the adapters are counted sharded, as FSDP shards them).
    Held out: nothing in the replay was set from these rows."""
    rows = _rows(DATA)
    r = rows[row - 1]
    found = _ALLOCATED.search(r["notes"])
    assert found is not None
    allocated = float(found.group(1 + which)) * GIB
    reserved = float(r["peak_mem_reserved_gb"]) * GIB
    m = map_row(row, r)
    t = m.training
    assert t is not None and t.load_path == "fsdp-flatten"
    replayed = reserved_training_memory(t, m.num_gpus)
    assert replayed.reserved_bytes == pytest.approx(reserved, rel=0.06)
    assert share * (reserved - allocated) < replayed.allocator_reserve_bytes < reserved - allocated
