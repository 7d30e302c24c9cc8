"""A researcher's press code, imported first in a child: an exit, crash or hang at import is refused, naming the file.

The child keeps whatever the code does at import away from the process that asked: Snakemake's own while it
parses, or a check_method job.

A press file is Python that runs when it is imported. The parse used to import it inside Snakemake's process: a
file calling ``sys.exit(0)`` at import ended the whole ``snakemake`` command with exit status 0 and nothing
printed (issue 51), and a segfault or an endless loop would have killed or held the parse. The custom methods
whose construction runs a researcher's module (``presses/<file>.py:Class`` or ``module:Class``, their own or an
``inner`` method's) are now checked in a child: the same checks as before (the class, its kwargs, a build at
retention 0.5), and an exit, a crash (a signal) or a hang there (no result within ``KVCACHE_BENCH_PRESS_IMPORT_TIMEOUT``
seconds per method, 300 unless set) is refused naming the file that was being imported and what happened.

What it costs: the parse checked these methods in-process already, importing torch and kvpress for it (4.4 s of
a 7.4 s dry run of the demo with ``presses/value_norm.py``; 3.0 s without it; 2 shared CPU cores). The child
imports them instead, and the parse itself no longer does: the check costs the same CPU in a child as in-process
(5.2 s either way, measured side by side), the dry run 7.6 to 7.9 s against 7.4 to 8.5 s before (the child's
start; the parse waits for the answer before it plans), a config without user code nothing, and a file that fails
at import fails in milliseconds, before kvpress is imported (``constructions.resolve_class`` imports the
researcher's module first). An AST read alone would have been cheaper, but the parse refuses kwargs the class does
not take and presses that do not build, which only the class itself can tell, and those refusals stay at parse.

The check_method job checks again the same way (``methods.custom.refuse_failing_user_code``): a press can behave
otherwise in a job, and a job's script that exits 0 without its output names no press. It costs that job about 5 s
of CPU, once per custom method, its child overlapping the job's own import of kvpress.
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TIMEOUT_VARIABLE = "KVCACHE_BENCH_PRESS_IMPORT_TIMEOUT"
# Generous: a first import of torch and kvpress from a cold network disk (a cluster's login node) takes a minute
# or more, and a press refused for being slow would be worse than a hang refused late. Tests set 2 s.
DEFAULT_TIMEOUT_S = 300.0
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


class UserCodeError(RuntimeError):
    """A custom method's press code exited, crashed, hung or failed when imported and built."""


def import_timeout() -> float:
    value = os.environ.get(TIMEOUT_VARIABLE, "").strip()
    if not value:
        return DEFAULT_TIMEOUT_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds < float("inf"):
        raise UserCodeError(
            f"{TIMEOUT_VARIABLE}={value!r}: give a number of seconds above 0 (unset: {DEFAULT_TIMEOUT_S:g})"
        )
    return seconds


def _events(path: Path) -> list[dict]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    events = []
    for line in lines:
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a line cut short by the crash that ended the child
    return events


def _what_it_printed(stderr: Path, limit: int = 6) -> str:
    """The end of the child's stderr that points at the researcher's code: faulthandler's "Fatal Python error"
    line and the stack frames outside Python's own import machinery and this package."""
    try:
        lines = stderr.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    kept = [
        line.strip()
        for line in lines
        if line.startswith("Fatal Python error")
        or (line.strip().startswith('File "') and "<frozen" not in line and "kvcache_bench" not in line
            and 'File "<string>"' not in line)
    ]
    if not kept:
        kept = [line.strip() for line in lines if line.strip()][-limit:]
    return "; ".join(kept[:limit])


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _refusal(name: str, importing: str | None, returncode: int | None, timeout: float, printed: str) -> str:
    """What ended the child while it checked ``name``, naming what it was importing (a press file, a module, or
    kvpress itself), or the build of the method's press when no import was under way."""
    if importing:
        subject, doing = importing, "importing it"
    else:
        subject, doing = f"the press of custom_methods.{name}", "building it"
    advice = "a press module should only define its classes when imported"
    if returncode is None:
        text = (
            f"{subject} did not finish {doing.removesuffix(' it')} within {timeout:g} s ({TIMEOUT_VARIABLE}): an "
            f"endless loop or a wait? {advice[0].upper() + advice[1:]}. If it is only slow (a first import of torch "
            f"from a cold disk), set {TIMEOUT_VARIABLE} to more seconds"
        )
    elif returncode < 0:
        text = f"{subject} crashed the process {doing} ({_signal_name(-returncode)}): {advice}"
    else:
        text = f"{subject} ended the process {doing} (exit status {returncode}, with no exception: os._exit?): {advice}"
    return f"custom_methods.{name}.press: {text}" + (f". It printed: {printed}" if printed else "")


