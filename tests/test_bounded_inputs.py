"""Inputs that cannot be meant are refused at once, naming the setting: a YAML alias bomb, retentions that make
unreadable paths, seeds no generator takes, counts past any study's size (issue 27's crashes and hangs)."""

from __future__ import annotations

import copy
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
