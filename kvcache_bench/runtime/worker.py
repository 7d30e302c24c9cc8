"""Model workers: the model loaded once per (model settings, attention, GPU), shared by the cells that run there.

A sweep used to pay a process per cell: Python, torch/transformers/kvpress imports, CUDA start and the model
load, seconds to tens of seconds before each cell's few seconds of work. With ``generation.model_workers``
each cell is still its own Snakemake job (its own log, benchmark, outputs, manifest and rerun decision), but
its process is a light client that imports no torch:

  * the client claims its slot through the GPU job entry (``runtime.gpu_job``, ``load=False``): on a GPU,
    the GPU lock (one job per GPU at a time, as before); on the CPU, the first free slot of its worker key;
  * it sends the job to the worker of (checkout, Python, package code, model settings, the method's
    attention, slot, its Snakemake run), starting that worker first if none is listening. A worker of
    another model on the same GPU is stopped first, so a GPU holds one model;
  * the worker runs the cell on its loaded model, writing the job's outputs and manifest, with the job's log
    as its log, and replies. Load and start-up are measured once, in the worker's log and its manifest
    (``logs/model_workers/``), and named in each cell's manifest (``worker``).

Snakemake's own service jobs were tried first (``service()`` output, consumers grouped with it) and dropped:
a needed service job makes every consumer of it "updated by another job", so one changed cell would rerun
every cell of its model (Snakemake 9.27.1, dag.py: only an existing ``ancient`` input is exempt, and a
service output never exists between runs). See docs/model-workers.md.

Failures: a cell that fails is reported to its job with the worker's traceback, and the worker leaves (the
next cell starts a fresh one); a worker that dies fails its job naming its log; a client that is killed
stops its cell before anything is written; a worker leaves when its Snakemake run has ended (killed or not)
or after ``IDLE_SECONDS`` idle. Jobs run by a cluster scheduler keep their own process (``applies_to``).
"""

from __future__ import annotations

import _thread
import contextlib
import hashlib
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

from kvcache_bench.runtime.gpus import SCHEDULER_JOB_VARIABLES, claim_gpus, default_lock_dir
from kvcache_bench.workflow import ScriptJob

IDLE_SECONDS = 60
START_TIMEOUT_SECONDS = 1800  # an 8B model from a slow disk
# Read when a library is imported, so a worker serves only clients that agree on them.
IMPORT_TIME_ENV_PREFIXES = (
    "HF_",
    "TRANSFORMERS_",
    "TORCH",
    "PYTORCH",
    "CUDA",
    "OMP_",
    "MKL_",
    "PYTHON",
    "KVCACHE_BENCH_",
)
CPU_SLOTS = [str(index) for index in range(256)]


def applies_to(job) -> bool:
    """Workers are asked for and no cluster scheduler runs this job (a worker would die with its allocation)."""
    return bool(dict(job.params.items()).get("model_workers")) and not any(
        os.environ.get(v) for v in SCHEDULER_JOB_VARIABLES
    )


def snakemake_run_pid() -> int:
    """The Snakemake process running this job (the nearest ancestor that is one), else this job's parent."""
    pid = os.getppid()
    while pid > 1:
        with contextlib.suppress(OSError):
            if b"snakemake" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return os.getppid()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# What a worker can do for a job, by the job's kind: each writes the job's outputs from the loaded model.
WORK = {
    "generate": ("kvcache_bench.runtime.job", "write_cell_predictions"),
    "probe_padding": ("kvcache_bench.runtime.probes", "write_padding_report"),
}


def worker_settings(job, attention: str | None = None) -> dict:
    """What a worker is for: the model settings and the attention the job runs (by default, what its method needs)."""
    from kvcache_bench.runtime.gpu_job import method_attention, model_params_of

    return {"model": model_params_of(job), "attention": attention or method_attention(job), "code": job.params.code}


def worker_key(settings: dict, slot: str, owner: int) -> str:
    environment = sorted((k, v) for k, v in os.environ.items() if k.startswith(IMPORT_TIME_ENV_PREFIXES))
    identity = json.dumps([os.getcwd(), sys.executable, settings, slot, owner, environment], sort_keys=True)
    return hashlib.sha256(identity.encode()).hexdigest()[:20]


# Where nothing may be left behind: on Linux a worker listens on an abstract socket (no file; gone with the
# process, also after kill -9), elsewhere on a socket file in a per-user temporary directory.
ABSTRACT_SOCKETS = sys.platform.startswith("linux")
# The CPU slot locks: inside the workflow directory, one fixed set per worker key (no directory per run).
CPU_SLOTS_DIR = Path(".snakemake/kvcache-bench/cpu-slots")


