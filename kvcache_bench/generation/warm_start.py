"""Warm start: a CPU job runs in a process forked from one that has imported torch, transformers and kvpress.

On the demo's 2 CPU cores a generate job spent most of its time starting Python and importing those
libraries, not generating. With ``generation.warm_start`` each job is still its own Snakemake job, with its
own files, log, manifest and rerun decision; only the imports are shared:

  * the job's thin client (scripts/generate.py, which does not import torch) sends the job to a server
    over a Unix socket, starting the server first if none is listening;
  * the server forks a child per job: every child starts from the same freshly imported state (nothing one
    job does reaches the next), takes the job's working directory and environment, writes to the job's log,
    and leaves with ``os._exit`` (no interpreter teardown either);
  * one server per (checkout, Python, package code, import-time environment): an edit to the package starts
    a new one; a server idle for ``IDLE_SECONDS`` exits.

GPU jobs keep their own process: CUDA state and GPU pinning belong to one process. So do jobs a cluster
scheduler runs: a server started inside one job's allocation dies with it (``applies_to``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from kvcache_bench.workflow import ScriptJob

IDLE_SECONDS = 120
START_TIMEOUT_SECONDS = 600
# Read when a library is imported, so a server serves only clients that agree on them.
IMPORT_TIME_ENV_PREFIXES = ("HF_", "TRANSFORMERS_", "TORCH", "PYTORCH", "CUDA", "OMP_", "MKL_", "PYTHON", "KVCACHE_BENCH_")
SCHEDULER_JOB_VARIABLES = ("SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID")


def applies_to(job) -> bool:
    """Warm start is asked for, the model runs on the CPU, and no cluster scheduler runs this job."""
    return (
        bool(getattr(job.params, "warm_start", False))  # off when a command line leaves it out
        and str(job.params.model_settings["device"]).startswith("cpu")
        and not any(os.environ.get(name) for name in SCHEDULER_JOB_VARIABLES)
    )


def preload() -> None:
    """What a generate job imports, imported once in the server."""
    importlib.import_module("kvcache_bench.generation.job")
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM  # noqa: F401

    from kvcache_bench.methods.registry import import_kvpress

    import_kvpress()


def socket_path(key: str) -> Path:
    environment = sorted((k, v) for k, v in os.environ.items() if k.startswith(IMPORT_TIME_ENV_PREFIXES))
    identity = json.dumps([os.getcwd(), sys.executable, key, environment])
    directory = Path(tempfile.gettempdir()) / f"kvcache-bench-warm-{os.getuid()}"
    directory.mkdir(mode=0o700, exist_ok=True)
    return directory / f"{hashlib.sha256(identity.encode()).hexdigest()[:20]}.sock"


def _send(connection: socket.socket, message: dict) -> None:
    data = json.dumps(message).encode()
    connection.sendall(len(data).to_bytes(8, "big") + data)


def _receive(connection: socket.socket) -> dict | None:
    """The next message, or None when the other side closed first."""

    def exactly(n: int) -> bytes | None:
        chunks = b""
        while len(chunks) < n:
            chunk = connection.recv(n - len(chunks))
            if not chunk:
                return None
            chunks += chunk
        return chunks

    header = exactly(8)
    body = exactly(int.from_bytes(header, "big")) if header else None
    return json.loads(body) if body is not None else None


def _job_as_dict(job) -> dict:
    return {
        "input": {name: value for name, value in job.input.items()},
        "output": {name: value for name, value in job.output.items()},
        "params": {name: value for name, value in job.params.items()},
        "wildcards": {name: value for name, value in job.wildcards.items()},
        "log": [str(path) for path in job.log],
        "threads": int(job.threads),
    }


@contextlib.contextmanager
def _server_lock(path: Path):
    """Held while a client connects or starts a server, and while an idle server leaves."""
    with open(path.with_suffix(".lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _connect(path: Path) -> socket.socket:
    """A connection to the server at ``path``, starting one first if none is listening."""
    with _server_lock(path):
        with contextlib.suppress(FileNotFoundError, ConnectionRefusedError):
            return _open(path)
        server_log = path.with_suffix(".log")
        with open(server_log, "w") as log:
            server = subprocess.Popen(
                [sys.executable, "-m", "kvcache_bench.generation.warm_start", str(path)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while True:
            with contextlib.suppress(FileNotFoundError, ConnectionRefusedError):
                return _open(path)
            if server.poll() is not None:
                raise RuntimeError(f"the warm-start server exited while starting:\n{server_log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                server.kill()
                raise TimeoutError(f"the warm-start server did not start in {START_TIMEOUT_SECONDS} s ({server_log})")
            time.sleep(0.05)


def _open(path: Path) -> socket.socket:
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(str(path))
    except OSError:
        connection.close()
        raise
    return connection


def run_warm(job, target: str, key: str) -> None:
    """Run ``target`` ("module:function", called with the job) in a warm process; raise if it failed."""
    request = {"target": target, "job": _job_as_dict(job), "cwd": os.getcwd(), "env": dict(os.environ)}
    path = socket_path(key)
    for _ in range(3):
        with _connect(path) as connection:
            _send(connection, request)
            if _receive(connection) is None:
                continue  # the server was leaving, idle, and never took the job: start or find another
            reply = _receive(connection)
        if reply is None:
            raise RuntimeError("the warm process running this job died; see the job's log")
        if not reply["ok"]:
            raise RuntimeError(f"the job failed in its warm process:\n{reply['error']}")
        return
    raise RuntimeError(f"no warm-start server took the job ({path})")


def _exit_when_client_leaves(connection: socket.socket) -> None:
    """A job whose client was killed (Snakemake stopped it) must not write its outputs afterwards."""
    with contextlib.suppress(OSError):
        if connection.recv(1) == b"":
            os._exit(1)


def _run_one(connection: socket.socket) -> None:
    """In a forked child: become the job's process, run it, report, and leave without teardown."""
    status = 1
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the job's own subprocesses report their exit status
    try:
        request = _receive(connection)
        _send(connection, {"accepted": True})
        threading.Thread(target=_exit_when_client_leaves, args=(connection,), daemon=True).start()
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        job = ScriptJob(**request["job"])
        if len(job.log):
            log = os.open(job.log[0], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.dup2(log, 1)
            os.dup2(log, 2)
        module, function = request["target"].split(":")
        getattr(importlib.import_module(module), function)(job)
        _send(connection, {"ok": True})
        status = 0
    except BaseException:
        with contextlib.suppress(Exception):
            _send(connection, {"ok": False, "error": traceback.format_exc()})
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(status)


def serve(path: Path, idle_seconds: float = IDLE_SECONDS) -> None:
    preload()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped as they exit
    path.unlink(missing_ok=True)  # a dead server's socket: the starting client holds the lock
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(64)
    listener.settimeout(idle_seconds)
    print(f"warm-start server {os.getpid()} listening on {path}", flush=True)
    while True:
        try:
            connection, _ = listener.accept()
        except TimeoutError:
            with _server_lock(path):
                listener.close()
                path.unlink(missing_ok=True)
            return
        connection.settimeout(None)
        if os.fork() == 0:
            listener.close()
            _run_one(connection)
        connection.close()


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
