"""One GPU per local job: concurrent jobs get different GPUs, crashes free theirs, schedulers are obeyed."""

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from kvcache_bench.runtime import gpus

REPO = Path(__file__).resolve().parents[1]

# A job: claims GPU(s) like scripts/generate.py does, reports what it got, holds them, then exits.
JOB = textwrap.dedent(
    """
    import json, os, sys, time
    from kvcache_bench.runtime.gpus import pin_gpus
    count, wanted, hold, lock_dir = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    environ = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID")}
    if len(sys.argv) > 5:
        environ["CUDA_VISIBLE_DEVICES"] = sys.argv[5]
    pin = pin_gpus(wanted, environ=environ, count=count, lock_dir=lock_dir, timeout=60)
    start = time.time()
    print(json.dumps({"devices": pin.devices, "visible": environ.get("CUDA_VISIBLE_DEVICES"),
                      "start": start}), flush=True)
    time.sleep(hold)
    print(json.dumps({"end": time.time()}), flush=True)
    """
)


def start_job(lock_dir, count, hold, wanted=1, pool=None):
    argv = [sys.executable, "-c", JOB, str(count), str(wanted), str(hold), str(lock_dir)]
    if pool is not None:
        argv.append(pool)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def finish(job, already_claimed=None):
    out, err = job.communicate(timeout=90)
    assert job.returncode == 0, err
    records = [already_claimed] if already_claimed else []
    records += [json.loads(line) for line in out.splitlines()]
    first, last = records
    return {**first, **last}


def claimed(job):
    """Wait for a running job to report its claim (without waiting for it to end)."""
    line = job.stdout.readline()
    assert line, job.stderr.read()
    return json.loads(line)


def test_concurrent_jobs_never_share_a_gpu_and_all_gpus_get_used(tmp_path):
    jobs = [start_job(tmp_path, count=3, hold=0.6) for _ in range(7)]
    runs = [finish(job) for job in jobs]
    assert all(len(run["devices"]) == 1 and run["visible"] == run["devices"][0] for run in runs)
    for i, a in enumerate(runs):
        for b in runs[i + 1 :]:
            overlapping = a["start"] < b["end"] and b["start"] < a["end"]
            assert not (overlapping and a["devices"] == b["devices"]), (a, b)
    assert {run["devices"][0] for run in runs} == {"0", "1", "2"}
    # 7 jobs of 0.6 s on 3 GPUs: they ran three at a time, not one after another
    assert max(run["end"] for run in runs) - min(run["start"] for run in runs) < 7 * 0.6


def test_a_killed_job_frees_its_gpu(tmp_path):
    holder = start_job(tmp_path, count=1, hold=120)
    assert claimed(holder)["devices"] == ["0"]
    with pytest.raises(TimeoutError):
        gpus.claim_gpus(1, candidates=["0"], lock_dir=str(tmp_path), timeout=0.5)
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    got, handles = gpus.claim_gpus(1, candidates=["0"], lock_dir=str(tmp_path), timeout=5)
    assert got == ["0"]
    for handle in handles:
        handle.close()


def test_a_waiting_job_takes_the_gpu_freed_by_a_finished_one(tmp_path):
    first = start_job(tmp_path, count=1, hold=1.0)
    first_claim = claimed(first)
    assert first_claim["devices"] == ["0"]
    second = finish(start_job(tmp_path, count=1, hold=0))
    first_run = finish(first, first_claim)
    assert second["devices"] == ["0"]
    assert second["start"] >= first_run["end"] - 0.05


def test_a_multi_gpu_job_takes_all_or_nothing(tmp_path):
    holder = start_job(tmp_path, count=2, hold=120)
    assert claimed(holder)["devices"] == ["0"]
    with pytest.raises(TimeoutError):
        gpus.claim_gpus(2, candidates=["0", "1"], lock_dir=str(tmp_path), timeout=0.5)
    # the waiting two-GPU claim must not have kept GPU 1 for itself
    got, handles = gpus.claim_gpus(1, candidates=["0", "1"], lock_dir=str(tmp_path), timeout=1)
    assert got == ["1"]
    for handle in handles:
        handle.close()
    holder.kill()
    holder.wait(timeout=30)
    assert finish(start_job(tmp_path, count=2, hold=0, wanted=2))["devices"] == ["0", "1"]


def test_scheduler_assigned_gpu_is_kept_and_nothing_is_locked(tmp_path):
    environ = {"CUDA_VISIBLE_DEVICES": "3", "SLURM_JOB_ID": "42"}
    pin = gpus.pin_gpus(1, environ=environ, count=8, lock_dir=str(tmp_path))
    assert (pin.devices, pin.source, environ["CUDA_VISIBLE_DEVICES"]) == (["3"], "scheduler", "3")
    # a job that asked SLURM for two GPUs keeps both
    environ = {"CUDA_VISIBLE_DEVICES": "0,1", "SLURM_JOB_ID": "43"}
    assert gpus.pin_gpus(2, environ=environ, count=8, lock_dir=str(tmp_path)).devices == ["0", "1"]
    assert environ["CUDA_VISIBLE_DEVICES"] == "0,1"
    # inside an allocation that hides GPUs by cgroup (no CUDA_VISIBLE_DEVICES): no guessing
    environ = {"SLURM_JOB_ID": "44"}
    assert gpus.pin_gpus(1, environ=environ, count=8, lock_dir=str(tmp_path)).source == "scheduler"
    assert environ == {"SLURM_JOB_ID": "44"}
    assert list(tmp_path.iterdir()) == []


