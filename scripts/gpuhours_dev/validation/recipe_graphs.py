"""The CUDA graph scope of the Megatron-Bridge performance recipe behind a published row
(Training.cuda_graph_scope), and whether it sets Transformer Engine's op fuser for the experts
(Training.moe_fused_mlp) and which modules it recomputes selectively (Training.
recompute_modules), read from data/megatron_bridge_cuda_graphs.csv: every recipe of
src/megatron/bridge/perf_recipes/ at NVIDIA-NeMo/Megatron-Bridge@067f987d, the commit the
performance tables (data/throughput_blackwell.csv, the Megatron-Bridge rows of
throughput_h100.csv and finetune_runs_added.csv) were read at, with its effective
cuda_graph_impl / cuda_graph_scope (scripts/megatron_bridge_graph_scopes.py says how).

A row names its model, system, GPU count and precision; the recipe is
`{model}_{task}_{n}gpu_{gpu}_{precision}_config`. A row whose precision is plain "FP8" (the
older tables) takes the recipes of every fp8 scaling there is for it, and their scope only if
they agree. No recipe, or recipes that disagree: the row stays ungraphed and its setup says so.
The recipes are those of the commit, not necessarily of the container release a row was
measured with (the archive's older releases may have graphed differently). A Megatron-Bridge
table's VP or EP of "n/a" (left out of the data) states 1 (hopper.stated_layout_row), so a row
run without virtual stages does not match a later recipe that interleaves. No row's error
chose anything here.
"""

from __future__ import annotations

import csv
from functools import cache
from pathlib import Path

#: the data file and the commit its recipes were read at
GRAPHS_CSV = Path(__file__).resolve().parent / "data" / "megatron_bridge_cuda_graphs.csv"
RECIPE_COMMIT = "067f987d"

#: the recipes' name of each catalog model
RECIPE_MODEL = {"llama-3-8b": "llama3_8b", "llama-3-70b": "llama3_70b",
                "llama-3.1-405b": "llama31_405b", "qwen3-30b-a3b": "qwen3_30b_a3b",
                "qwen3-235b-a22b": "qwen3_235b_a22b", "gpt-oss-120b": "gpt_oss_120b",
                "gpt-oss-20b": "gpt_oss_20b", "deepseek-v3": "deepseek_v3"}
#: the recipes' precision names of a table's Precision column (FP8-CS: per-tensor current
#: scaling; FP8-MX / MXFP8: block-scaled; plain FP8: any of the fp8 recipes, ds = delayed)
RECIPE_PRECISIONS = {"BF16": ("bf16",), "FP8-CS": ("fp8cs",), "FP8-MX": ("fp8mx",),
                     "MXFP8": ("fp8mx",), "FP8": ("fp8cs", "fp8mx", "fp8ds", "fp8sc")}


@cache
def recipe_scopes() -> dict[str, tuple[str, str, dict[str, int]]]:
    """Recipe function -> (effective scope as gpuhours names it, its file, the layout it sets:
    tensor, pipeline, context, expert, vp, micro, global; a size it leaves to its base recipe
    is absent)."""
    with GRAPHS_CSV.open() as f:
        return {r["function"]: (r["cuda_graph_scope"], r["recipe"].split("perf_recipes/")[1],
                                {k: int(v) for k, v in (kv.split("=") for kv in
                                                        r["layout"].split()) if v})
                for r in csv.DictReader(f)}


@cache
def recipe_op_fusers() -> dict[str, bool]:
    """Recipe function -> whether it runs the experts through Transformer Engine's op fuser
    (the CSV's te_op_fuser: Megatron-Core use_transformer_engine_op_fuser as the recipe leaves
    it, scripts/megatron_bridge_graph_scopes.py)."""
    with GRAPHS_CSV.open() as f:
        return {r["function"]: r["te_op_fuser"] == "true" for r in csv.DictReader(f)}


def _matched(model: str, gpu: str, n_gpus: int, precision: str, task: str,
             layout: dict[str, int]) -> tuple[dict[str, tuple[str, str, dict[str, int]]],
                                              dict[str, tuple[str, str]], str]:
    """(the recipes named for the row, those of them whose layout is the row's: name ->
    (scope, file), the name wanted) (recipe_graph_scope's arguments)."""
    prefix = RECIPE_MODEL.get(model)
    precisions = RECIPE_PRECISIONS.get(precision.upper(), ())
    scopes = recipe_scopes()
    named = {} if prefix is None else {
        name: scopes[name] for p in precisions
        if (name := f"{prefix}_{task}_{n_gpus}gpu_{gpu}_{p}_config") in scopes}
    wanted = f"{prefix or model}_{task}_{n_gpus}gpu_{gpu}_{'/'.join(precisions) or '?'}"
    found = {name: (scope, path) for name, (scope, path, sets) in named.items()
             if all(layout.get(k) == (v or 1) for k, v in sets.items() if k in layout)}
    return named, found, wanted


