"""Which code a rule's jobs run, as a hash its params carry: the Snakefile's stand-in for Snakemake's ``code`` trigger.

Snakemake reruns a ``script:`` rule when the script's mtime is newer than its outputs, so a ``touch`` or a ``git
checkout`` would rerun a study. The workflow profile leaves that trigger out, and each rule's params carry
``package_code_hash`` of its script instead: the script's syntax tree and those of the package modules it imports,
docstrings left out. Here, not in ``workflow.py``, because no script imports this module: a change to how the hash is
made reruns no job by itself (``workflow.py`` is in every script's hash).

Every Snakemake invocation computes it for every rule's script (36 of them, 150 modules), which took 4 s of a 10 s
`snakemake -n` parsing each module's syntax tree twice. What a module imports and what a script's hash is depend
only on the sources, so both are kept in a small cache file keyed by the sources' sha256, this Python and this
module's own source (``CACHE_ENV``; ``~/.cache/kvcache-bench`` by default, an empty value for none): an invocation
with nothing edited reads the sources and parses none. The hash itself is what it was, so no study reruns for it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

CACHE_ENV = "KVCACHE_BENCH_CODE_HASH_CACHE"
# a cache kept past this many scripts' hashes keeps the newest (an edit loop adds one per edit)
CACHE_LIMIT = 4096


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@functools.cache
def _cache_file() -> Path | None:
    """This Python's and this module's cache: the AST's dump differs between Python versions, and an edit here may
    change what a hash is made of."""
    root = os.environ.get(CACHE_ENV)
    if root is None:
        root = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kvcache-bench")
    if not root:
        return None
    this = _sha(Path(__file__).read_text(encoding="utf-8"))[:12]
    python = "{}{}.{}.{}".format(sys.implementation.name, *sys.version_info[:3])
    return Path(root) / f"code-hash-{python}-{this}.json"


@functools.cache
def _cache() -> dict:
    """The cache as this process read it (an unreadable or foreign file counts as empty: it only saves time)."""
    path = _cache_file()
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path else {}
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    for part in ("imports", "hashes"):
        if not isinstance(data.get(part), dict):
            data[part] = {}
    return data


_unsaved: set[str] = set()  # the parts this process added to and has not written


def _remember(part: str, key: str, value) -> None:
    """Adds one entry to this process's cache; ``_save`` writes what was added."""
    _cache()[part][key] = value
    _unsaved.add(part)


def _save() -> None:
    """Writes the entries this process added, merged into the file as it is now (other processes may have written
    theirs) and replaced at once, so a reader never sees half a file; a cache that cannot be written is left alone.
    Once per script's hash, not once per module learned: a cold cache learns 150 modules' imports."""
    path = _cache_file()
    if path is None or not _unsaved:
        return
    _unsaved.clear()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            on_disk = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            on_disk = {}
        merged = {
            p: {
                **(on_disk.get(p) if isinstance(on_disk, dict) and isinstance(on_disk.get(p), dict) else {}),
                **_cache()[p],
            }
            for p in ("imports", "hashes")
        }
        merged["hashes"] = dict(list(merged["hashes"].items())[-CACHE_LIMIT:])
        merged["imports"] = dict(list(merged["imports"].items())[-CACHE_LIMIT * 4 :])
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(merged, out)
        os.replace(temporary, path)
    except OSError:
        return


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
    package_dir = Path(package_dir)
    package = package_dir.name

    def file_of(dotted: str) -> Path | None:
        parts = dotted.split(".")[1:]
        if not parts:
            return None  # the package's __init__ runs no study code
        module = package_dir.joinpath(*parts)
        return next((c for c in (module.with_suffix(".py"), module / "__init__.py") if c.is_file()), None)

    def imported_by(path: Path, dotted_self: str | None) -> set[str]:
        names = _imports_of(path.read_text(encoding="utf-8"), dotted_self, package)
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


def _imports_of(source: str, dotted_self: str | None, package: str) -> frozenset[str]:
    """``_package_imports`` through the cache file."""
    key = f"{_sha(source)}:{dotted_self}:{package}"
    known = _cache()["imports"].get(key)
    if isinstance(known, list):
        return frozenset(known)
    names = _package_imports(source, dotted_self, package)
    _remember("imports", key, sorted(names))
    return names


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
    the ``code`` trigger out and this hash stands in for it. Taken from the cache file when the script and every
    module it runs are byte for byte as when it was last computed."""
    root = Path(package_dir).parent
    script_source = Path(script).read_text(encoding="utf-8")
    modules = {
        relative: (root / relative).read_text(encoding="utf-8") for relative in package_modules(script, package_dir)
    }
    key = _sha(
        "\0".join([_sha(script_source), *(f"{relative}\0{_sha(source)}" for relative, source in modules.items())])
    )
    known = _cache()["hashes"].get(key)
    if isinstance(known, str):
        _save()  # imports learned on the way (a file pruned of them but not of this hash)
        return known
    digest = hashlib.sha256()
    digest.update(b"script\0" + code_without_docstrings(script_source).encode() + b"\0")
    for relative, source in modules.items():
        digest.update(relative.encode() + b"\0" + code_without_docstrings(source).encode() + b"\0")
    value = digest.hexdigest()[:16]
    _remember("hashes", key, value)
    _save()
    return value