def _run_child(names: list[str], custom_methods: dict, workdir: str, check: str, timeout: float, folder: Path) -> tuple:
    """One child checking ``names`` in order: ({name: problems} for those it finished, the name it was on when it
    ended without finishing or None, and that ending's refusal or None)."""
    request, progress, stderr = folder / "request.pickle", folder / "progress.jsonl", folder / "stderr.txt"
    for stale in (progress, stderr):
        stale.unlink(missing_ok=True)
    request.write_bytes(
        pickle.dumps({"names": names, "custom_methods": custom_methods, "workdir": workdir, "check": check})
    )
    python_path = os.pathsep.join(filter(None, [PACKAGE_ROOT, os.environ.get("PYTHONPATH")]))
    environment = {**os.environ, "PYTHONPATH": python_path}
    # `-c` puts the working directory first on sys.path; the child drops it, so it imports what a job imports
    code = "import sys; sys.path.pop(0); from kvcache_bench.methods.user_code import child; child()"
    with open(stderr, "wb") as printed:
        # its own session: on a hang the whole group is killed, whatever the press started
        process = subprocess.Popen(
            [sys.executable, "-c", code, str(request), str(progress)],
            cwd=workdir, stdin=subprocess.DEVNULL, stdout=printed, stderr=printed, env=environment,
            start_new_session=True,
        )
        seen, deadline = 0, time.monotonic() + timeout
        try:
            while True:
                try:
                    returncode = process.wait(timeout=0.1)
                    break
                except subprocess.TimeoutExpired:
                    started = sum(1 for event in _events(progress) if "method" in event)
                    if started > seen:  # each method has its own allowance
                        seen, deadline = started, time.monotonic() + timeout
                    if time.monotonic() > deadline:
                        returncode = None
                        break
        finally:  # out of time, or this process interrupted (Ctrl-C reaches only this session, not the child's)
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    finished, started, current, importing = {}, set(), None, None
    for event in _events(progress):
        if "method" in event:
            current, importing = event["method"], None
            started.add(current)
        elif "importing" in event:
            importing = event["importing"]
        elif "done" in event:
            finished[event["done"]] = event["problems"]
            current = None
    if returncode == 0 and current is None and len(finished) == len(names):
        return finished, None, None
    name = current or next(n for n in names if n not in finished)
    if name not in started:  # it ended before its first method: this package or Python itself, not a press
        how = "did not answer in time" if returncode is None else f"ended with status {returncode}"
        printed = _what_it_printed(stderr)
        return finished, name, f"custom_methods.{name}: the process checking its press {how}: {printed or 'no output'}"
    return finished, name, _refusal(name, importing, returncode, timeout, _what_it_printed(stderr))


def check_in_child(
    names, custom_methods: dict, workdir: str | os.PathLike, check: str, timeout: float | None = None
) -> dict:
    """{name: its problems} for each of ``names``, from ``check`` (``"module:function"``, called in a child process
    as ``function(name, custom_methods, workdir)``, returning a list of problems). A child that exits, crashes or
    hangs is refused for the method it was on, and a new child checks the rest."""
    timeout = import_timeout() if timeout is None else timeout
    workdir = os.path.abspath(workdir)
    pending, problems = list(names), {}
    with tempfile.TemporaryDirectory(prefix="kvcache-bench-press-check-") as folder:
        while pending:
            try:
                finished, failed, refusal = _run_child(pending, custom_methods, workdir, check, timeout, Path(folder))
            except OSError as error:  # no process could be started (out of memory, of processes)
                unchecked = {n: [f"custom_methods.{n}: its press could not be checked: {error}"] for n in pending}
                return {**problems, **unchecked}
            problems.update(finished)
            if failed is not None:
                problems[failed] = [refusal]
            pending = [n for n in pending if n not in problems]
    return problems


def _exit_call(error: SystemExit) -> str:
    return f"sys.exit({error.code!r})"


def child() -> None:
    """The child's side: check each requested method, writing a line before each method and each import of a
    researcher's module, and one with its problems when it is done."""
    import faulthandler

    faulthandler.enable()  # a crash prints the Python stack, the press file's line in it, before the process dies
    request_path, progress_path = sys.argv[1:3]
    with open(request_path, "rb") as handle:
        request = pickle.load(handle)  # written by the parent just now
    from kvcache_bench.methods import constructions

    # the check is named by its caller (methods.custom), which imports this module: no import back
    module_name, _, function_name = request["check"].partition(":")
    check = getattr(importlib.import_module(module_name), function_name)

    with open(progress_path, "a", encoding="utf-8") as progress:

        def note(**event) -> None:
            progress.write(json.dumps(event) + "\n")
            progress.flush()

        importing = []  # the module under import, when one is

        def announce(what: str | None) -> None:
            importing[:] = [what] if what else []
            note(importing=what)

        constructions.import_announcer = announce
        custom_methods = request["custom_methods"]
        for name in request["names"]:
            note(method=name)
            try:
                problems = check(name, custom_methods, request["workdir"])
            except BaseException as error:  # what the checks do not catch: a KeyboardInterrupt raised at import (no
                # Ctrl-C reaches this child, in its own session), a constructor's sys.exit()
                what = f"SystemExit ({_exit_call(error)})" if isinstance(error, SystemExit) else type(error).__name__
                where = f"{importing[0]} raised {what} while it was imported" if importing else (
                    f"its press ({custom_methods[name].get('press')}) raised {what} while it was built"
                )
                said = "" if isinstance(error, SystemExit) or not str(error) else f": {error}"
                problems = [f"custom_methods.{name}.press: {where}{said}"]
            note(done=name, problems=problems)
