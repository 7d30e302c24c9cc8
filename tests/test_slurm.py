"""profiles/slurm: GPU rules get a GPU in the GPU partition, and the demo runs through a real SLURM.

The end-to-end test needs a running SLURM (tools/bootstrap.sh starts one with tools/start_slurm.sh where it runs as root); it skips,
saying so, where there is none.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from conftest import copy_workflow

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "profiles" / "slurm" / "config.yaml"


def parsed_profile(path=PROFILE):
    """The profile as Snakemake reads it: {option: value}, resources as {rule: {name: value}}."""
    from snakemake.profiles import ProfileConfigFileParser

    with open(path) as handle:
        options = ProfileConfigFileParser().parse(handle)

    def value(text):
        try:
            return int(text)
        except ValueError:
            return text.strip("'\"")

    defaults = dict(item.split("=", 1) for item in options.get("default-resources", []))
    per_rule = {}
    for item in options.get("set-resources", []):
        rule_and_name, text = item.split("=", 1)
        rule, name = rule_and_name.split(":")
        per_rule.setdefault(rule, {})[name] = value(text)
    return options, {k: value(v) for k, v in defaults.items()}, per_rule


def profile_variables(path=PROFILE):
    return yaml.safe_load(Path(path).read_text())["__variables__"]


def rules_asking_for_a_gpu():
    """{rule: asks for a GPU}, rules defined under an ``if`` (indented: measure_hardware_rates) included."""
    rules = {}
    for smk in sorted((REPO / "rules").glob("*.smk")):
        text = smk.read_text()
        headers = list(re.finditer(r"^[ \t]*rule (\w+):\n", text, flags=re.M))
        for header, following in zip(headers, headers[1:] + [None]):
            body = text[header.end():following.start() if following else len(text)]
            rules[header.group(1)] = bool(re.search(r"^\s+resources:\n(?:\s{8,}.*\n)*?\s{8,}gpu\s*=", body, flags=re.M))
    return rules


def test_every_gpu_rule_asks_slurm_for_one_gpu_in_the_gpu_partition():
    rules = rules_asking_for_a_gpu()
    gpu_rules = sorted(name for name, wants_gpu in rules.items() if wants_gpu)
    assert "generate" in gpu_rules and "score" in rules and not rules["score"]
    _, defaults, per_rule = parsed_profile()
    variables = profile_variables()
    assert variables["cpu_partition"] != variables["gpu_partition"]
    for rule in gpu_rules:
        wanted = per_rule.get(rule, {})
        assert wanted.get("slurm_partition") == variables["gpu_partition"], rule
        assert wanted.get("gpu") == 1, rule
        assert {"cpus_per_gpu", "mem_mb", "runtime"} <= set(wanted), rule
    # everything else goes to the CPU partition, under the user's account
    assert defaults["slurm_partition"] == variables["cpu_partition"]
    assert defaults["slurm_account"] == variables["account"]
    assert not any("gpu" in resources for rule, resources in per_rule.items() if rule not in gpu_rules)


def sbatch_line(resources, threads=1):
    """The sbatch command the SLURM plugin builds for a job with these resources."""
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    class Resources(dict):
        __getattr__ = dict.__getitem__

    job = SimpleNamespace(resources=Resources(resources), threads=threads)
    params = dict(run_uuid="run", slurm_logfile="log", comment_str="c", workdir=None,
                  account=f" -A {resources['slurm_account']}", partition=f" -p {resources['slurm_partition']}")
    return get_submit_command(job, params) + set_gres_string(job)


def test_profile_turns_into_gpu_and_cpu_sbatch_requests():
    _, defaults, per_rule = parsed_profile()
    variables = profile_variables()
    generate = sbatch_line({**defaults, **per_rule["generate"]})
    assert f"-p {variables['gpu_partition']}" in generate and f"-A {variables['account']}" in generate
    assert "--gpus=1" in generate.split()
    assert f"--cpus-per-gpu={per_rule['generate']['cpus_per_gpu']}" in generate.split()
    assert f"--mem {per_rule['generate']['mem_mb']}" in generate
    score = sbatch_line(defaults)
    assert f"-p {variables['cpu_partition']}" in score and "--gpus" not in score
    assert "--cpus-per-task=1" in score.split()
    with_model = sbatch_line({**defaults, **per_rule["generate"], "gpu_model": "h100"})
    assert "--gpus=h100:1" in with_model.split()


# ----------------------------------------------------------------------------------- real SLURM


def slurm_problem():
    """Why the end-to-end test cannot run here, or None."""
    if not shutil.which("sbatch"):
        return "SLURM is not installed (sbatch not found); start one with: sudo bash tools/start_slurm.sh"
    try:
        states = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=20).stdout
    except (subprocess.SubprocessError, OSError) as error:
        return f"SLURM is not answering ({error})"
    if not set(states.split()) & {"idle", "mix", "alloc"}:
        return f"no usable SLURM node (sinfo states: {states.split() or 'none'}); start it with: sudo bash tools/start_slurm.sh"
    return None


def write_small_demo(repo: Path) -> str:
    """The demo with two cells (one full cache, one evicting) and four examples: same rules, fewer jobs."""
    config = yaml.safe_load((repo / "config" / "demo.yaml").read_text())
    config["methods"] = ["full_cache", "snapkv"]
    config.pop("batch_size_overrides", None)  # one generation job per method
    config["retentions"] = [0.5]
    config["question_modes"] = ["question_aware"]
    config["datasets"]["synthetic"]["num_examples"] = 4
    config["generation"]["device"] = "auto"  # a GPU if the job has one: generation jobs go through GPU pinning
    (repo / "config" / "small-demo.yaml").write_text(yaml.safe_dump(config))
    return "config/small-demo.yaml"


def slurm_site():
    """This cluster's default partition and the user's account (None without accounting)."""
    partitions = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True).stdout.split()
    partition = next((p.rstrip("*") for p in partitions if p.endswith("*")), partitions[0].rstrip("*"))
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True).stdout
    if "accounting_storage/slurmdbd" not in config:
        return partition, None
    user = subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip()
    accounts = subprocess.run(["sacctmgr", "-n", "-P", "list", "assoc", f"user={user}", "format=account"],
                              capture_output=True, text=True).stdout.split()
    return partition, (accounts[0] if accounts else None)


def edit_profile_for_this_cluster(repo: Path, partition: str, account: str | None):
    """What a user does (edit the three variables), plus sizes that fit a 2-CPU CI node."""
    path = repo / "profiles" / "slurm" / "config.yaml"
    text = path.read_text()
    edits = [
        (r'(\n  account: )"[^"]*"', rf'\1"{account or ""}"'),
        (r'(\n  cpu_partition: )"[^"]*"', rf'\1"{partition}"'),
        (r'(\n  gpu_partition: )"[^"]*"', rf'\1"{partition}"'),
        (r"(\n    cpus_per_gpu: )\d+", r"\g<1>1"),
        (r"(\n  mem_mb: )\d+", r"\g<1>1000"),
        (r"(\n    mem_mb: )\d+", r"\g<1>1000"),
    ]
    if account is None:  # no accounting daemon: nothing to validate an account against
        edits.append((r"\n  slurm_account: \?account", ""))
    for pattern, replacement in edits:
        text, count = re.subn(pattern, replacement, text)
        assert count >= 1, f"profile no longer has {pattern!r}"
    path.write_text(text)


def start_snakemake(repo: Path, *args):
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}
    for name in ("CUDA_VISIBLE_DEVICES", "PYTHONPATH"):  # jobs find the package through the Snakefile alone
        env.pop(name, None)
    return subprocess.Popen([sys.executable, "-m", "snakemake", *args], cwd=repo, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finished(run, timeout=900):
    output, _ = run.communicate(timeout=timeout)
    assert run.returncode == 0, output[-8000:]
    return output


def comparable_outputs(repo: Path) -> dict:
    """Every prediction, score and table row, minus wall-clock timings."""
    outputs = {}
    for stage in ("predictions", "scores"):
        for path in sorted((repo / "results" / stage).rglob("*.jsonl")):
            records = [json.loads(line) for line in path.read_text().splitlines()]
            outputs[str(path.relative_to(repo))] = [{k: v for k, v in r.items() if k != "seconds"} for r in records]
    outputs["summary"] = (repo / "results" / "tables" / "summary.csv").read_text()
    return outputs


@pytest.mark.slow
def test_demo_runs_through_real_slurm_with_a_gpu_per_generation_job_and_matches_a_local_run(tmp_path):
    problem = slurm_problem()
    if problem and os.environ.get("KVCACHE_BENCH_REQUIRE_SLURM") == "1":
        pytest.fail(f"CI started SLURM but: {problem}")
    if problem:
        pytest.skip(problem)
    partition, account = slurm_site()
    on_slurm = copy_workflow(tmp_path / "on-slurm")
    local = copy_workflow(tmp_path / "local")
    config = write_small_demo(on_slurm)
    write_small_demo(local)
    edit_profile_for_this_cluster(on_slurm, partition, account)
    target = "results/tables/summary.csv"

    extra = ["--slurm-init-seconds-before-status-checks", "1"]
    if account is None:
        extra += ["--slurm-status-command", "squeue"]
    # the local reference run uses the CPUs while the SLURM run mostly waits on the queue
    local_run = start_snakemake(local, target, "--cores", "2", "--configfile", config)
    log = finished(start_snakemake(on_slurm, target, "--profile", "profiles/slurm", "--configfile", config,
                                   "--verbose", *extra))
    finished(local_run)

    # Every job but the localrules (checks, scores, tables, figures: seconds each) went through sbatch, to the
    # edited partition and account; exactly the GPU jobs asked for a GPU.
    calls = re.findall(r"sbatch call: (sbatch .*)", log)
    rules = [re.search(r"--comment '?rule_([a-z_]+?)(?:_wildcards_|'| )", call).group(1) for call in calls]
    assert sorted(set(rules)) == ["generate", "make_synthetic_dataset"]
    assert rules.count("generate") == 2
    for rule, call in zip(rules, calls):
        assert f"-p {partition}" in call
        assert (f"-A {account}" in call) == (account is not None)
        assert ("--gpus=1" in call.split()) == (rule == "generate"), call

    # ... and SLURM itself ran them, giving each generation job one GPU (gres/gpu=1).
    run_id = re.search(r"SLURM run ID: (\S+)", log).group(1)
    submitted = re.findall(r"has been submitted with SLURM jobid (\d+)", log)
    assert len(submitted) == len(calls)
    if account is not None:
        rows = subprocess.run(["sacct", "-X", "-n", "-P", "--name", run_id, "-o", "JobID,State,AllocTRES"],
                              capture_output=True, text=True, check=True).stdout.splitlines()
        jobs = {row.split("|")[0]: row.split("|")[1:] for row in rows}
        assert set(jobs) == set(submitted)
        assert all(state == "COMPLETED" for state, _ in jobs.values()), jobs
        assert sum("gres/gpu=1" in tres for _, tres in jobs.values()) == 2

    # Inside SLURM, each generation job kept the GPU SLURM gave it (CUDA_VISIBLE_DEVICES) instead of locking one.
    pins = [re.search(r"GPU: (.*)", log.read_text()).group(1) for log in (on_slurm / "logs" / "generate").rglob("*.log")]
    assert len(pins) == 2 and all(re.fullmatch(r"CUDA_VISIBLE_DEVICES=[01] \(scheduler\)", pin) for pin in pins), pins

    assert comparable_outputs(on_slurm) == comparable_outputs(local)
