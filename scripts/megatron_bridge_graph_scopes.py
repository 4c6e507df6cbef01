"""Read the CUDA graph setting of every Megatron-Bridge performance recipe at a commit, as
gpuhours names it (setup.CudaGraphScope), whether it runs the experts through Transformer
Engine's op fuser (use_transformer_engine_op_fuser: Training.moe_fused_mlp) and the modules it
recomputes selectively (Training.recompute_modules), into
scripts/gpuhours_dev/validation/data/megatron_bridge_cuda_graphs.csv.

    python scripts/megatron_bridge_graph_scopes.py PATH_TO_MEGATRON_BRIDGE_GIT [COMMIT]

Static reading, no import of Megatron-Bridge: for each public `*_config` function of
src/megatron/bridge/perf_recipes/, its statements in order, following a `cfg = base()` call
into the base function (through `_with_global_batch_size(base(), n)`), helper calls that take
the config (`_benchmark_common(cfg)`, `_deepseek_v3_common(cfg)`), and
src/megatron/bridge/utils/cuda_graph.py's `set_full_iteration_cuda_graph` and
`clear_cuda_graph_modules`. Assignments inside an `if` are not applied (the only ones in these
recipes are perf_recipes/_common.py's clearing of the module list when cuda_graph_impl is
"none"). The effective setting, by Megatron-Core's rules (NVIDIA/Megatron-LM@d98e8a64
transformer_config.py, cuda_graph_config.py): cuda_graph_impl "none" (or unset) is no graphs
unless the scope holds the deprecated "full_iteration" (migrated to cuda_graph_impl
full_iteration); "full_iteration" is one graph a step; "local" or "transformer_engine" with an
empty list (or "full") graphs each whole layer, else the named modules.
"""
import ast
import csv
import subprocess
import sys
from pathlib import Path

OUT = (Path(__file__).resolve().parent / "gpuhours_dev" / "validation" / "data"
       / "megatron_bridge_cuda_graphs.csv")


def git(repo, *a):
    """stdout of a git command in the mirror `repo`."""
    return subprocess.run(["git", "-C", repo, *a], capture_output=True, text=True,
                          check=True).stdout


#: module name -> (file path, parsed module) of the recipes and the recipes they build on
MODS: dict = {}


def defs(mod):
    """(functions defined in `mod`, names it imports -> (module, name))."""
    out, imports = {}, {}
    for node in MODS[mod][1].body:
        if isinstance(node, ast.FunctionDef):
            out[node.name] = (mod, node)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                imports[a.asname or a.name] = (node.module, a.name)
    return out, imports


#: module name -> defs(module)
CACHE: dict = {}


def resolve(mod, name, depth=0):
    """(module, FunctionDef) that `name` means in `mod`, through its imports; None if outside."""
    d, imp = CACHE[mod]
    if name in d:
        return d[name]
    if name in imp and depth < 6:
        m2, n2 = imp[name]
        if m2 in MODS:
            return resolve(m2, n2, depth + 1)
    return None


def const(node):
    """The value of an assigned expression: a literal, an enum member's name, or "?"."""
    try:
        return ast.literal_eval(node)
    except Exception:
        if isinstance(node, ast.List):
            return [getattr(e, "attr", "?") for e in node.elts]
        if isinstance(node, ast.Attribute):
            return node.attr
        return "?"


def run(mod, fn, state, notes, depth=0):
    """The state (impl, scope, layout sizes) after `fn`'s statements run on it."""
    if depth > 12:
        return state
    for stmt in fn.body:
        state = stmt_(mod, stmt, state, notes, depth, cond=False)
    return state


def call_target(mod, call):
    """(called name, resolve() of it) of a plain call `f(...)`."""
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Name):
        return call.func.id, resolve(mod, call.func.id)
    return None, None


#: the layout a recipe sets, recorded beside its graphs (a row is matched to its recipe by it)
LAYOUT = ("tensor_model_parallel_size", "pipeline_model_parallel_size",
          "context_parallel_size", "expert_model_parallel_size",
          "virtual_pipeline_model_parallel_size", "micro_batch_size", "global_batch_size")

#: Megatron-Core's Transformer Engine op fuser for the grouped expert MLP (recorded beside the
#: graphs: Training.moe_fused_mlp); unset is Megatron-Core's default, False
OP_FUSER = "use_transformer_engine_op_fuser"
#: Megatron-Core's recomputation settings (recorded beside the graphs: with granularity
#: "selective", the modules are Training.recompute_modules)
RECOMPUTE = ("recompute_granularity", "recompute_modules")


def selective_modules(state):
    """The modules a recipe recomputes selectively, comma-joined; "" for none (no
    recomputation, full recomputation, or an empty list)."""
    if state.get("recompute_granularity") != "selective":
        return ""
    modules = state.get("recompute_modules")
    if not isinstance(modules, list):
        return ""
    return ",".join(str(m) for m in modules)


