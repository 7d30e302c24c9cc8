"""The package's modules import each other top-down: no cycle, not even through an import inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "kvcache_bench"


def imported_modules(path: Path) -> set[str]:
    """Sibling modules ``path`` imports anywhere in its body (``from .x import`` and ``from . import x``)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            names |= {node.module.split(".")[0]} if node.module else {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kvcache_bench."):
            names.add(node.module.split(".")[1])
    return names


def test_no_module_imports_one_that_imports_it_back():
    graph = {path.stem: imported_modules(path) for path in PACKAGE.glob("*.py")}
    state: dict[str, str] = {}

    def visit(module: str, trail: list[str]) -> None:
        if state.get(module) == "done":
            return
        assert state.get(module) != "open", "import cycle: " + " -> ".join(trail + [module])
        state[module] = "open"
        for dependency in sorted(graph.get(module, ())):
            visit(dependency, trail + [module])
        state[module] = "done"

    for module in sorted(graph):
        visit(module, [])


def test_generation_modules_sit_in_the_documented_order():
    # loading and caches need nothing of the package; prefill builds on them; engine on prefill;
    # batched_decode on engine; the cell runner on everything: one home per concern.
    order = ["loading", "caches", "prefill", "engine", "batched_decode", "cell"]
    for index, module in enumerate(order):
        later = set(order[index:])
        assert not imported_modules(PACKAGE / f"{module}.py") & later, f"{module} imports a module after it"
