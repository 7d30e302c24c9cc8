"""The package's modules import each other top-down: no cycle, not even through an import inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "kvcache_bench"


def module_names() -> list[str]:
    return sorted(
        ".".join(p.relative_to(PACKAGE).with_suffix("").parts) for p in PACKAGE.rglob("*.py") if p.stem != "__init__"
    )


def imported_modules(path: Path) -> set[str]:
    """Package modules ``path`` imports anywhere in its body, as dotted names below the package."""
    known = set(module_names())
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{path}: relative import; the package imports itself by absolute name")
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kvcache_bench."):
            module = node.module.removeprefix("kvcache_bench.")
            names |= {module} | {f"{module}.{alias.name}" for alias in node.names}
    return names & known


def test_no_module_imports_one_that_imports_it_back():
    graph = {name: imported_modules(PACKAGE / (name.replace(".", "/") + ".py")) for name in module_names()}
    assert len(graph) > 30 and "engine.prefill" in graph
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


def test_engine_modules_sit_in_the_documented_order():
    # loading and caches need nothing of the package; prefill builds on them; greedy (batch-1 decoding) on prefill;
    # prefilled (snapshots to stack) and static_decode (stacked caches decoded) on greedy; the cell runner on everything.
    # The decoders (one file per strategy, engine/decoders/) sit between the decode functions and the cell runner.
    order = ["loading", "caches", "prefill", "greedy", "prefilled", "static_decode", "decoders", "cell_runner"]
    for index, module in enumerate(order):
        later = {f"engine.{name}" for name in order[index:]}
        files = sorted((PACKAGE / "engine" / module).glob("*.py")) if module == "decoders" else [PACKAGE / "engine" / f"{module}.py"]
        for file in files:
            imported = {name.split(".decoders.")[0] + ".decoders" if ".decoders." in name else name for name in imported_modules(file)}
            assert not imported & (later - ({"engine.decoders"} if module == "decoders" else set())), f"{file.name} imports a module after it"


def test_stages_depend_downwards_only():
    """A folder says where a number is made: analysis never reaches the engine (it runs without torch); the
    engine (torch and kvpress) knows neither Snakemake's jobs nor GPUs (runtime/); the study's config and cells
    read no dataset (data/ reads the study's prompts, not the other way); the top-level modules (io, manifest,
    workflow) import no stage."""
    forbidden = {"analysis": {"engine", "runtime", "canary"},
                 "study": {"engine", "runtime", "perf", "analysis", "canary", "data"},
                 "methods": {"engine", "runtime", "perf", "analysis", "canary", "data"},
                 "engine": {"runtime", "perf", "analysis", "canary", "workflow"},
                 "data": {"runtime", "perf", "analysis", "canary"}}
    for name in module_names():
        stage = name.split(".")[0] if "." in name else None
        imports = {m.split(".")[0] for m in imported_modules(PACKAGE / (name.replace(".", "/") + ".py"))}
        if stage is None:
            assert imports <= {"files", "manifest", "workflow"}, (name, imports)
        else:
            assert not imports & forbidden.get(stage, set()), (name, imports & forbidden[stage])
