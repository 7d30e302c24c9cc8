"""What every script in ``scripts/`` shares: its inputs (from Snakemake or the command line) and its log.

Under Snakemake a script receives the ``snakemake`` object. For debugging outside Snakemake the same
script takes them on the command line:

    python scripts/score.py --input predictions=p.jsonl --output scores=s.jsonl \
        --wildcards '{"task": "qasper"}' --log /dev/stderr

A job's settings are its wildcards (what its output path says) and its params (what the path does not
say); ``settings_of`` gives both, wildcards typed, so a rule never restates a wildcard as a param.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys


class NamedList(list):
    """A list whose items can also be reached by name, like Snakemake's ``input``/``output``."""

    def __init__(self, named: dict):
        super().__init__(named.values())
        self.__dict__.update(named)

    def __getitem__(self, key):
        return self.__dict__[key] if isinstance(key, str) else super().__getitem__(key)

    def items(self):
        return self.__dict__.items()


# Wildcards that are numbers in every rule that has them (the path spells them as text).
NUMERIC_WILDCARDS = {"retention": float, "batch_size": int, "decode_batch_size": int, "context": int}


class ScriptJob:
    def __init__(
        self, input: dict, output: dict, params: dict, log: list[str], threads: int = 1, wildcards: dict | None = None
    ):
        self.input = NamedList(input)
        self.output = NamedList(output)
        self.params = NamedList(params)
        self.wildcards = NamedList(wildcards or {})
        self.log = NamedList({f"log{i}": path for i, path in enumerate(log)})
        self.threads = threads


def _pairs(items: list[str]) -> dict:
    named = {}
    for item in items or []:
        name, _, value = item.partition("=")
        if not value:
            raise SystemExit(f"expected name=path, got {item!r}")
        named.setdefault(name, [])
        named[name].append(value)
    return {name: values[0] if len(values) == 1 else values for name, values in named.items()}


def job_from_argv(argv: list[str] | None = None) -> ScriptJob:
    parser = argparse.ArgumentParser(description="Run a pipeline script outside Snakemake")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=PATH")
    parser.add_argument("--output", action="append", default=[], metavar="NAME=PATH")
    parser.add_argument("--wildcards", default="{}", help="JSON object of the rule's wildcards")
    parser.add_argument("--params", default="{}", help="JSON object of the rule's params")
    parser.add_argument("--log", default="/dev/stderr")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    return ScriptJob(
        _pairs(args.input),
        _pairs(args.output),
        json.loads(args.params),
        [args.log],
        args.threads,
        json.loads(args.wildcards),
    )


def export_package_path(checkout: str) -> None:
    """Put the checkout first on PYTHONPATH for every job Snakemake starts (local, conda or cluster)."""
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (checkout, os.environ.get("PYTHONPATH")) if p)


def wildcards_of(job) -> dict:
    """The job's wildcards, numbers as numbers."""
    wildcards = getattr(job, "wildcards", None) or {}
    return {name: NUMERIC_WILDCARDS.get(name, str)(value) for name, value in wildcards.items()}


def params_of(job) -> dict:
    """Everything that decides the job's output, wildcards and params, as a plain dict (manifests, config hashes)."""
    return {**wildcards_of(job), **{name: value for name, value in job.params.items()}}


def settings_of(job) -> NamedList:
    """``params_of`` with attribute access: ``settings_of(job).task`` whether task is a wildcard or a param."""
    return NamedList(params_of(job))


def current_job(script_globals: dict):
    """The Snakemake job when run by Snakemake, otherwise one built from the command line."""
    return script_globals["snakemake"] if "snakemake" in script_globals else job_from_argv()


@contextlib.contextmanager
def logging_to(job):
    """Send logging, warnings and progress bars (stderr) to the rule's log file for the job's duration."""
    path = job.log[0] if len(job.log) else None
    if not path or path == "/dev/stderr":
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        yield
        return
    with open(path, "a", encoding="utf-8", buffering=1) as handle:
        previous = sys.stderr
        sys.stderr = handle
        handler = logging.StreamHandler(handle)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        logging.captureWarnings(True)
        try:
            yield
        except BaseException:
            logging.getLogger("kvcache_bench").exception("job failed")
            raise
        finally:
            root.removeHandler(handler)
            sys.stderr = previous


def package_modules(script: str | os.PathLike, package_dir: str | os.PathLike) -> list[str]:
    """The package modules a script can run: the ones it imports and theirs, imports inside functions included.

    Read from the source (nothing is imported), so the Snakefile can compute it for any env's script.
    """
    import ast
    from pathlib import Path

    package_dir = Path(package_dir)
    package = package_dir.name

    def file_of(dotted: str) -> Path | None:
        parts = dotted.split(".")[1:]
        if not parts:
            return None  # the package's __init__ runs no study code
        module = package_dir.joinpath(*parts)
        return next((c for c in (module.with_suffix(".py"), module / "__init__.py") if c.is_file()), None)

    def imported_by(path: Path, dotted_self: str | None) -> set[str]:
        names = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {alias.name for alias in node.names if alias.name.split(".")[0] == package}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = dotted_self.rsplit(".", node.level)[0] if dotted_self else package
                    module = f"{base}.{node.module}" if node.module else base
                elif node.module and node.module.split(".")[0] == package:
                    module = node.module
                else:
                    continue
                names.add(module)
                names |= {f"{module}.{alias.name}" for alias in node.names}
        return {name for name in names if file_of(name)}

    seen: dict[str, Path] = {}
    pending = list(imported_by(Path(script), None))
    while pending:
        dotted = pending.pop()
        if dotted in seen:
            continue
        seen[dotted] = file_of(dotted)
        pending += imported_by(seen[dotted], dotted)
    return sorted(str(path.relative_to(package_dir.parent)) for path in set(seen.values()))


def code_without_docstrings(source: str) -> str:
    """What a module does, without how it is written: its syntax tree with docstrings removed, dumped without
    line numbers, so comments, formatting and docstrings are not part of it."""
    import ast

    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) or not body:
            continue
        first = body[0]
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


def package_code_hash(script: str | os.PathLike, package_dir: str | os.PathLike) -> str:
    """A hash of ``script``'s own code and the package modules it runs (their paths and code): a rule's params
    carry it, so editing the script or the library's code reruns exactly the jobs whose scripts run the edited
    code, and editing a comment, a docstring or the formatting reruns nothing. Snakemake's own trigger for a
    script is its mtime (a ``touch`` or a ``git checkout`` would rerun a study), so the workflow profile leaves
    the ``code`` trigger out and this hash stands in for it."""
    import hashlib
    from pathlib import Path

    digest = hashlib.sha256()
    root = Path(package_dir).parent
    digest.update(b"script\0" + code_without_docstrings(Path(script).read_text(encoding="utf-8")).encode() + b"\0")
    for relative in package_modules(script, package_dir):
        code = code_without_docstrings((root / relative).read_text(encoding="utf-8"))
        digest.update(relative.encode() + b"\0" + code.encode() + b"\0")
    return digest.hexdigest()[:16]


def print_and_log(job, text: str) -> None:
    """For rules with no output (plan, doctor): the text goes to stdout and, under Snakemake, to the rule's log."""
    sys.stdout.write(text)
    if len(job.log) and job.log[0] != "/dev/stderr":
        with open(job.log[0], "w", encoding="utf-8") as handle:
            handle.write(text)
