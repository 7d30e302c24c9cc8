"""A researcher's press code, imported away from the process that asked (issue 51, cases 6 and 8): a press module
that exits, crashes or hangs at import is refused naming the file, at parse and in the check_method job, and a
press path that is no press file names the key and what to write instead.

Before: `press: "../../../../etc/hostname:Foo"` raised Python's `TypeError: the 'package' argument is required to
perform a relative import`, naming no key; a press file calling `sys.exit(0)` at import ended the whole `snakemake`
command with exit status 0 and nothing printed (the parse imported it in Snakemake's own process)."""

from __future__ import annotations

import pytest

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