def stmt_(mod, stmt, state, notes, depth, cond):
    """The state after one statement; `cond`: inside an `if` (graph settings only noted)."""
    if isinstance(stmt, ast.Assign):
        tgt = stmt.targets[0]
        if isinstance(tgt, ast.Attribute) and tgt.attr in ("cuda_graph_impl", "cuda_graph_scope",
                                                             "cuda_graph_modules"):
            v = const(stmt.value)
            key = "impl" if tgt.attr == "cuda_graph_impl" else "scope"
            if cond:
                notes.append(f"conditional {key}={v}")
            else:
                state = {**state, key: v}
            return state
        if isinstance(tgt, ast.Attribute) and tgt.attr in LAYOUT and not cond:
            return {**state, tgt.attr: const(stmt.value)}
        if isinstance(tgt, ast.Attribute) and tgt.attr in RECOMPUTE and not cond:
            return {**state, tgt.attr: const(stmt.value)}
        if isinstance(tgt, ast.Attribute) and tgt.attr == OP_FUSER:
            v = const(stmt.value)
            # `if cfg.model.use_transformer_engine_op_fuser: ... = False` (_benchmark_common)
            # is `= False` whichever way the test goes; another conditional value is noted
            if cond and v is not False:
                notes.append(f"conditional {OP_FUSER}={v}")
                return state
            return {**state, "op_fuser": v is True}
        if isinstance(tgt, ast.Name) and isinstance(stmt.value, ast.Call):
            name, target = call_target(mod, stmt.value)
            gbs = None
            if name == "_with_global_batch_size" or (target is None and stmt.value.args
                                                     and isinstance(stmt.value.args[0], ast.Call)):
                if name == "_with_global_batch_size":
                    gbs = const(stmt.value.args[1])
                name, target = call_target(mod, stmt.value.args[0])
            if target is not None:
                # a base config: its result replaces the state
                state = run(target[0], target[1], {"impl": None, "scope": None}, notes,
                            depth + 1)
            if gbs is not None:
                state = {**state, "global_batch_size": gbs}
        return state
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        name, target = call_target(mod, stmt.value)
        if name == "set_full_iteration_cuda_graph":
            return {**state, "impl": "full_iteration", "scope": []}
        if name == "clear_cuda_graph_modules":
            return {**state, "scope": []}
        if name == "set_cuda_graph_modules":
            return {**state, "scope": const(stmt.value.args[1])}
        if target is not None:
            return run(target[0], target[1], state, notes, depth + 1)
        return state
    if isinstance(stmt, ast.If):
        for s in stmt.body + stmt.orelse:
            state = stmt_(mod, s, state, notes, depth, cond=True)
        return state
    return state


def effective(state):
    """What Megatron-Core runs for the state's impl and scope (the module docstring's rules)."""
    impl, scope = state["impl"], state["scope"]
    if isinstance(scope, str):
        scope = [scope]
    if impl in (None, "none"):
        if scope and "full_iteration" in scope:
            return "full_iteration"
        return "none"
    if impl == "full_iteration" or (scope and "full_iteration" in scope):
        return "full_iteration"
    if not scope or scope == ["full"]:
        return "full"
    return ",".join(scope)



def main() -> None:
    repo = sys.argv[1]
    rev = subprocess.run(["git", "-C", repo, "rev-parse", sys.argv[2] if len(sys.argv) > 2
                          else "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    files = [f for f in git(repo, "ls-tree", "-r", "--name-only", rev).split()
             if f.startswith("src/megatron/bridge/") and f.endswith(".py")
             and ("perf_recipes" in f or "/recipes/" in f)]
    for f in files:
        mod = f[len("src/"):-3].replace("/", ".").removesuffix(".__init__")
        try:
            MODS[mod] = (f, ast.parse(git(repo, "show", f"{rev}:{f}")))
        except SyntaxError:
            continue
    CACHE.update({m: defs(m) for m in MODS})
    rows = []
    for mod, (f, tree) in sorted(MODS.items()):
        if ".perf_recipes." not in mod:
            continue
        for node in tree.body:
            if (isinstance(node, ast.FunctionDef) and node.name.endswith("_config")
                    and not node.name.startswith("_")):
                state = run(mod, node, {"impl": None, "scope": None}, [])
                layout = {k.split("_")[0] if k != "virtual_pipeline_model_parallel_size"
                          else "vp": state.get(k) for k in LAYOUT}
                rows.append({"recipe": f, "function": node.name,
                             "cuda_graph_scope": effective(state),
                             "cuda_graph_impl": state["impl"] or "",
                             "te_op_fuser": str(bool(state.get("op_fuser"))).lower(),
                             "recompute_modules": selective_modules(state),
                             "layout": " ".join(f"{k}={'' if v in (None, '?') else v}"
                                                for k, v in layout.items()),
                             "commit": rev})
    with OUT.open("w", newline="") as out:
        w = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {len(rows)} recipes to {OUT}")


if __name__ == "__main__":
    main()
