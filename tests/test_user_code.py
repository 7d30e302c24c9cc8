"""A researcher's press code, imported away from the process that asked (issue 51, cases 6 and 8): a press module
that exits, crashes or hangs at import is refused naming the file, at parse and in the check_method job, and a
press path that is no press file names the key and what to write instead.

Before: `press: "../../../../etc/hostname:Foo"` raised Python's `TypeError: the 'package' argument is required to
perform a relative import`, naming no key; a press file calling `sys.exit(0)` at import ended the whole `snakemake`
command with exit status 0 and nothing printed (the parse imported it in Snakemake's own process)."""

from __future__ import annotations

import time

import pytest
from conftest import run_snakemake, write_config

from kvcache_bench.methods.constructions import PressImportError, load_press_file
from kvcache_bench.methods.custom import custom_method_problems

TIMEOUT_VARIABLE = "KVCACHE_BENCH_PRESS_IMPORT_TIMEOUT"  # as docs/methods.md names it (300 s unless set)

# a press class that builds, for files that must pass the parse (kvpress's Knorm under another name)
A_PRESS = "from kvpress import KnormPress\n\n\nclass Foo(KnormPress):\n    pass\n"
# code that runs at import: what a user wrote, and what the refusal must say happened
AT_IMPORT = {
    "exits": ("import sys\nsys.exit(0)\n", "exited the process while it was imported (sys.exit(0) at import)"),
    "crashes": ("import os\nos.kill(os.getpid(), 11)\n", "crashed the process importing it (SIGSEGV)"),
    "hangs": ("while True:\n    pass\n", "did not finish importing within 2 s (KVCACHE_BENCH_PRESS_IMPORT_TIMEOUT)"),
}


def _problems(workdir, custom: dict) -> list[str]:
    return custom_method_problems({"methods": list(custom), "custom_methods": custom}, workdir)


@pytest.mark.parametrize(
    "press, expected",
    [
        ("../../../../etc/hostname:Foo", "'../../../../etc/hostname' is neither a press file"),
        ("/etc/passwd:Foo", "'/etc/passwd' is neither a press file"),
        ("..presses:Foo", "'..presses' is neither a press file"),
        ("presses/mine:Foo", "a press file's path ends in .py; write presses/mine.py:Foo"),
        ("presses/mine.py", "names a file but no class: write the class after a colon, presses/mine.py:Foo"),
        ("presses.mine:Foo", "its edits would not rerun its cells (only a press file's hash is in their params); "
                             "write presses/mine.py:Foo"),
        ("presses/mine.py:Foo Bar", "after the colon comes a class name, and 'Foo Bar' is none"),
    ],
    ids=["issue-relative-path", "absolute-path", "relative-module", "no-py", "no-class", "file-as-module", "bad-class"],
)
def test_a_press_that_names_no_press_file_names_the_key_and_what_to_write(tmp_path, press, expected):
    """Refused from its spelling alone, before any import: the key, and the press to write instead."""
    (tmp_path / "presses").mkdir()
    (tmp_path / "presses/mine.py").write_text(A_PRESS)
    problems = _problems(tmp_path, {"mine": {"press": press}})
    assert len(problems) == 1 and problems[0].startswith("custom_methods.mine.press: "), problems
    assert expected in problems[0], problems
    if "neither a press file" in expected:
        assert "copy it into presses/ and write presses/<file>.py:Foo" in problems[0]


@pytest.mark.workflow
def test_the_press_each_refusal_says_to_write_is_accepted(tmp_path):
    """The refusals' own suggestions, written as printed, pass the check (one child imports kvpress for all)."""
    (tmp_path / "presses").mkdir()
    (tmp_path / "presses/mine.py").write_text(A_PRESS)
    custom = {f"m{i}": {"press": press} for i, press in enumerate(["presses/mine:Foo", "presses/mine.py", "presses.mine:Foo"])}
    suggested = {}
    for problem in _problems(tmp_path, custom):
        name = problem.split(".")[1]
        suggested[name] = {"press": problem.rsplit(" ", 1)[-1]}  # each ends with the press to write
    assert set(suggested) == set(custom) and all(s["press"] == "presses/mine.py:Foo" for s in suggested.values())
    assert _problems(tmp_path, suggested) == []


