"""Inputs that used to end in a library's traceback mid-job, or run on with wrong numbers (issue 27 item 6): each is
refused naming the config key and what to change, at parse where the parse can tell, else in the job before any
model loads. In-process cases call the check the parse calls; two run `snakemake -n` on a copy of the workflow."""

from __future__ import annotations

import jsonschema
import pytest
import torch
import yaml
from conftest import REPO, copy_workflow
from test_bad_inputs import run_with, small_config

from kvcache_bench.engine.loading import ModelSettings, ModelUnavailableError, load_for_settings
from kvcache_bench.methods.constructions import PressImportError, resolve_class
from kvcache_bench.study.config_checks import study_config_problems
from kvcache_bench.study.setting_checks import (
    jobs_run_here,
    missing_gpu_problem,
    perf_nothing_to_measure,
    validation_error_message,
    visible_gpu_count,
)

KVPRESS_VERSION = __import__("importlib.metadata").metadata.version("kvpress")


def demo() -> dict:
    config = yaml.safe_load((REPO / "config/demo.yaml").read_text())
    config["generation"]["device"] = "auto"
    return config


def flash(config):
    config["models"]["canary"]["attn_implementation"] = "flash_attention_2"


def flash_on_cpu(config):
    flash(config)
    config["generation"]["device"] = "cpu"


def liger_on_cpu(config):
    config["models"]["canary"]["kernels"] = "liger"
    config["generation"]["device"] = "cpu"


def random_seed(value):
    def change(config):
        config["method_kwargs"]["random"] = {"seed": value}

    return change


def custom_seed(config):
    config["custom_methods"] = {"my_random": {"press": "RandomPress", "kwargs": {"seed": "a"}}}


def hub_without_id(config):
    config["datasets"]["hubby"] = {"source": "hub", "tasks": ["qasper"]}


def fake_parquet(tmp_path):
    def change(config):
        (tmp_path / "rows.parquet").write_text('{"input": "a text file renamed"}\n')
        config["datasets"]["mine"] = {"source": "local", "local_path": str(tmp_path / "rows.parquet"), "tasks": ["qasper"]}

    return change


def unknown_press(config):
    config["custom_methods"] = {"mine": {"press": "SnapKVPresss"}}


# (case, config change, what the user must read); each used to pass the parse
PARSE_CASES = [
    ("flash_attention_2 on the CPU", flash_on_cpu,
     "models.canary.attn_implementation is flash_attention_2, but generation.device is 'cpu': FlashAttention runs on "
     "CUDA GPUs only"),
    ("flash_attention_2 without flash_attn", flash,
     "models.canary.attn_implementation is flash_attention_2, but the flash_attn package is not installed"),
    ("Liger's kernels on the CPU", liger_on_cpu,
     "models.canary.kernels is liger, but generation.device is 'cpu': Liger-Kernel's Triton kernels run on CUDA GPUs only"),
    ("a press seed that is text", random_seed("a"), "method_kwargs.random.seed is 'a': a seed is a whole number"),
    ("a press seed that is a number with a point", random_seed(1.5), "method_kwargs.random.seed is 1.5"),
    ("a custom press's seed that is text", custom_seed, "custom_methods.my_random.kwargs.seed is 'a'"),
    ("source hub without hub_id", hub_without_id, "datasets.hubby has source: hub but no hub_id"),
    ("an unknown kvpress press", unknown_press, f"custom_methods.mine.press: kvpress {KVPRESS_VERSION} has no press"),
]


@pytest.mark.parametrize("case, change, message", PARSE_CASES, ids=[c[0] for c in PARSE_CASES])
def test_a_library_error_is_named_at_parse(case, change, message):
    if case == "flash_attention_2 without flash_attn" and __import__("importlib.util").util.find_spec("flash_attn"):
        pytest.skip("flash_attn is installed here")
    config = demo()
    assert not study_config_problems(config, REPO)  # the demo alone passes
    change(config)
    problems = study_config_problems(config, REPO)
    assert any(message in problem for problem in problems), problems


def test_a_text_file_named_parquet_is_named_at_parse(tmp_path):
    config = demo()
    fake_parquet(tmp_path)(config)
    problems = study_config_problems(config, REPO)
    assert any(
        f"datasets.mine.local_path '{tmp_path / 'rows.parquet'}' is not a parquet file" in p for p in problems
    ), problems


