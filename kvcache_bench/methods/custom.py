"""A researcher's own methods (the config's ``custom_methods``): checked when the workflow is parsed, and what
of them each job needs (the settings it builds from, the press files its code hash covers).

``custom_methods.<name> = {press, inner, kwargs, label, takes_retention}``: ``press`` is a kvpress class name,
an importable ``module:Class``, or ``presses/<file>.py:Class`` inside the workflow directory; ``inner`` names
the method a wrapper press wraps (a list for ComposedPress).
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
from pathlib import Path

from kvcache_bench.methods.catalogue import WRAPPER_CLASSES
from kvcache_bench.methods.constructions import constructor_fields, press_file_of, press_spelling_problem, resolve_class
from kvcache_bench.methods.registry import METHODS, UnknownMethodError, build_press, did_you_mean
from kvcache_bench.methods.user_code import UserCodeError, check_in_child

NAME = re.compile(r"^[a-z0-9_]+$")


def _inner_names(settings: dict) -> list[str]:
    inner = settings.get("inner")
    return [] if inner is None else list(inner) if isinstance(inner, list) else [inner]


def methods_needed(name: str, custom_methods: dict | None) -> dict:
    """The custom settings that building ``name`` reads: its own and its inner methods', nothing else.

    A job's params carry exactly these, so editing one custom method reruns only the cells built from it.
    """
    custom_methods = custom_methods or {}
    needed, pending = {}, [name]
    while pending:
        current = pending.pop()
        if current in custom_methods and current not in needed:
            needed[current] = custom_methods[current]
            pending += _inner_names(custom_methods[current])
    return needed


def _module_files(module: str, level: int, importer: str, workdir: str) -> list[str]:
    """The workflow-relative .py files an import of ``module`` (``level`` dots) from ``importer`` can load: from
    the importer's folder (relative, or beside it on sys.path) or the workflow directory (Snakemake's cwd)."""
    folder = os.path.dirname(importer)
    if level:
        for _ in range(level - 1):
            folder = os.path.dirname(folder)
        roots = [folder]
    else:
        roots = [folder, ""]
    relative = module.replace(".", os.sep) if module else ""
    found = []
    for root in roots:
        for candidate in (os.path.join(root, relative + ".py"), os.path.join(root, relative, "__init__.py")):
            candidate = os.path.normpath(candidate)
            if relative and os.path.isfile(os.path.join(workdir, candidate)) and not candidate.startswith(".."):
                found.append(candidate)
    return found


def workflow_imports(path: str, workdir: str = ".") -> list[str]:
    """``path`` and every module of the workflow directory it imports, at any depth: a press whose helper
    module changed must rerun (editing a helper beside a press once planned nothing, and a forced rerun moved
    the score from 54.54 to 0.00). Packages installed elsewhere are versioned in the manifests instead."""
    seen, pending = set(), [os.path.normpath(path)]
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            tree = ast.parse(Path(workdir, current).read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue  # its check job says why it does not import
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                wanted = [(alias.name, 0) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                wanted = [(base, node.level)] + [
                    (f"{base}.{a.name}" if base else a.name, node.level) for a in node.names
                ]
            else:
                continue
            for module, level in wanted:
                pending += _module_files(module, level, current, workdir)
    return sorted(seen)


def press_files(name: str, custom_methods: dict | None, workdir: str = ".") -> list[str]:
    """Workflow-relative files (``presses/<file>.py`` and the workflow's modules they import) the construction
    of ``name`` runs."""
    files = {press_file_of(settings["press"]) for settings in methods_needed(name, custom_methods).values()}
    return sorted({module for f in files if f for module in workflow_imports(f, workdir)})


def press_code_hash(name: str, custom_methods: dict | None, workdir: str = ".") -> str:
    """sha256 over the press files a method is built from and the workflow modules they import ("" for a
    built-in): part of its jobs' params."""
    files = press_files(name, custom_methods, workdir)
    if not files:
        return ""
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.encode() + b"\0")
        with open(os.path.join(workdir, path), "rb") as handle:
            digest.update(handle.read())
    return digest.hexdigest()


def configured_method_names(config: dict) -> dict[str, list[str]]:
    """Every place a config names a method, by key."""
    perf = config.get("perf") or {}
    return {
        "methods": list(config.get("methods") or []),
        "perf.methods": list(perf.get("methods") or []),
        "batch_size_overrides": list(config.get("batch_size_overrides") or {}),
    }


def known_names(config: dict) -> list[str]:
    return list(METHODS) + list(config.get("custom_methods") or {})


def unknown_method_problems(config: dict) -> list[str]:
    known = known_names(config)
    problems = []
    for key, names in configured_method_names(config).items():
        for name in names:
            if name not in known:
                problems.append(
                    f"{key} names {name!r}, which is no method; {did_you_mean(name, known)}"
                    "see README's method table or define it under custom_methods"
                )
    return problems


