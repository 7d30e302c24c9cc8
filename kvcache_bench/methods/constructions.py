"""A press as data: a class and its keyword arguments (inner presses included), built only when a job runs.

The registry writes each method as a tree of ``Construction`` nodes so that it reads like kvpress's own
``evaluation/evaluate_registry.py`` and can be listed, documented and checked without importing kvpress.
``construction_of`` goes the other way: from a built press to the tree of classes and arguments it holds,
which every prediction record carries.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import importlib.util
import inspect
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from kvcache_bench.methods.kvpress_import import import_kvpress


class PressImportError(ValueError):
    pass


@dataclass(frozen=True)
class Construction:
    """``press`` is a kvpress class name, ``module:Class``, or ``presses/<file>.py:Class``
    (a file in the workflow directory)."""

    press: str
    kwargs: dict = field(default_factory=dict)  # values may be Constructions, or lists of them


def press(name: str, *inner: Construction, **kwargs) -> Construction:
    """``press("AdaKVPress", press("SnapKVPress"))`` reads as kvpress's ``AdaKVPress(SnapKVPress())``.

    A positional inner press goes to the class's first dataclass field, as Python would pass it.
    """
    if inner:
        kwargs = {"__positional__": list(inner), **kwargs}
    return Construction(name, kwargs)


# Called with a module's name or a press file's path just before it is imported, and with None once it has
# imported: the child process that checks user code (methods.user_code) reports through it which file was being
# imported when that process exited, crashed or hung.
import_announcer = None


def _announce(what: str | None) -> None:
    if import_announcer is not None:
        import_announcer(what)


def _ran_user_code(label: str, run):
    """``run()``, the import of a researcher's module (``label`` names it), with every way it can stop refused
    naming it: an exception, and also ``sys.exit()`` at import, which once ended the whole ``snakemake`` command with
    exit status 0 and nothing printed (the parse imported the press in Snakemake's own process). A crash or a hang
    cannot be caught in-process: the parse and the check_method job import user code in a child first
    (methods.user_code)."""
    _announce(label)
    try:
        result = run()
    except KeyboardInterrupt:
        raise  # Ctrl-C (or Snakemake stopping the job) stays what it is
    except SystemExit as error:
        raise PressImportError(
            f"{label} exited the process while it was imported (sys.exit({error.code!r}) at import): a press "
            "module defines its classes and must not exit; move that code under `if __name__ == \"__main__\":`"
        ) from None
    except BaseException as error:  # a researcher's file: any failure is theirs to see, with its type
        raise PressImportError(f"{label} does not import: {type(error).__name__}: {error}") from error
    _announce(None)
    return result


def _kvpress():
    """kvpress, its import announced: seconds on a warm disk (torch with it), a minute or more on a cold one, which
    the child checking user code names when it runs out of time there."""
    _announce("kvpress (and torch)")
    kvpress = import_kvpress()
    _announce(None)
    return kvpress


def load_press_file(path: str, workdir: str):
    """The module in ``path`` (relative to ``workdir``), refused when the file lies outside it."""
    root = os.path.realpath(workdir)
    full = os.path.realpath(os.path.join(root, path))
    if os.path.commonpath([root, full]) != root:
        raise PressImportError(
            f"press file {path!r} is outside the workflow directory {root}: a press file is part of the study (its "
            f"hash decides which cells rerun); copy it into {os.path.join(root, 'presses')} and name it "
            f"presses/<file>.py"
        )
    if not os.path.isfile(full):
        raise PressImportError(f"press file {path!r} does not exist in {root}")
    module_name = "kvcache_bench_user_press_" + os.path.relpath(full, root).replace(os.sep, "_").removesuffix(".py")
    spec = importlib.util.spec_from_file_location(module_name, full)
    module = importlib.util.module_from_spec(spec)
    return _ran_user_code(f"press file {path!r}", lambda: spec.loader.exec_module(module) or module)


def press_file_of(name: str) -> str | None:
    """The workflow-relative file a ``presses/<file>.py:Class`` press lives in; None for a class from a package."""
    module, _, _ = name.rpartition(":")
    return module if module.endswith(".py") else None


def kvpress_version() -> str:
    """The installed kvpress's version, from its package metadata (kvpress sets no ``__version__``)."""
    try:
        return importlib.metadata.version("kvpress")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"


MODULE_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
WHAT_TO_WRITE = (
    "write presses/<file>.py:<Class> for a file in the workflow directory's presses/ folder, <package.module>:<Class> "
    "for an installed module, or a kvpress class name (SnapKVPress)"
)


def _classes_in_file(full: str) -> list[str]:
    """The classes a Python file defines at top level, read without running it (for a message)."""
    try:
        tree = ast.parse(Path(full).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return []
    return [node.name for node in tree.body if isinstance(node, ast.ClassDef)]


def _workflow_file(module_name: str, workdir: str) -> str | None:
    """The workflow-relative file a dotted module name would import from the workflow directory, if any."""
    relative = module_name.replace(".", "/")
    for candidate in (f"{relative}.py", f"{relative}/__init__.py"):
        if os.path.isfile(os.path.join(workdir, candidate)):
            return candidate
    return None


def press_spelling_problem(name, workdir: str = ".") -> str | None:
    """Why ``name`` (a custom method's ``press``) is no press this workflow can name, and what to write instead;
    None when it is spelled as one. Read without importing anything: the path
    ``../../../../etc/hostname:Foo`` once reached ``importlib.import_module`` and raised Python's ``TypeError: the
    'package' argument is required to perform a relative import``, naming no key."""
    if not isinstance(name, str) or not name.strip():
        return f"{name!r} names no press: {WHAT_TO_WRITE}"
    module_name, colon, class_name = name.rpartition(":")
    if not colon:
        if name.endswith(".py") or "/" in name or os.sep in name:
            found = _classes_in_file(os.path.join(workdir, name))
            example = found[0] if len(found) == 1 else "<Class>"
            return (
                f"{name!r} names a file but no class: write the class after a colon, {name}:{example}"
                + (f" (the file defines {', '.join(found)})" if len(found) > 1 else "")
            )
        return None  # a kvpress class name, looked up when the class is resolved
    if not class_name.isidentifier():
        return f"{name!r}: after the colon comes a class name, and {class_name!r} is none; {WHAT_TO_WRITE}"
    if module_name.endswith(".py"):
        return None  # a press file, checked (inside the workflow directory) when it is loaded
    if MODULE_NAME.match(module_name):
        if file := _workflow_file(module_name, workdir):
            return (
                f"{name!r} imports {file}, a file of the workflow directory, as a module: its edits would not rerun "
                f"its cells (only a press file's hash is in their params); write {file}:{class_name}"
            )
        return None  # an installed module, imported when the class is resolved
    if os.path.isfile(os.path.join(workdir, f"{module_name}.py")):
        return f"{name!r}: a press file's path ends in .py; write {module_name}.py:{class_name}"
    return (
        f"{module_name!r} is neither a press file (a path ending in .py, inside the workflow directory "
        f"{os.path.realpath(workdir)}) nor a module name (dotted, as in mypackage.presses); {WHAT_TO_WRITE}. "
        f"A file kept elsewhere: copy it into presses/ and write presses/<file>.py:{class_name}"
    )


def resolve_class(name: str, workdir: str = "."):
    """The class a construction names, checked to be a kvpress ``BasePress``. A researcher's module is imported
    before kvpress, so a module that fails at import says so in milliseconds whatever kvpress costs to import."""
    if problem := press_spelling_problem(name, workdir):
        raise PressImportError(problem)
    module_name, _, class_name = name.rpartition(":")
    if not module_name:
        kvpress = _kvpress()
        found = getattr(kvpress, name, None)
        if found is None:
            raise PressImportError(f"kvpress {kvpress_version()} has no press {name!r}")
    else:
        if module_name.endswith(".py"):
            module = load_press_file(module_name, workdir)
        else:
            try:
                module = _ran_user_code(f"module {module_name!r}", lambda: importlib.import_module(module_name))
            except PressImportError as error:
                raise PressImportError(f"press {name!r}: {error}") from error.__cause__
        found = getattr(module, class_name, None)
        if found is None:
            classes = [n for n, v in vars(module).items() if isinstance(v, type) and not n.startswith("_")]
            hint = f" (it defines {', '.join(sorted(classes)[:12])})" if module_name.endswith(".py") and classes else ""
            raise PressImportError(f"press {name!r}: {module_name} has no class {class_name!r}{hint}")
        kvpress = _kvpress()
    if not (isinstance(found, type) and issubclass(found, kvpress.BasePress)):
        raise PressImportError(f"press {name!r} is not a kvpress BasePress subclass")
    return found


def constructor_fields(press_class) -> list[str]:
    """The arguments a press's constructor takes, in order (a dataclass's init fields, or a written ``__init__``'s)."""
    parameters = inspect.signature(press_class).parameters.values()
    return [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def build(construction: Construction, overrides: dict | None = None, workdir: str = "."):
    """Instantiate a construction. Each of ``overrides`` (the config's kwargs) goes to the outermost press in
    the tree that takes it, so ``expected_attention: {n_future_positions: 64}`` reaches the scorer inside AdaKV."""
    built, unused = _build(construction, dict(overrides or {}), workdir)
    if unused:
        raise PressImportError(f"no press in {describe(construction)} accepts {sorted(unused)}")
    return built


def _build(construction: Construction, overrides: dict, workdir: str):
    press_class = resolve_class(construction.press, workdir)
    accepted = constructor_fields(press_class)
    for key in construction.kwargs:
        if key != "__positional__" and key not in accepted:
            raise PressImportError(f"{press_class.__name__} does not accept {key!r}; accepted: {accepted}")
    own = {key: value for key, value in overrides.items() if key in accepted}
    rest = {key: value for key, value in overrides.items() if key not in accepted}
    kwargs = {}
    for key, value in {**construction.kwargs, **own}.items():
        if key == "__positional__":
            for position, inner in enumerate(value):
                kwargs[accepted[position]], rest = _built(inner, rest, workdir)
        else:
            kwargs[key], rest = _built(value, rest, workdir)
    return press_class(**kwargs), rest


def _built(value, overrides: dict, workdir: str):
    if isinstance(value, Construction):
        return _build(value, overrides, workdir)
    if isinstance(value, list) and value and all(isinstance(v, Construction) for v in value):
        built = []
        for item in value:
            press, overrides = _build(item, overrides, workdir)
            built.append(press)
        return built, overrides
    return value, overrides


def _described(value):
    if isinstance(value, import_kvpress().BasePress):
        return construction_of(value)
    if isinstance(value, (list, tuple)):
        return [_described(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return f"<{type(value).__name__}>"  # tensors and models: their presence, not their bytes


def construction_of(built) -> dict | None:
    """The class tree and every constructor argument of a built press (defaults included), as JSON."""
    if built is None:
        return None
    kind = type(built)
    arguments = {
        name: _described(getattr(built, name, None)) for name in constructor_fields(kind) if not name.startswith("_")
    }
    return {"class": f"{kind.__module__}.{kind.__qualname__}", "kwargs": arguments}


def _text(value) -> str:
    if isinstance(value, Construction):
        return describe(value)
    if isinstance(value, list) and value and all(isinstance(v, Construction) for v in value):
        return f"[{', '.join(describe(v) for v in value)}]"
    return repr(value)


def describe(construction: Construction | None) -> str:
    """Python-like text for a construction, as kvpress's registry writes it (docs, doctor)."""
    if construction is None:
        return "(no press)"
    parts = []
    for key, value in construction.kwargs.items():
        if key == "__positional__":
            parts += [_text(v) for v in value]
        else:
            parts.append(f"{key}={_text(value)}")
    return f"{construction.press}({', '.join(parts)})"


def classes_in(construction: Construction) -> list[str]:
    """Every press class a construction names, outermost first."""
    names = [construction.press]
    for value in construction.kwargs.values():
        for item in value if isinstance(value, list) else [value]:
            for node in item if isinstance(item, list) else [item]:
                if isinstance(node, Construction):
                    names += classes_in(node)
    return names


def decoding_budget(construction: dict | None) -> dict:
    """The decoding-time budget in a press's construction (``press_construction``): its ``compression_interval``
    and ``target_size``, from the outermost press that has them ({} for a press that compresses the prompt alone)."""
    if not isinstance(construction, dict):
        return {}
    kwargs = construction.get("kwargs") or {}
    if "compression_interval" in kwargs:
        return {name: kwargs[name] for name in ("compression_interval", "target_size") if name in kwargs}
    for value in kwargs.values():
        if found := decoding_budget(value):
            return found
    return {}