def test_local_jobs_inside_a_multi_gpu_allocation_split_it_with_job_specific_locks(tmp_path, monkeypatch):
    monkeypatch.setenv("KVCACHE_BENCH_GPU_LOCK_DIR", str(tmp_path / "locks"))
    first = {"CUDA_VISIBLE_DEVICES": "0,1", "SLURM_JOB_ID": "45"}
    second = dict(first)
    assert gpus.pin_gpus(1, environ=first).devices == ["0"]
    assert gpus.pin_gpus(1, environ=second, timeout=1).devices == ["1"]
    assert (first["CUDA_VISIBLE_DEVICES"], second["CUDA_VISIBLE_DEVICES"]) == ("0", "1")
    assert [p.name for p in tmp_path.iterdir()] == ["locks-job45"]
    for handle in gpus._held_lock_files[-2:]:
        handle.close()


def test_user_listed_gpus_are_the_pool_to_pick_from(tmp_path):
    first = start_job(tmp_path, count=8, hold=120, pool="5,6")
    assert claimed(first)["devices"] == ["5"]
    assert finish(start_job(tmp_path, count=8, hold=0, pool="5,6"))["visible"] == "6"
    first.kill()
    first.wait(timeout=30)


def test_machine_without_gpus_and_cpu_jobs_are_left_alone(tmp_path):
    environ = {}
    pin = gpus.pin_gpus(1, environ=environ, count=0, lock_dir=str(tmp_path))
    assert (pin.devices, pin.source, environ) == ([], "none", {})
    cpu_job = SimpleNamespace(resources={"gpu": 1}, params=SimpleNamespace(model={"device": "cpu"}))
    assert gpus.pin_gpus_for_job(cpu_job).source == "none"
    no_gpu_job = SimpleNamespace(resources={"_cores": 1}, params=SimpleNamespace())
    assert gpus.pin_gpus_for_job(no_gpu_job).source == "none"


def test_job_pin_sets_cuda_visible_devices_and_traces_the_claim(tmp_path, monkeypatch):
    trace = tmp_path / "trace.jsonl"
    code = textwrap.dedent(
        """
        import os
        from types import SimpleNamespace
        from kvcache_bench.runtime.gpus import pin_gpus_for_job
        job = SimpleNamespace(resources={"gpu": 1}, params=SimpleNamespace(model={"device": "auto"}),
                              output=["results/predictions/x.jsonl"])
        pin_gpus_for_job(job)
        print(os.environ["CUDA_VISIBLE_DEVICES"], os.environ["CUDA_DEVICE_ORDER"])
        """
    )
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID")}
    env.update(PYTHONPATH=str(REPO), KVCACHE_BENCH_GPU_COUNT="2", KVCACHE_BENCH_GPU_LOCK_DIR=str(tmp_path / "locks"),
               KVCACHE_BENCH_GPU_TRACE=str(trace))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "PCI_BUS_ID"]
    (record,) = [json.loads(line) for line in trace.read_text().splitlines()]
    assert record["devices"] == ["0"] and record["output"] == "results/predictions/x.jsonl"
    assert record["claimed_at"] <= record["released_at"]


def local_profile_resources(monkeypatch, **environ):
    from snakemake.profiles import ProfileConfigFileParser

    monkeypatch.chdir(REPO)
    for name in ("CUDA_VISIBLE_DEVICES", "KVCACHE_BENCH_GPU_COUNT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    with open(REPO / "profiles" / "local" / "config.yaml") as handle:
        return ProfileConfigFileParser().parse(handle)["resources"]


def test_local_profile_allows_one_generation_job_per_gpu_present(monkeypatch):
    assert local_profile_resources(monkeypatch, KVCACHE_BENCH_GPU_COUNT="4") == ["gpu=4"]
    assert local_profile_resources(monkeypatch, KVCACHE_BENCH_GPU_COUNT="4", CUDA_VISIBLE_DEVICES="1,3") == ["gpu=2"]
    # no GPU: generation runs on CPU, limited only by --cores
    assert local_profile_resources(monkeypatch, KVCACHE_BENCH_GPU_COUNT="0") == [f"gpu={os.cpu_count()}"]


@pytest.mark.slow
def test_multigpu_check_rehearsal_runs_two_generation_jobs_at_once_on_different_gpus(tmp_path):
    """tools/gpu/multigpu_check.sh end to end on CPU, with 2 fake GPUs: the same plumbing as on the GPU box."""
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID")}
    env.update(REHEARSAL="1", GPUS="2", OUT=str(out), PYTHON=sys.executable,
               PATH=os.path.dirname(sys.executable) + os.pathsep + env["PATH"])
    result = subprocess.run(["bash", "tools/gpu/multigpu_check.sh"], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:] + (out / "snakemake.log").read_text()[-3000:]
    report = json.loads((out / "multigpu_report.json").read_text())
    jobs = report["jobs"]
    assert sorted(job["locked_gpu_index"] for job in jobs) == [["0"], ["1"]]
    assert report["seconds_all_jobs_overlapped"] > 0
    assert all("/predictions/" in job["output"] for job in jobs)
    log_lines = (out / "gpu_log_lines.txt").read_text()
    assert "CUDA_VISIBLE_DEVICES=0 (lock" in log_lines and "CUDA_VISIBLE_DEVICES=1 (lock" in log_lines
    assert not (REPO / "multigpu-out").exists()