def worker_address(key: str) -> str:
    """The worker of ``key``'s socket, written as a command-line argument can carry it ('@' for the abstract
    namespace's leading NUL)."""
    if ABSTRACT_SOCKETS:
        return f"@kvcache-bench-{os.getuid()}-{key}"
    directory = Path(tempfile.gettempdir()) / f"kvcache-bench-workers-{os.getuid()}"
    directory.mkdir(mode=0o700, exist_ok=True)
    return str(directory / f"{key}.sock")


def _bindable(address: str) -> str:
    return "\0" + address[1:] if address.startswith("@") else address


def _key_of(address: str) -> str:
    return address.rsplit("-", 1)[1] if address.startswith("@") else Path(address).stem


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
        "log": [str(path) for path in job.log],
        "threads": int(job.threads),
        "wildcards": {name: value for name, value in (getattr(job, "wildcards", None) or {}).items()},
    }


def _tail(path: Path, characters: int = 3000) -> str:
    return path.read_text(errors="replace")[-characters:] if path.exists() else "(no log)"


def _stop_other_worker_on_gpu(gpu: str, key: str) -> None:
    """A GPU holds one model: the worker of another key there (idle, since we hold the GPU's lock) leaves."""
    resident = Path(default_lock_dir()) / f"gpu-{gpu}.worker"
    with contextlib.suppress(FileNotFoundError, ValueError):
        other = json.loads(resident.read_text())
        if other["key"] != key and _alive(other["pid"]):
            os.kill(other["pid"], signal.SIGTERM)
            deadline = time.monotonic() + 120
            while _alive(other["pid"]) and time.monotonic() < deadline:
                time.sleep(0.1)


def _start_worker(address: str, log_path: Path, settings: dict, owner: int, threads: int) -> subprocess.Popen:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a") as log:
        # its own session: a Snakemake that stops this job's process group leaves the worker to the next cell
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kvcache_bench.runtime.worker",
                address,
                str(log_path),
                json.dumps(settings),
                str(owner),
                str(threads),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )


def _connect(address: str, log_path: Path, start) -> socket.socket:
    """A connection to the worker at ``address``, starting it (``start()``) if none is listening."""
    worker = None
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while True:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(_bindable(address))
            return connection
        except (FileNotFoundError, ConnectionRefusedError):
            connection.close()
        if worker is None:
            worker = start()
        elif worker.poll() is not None:
            raise RuntimeError(
                f"the model worker exited while loading (exit status {worker.returncode}); "
                f"its log {log_path} ends:\n{_tail(log_path)}"
            )
        if time.monotonic() > deadline:
            worker.kill()
            raise TimeoutError(
                f"the model worker did not start in {START_TIMEOUT_SECONDS} s; "
                f"its log {log_path} ends:\n{_tail(log_path)}"
            )
        time.sleep(0.05)


def run_in_worker(job, entered, work: str = "generate", attention: str | None = None) -> dict:
    """Run the job's ``work`` (a cell, or a probe: ``WORK``) in its worker (this process is the light client);
    return the worker's facts. ``attention``: the attention the job runs, when not its method's own."""
    import logging

    if work not in WORK:
        raise ValueError(f"a model worker does {', '.join(WORK)}, not {work!r}")
    settings = worker_settings(job, attention)
    owner = snakemake_run_pid()
    if entered.pin.devices:
        slot, held = ",".join(entered.pin.devices), []
    else:  # CPU: as many workers of one key as its jobs run at once, each serving one job at a time
        # keyed without the run: the workflow directory (in the key) has one Snakemake run at a time
        slots_dir = CPU_SLOTS_DIR / worker_key(settings, "cpu", 0)
        claimed, held = claim_gpus(1, candidates=CPU_SLOTS, lock_dir=str(slots_dir))
        slot = f"cpu{claimed[0]}"
    key = worker_key(settings, slot, owner)
    if entered.pin.devices:
        _stop_other_worker_on_gpu(slot, key)
    address = worker_address(key)
    name = f"{Path(settings['model']['path']).name}-{settings['attention']}-{slot.replace(',', '_')}-{key[:8]}"
    log_path = Path("logs/model_workers") / f"{name}.log"
    start = lambda: _start_worker(address, log_path, settings, owner, int(job.threads))  # noqa: E731
    request = {"job": _job_as_dict(job), "data": entered.data, "work": work}
    with _connect(address, log_path, start) as connection:
        _send(connection, request)
        accepted = _receive(connection)
        reply = _receive(connection) if accepted is not None else None
    for handle in held:
        handle.close()
    if reply is None:
        raise RuntimeError(f"the model worker running this cell died (its log {log_path} ends):\n{_tail(log_path)}")
    if not reply["ok"]:
        raise RuntimeError(f"the cell failed in its model worker ({log_path}):\n{reply['error']}")
    logging.getLogger("kvcache_bench").info("ran in model worker %s (log %s)", reply["worker"]["pid"], log_path)
    return reply["worker"]


