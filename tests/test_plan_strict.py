"""Plan and catalog models are strict: a value of the wrong type is refused, never converted
(`seeds: true` was read as 1 and cut the Pixelis budget from 1,149 to 426 GPU hours)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuhours.errors import InputError
from gpuhours.plan.load import parse_plan

PIXELIS = Path(__file__).resolve().parent.parent / "examples" / "pixelis.yaml"


def _with(path: tuple, value: object) -> str:
    data = yaml.safe_load(PIXELIS.read_text())
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return yaml.safe_dump(data, sort_keys=False)


@pytest.mark.parametrize(("path", "value"), [
    (("seeds",), True),
    (("seeds",), "3"),
    (("contingency_percent",), True),
    (("hardware", "nodes"), True),
    (("hardware", "gpus_per_node"), "8"),
    (("hardware", "usd_per_gpu_hour"), "1.5"),
    (("phases", 0, "gpu_hours"), True),
    (("defaults", "micro_batch"), True),
    (("defaults", "checkpointing"), "yes please"),
    (("defaults", "zero_stage"), "3"),
], ids=lambda v: str(v))
def test_a_value_of_the_wrong_type_is_refused(path: tuple, value: object) -> None:
    text = _with(path, value)
    with pytest.raises(InputError, match=r"line \d+") as caught:
        parse_plan(text, "plan.yaml")
    assert str(path[-1]) in caught.value.where


def test_the_example_plan_still_loads() -> None:
    plan = parse_plan(PIXELIS.read_text(), "pixelis.yaml").plan
    assert plan.seeds == 3


def test_catalog_rows_are_strict_but_csv_cells_are_read_by_column() -> None:
    from gpuhours.catalog._load import parse_csv_rows
    from gpuhours.catalog.schema import DenseTflops

    rows = parse_csv_rows("fp32,tf32,fp16,bf16,fp8\n19.5,,312,312,\n", "t.csv", DenseTflops)
    assert rows[0].bf16 == 312.0
    with pytest.raises(Exception, match="valid number"):
        DenseTflops.model_validate({"bf16": True})
