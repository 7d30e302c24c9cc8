"""Each rule's script imports only what its conda env installs, so `snakemake --use-conda` cannot break on an import.

Nothing here can build conda envs, so the env is imitated: every pinned package that the rule's
envs/*.yaml does not list is blocked (an import of it raises ImportError), then the script's imports run,
pulling in the package modules they import.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import subprocess
import sys

import yaml
from conftest import REPO

# The runner's own packages: Snakemake runs a rule's script with them, they are not the script's imports.
RUNNER_PACKAGES = {"snakemake", "snakemake-executor-plugin-slurm"}

BLOCKED_IMPORT_CHECK = r"""
import ast, importlib.abc, json, sys

blocked, scripts = set(json.loads(sys.argv[1])), json.loads(sys.argv[2])


class BlockPackagesTheEnvLacks(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ImportError(f"{name} is not installed in this rule's env")
        return None


sys.meta_path.insert(0, BlockPackagesTheEnvLacks())
failures = {}
for script in scripts:
    tree = ast.parse(open(script).read())
    imports = ast.Module([node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))], [])
    try:
        exec(compile(imports, script, "exec"), {"__name__": "imports_of_" + script})
    except ImportError as error:
        failures[script] = str(error)
print(json.dumps(failures))
"""


def _rule_blocks():
    """{rule: (env file, script)} for every rule with a script, read from rules/*.smk."""
    rules = {}
    for smk in sorted(REPO.joinpath("rules").glob("*.smk")):
        for block in re.split(r"^(?=rule \w+:)", smk.read_text(), flags=re.M)[1:]:
            name = re.match(r"rule (\w+):", block).group(1)
            script = re.search(r'^    script:\n\s+"\.\./(scripts/[\w.]+)"', block, flags=re.M)
            if script:
                env = re.search(r'^    conda:\n\s+"\.\./(envs/[\w.-]+)"', block, flags=re.M)
                rules[name] = (env.group(1) if env else None, script.group(1))
    return rules


def _pip_names(lines) -> set[str]:
    return {str(line).split("==")[0].strip().lower().replace("_", "-") for line in lines if "==" in str(line)}


def _import_names(distributions: set[str]) -> set[str]:
    """The top-level module names these installed distributions provide."""
    names = set()
    for module, dists in importlib.metadata.packages_distributions().items():
        if any(d.lower().replace("_", "-") in distributions for d in dists) and module.isidentifier():
            names.add(module)
    return names


def _env_packages(env_file: str) -> set[str]:
    spec = yaml.safe_load((REPO / env_file).read_text())
    pip = next(d["pip"] for d in spec["dependencies"] if isinstance(d, dict) and "pip" in d)
    return _pip_names(pip)


def test_every_rule_script_imports_only_what_its_env_installs():
    rules = _rule_blocks()
    assert {"generate", "perf", "perf_summary", "figure_perf", "plan", "aggregate", "score"} <= set(rules)
    assert all(env for env, _ in rules.values()), {r: s for r, (e, s) in rules.items() if not e}
    pinned = _pip_names((REPO / "requirements.txt").read_text().splitlines()) - RUNNER_PACKAGES
    by_env: dict[str, set[str]] = {}
    for env, script in rules.values():
        by_env.setdefault(env, set()).add(script)
    failures = {}
    for env, scripts in sorted(by_env.items()):
        blocked = _import_names(pinned - _env_packages(env))
        assert blocked, f"{env} lists every pinned package: nothing to block"
        result = subprocess.run(
            [sys.executable, "-c", BLOCKED_IMPORT_CHECK, json.dumps(sorted(blocked)), json.dumps(sorted(scripts))],
            cwd=REPO, capture_output=True, text=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        )
        assert result.returncode == 0, result.stderr[-3000:]
        failures.update({f"{script} ({env})": error for script, error in json.loads(result.stdout).items()})
    assert not failures, failures


def test_the_blocking_catches_a_script_importing_torch_in_the_analysis_env(tmp_path):
    script = tmp_path / "uses_torch.py"
    script.write_text("from kvcache_bench.perf.runs import timed_generation\n")
    blocked = _import_names(_pip_names((REPO / "requirements.txt").read_text().splitlines()) - _env_packages("envs/analysis.yaml"))
    assert "torch" in blocked and "pandas" not in blocked
    result = subprocess.run(
        [sys.executable, "-c", BLOCKED_IMPORT_CHECK, json.dumps(sorted(blocked)), json.dumps([str(script)])],
        cwd=REPO, capture_output=True, text=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert "torch is not installed" in json.loads(result.stdout)[str(script)]


def test_analysis_scripts_never_import_torch_even_lazily_through_the_package():
    """Static: the torch-free modules keep torch (and transformers, kvpress) out of every function too."""
    torch_free = [*(REPO / "kvcache_bench").glob("analysis/*.py"), *(REPO / "kvcache_bench").glob("study/*.py")]
    torch_free += [REPO / "kvcache_bench/perf" / f"{name}.py" for name in ("tables", "plan", "plots")]
    assert len(torch_free) >= 10
    for path in torch_free:
        module = path.relative_to(REPO).as_posix()
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.partition(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                imported.add(node.module.partition(".")[0])
        assert not imported & {"torch", "transformers", "kvpress", "datasets"}, (module, imported)