# ----------------------------------------------------------------------------- the worker process


class _Cell:
    """One request: its client watched, so a client that leaves stops the cell before it writes anything."""

    def __init__(self, connection: socket.socket):
        self.connection = connection
        self.running = True
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        with contextlib.suppress(OSError):
            while self.connection.recv(1):
                pass
        if self.running:
            _thread.interrupt_main()


def _serve_one(connection: socket.socket, loaded, facts: dict) -> bool:
    """Run one cell; True when the worker may serve another."""
    import importlib

    import torch

    from kvcache_bench.workflow import logging_to

    request = _receive(connection)
    if request is None:
        return True
    _send(connection, {"accepted": True})
    cell = _Cell(connection)
    job = ScriptJob(**request["job"])
    module, function = WORK[request.get("work", "generate")]
    write_outputs = getattr(importlib.import_module(module), function)
    facts = {**facts, "cell_index": facts["cells_served"], "load_counted_here": facts["cells_served"] == 0}
    try:
        with logging_to(job):
            torch.set_num_threads(max(1, int(job.threads)))
            write_outputs(job, loaded, request["data"], worker=facts)
        cell.running = False
        _send(connection, {"ok": True, "worker": facts})
        return True
    except BaseException:
        cell.running = False
        with contextlib.suppress(OSError):
            _send(connection, {"ok": False, "error": traceback.format_exc()})
        print(f"cell failed, leaving so the next one starts clean:\n{traceback.format_exc()}", flush=True)
        return False


def serve(
    address: str, log_path: Path, settings: dict, owner: int, threads: int, idle_seconds: float = IDLE_SECONDS
) -> None:
    started = time.perf_counter()
    import torch

    from kvcache_bench.engine.loading import ModelSettings, load_for_settings
    from kvcache_bench.manifest import write_manifest

    torch.set_num_threads(max(1, threads))
    loaded = load_for_settings(ModelSettings(**settings["model"]), attn_implementation=settings["attention"])
    facts = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "log": str(log_path),
        "loaded_at": time.time(),
        "load_seconds": round(loaded.load_seconds, 3),
        "start_seconds": round(time.perf_counter() - started, 3),
        "device": str(loaded.device),
        "attention": settings["attention"],
        "cells_served": 0,
    }
    socket_file = None if address.startswith("@") else Path(address)
    if socket_file is not None:
        socket_file.unlink(missing_ok=True)  # a dead worker's: its clients hold the slot, so nobody else starts one
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(_bindable(address))
    listener.listen(8)
    listener.settimeout(1.0)
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES") if loaded.device.type == "cuda" else None
    if gpu is not None:
        (Path(default_lock_dir()) / f"gpu-{gpu}.worker").write_text(
            json.dumps({"pid": os.getpid(), "key": _key_of(address)})
        )
    print(
        f"model worker {os.getpid()} ready: {settings['model']['path']} ({settings['attention']} attention) on "
        f"{loaded.device}, loaded in {facts['load_seconds']} s, {facts['start_seconds']} s from start",
        flush=True,
    )
    write_manifest(log_path, settings, None, extra={"worker": facts})
    idle_since = time.monotonic()
    try:
        while _alive(owner) and time.monotonic() - idle_since < idle_seconds:
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except KeyboardInterrupt:  # a client that left just after its cell: nothing was running
                continue
            connection.settimeout(None)
            with connection:
                keep_serving = _serve_one(connection, loaded, facts)
            facts["cells_served"] += 1
            idle_since = time.monotonic()
            if not keep_serving:
                break
    finally:
        listener.close()
        if socket_file is not None:
            socket_file.unlink(missing_ok=True)
        print(f"model worker {os.getpid()} leaving after {facts['cells_served']} cell(s)", flush=True)
        write_manifest(log_path, settings, None, extra={"worker": facts})


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # leave through `finally`: socket removed, manifest written
    # A cell whose client left is stopped by _thread.interrupt_main, which is a SIGINT: a worker started from a job of
    # a Snakemake run under nohup or `&` inherits SIGINT ignored, and the interrupt did nothing (the cell ran on and
    # wrote its outputs after its job was killed). Python's own handler, whatever was inherited.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    serve(sys.argv[1], Path(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    sys.stdout.flush()
    os._exit(0)  # tearing down torch's interpreter state takes seconds on a busy machine and frees nothing more
