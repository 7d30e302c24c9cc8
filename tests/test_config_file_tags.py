"""A `--configfile` holding a YAML tag (issue 27): refused before Snakemake reads it, naming file, line and tag and
what to write instead, and nothing runs. Snakemake itself said only "Config file is not valid JSON or YAML. In case
of YAML, make sure to not mix whitespace and tab indentation." (and `!!python/tuple`, which its loader builds,
stopped the Snakefile with a traceback). A string that merely contains "!!python" is no tag and runs.

The check is the workflow profile's (profiles/default/config.yaml, read with YTE before any config file):
kvcache_bench/study/config_tags.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import copy_workflow, planned_jobs

from kvcache_bench.study.config_tags import configfile_arguments, tag_refusal, tags_in

# ----------------------------------------------------------------------------- the scan (unit)


def test_the_scan_names_each_tag_and_its_line_without_building_anything(tmp_path):
    text = (
        "%TAG !py! tag:yaml.org,2002:python/\n"
        "---\n"
        "seed: !!python/object/apply:os.system ['touch built']\n"  # line 3
        "order: !!python/object:collections.OrderedDict {}\n"
        "pair: !py!tuple [1, 2]\n"
        "name: !<tag:yaml.org,2002:python/name:os.system> x\n"
        "ref: !Ref other\n"
        "quoted: '!!python/object/apply:os.system [x]'\n"  # text, no tag
        "# seed: !!python/tuple [1]\n"  # a comment, no tag
        "plain: [!!int '3', !!str 4, !!float 1, ! text, !!set {a}, !!null '']\n"  # tags the safe loader reads
    )
    assert tags_in(text) == [
        (3, "!!python/object/apply:os.system"),
        (4, "!!python/object:collections.OrderedDict"),
        (5, "!!python/tuple"),
        (6, "!!python/name:os.system"),
        (7, "!Ref"),
    ]
    assert tags_in("seed: 1\nnote: 'no tag here'\n") == []
    assert tags_in("seed: !!python/tuple [1]\nbroken: [\n") == [(1, "!!python/tuple")]  # not YAML: Snakemake says
    assert not Path("built").exists() and not (tmp_path / "built").exists()


def test_the_config_files_of_a_command_line_are_found_as_argparse_reads_them():
    argv = ["-n", "--configfile", "a.yaml", "b.yaml", "-c1", "--configfiles=c.yaml", "--configf", "d.yaml",
            "--config", "seed=1", "--", "--configfile", "e.yaml"]
    assert configfile_arguments(argv) == ["a.yaml", "b.yaml", "c.yaml", "d.yaml"]
    assert configfile_arguments(["-n", "--config", "seed=1", "all"]) == []


def test_the_refusal_names_file_line_tag_and_what_to_write(tmp_path):
    tagged, plain = tmp_path / "tagged.yaml", tmp_path / "plain.yaml"
    tagged.write_text("methods: [snapkv]\nseed: !!python/object/apply:os.system ['echo hi']\n")
    plain.write_text("seed: 7\nnote: '!!python/tuple'\n")
    message = tag_refusal([str(plain), str(tagged), str(tmp_path / "missing.yaml")])
    assert f"{tagged}, line 2: the tag !!python/object/apply:os.system" in message
    assert "nothing was run" in message and "a number" in message and "a mapping" in message
    assert str(plain) not in message
    assert tag_refusal([str(plain)]) is None


# ----------------------------------------------------------------------------- the command a user types (workflow)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return copy_workflow(tmp_path_factory.mktemp("config_tags"))


def snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    """`snakemake ARGS` as typed in the checkout: the venv's console script, the package found by the workflow."""
    script = Path(sys.executable).parent / "snakemake"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "snakemake"]
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return subprocess.run([*command, *args], cwd=workdir, env=environment, capture_output=True, text=True,
                          timeout=600)


def demo_with(workdir: Path, name: str, replace: str, by: str) -> str:
    text = (workdir / "config/demo.yaml").read_text()
    assert replace in text
    (workdir / "config" / name).write_text(text.replace(replace, by, 1))
    return f"config/{name}"


@pytest.mark.parametrize("tagged", [
    "!!python/object/apply:os.system ['touch executed']",
    "!!python/object:collections.OrderedDict {}",
    "!!python/tuple [1, 2]",
])
def test_a_tagged_config_file_is_refused_before_anything_runs(workdir, tagged):
    path = demo_with(workdir, "tagged.yaml", "seed: 1234", f"seed: {tagged}")
    line = (workdir / path).read_text().splitlines().index(f"seed: {tagged}") + 1
    result = snakemake(workdir, "-c1", "--configfile", path)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    tag = tagged.split()[0]
    assert f"{path}, line {line}: the tag {tag}" in output, output
    assert "nothing was run" in output and "Write a plain YAML value in place of each tag: a number" in output
    assert "not mix whitespace and tab" not in output.replace("'not valid JSON or YAML ... tab indentation'", "")
    assert "Traceback" not in output and "Job stats" not in output
    assert not (workdir / "results").exists() and not (workdir / "executed").exists()


def test_a_string_that_contains_python_tag_text_is_no_tag_and_runs(workdir):
    path = demo_with(workdir, "plain.yaml", "    split: test",
                     "    split: 'test !!python/object/apply:os.system [x]'  # !!python/tuple in a comment")
    assert yaml.safe_load((workdir / path).read_text())["datasets"]["synthetic"]["split"].endswith("[x]")
    result = snakemake(workdir, "-n", "--configfile", path)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert planned_jobs(output).get("generate"), output[-3000:]
    assert "refused before Snakemake reads" not in output