def recipe_op_fuser(model: str, gpu: str, n_gpus: int, precision: str, task: str,
                    layout: dict[str, int]) -> bool:
    """Training.moe_fused_mlp of a Megatron-Bridge row (recipe_graph_scope's arguments): True
    where every recipe of the row's configuration sets the op fuser; a row with no such recipe
    (or another layout's) runs Megatron-Core's default, the unfused grouped MLP."""
    _, found, _ = _matched(model, gpu, n_gpus, precision, task, layout)
    fusers = recipe_op_fusers()
    return bool(found) and all(fusers[name] for name in found)


#: the selectively recomputed modules the estimator models (setup.RecomputeModule)
MODELLED_RECOMPUTE = {"layernorm", "moe_act"}


@cache
def recipe_recomputes() -> dict[str, tuple[str, ...]]:
    """Recipe function -> the modules it recomputes selectively (the CSV's recompute_modules,
    scripts/megatron_bridge_graph_scopes.py; empty: none)."""
    with GRAPHS_CSV.open() as f:
        return {r["function"]: tuple(m for m in r["recompute_modules"].split(",") if m)
                for r in csv.DictReader(f)}


def recipe_recompute(model: str, gpu: str, n_gpus: int, precision: str, task: str,
                     layout: dict[str, int]) -> tuple[tuple[str, ...] | None, str]:
    """(Training.recompute_modules, what the setup column says) of a Megatron-Bridge row
    (recipe_graph_scope's arguments): the modules its recipe recomputes selectively where every
    recipe of its configuration agrees and the estimator models them all (MODELLED_RECOMPUTE);
    other modules are left out and the setup says so; no recipe of the row's layout: none."""
    _, found, _ = _matched(model, gpu, n_gpus, precision, task, layout)
    kinds = {recipe_recomputes()[name] for name in found}
    if len(kinds) != 1:
        return None, ""
    (modules,) = kinds
    if not modules:
        return None, ""
    if set(modules) <= MODELLED_RECOMPUTE:
        return modules, f"selective recomputation {','.join(modules)} (the recipe's)"
    return None, (f"the recipe recomputes {','.join(modules)} selectively: not modelled, left "
                  "out")


def recipe_graph_scope(model: str, gpu: str, n_gpus: int, precision: str, task: str,
                       layout: dict[str, int]) -> tuple[tuple[str, ...] | None, str]:
    """(Training.cuda_graph_scope, how the setup column says it) for a Megatron-Bridge row of
    `model` (catalog name) on n_gpus `gpu`s (the recipes' name: h100, b200, gb200, b300,
    gb300) at the table's `precision`, `task` pretrain, sft or peft, with the row's stated
    `layout` (the recipe's keys; vp 1 for none): a recipe that sets another layout is another
    configuration than the row's (an older release's), whose graphs are not read here."""
    named, found, wanted = _matched(model, gpu, n_gpus, precision, task, layout)
    if not named:
        return None, (f"CUDA graphs: no Megatron-Bridge recipe {wanted} at {RECIPE_COMMIT}, "
                      "left ungraphed")
    if not found:
        name, (_, path, sets) = sorted(named.items())[0]
        return None, (f"CUDA graphs: the recipe {path} {name} @ {RECIPE_COMMIT} sets another "
                      f"layout ({' '.join(f'{k} {v}' for k, v in sets.items())}): the row's "
                      "release's graphs not read, left ungraphed")
    kinds = {scope for scope, _ in found.values()}
    where = "; ".join(f"{path} {name}" for name, (_, path) in sorted(found.items()))
    if len(kinds) > 1:
        return None, (f"CUDA graphs: the recipes of {wanted} disagree ({where} @ "
                      f"{RECIPE_COMMIT}), left ungraphed")
    (scope,) = kinds
    if scope == "none":
        return None, f"no CUDA graphs ({where} @ {RECIPE_COMMIT})"
    return tuple(scope.split(",")), f"CUDA graphs {scope} ({where} @ {RECIPE_COMMIT})"
