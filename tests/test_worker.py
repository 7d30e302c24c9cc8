"""Model workers: cells run in a worker write what a fresh process writes, share one load, and fail as loudly."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import REPO

from kvcache_bench.data.synthetic import make_synthetic_rows
from kvcache_bench.files import read_jsonl, write_jsonl_atomic
from kvcache_bench.manifest import write_manifest

MODEL = {"path": str(REPO / "resources/canary"), "dtype": "float32", "attn_implementation": "sdpa",
         "trust_remote_code": False, "max_context_tokens": 4096, "device": "cpu"}


def _params(method, retention, workers, **extra):
    return {"code": "test", "task": "synthetic_qa", "model_settings": MODEL, "method": method, "retention": retention,
            "batch_size": 1, "decode_batch_size": 1, "question_mode": "question_aware", "max_new_tokens": 8,
            "method_kwargs": extra.pop("method_kwargs", {}), "seed": 3, "model_workers": workers, **extra}


def _client_command(tmp_path, name, params):
    return [sys.executable, str(REPO / "scripts/generate.py"), "--input", f"rows={tmp_path / 'rows.jsonl'}",
            "--output", f"predictions={tmp_path / name}.jsonl", "--params", json.dumps(params),
            "--log", str(tmp_path / f"{name}.log")]


ENV = {**os.environ, "PYTHONPATH": str(REPO), "TQDM_DISABLE": "1"}


def _generate(tmp_path, name, params):
    result = subprocess.run(_client_command(tmp_path, name, params), cwd=tmp_path, capture_output=True, text=True,
                            timeout=600, env=ENV)
    return result, tmp_path / f"{name}.jsonl"


def _manifest(path):
    return json.loads(path.with_name(path.name + ".manifest.json").read_text())


def _without_timings(path):
    return [{k: v for k, v in record.items() if "second" not in k} for record in read_jsonl(path)]


def _gone(pid, within=15.0):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


@pytest.fixture
def rows(tmp_path):
    write_jsonl_atomic(tmp_path / "rows.jsonl", make_synthetic_rows(2, seed=5, min_words=40, max_words=60))
    write_manifest(tmp_path / "rows.jsonl", {"rows": "2 synthetic rows"})  # generate refuses data its manifest does not describe
    yield tmp_path / "rows.jsonl"
    for manifest in tmp_path.glob("logs/model_workers/*.manifest.json"):  # workers owned by pytest: not left idling
        with contextlib.suppress(ProcessLookupError):
            os.kill(json.loads(manifest.read_text())["worker"]["pid"], signal.SIGTERM)


def test_cells_in_a_worker_write_what_a_fresh_process_writes_and_share_one_load(tmp_path, rows):
    workers = []
    for method, retention in (("snapkv", 0.5), ("random", 0.25), ("h2o", 0.5)):
        fresh, fresh_out = _generate(tmp_path, f"fresh-{method}", _params(method, retention, False))
        warm, warm_out = _generate(tmp_path, f"worker-{method}", _params(method, retention, True))
        assert fresh.returncode == 0 and warm.returncode == 0, fresh.stderr[-2000:] + warm.stderr[-2000:]
        assert _without_timings(warm_out) == _without_timings(fresh_out)
        assert "worker" not in _manifest(fresh_out)
        workers.append(_manifest(warm_out)["worker"])
        assert f"method={method}" in (tmp_path / f"worker-{method}.log").read_text()  # the job's log, not the worker's
    snapkv, random, h2o = workers
    assert snapkv["pid"] == random["pid"] and (snapkv["load_counted_here"], random["load_counted_here"]) == (True, False)
    assert h2o["pid"] != snapkv["pid"] and h2o["attention"] == "eager"  # another attention: another worker
    logs = sorted(tmp_path.glob("logs/model_workers/*.log"))
    assert len(logs) == 2 and all(log.read_text().count(" ready: ") == 1 for log in logs)


def test_a_cell_that_fails_in_its_worker_fails_its_job_with_the_reason_and_the_next_cell_runs(tmp_path, rows):
    result, out = _generate(tmp_path, "broken", _params("snapkv", 0.5, True, method_kwargs={"no_such_option": 1}))
    assert result.returncode != 0
    assert "the cell failed in its model worker" in result.stderr and "no_such_option" in result.stderr
    assert not out.exists()
    again, out = _generate(tmp_path, "fixed", _params("snapkv", 0.5, True))
    assert again.returncode == 0, again.stderr[-2000:]
    assert _manifest(out)["worker"]["load_counted_here"]  # a fresh worker: the failed one left


def test_a_worker_that_dies_fails_its_job_naming_its_log(tmp_path, rows):
    params = _params("snapkv", 0.5, True, model_settings={**MODEL, "path": str(tmp_path / "no-such-model")})
    result, out = _generate(tmp_path, "missing", params)
    assert result.returncode != 0 and not out.exists()
    assert "the model worker exited while loading" in result.stderr and "logs/model_workers/" in result.stderr


def test_a_worker_leaves_when_the_run_that_started_it_has_ended(tmp_path, rows):
    """A killed (or finished) Snakemake leaves no worker behind holding memory or a GPU."""
    run = f"import subprocess, sys; sys.exit(subprocess.run({_client_command(tmp_path, 'cell', _params('knorm', 0.5, True))!r}).returncode)"
    result = subprocess.run([sys.executable, "-c", run], cwd=tmp_path, capture_output=True, text=True, timeout=600, env=ENV)
    assert result.returncode == 0, result.stderr[-2000:]
    assert _gone(_manifest(tmp_path / "cell.jsonl")["worker"]["pid"])


def _temporary_entries() -> set[str]:
    """Everything of this project's in the system's temporary directory, one level deep."""
    root = Path(tempfile.gettempdir())
    entries = {path.name for path in root.glob("kvcache-bench*")}
    return entries | {f"{d.name}/{f.name}" for d in root.glob("kvcache-bench-workers-*") if d.is_dir() for f in d.iterdir()}


def test_a_worker_leaves_nothing_outside_the_workflow_directory_even_when_killed(tmp_path, rows):
    """Sockets and CPU slot locks once piled up in /tmp (58 -> 61 directories in one run): the socket is now an
    abstract one (no file, gone with its process, kill -9 included) and the slot locks a fixed set in .snakemake/."""
    before = _temporary_entries()
    result, out = _generate(tmp_path, "cell", _params("knorm", 0.5, True))
    assert result.returncode == 0, result.stderr[-2000:]
    worker = _manifest(out)["worker"]["pid"]
    os.kill(worker, signal.SIGKILL)
    assert _gone(worker)
    assert _temporary_entries() - before == set()
    assert [p.name for p in (tmp_path / ".snakemake/kvcache-bench/cpu-slots").iterdir()]  # the slot locks live here
    again, out = _generate(tmp_path, "after-kill", _params("knorm", 0.5, True))  # a killed worker's place is free
    assert again.returncode == 0, again.stderr[-2000:]
    assert _manifest(out)["worker"]["pid"] != worker


def test_workers_are_for_local_jobs_only(monkeypatch):
    from kvcache_bench.runtime.worker import applies_to
    from kvcache_bench.workflow import ScriptJob

    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert applies_to(ScriptJob({}, {}, {"model_workers": True}, [])) and not applies_to(ScriptJob({}, {}, {"model_workers": False}, []))
    monkeypatch.setenv("SLURM_JOB_ID", "42")  # a worker started in one job's allocation would die with that job
    assert not applies_to(ScriptJob({}, {}, {"model_workers": True}, []))


def test_a_job_killed_mid_cell_writes_nothing_and_its_worker_leaves(tmp_path, rows):
    # enough rows that the cell cannot end between its first log line and the kill
    write_jsonl_atomic(rows, make_synthetic_rows(600, seed=5, min_words=200, max_words=300))
    write_manifest(rows, {"rows": "600 synthetic rows"})
    # SIGINT ignored, as in every job of a Snakemake started with nohup or `&` from a script: the worker inherits it,
    # and Python's interrupt of a cell whose client left is a SIGINT (under a nohup'd .ci/run this cell wrote its output)
    client = subprocess.Popen(_client_command(tmp_path, "killed", _params("snapkv", 0.5, True)), cwd=tmp_path, env=ENV,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    log = tmp_path / "killed.log"
    deadline = time.monotonic() + 300
    while "method=snapkv" not in (log.read_text() if log.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.2)  # the worker has started the cell
    client.kill()
    client.wait(timeout=30)
    (manifest,) = tmp_path.glob("logs/model_workers/*.manifest.json")
    assert _gone(json.loads(manifest.read_text())["worker"]["pid"], within=60)
    assert not (tmp_path / "killed.jsonl").exists()


def test_a_worker_killed_by_sigkill_fails_its_job_saying_so_and_what_usually_sends_it(tmp_path, rows):
    """Issue 51: the kernel's OOM killer ended a worker holding 11.6 GB, and its job said only "the model worker
    running this cell died". A SIGKILL from this test stands in for the OOM killer: nothing inside the worker can
    catch either, so what the job says comes from the worker's supervisor, its parent."""
    write_jsonl_atomic(rows, make_synthetic_rows(300, seed=5, min_words=200, max_words=300))
    write_manifest(rows, {"rows": "300 synthetic rows"})
    client = subprocess.Popen(_client_command(tmp_path, "oom", _params("snapkv", 0.5, True)), cwd=tmp_path, env=ENV,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = tmp_path / "oom.log"
    deadline = time.monotonic() + 300
    while "method=snapkv" not in (log.read_text() if log.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.2)  # the worker is running the cell
    (manifest,) = tmp_path.glob("logs/model_workers/*.manifest.json")
    os.kill(json.loads(manifest.read_text())["worker"]["pid"], signal.SIGKILL)
    _, stderr = client.communicate(timeout=120)
    assert client.returncode != 0 and not (tmp_path / "oom.jsonl").exists()
    assert "running this cell died: it was killed by signal 9 (SIGKILL), which no process can catch or log." in stderr
    assert "The kernel's out-of-memory killer is its usual sender" in stderr
    assert re.search(r"Its resident memory peaked at \d+\.\d\d GiB \(VmHWM", stderr)  # what it held, last read
    # where the cgroup's counter is readable, it tells this kill (no OOM) from the kernel's
    record = json.loads(next(tmp_path.glob("logs/model_workers/*.log.exit.json")).read_text())
    if record["oom_kills"] is not None:
        assert record["oom_kills"] == 0 and "Its cgroup counted no out-of-memory kill while it ran" in stderr


EXITS = [
    ("the OOM killer, counted by the cgroup", {"returncode": -9, "peak_rss_bytes": 11.6 * 2**30, "oom_kills": 1,
     "cgroup_events": "/sys/fs/cgroup/job/memory.events", "cgroup_limit_bytes": 12 * 2**30},
     "Its resident memory peaked at 11.60 GiB (VmHWM, read every 0.5 s while it ran). Its cgroup counted 1 "
     "out-of-memory kill(s) while it ran (/sys/fs/cgroup/job/memory.events; its memory limit 12.00 GiB): the OOM "
     "killer ended it."),
    ("a segfault", {"returncode": -11}, "it was ended by signal 11 (SIGSEGV): a crash in native code"),
    ("a scheduler's stop", {"returncode": -15}, "it was stopped by signal 15 (SIGTERM): something asked it to end"),
    ("an exit status", {"returncode": 1, "peak_rss_bytes": 2**30}, "it exited with status 1. Its resident memory peaked at 1.00 GiB"),
]


@pytest.mark.parametrize("case, record, told", EXITS, ids=[c[0] for c in EXITS])
def test_why_a_worker_ended_is_told_from_its_supervisors_record(case, record, told):
    from kvcache_bench.runtime.worker import describe_exit

    assert told in describe_exit(record)