@pytest.mark.workflow
def test_code_that_exits_crashes_or_hangs_at_import_is_refused_naming_the_file(tmp_path, monkeypatch):
    """The variants of the issue's sys.exit(0), checked as the parse checks them (in a child): each is refused
    naming its file and what happened, the hang after the timeout set (2 s here; 300 s unless set)."""
    monkeypatch.setenv(TIMEOUT_VARIABLE, "2")
    files = {
        **{name: code for name, (code, _) in AT_IMPORT.items()},
        "segfaults": "import ctypes\nctypes.string_at(0)\n",
        "os_exits": "import os\nos._exit(0)\n",
        "exits_with_text": "raise SystemExit('done here')\n",
        "sleeps": "import time\ntime.sleep(3600)\n",
    }
    (tmp_path / "presses").mkdir()
    for name, code in files.items():
        (tmp_path / f"presses/{name}.py").write_text(code)
    started = time.monotonic()
    problems = _problems(tmp_path, {name: {"press": f"presses/{name}.py:Foo"} for name in files})
    elapsed = time.monotonic() - started
    expected = {
        **{name: happened for name, (_, happened) in AT_IMPORT.items()},
        "segfaults": "crashed the process importing it (SIGSEGV)",
        "os_exits": "ended the process importing it (exit status 0, with no exception: os._exit?)",
        "exits_with_text": "exited the process while it was imported (sys.exit('done here') at import)",
        "sleeps": "did not finish importing within 2 s",
    }
    assert len(problems) == len(files), problems
    for problem, (name, happened) in zip(problems, expected.items(), strict=True):
        assert problem.startswith(f"custom_methods.{name}.press: press file 'presses/{name}.py' {happened}"), problem
    # a crash names the line that crashed (faulthandler's stack, from the child's stderr)
    assert "presses/crashes.py\", line 2 in <module>" in problems[1] and "presses/segfaults.py\", line 2" in problems[3]
    assert 4 <= elapsed < 30, elapsed  # two hangs of 2 s each, each refused when its time ran out


def test_an_exit_in_a_press_imported_in_process_is_an_error_naming_the_file(tmp_path):
    """Where a press is imported in the job's own process (a model worker building a cell's press), sys.exit at
    import is caught and named, not the end of the process with exit status 0."""
    (tmp_path / "presses").mkdir()
    (tmp_path / "presses/mine.py").write_text("import sys\nsys.exit(0)\n")
    with pytest.raises(PressImportError, match=r"press file 'presses/mine.py' exited the process .*sys.exit\(0\)"):
        load_press_file("presses/mine.py", str(tmp_path))


def test_the_issues_press_paths_and_code_are_refused_at_parse(workflow_copy):
    """The issue's two cases as a user meets them, `snakemake -n` with the press in a config: exit status 1 and
    each press named, with a crash and a hang beside them (each reported, the parse going on past them)."""
    for name, (code, _) in AT_IMPORT.items():
        (workflow_copy / f"presses/{name}.py").write_text(code)
    custom = {name: {"press": f"presses/{name}.py:Foo"} for name in AT_IMPORT}
    custom["elsewhere"] = {"press": "../../../../etc/hostname:Foo"}
    write_config(workflow_copy, "config/demo.yaml", "mine.yaml", methods=["full_cache", *custom], custom_methods=custom)
    run = run_snakemake(workflow_copy, "-n", "--configfile", "config/mine.yaml", env={TIMEOUT_VARIABLE: "2"}, timeout=120)
    printed = run.stdout + run.stderr
    assert run.returncode == 1, printed[-3000:]
    assert "the study config is refused before any job runs" in printed
    for name, (_, happened) in AT_IMPORT.items():
        assert f"custom_methods.{name}.press: press file 'presses/{name}.py' {happened}" in printed, printed[-3000:]
    assert "custom_methods.elsewhere.press: '../../../../etc/hostname' is neither a press file" in printed
    assert "TypeError" not in printed and not (workflow_copy / "results").exists()


def test_a_press_that_exits_only_in_a_job_fails_that_job_naming_the_file(workflow_copy):
    """A press that imports at parse and exits in its check_method job (on a file that exists only then, as a GPU
    might): the job fails naming the file and Snakemake exits non-zero. Before, the job's script exited 0 without
    its output (Snakemake's MissingOutputException, naming no press); caught as an ordinary error inside the
    measurement, it would have been recorded as a press that merely fails on the tiny model, its cells not run and
    the run exiting 0. A crash in the job is refused by the same child check as at parse (tested above)."""
    (workflow_copy / "presses/exits_in_jobs.py").write_text(
        "import os\nimport sys\n\nif os.path.isdir('results/checks/methods'):  # made for the job\n    sys.exit(0)\n"
        + A_PRESS
    )
    custom = {"exits_in_jobs": {"press": "presses/exits_in_jobs.py:Foo"}}
    write_config(workflow_copy, "config/demo.yaml", "mine.yaml", methods=["full_cache", *custom], custom_methods=custom)
    target = "results/checks/methods/exits_in_jobs.json"
    run = run_snakemake(workflow_copy, target, "--cores", "1", "--configfile", "config/mine.yaml", timeout=300)
    printed = run.stdout + run.stderr
    assert run.returncode == 1 and "the study config is refused" not in printed  # the parse accepted it
    assert "Error in rule check_method" in printed and "MissingOutputException" not in printed
    assert ("custom_methods.exits_in_jobs.press: press file 'presses/exits_in_jobs.py' exited the process while it "
            "was imported (sys.exit(0) at import)") in printed, printed[-4000:]
    assert not (workflow_copy / target).exists()
