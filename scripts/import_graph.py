"""The import graph of the gpuhours package: one line per module with what it imports at module
level (imports inside functions are lazy by design and left out), and any cycle.

    python scripts/import_graph.py            # the graph and the cycles (exit 1 if any)
    python scripts/import_graph.py --map      # one line per module: its docstring's first line

Read from the source with `ast`; nothing is imported.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(tree: ast.Module, lazy: bool) -> list[ast.Import | ast.ImportFrom]:
    """Imports executed when the module is imported: the module body and `if` blocks, not
    `if TYPE_CHECKING:` blocks; with `lazy`, also those inside functions (run on first use)."""
    found: list[ast.Import | ast.ImportFrom] = []
    if lazy:
        return [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)
                and not _under_type_checking(tree, n)]

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                found.append(node)
            elif isinstance(node, ast.If):
                test = ast.unparse(node.test)
                if "TYPE_CHECKING" not in test:
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)

    visit(tree.body)
    return found


def _under_type_checking(tree: ast.Module, target: ast.stmt) -> bool:
    for node in ast.walk(tree):
        if (isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                and any(child is target for child in ast.walk(node))):
            return True
    return False


def import_graph(lazy: bool = False) -> dict[str, set[str]]:
    """module -> the gpuhours modules it imports at import time (with `lazy`, also inside
    functions: the dependencies of the design, not only of the import)."""
    modules = {module_name(p): p for p in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        edges: set[str] = set()
        for node in _imports(tree, lazy):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
                    for _ in range(node.level - 1):
                        package = package.rsplit(".", 1)[0]
                    base = f"{package}.{base}" if base else package
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                           for a in node.names]
            for target in targets:
                # the most specific module named; its parent packages run first but only as
                # packages (an edge to a package is one to what its __init__ imports)
                while target and target not in modules:
                    target = target.rsplit(".", 1)[0] if "." in target else ""
                if target and target != name:
                    edges.add(target)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def strongconnect(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            # a package importing its own submodule is not a cycle unless the submodule
            # imports the package back, which a component of 2+ modules captures
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return found


def package_map() -> list[str]:
    """One line per module: its name and the first line of its docstring."""
    lines = []
    for path in sorted(SRC.rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        first = doc.strip().splitlines()[0] if doc.strip() else "(no docstring)"
        lines.append(f"{module_name(path):38} {first}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--map", action="store_true", help="print the package map instead")
    parser.add_argument("--lazy", action="store_true",
                        help="count imports inside functions too (the design's dependencies)")
    args = parser.parse_args()
    if args.map:
        print("\n".join(package_map()))
        return 0
    graph = import_graph(lazy=args.lazy)
    for name in sorted(graph):
        deps = sorted(d for d in graph[name] if d.startswith("gpuhours"))
        print(f"{name}: {', '.join(deps) if deps else '-'}")
    found = cycles(graph)
    print(f"\n{len(found)} import cycle(s)")
    for component in found:
        print("  cycle: " + " <-> ".join(component))
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
