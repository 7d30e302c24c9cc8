"""Which code a rule's jobs run, as a hash its params carry: the Snakefile's stand-in for Snakemake's ``code`` trigger.

Snakemake reruns a ``script:`` rule when the script's mtime is newer than its outputs, so a ``touch`` or a ``git
checkout`` would rerun a study. The workflow profile leaves that trigger out, and each rule's params carry
``package_code_hash`` of its script instead: the script's syntax tree and those of the package modules it imports,
docstrings left out. Here, not in ``workflow.py``, because no script imports this module: a change to how the hash is
made reruns no job by itself (``workflow.py`` is in every script's hash).
"""

from __future__ import annotations

import functools
import os


@functools.cache
def _package_imports(source: str, dotted_self: str | None, package: str) -> frozenset[str]:
    """The dotted names of ``package`` a module's source imports (``from m import x`` gives m and m.x). Cached by
    the source itself: a Snakefile computes the hash of every rule's script, and most share modules, so each module
    is parsed once per process rather than once per script that runs it (2.8 s of every parse before)."""
    import ast

    names = set()
    for node in ast.walk(ast.parse(source)):
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
    return frozenset(names)


def package_modules(script: str | os.PathLike, package_dir: str | os.PathLike) -> list[str]:
    """The package modules a script can run: the ones it imports and theirs, imports inside functions included.

    Read from the source (nothing is imported), so the Snakefile can compute it for any env's script.
    """
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
        names = _package_imports(path.read_text(encoding="utf-8"), dotted_self, package)
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


@functools.cache  # by the source itself, as _package_imports
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