def test_an_unknown_press_class_names_the_installed_kvpress():
    with pytest.raises(PressImportError, match=f"kvpress {KVPRESS_VERSION} has no press 'NoSuchPress'"):
        resolve_class("NoSuchPress")


@pytest.mark.parametrize(
    "device, attention, message",
    [
        ("cuda", "sdpa", "generation.device is 'cuda', but torch"),
        ("cpu", "flash_attention_2", "attn_implementation is flash_attention_2, but the model runs on cpu"),
    ],
)
def test_a_device_the_job_cannot_use_is_named_before_any_load(device, attention, message):
    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    settings = ModelSettings(path="does/not-exist-here", max_context_tokens=64, device=device)
    # the path does not exist: reaching the loader would raise another error
    with pytest.raises(ModelUnavailableError, match=message):
        load_for_settings(settings, attn_implementation=attention)


@pytest.mark.parametrize(
    "change, lines, message",
    [
        ({"sed": 3}, 2, "the config's top level: Additional properties are not allowed ('sed' was unexpected)"),
        ({"models": {"canary": {"path": "resources/canary", "dtype": "float33"}}}, 3,
         "config key models.canary.dtype (value 'float33'): 'float33' is not one of"),
    ],
)
def test_a_schema_error_is_a_few_lines(change, lines, message):
    schema = yaml.safe_load((REPO / "schemas/config.schema.yaml").read_text())
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(demo() | change))
    said = validation_error_message(error)
    assert message in said and len(said.splitlines()) == lines, said


def test_perf_all_with_nothing_to_measure_says_so():
    assert "perf.context_lengths is empty" in perf_nothing_to_measure({"perf": {"context_lengths": []}}, 0, 0)
    assert "each of its 2 perf cell(s) is refused" in perf_nothing_to_measure(demo(), 0, 2)
    assert perf_nothing_to_measure(demo(), 3, 0) is None


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return copy_workflow(tmp_path_factory.mktemp("library_errors") / "workflow")


def test_a_dry_run_names_the_schema_error_in_a_few_lines(workdir):
    result, output = run_with(workdir, small_config(workdir, sed=3), "-n")
    assert result.returncode != 0
    assert "Additional properties are not allowed ('sed' was unexpected)" in output
    assert len(output.splitlines()) < 15, output  # was 1,907 lines: the whole schema and config


def test_a_dry_run_of_perf_all_without_perf_names_it(workdir):
    result, output = run_with(workdir, small_config(workdir), "perf_all", "-n")
    assert result.returncode != 0
    assert "perf_all has nothing to measure: perf.context_lengths is empty" in output, output[-3000:]


@pytest.mark.parametrize(
    "argv, profile, here",
    [
        (["snakemake", "-n"], None, True),
        (["snakemake", "--cores", "2", "--executor", "local"], None, True),
        (["snakemake", "--executor", "slurm", "-j", "8"], None, False),
        (["snakemake", "--profile", str(REPO / "profiles/slurm")], None, False),
        (["snakemake", "--profile=" + str(REPO / "profiles/local")], None, True),
        (["snakemake", "-n"], "no/such/profile", False),  # unsure: the jobs' machine is not judged here
    ],
)
def test_where_the_jobs_run_is_read_from_the_command_line_and_profile(argv, profile, here):
    assert jobs_run_here(argv, {"SNAKEMAKE_PROFILE": profile} if profile else {}) is here


@pytest.mark.parametrize(
    "device, environ, refused",
    [("cuda", {"CUDA_VISIBLE_DEVICES": ""}, True), ("cuda:1", {"CUDA_VISIBLE_DEVICES": "0"}, True),
     ("cuda:1", {"CUDA_VISIBLE_DEVICES": "0,1"}, False), ("auto", {"CUDA_VISIBLE_DEVICES": ""}, False)],
)
def test_a_gpu_this_machine_lacks_is_named_at_parse(device, environ, refused):
    config = demo()
    config["generation"]["device"] = device
    problem = missing_gpu_problem(config, lambda: visible_gpu_count(environ, lambda: 8))
    assert (problem is not None) == refused
    if refused:
        assert problem.startswith(f"generation.device is {device!r}, but this machine, where this run's jobs run, has")


def test_a_dry_run_with_a_gpu_the_machine_lacks_names_the_key(workdir):
    config = small_config(workdir)
    config["generation"]["device"] = "cuda:99"
    result, output = run_with(workdir, config, "-n", name="gpu.yaml")
    assert result.returncode != 0 and "generation.device is 'cuda:99', but this machine" in output, output[-3000:]
