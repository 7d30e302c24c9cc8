"""Numbers written as text say where they came from, and each printed remedy works when run as printed (issue 51,
case 7): `retentions: ['50%']` in a config file was blamed on `--config`, and the printed
`printf 'retentions: [50%]\\n'` failed in printf (`%` is its format character), then as YAML (`[50%]` is text)."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import REPO, run_snakemake
from jsonschema import validate

from kvcache_bench.study.config_files import ConfigFileError, refuse_numbers_as_text

SCHEMA = yaml.safe_load((REPO / "schemas/config.schema.yaml").read_text())
LINES = re.compile(r"^(?P<file>\S+), lines? (?P<first>\d+)(-(?P<last>\d+))?: ")


def _with_retentions(workdir: Path, name: str, written: str) -> tuple[Path, int]:
    """The demo's config with its retentions line replaced by ``written``; the file and that line's number."""
    lines = (workdir / "config/demo.yaml").read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if line.startswith("retentions:"))
    lines[index : index + 1] = written.splitlines()
    path = workdir / "config" / name
    path.write_text("\n".join(lines) + "\n")
    return path, index + 1


def _apply_printed_fix(message: str, workdir: Path) -> str:
    """Does what a refusal of a config file says: the lines it names replaced by the line it prints."""
    first_line, printed = message.splitlines()[0], message.splitlines()[-1].strip()
    where = LINES.match(first_line)
    path = workdir / where["file"]
    first, last = int(where["first"]), int(where["last"] or where["first"])
    lines = path.read_text().splitlines()
    lines[first - 1 : last] = [printed]
    path.write_text("\n".join(lines) + "\n")
    return printed


def test_text_in_a_config_file_names_the_file_and_line_and_the_printed_line_works(workflow_copy):
    """The issue's case as a user meets it: the file and line named, nothing about --config, and the line it says
    to write makes the same command run."""
    _, line = _with_retentions(workflow_copy, "percent.yaml", "retentions: ['50%']")
    run = run_snakemake(workflow_copy, "-n", "--configfile", "config/percent.yaml")
    printed = run.stdout + run.stderr
    assert run.returncode == 1
    message = printed[printed.index(f"config/percent.yaml, line {line}: ") :]
    message = message[: message.index("retentions: [0.5]") + len("retentions: [0.5]")]
    assert message.startswith(f"config/percent.yaml, line {line}: retentions holds ['50%'], text and not numbers")
    assert "--config" not in printed and "printf" not in printed
    assert _apply_printed_fix(message, workflow_copy) == "retentions: [0.5]"
    fixed = run_snakemake(workflow_copy, "-n", "--configfile", "config/percent.yaml")
    assert fixed.returncode == 0, fixed.stdout[-2000:] + fixed.stderr[-2000:]


def test_text_given_with_config_names_config_and_the_printed_commands_work(workflow_copy):
    """`--config retentions=[50%]`: named as --config, and the two printed steps, run as printed (the `echo` in a
    shell, then the command with the `--configfile` it prints), plan the study at 0.5."""
    run = run_snakemake(workflow_copy, "-n", "--configfile", "config/demo.yaml", "--config", "retentions=[50%,0.25]")
    printed = run.stdout + run.stderr
    assert run.returncode == 1 and "--config retentions=[...] gave the list ['50%', '0.25']" in printed
    command = re.search(r"^    (echo .*)$", printed, re.M)[1]
    assert command == "echo 'retentions: [0.5, 0.25]' > my-retentions.yaml"
    subprocess.run(["bash", "-c", command], cwd=workflow_copy, check=True)
    arguments = shlex.split(re.search(r"^    (--configfile .*)$", printed, re.M)[1])
    assert arguments == ["--configfile", "config/demo.yaml", "my-retentions.yaml"]
    fixed = run_snakemake(workflow_copy, "-n", *arguments)
    assert fixed.returncode == 0, fixed.stdout[-2000:] + fixed.stderr[-2000:]
    assert "retention-0.50" in fixed.stdout and "retention-0.25" in fixed.stdout


@pytest.mark.parametrize(
    "written, fix",
    [
        ("retentions: ['0.25', 0.5]", "retentions: [0.25, 0.5]"),
        ("retentions:\n  - 12.5%\n  - '0.5'", "retentions: [0.125, 0.5]"),  # a block list: its three lines named
        ("retentions: [50%]  # half", "retentions: [0.5]"),
    ],
    ids=["quoted", "block-list", "unquoted-percent"],
)
def test_each_way_of_writing_text_is_named_with_a_line_that_is_accepted(tmp_path, written, fix):
    """The refusal's line, written where it says, gives a config the schema accepts (the check alone)."""
    (tmp_path / "config").mkdir()
    (tmp_path / "config/demo.yaml").write_text((REPO / "config/demo.yaml").read_text())
    path, line = _with_retentions(tmp_path, "mine.yaml", written)
    relative = path.relative_to(tmp_path)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)  # files are named as the user typed them, from the working directory
        with pytest.raises(ConfigFileError) as refused:
            refuse_numbers_as_text({}, SCHEMA, [str(relative)])
        message = str(refused.value)
        lines = written.count("\n") + 1
        assert message.startswith(f"{relative}, line {line}: " if lines == 1 else f"{relative}, lines {line}-{line + lines - 1}: ")
        assert _apply_printed_fix(message, tmp_path) == fix
        refuse_numbers_as_text({}, SCHEMA, [str(relative)])
    validate(yaml.safe_load(path.read_text()), SCHEMA)


def test_a_value_replaced_later_is_not_blamed(tmp_path):
    """Only the value the study runs with is judged: a later file's or --config's replaces an earlier file's."""
    text, numbers = tmp_path / "text.yaml", tmp_path / "numbers.yaml"
    text.write_text("seed: 1\nretentions: ['50%']\n")
    numbers.write_text("retentions: [0.5]\n")
    refuse_numbers_as_text({}, SCHEMA, [str(text), str(numbers)])
    refuse_numbers_as_text({"retentions": [0.5]}, SCHEMA, [str(text)])
    with pytest.raises(ConfigFileError, match=r"text.yaml, line 2: retentions holds \['50%'\]"):
        refuse_numbers_as_text({}, SCHEMA, [str(numbers), str(text)])
