"""Inputs that cannot be meant are refused at once, naming the setting: a YAML alias bomb, retentions that make
unreadable paths, seeds no generator takes, counts past any study's size (issue 27's crashes and hangs); data rows and
files past their bounds, naming the file, the line, the size and the bound (issue 51)."""

from __future__ import annotations

import copy
import json
import time

import pytest
import yaml
from conftest import REPO, run_snakemake
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from kvcache_bench.study.config_files import ConfigFileError, read_config_file

SCHEMA = str(REPO / "schemas/config.schema.yaml")


def alias_bomb(levels: int) -> str:
    """A YAML 'billion laughs': each level a list of nine aliases of the one before (9**levels values)."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_in_well_under_a_second(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(alias_bomb(9))  # 387 million values; it once grew a run to 2.4 GB without a word
    started = time.monotonic()
    with pytest.raises(ConfigFileError, match=r"bomb.yaml: its aliases \(\*name\) expand to more than 100,000 values"):
        read_config_file(bomb)
    assert time.monotonic() - started < 1.0


def test_ordinary_aliases_still_load(tmp_path):
    config = tmp_path / "anchors.yaml"
    config.write_text("shared: &shared {window_size: 8}\nmethod_kwargs: {snapkv: *shared, pyramidkv: *shared}\n")
    assert read_config_file(config)["method_kwargs"]["pyramidkv"] == {"window_size": 8}


def test_a_bomb_given_as_configfile_stops_snakemake_at_parse(tmp_path):
    workdir = tmp_path / "workflow"
    from conftest import copy_workflow

    copy_workflow(workdir)
    (workdir / "config/bomb.yaml").write_text(yaml.safe_dump(yaml.safe_load((REPO / "config/demo.yaml").read_text())) + alias_bomb(9))
    result = run_snakemake(workdir, "-n", "--configfile", "config/bomb.yaml", timeout=120)
    assert result.returncode != 0
    assert "its aliases (*name) expand to more than 100,000 values" in result.stdout + result.stderr


def _demo() -> dict:
    return yaml.safe_load((REPO / "config/demo.yaml").read_text())


OUT_OF_BOUNDS = [
    ("retention of 1e-300 (a 332-character path component)", lambda c: c.update(retentions=[1.0e-300]), "1e-300 is less than the minimum of 0.0001"),
    ("seed past 2^32 - 1", lambda c: c.update(seed=2**40), "is greater than the maximum of 4294967295"),
    ("negative seed", lambda c: c.update(seed=-1), "is less than the minimum of 0"),
    ("a million-row decode batch", lambda c: c.update(decode_batch_sizes=[10**6]), "is greater than the maximum of 4096"),
    ("a billion bootstrap resamples", lambda c: c.update(analysis={"bootstrap_resamples": 10**9}), "is greater than the maximum of 1000000"),
    ("max_new_tokens of 10^9", lambda c: c.update(generation={"max_new_tokens": {"synthetic_qa": 10**9}}), "is greater than the maximum of 1000000"),
]


@pytest.mark.parametrize("case, change, message", OUT_OF_BOUNDS, ids=[c[0] for c in OUT_OF_BOUNDS])
def test_a_setting_past_its_bound_is_refused_naming_the_bound(case, change, message):
    config = _demo()
    validate(copy.deepcopy(config), SCHEMA)  # the demo itself is within every bound
    change(config)
    with pytest.raises(WorkflowError, match=message.replace("(", r"\(").replace(")", r"\)")):
        validate(config, SCHEMA)


def test_every_committed_config_is_within_the_bounds():
    for path in sorted(REPO.glob("config/*.yaml")) + [REPO / "config.yaml"]:
        config = yaml.safe_load(path.read_text())
        if "models" in config:  # a whole study (not a targets-only file given before it)
            validate(config, SCHEMA)


def test_a_number_list_typed_on_the_command_line_is_named_with_what_to_write_instead():
    """`--config retentions=[0.25]` reaches the config as ['0.25'] (Snakemake passes a list's items as text): the
    refusal says so and how to write the list, where the schema would only say '0.25' is not a number."""
    from kvcache_bench.study.config_files import CommandLineConfigError, refuse_numbers_as_text

    schema = yaml.safe_load((REPO / "schemas/config.schema.yaml").read_text())
    with pytest.raises(CommandLineConfigError, match=r"--config retentions=\[\.\.\.\] gave the list \['0.25'\]") as refused:
        refuse_numbers_as_text({"retentions": ["0.25"]}, schema)
    assert "echo 'retentions: [0.25]' > my-retentions.yaml" in str(refused.value)
    with pytest.raises(CommandLineConfigError, match="decode_batch_sizes takes whole numbers"):
        refuse_numbers_as_text({"decode_batch_sizes": ["1", "32"]}, schema)
    # text where the schema takes text, and numbers where it takes numbers, pass
    refuse_numbers_as_text({"methods": ["full_cache", "snapkv"], "retentions": [0.25], "seed": "7"}, schema)


# ------------------------------------------------------------------ data rows and files (issue 51, case 5)
# Before: a local JSONL with one 200 MB row passed the data job, and a model worker tokenising it was killed by the
# kernel at 11.6 GB, 287 s later, the job saying only that its worker had died. A row just past the bound (32 MiB +
# 1 byte: 32 MB on disk, written in a fraction of a second) is enough to show the refusal.

GOOD_ROW = {"input": "what is it?", "context": "a long document " * 20, "answers": ["it"], "length": 60, "_id": "r0"}
# The bounds as the docs state them (kvcache_bench/study/input_bounds.py holds them; the test below says they agree)
MAX_ROW_BYTES, MAX_DATA_FILE_BYTES = 32 * 2**20, 4 * 2**30


def test_the_bounds_are_the_documented_ones():
    from kvcache_bench.study import input_bounds

    assert (input_bounds.MAX_ROW_BYTES, input_bounds.MAX_DATA_FILE_BYTES) == (MAX_ROW_BYTES, MAX_DATA_FILE_BYTES)


def _row_of_bytes(size: int, **fields) -> bytes:
    """A row whose JSONL line is exactly ``size`` bytes (its context padded with ASCII)."""
    row = {**GOOD_ROW, **fields, "context": ""}
    padding = size - len(json.dumps(row).encode())
    return json.dumps({**row, "context": "x" * padding}).encode()


def _local_rows(path, *lines: bytes):
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def test_a_row_just_past_its_bound_is_refused_naming_file_line_size_and_bound(tmp_path):
    from kvcache_bench.data.longbench import DataRowError, load_longbench_rows

    path = _local_rows(tmp_path / "qasper.jsonl", json.dumps(GOOD_ROW).encode(), _row_of_bytes(MAX_ROW_BYTES + 1, _id="r1"))
    started = time.monotonic()
    with pytest.raises(DataRowError) as refused:
        load_longbench_rows("qasper", local_path=str(path))
    assert str(refused.value).startswith(
        f"{path}, line 2: the row (its JSONL line) is 33,554,433 bytes (32.0 MiB); a row may be at most 33,554,432 "
        "bytes (32.0 MiB, kvcache_bench/study/input_bounds.py"
    )
    assert "Shorten or remove the row" in str(refused.value)
    assert time.monotonic() - started < 5  # measured in blocks, never parsed


def test_a_row_at_its_bound_is_read(tmp_path):
    from kvcache_bench.data.longbench import load_longbench_rows, normalise_rows

    path = _local_rows(tmp_path / "qasper.jsonl", _row_of_bytes(MAX_ROW_BYTES))
    [row] = normalise_rows(load_longbench_rows("qasper", local_path=str(path)), "qasper", None)
    assert len(row["context"]) > 33_000_000


def test_a_parquet_rows_text_past_its_bound_is_refused_naming_file_and_row(tmp_path):
    """Parquet is read by datasets whole, so its rows are measured after loading, before anything is written."""
    import pandas as pd

    from kvcache_bench.data.longbench import DataRowError, load_longbench_rows, normalise_rows

    path = tmp_path / "qasper.parquet"
    pd.DataFrame([GOOD_ROW, {**GOOD_ROW, "_id": "r1", "context": "é" * (MAX_ROW_BYTES // 2)}]).to_parquet(path)
    with pytest.raises(DataRowError) as refused:
        normalise_rows(load_longbench_rows("qasper", local_path=str(path)), "qasper", None)
    # 16 Mi two-byte characters of context, and the question, the reference and the id: 11 + 2 + 2 bytes
    assert f"{path}, row 2: the row's text is 33,554,447 bytes (32.0 MiB); a row may be at most 33,554,432" in str(refused.value)


def test_a_data_file_past_its_bound_is_refused_at_parse_by_its_size(tmp_path):
    """A sparse file: 4 GiB + 1 byte by its size, none of it on disk; the parse refuses it before hashing it."""
    from kvcache_bench.data.longbench import DataRowError, read_local_jsonl_rows
    from kvcache_bench.study.config_checks import study_config_problems

    path = tmp_path / "qasper.jsonl"
    with open(path, "wb") as handle:
        handle.truncate(MAX_DATA_FILE_BYTES + 1)
    config = _demo()
    config["datasets"] = {"mine": {"source": "local", "local_path": str(path), "tasks": ["qasper"]}}
    started = time.monotonic()
    [problem] = study_config_problems(config, REPO)
    assert problem.startswith(
        f"datasets.mine.local_path: {path} is 4,294,967,297 bytes (4.00 GiB); a data file may be at most "
        "4,294,967,296 bytes (4.00 GiB, kvcache_bench/study/input_bounds.py"
    )
    with pytest.raises(DataRowError, match="is 4,294,967,297 bytes"):  # the data job, run by hand, says the same
        read_local_jsonl_rows(path)
    assert time.monotonic() - started < 1


def test_a_workflow_with_an_oversized_row_stops_in_its_data_job_before_any_model_loads(tmp_path):
    from conftest import copy_workflow


    workdir = copy_workflow(tmp_path / "workflow")
    data = _local_rows(tmp_path / "qasper.jsonl", json.dumps(GOOD_ROW).encode(), _row_of_bytes(MAX_ROW_BYTES + 1, _id="r1"))
    config = _demo()
    config.pop("perf")
    config.update(methods=["full_cache"], retentions=[0.5], question_modes=["question_aware"], batch_size_overrides={})
    config["datasets"] = {"mine": {"source": "local", "local_path": str(data), "tasks": ["qasper"]}}
    (workdir / "config/case.yaml").write_text(yaml.safe_dump(config))
    result = run_snakemake(workdir, "--cores", "1", "--configfile", "config/case.yaml", timeout=300)
    assert result.returncode != 0
    log = (workdir / "logs/download_dataset/mine/qasper.log").read_text()
    assert f"{data}, line 2: the row (its JSONL line) is 33,554,433 bytes" in log
    assert not (workdir / "results/data/mine/qasper.jsonl").exists()
    assert not (workdir / "results/predictions").exists() and not (workdir / "logs/model_workers").exists()