def _settings_problems(name: str, settings: dict, custom_methods: dict, workdir: str) -> list[str]:
    where = f"custom_methods.{name}"
    if named := _named_problems(name, settings, workdir):
        return named
    try:
        press_class = resolve_class(settings["press"], workdir)
    except ValueError as error:
        return [f"{where}.press: {error}"]
    problems = []
    accepted = constructor_fields(press_class)
    unknown = sorted(set(settings.get("kwargs") or {}) - set(accepted))
    if unknown:
        problems.append(f"{where}.kwargs: {press_class.__name__} does not take {unknown}; it takes {accepted}")
    wrapped_field = WRAPPER_CLASSES.get(press_class.__name__)
    inner = _inner_names(settings)
    if wrapped_field and not inner:
        problems.append(f"{where}: {press_class.__name__} wraps another press; name the method it wraps in `inner`")
    known = list(METHODS) + list(custom_methods)
    for inner_name in inner:
        if inner_name == name or name in methods_needed(inner_name, custom_methods):
            problems.append(f"{where}.inner: {inner_name!r} wraps {name!r} in turn (a cycle)")
        elif inner_name not in known:
            problems.append(
                f"{where}.inner names {inner_name!r}, which is no method; {did_you_mean(inner_name, known)}".rstrip(
                    "; "
                )
            )
        elif inner_name in METHODS and METHODS[inner_name].construction is None:
            problems.append(f"{where}.inner: {inner_name!r} has no press to wrap")
    if problems:
        return problems
    try:  # what only building tells: an inner press of a kind the wrapper refuses, a bad kwarg value
        build_press(
            name, 0.5 if settings.get("takes_retention", True) else 1.0, custom_methods=custom_methods, workdir=workdir
        )
    except (UnknownMethodError, TypeError, ValueError, AssertionError) as error:
        problems.append(f"{where} does not build: {type(error).__name__}: {error}")
    return problems


def _named_problems(name: str, settings: dict, workdir: str) -> list[str]:
    """What the name and the press's spelling tell, without importing anything."""
    where = f"custom_methods.{name}"
    if name in METHODS:
        return [f"{where} shadows the built-in method {name!r} ({METHODS[name].label}); choose another name"]
    if not NAME.match(name):
        return [f"{where}: a method name is lower-case letters, digits and _ (it is part of result paths)"]
    problem = press_spelling_problem(settings.get("press"), workdir)
    return [f"{where}.press: {problem}"] if problem else []


def runs_user_code(press) -> bool:
    """Whether a ``press`` setting names a researcher's module (a file or an importable module), not a kvpress
    class: kvpress is the environment's pinned package, trusted as the rest of it is; a researcher's module may
    do anything at import."""
    return isinstance(press, str) and ":" in press


def methods_running_user_code(custom_methods: dict | None, names=None) -> list[str]:
    """The custom methods (of ``names``, default all) whose construction imports a researcher's module: their own
    press, or an inner method's at any depth (building the wrapper builds it)."""
    custom_methods = custom_methods or {}
    return [
        name
        for name in (custom_methods if names is None else names)
        if any(runs_user_code((s or {}).get("press")) for s in methods_needed(name, custom_methods).values())
    ]


def checked_in_a_child(name: str, custom_methods: dict, workdir: str) -> list[str]:
    """A method's checks as the child process of ``methods.user_code`` runs them."""
    return _settings_problems(name, custom_methods[name], custom_methods, workdir)


CHILD_CHECK = f"{__name__}:checked_in_a_child"


def refuse_failing_user_code(method: str, custom_methods: dict | None, workdir: str = ".") -> None:
    """For the job that first builds a custom method (check_method): its user code imported in a child, then here
    with exits caught, both before the method is measured. The measurement records a press that raises as one
    that "fails" on the tiny model (its cells are listed as not run); a press that cannot even be imported is the
    config's error, so the job fails naming the file, as the parse would. A press that behaves otherwise in a job
    (a GPU, a file that exists only then) is why the job checks again."""
    import threading

    from kvcache_bench.methods.kvpress_import import import_kvpress

    if not methods_running_user_code(custom_methods, [method]):
        return
    needed = methods_needed(method, custom_methods)
    # The child imports torch and kvpress from nothing (seconds); this job imports kvpress too, meanwhile, and
    # touches no user code until the child has answered.
    answer = {}
    probe = threading.Thread(target=lambda: answer.update(check_in_child([method], needed, workdir, CHILD_CHECK)))
    probe.start()
    try:
        import_kvpress()
    finally:
        probe.join()
    if problems := answer[method]:
        raise UserCodeError("\n".join(problems))
    for settings in needed.values():
        if runs_user_code(settings.get("press")):
            resolve_class(settings["press"], workdir)


def custom_method_problems(config: dict, workdir: str | os.PathLike = ".") -> list[str]:
    """Everything wrong with ``custom_methods``, and any method name no method has. A method built from kvpress's
    classes alone is checked here (importing kvpress); one whose construction imports a researcher's module is
    checked in a child process (``methods.user_code``: an exit, a crash or a hang at import is refused there,
    naming the file, instead of ending this process, Snakemake's own at parse)."""
    custom_methods = config.get("custom_methods") or {}
    workdir = str(workdir)
    named = {name: _named_problems(name, settings, workdir) for name, settings in custom_methods.items()}
    in_child = [name for name in methods_running_user_code(custom_methods) if not named[name]]
    checked = check_in_child(in_child, custom_methods, workdir, CHILD_CHECK) if in_child else {}
    problems = []
    for name, settings in custom_methods.items():
        if named[name]:
            problems += named[name]
        elif name in checked:
            problems += checked[name]
        else:
            problems += _settings_problems(name, settings, custom_methods, workdir)
    return problems + unknown_method_problems(config)
