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
next cell starts a fresh one); a worker that dies fails its job naming its log, and why it died: each worker runs
under a small supervisor (``supervise``, no torch) that is its parent, sees its exit status, samples its peak
memory while it runs and reads its cgroup's OOM-kill count, so a worker ended by a signal (the kernel's
out-of-memory killer sends SIGKILL, which nothing inside the worker can catch or log) is named as such; a client
that is killed stops its cell before anything is written; a worker leaves when its Snakemake run has ended
(killed or not) or after ``IDLE_SECONDS`` idle. Jobs run by a cluster scheduler keep their own process
(``applies_to``).
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
    """The worker's supervisor (which starts the worker as its child): the process this returns."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a") as log:
        # its own session: a Snakemake that stops this job's process group leaves the worker to the next cell
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kvcache_bench.runtime.worker",
                SUPERVISE,
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
            worker, started = start(), time.time()
        elif worker.poll() is not None:
            ended = worker_exit(log_path, since=started, wait=0)  # the supervisor wrote it before it exited
            why = f"; {describe_exit(ended)}" if ended else ""
            raise RuntimeError(
                f"the model worker exited while loading (exit status {worker.returncode}){why}; "
                f"its log {log_path} ends:\n{_tail(log_path)}"
            )
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(worker.pid, signal.SIGKILL)  # the supervisor and the worker it started: one session
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
        sent = time.time()
        _send(connection, request)
        accepted = _receive(connection)
        reply = _receive(connection) if accepted is not None else None
    for handle in held:
        handle.close()
    if reply is None:
        ended = worker_exit(log_path, since=sent)
        why = f": {describe_exit(ended)}" if ended else " (its supervisor wrote no exit record)"
        pid = f" {accepted['pid']}" if accepted and accepted.get("pid") else ""
        raise RuntimeError(
            f"the model worker{pid} running this cell died{why}\nIts log {log_path} ends:\n{_tail(log_path)}"
        )
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
    _send(connection, {"accepted": True, "pid": os.getpid()})
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


# ----------------------------------------------------------------------------- the supervisor: why a worker died

SUPERVISE = "--supervise"
SAMPLE_SECONDS = 0.5
EXIT_RECORD_WAIT_SECONDS = 10.0


def exit_record_path(log_path: Path) -> Path:
    return Path(f"{log_path}.exit.json")


def _peak_memory(pid: int) -> int | None:
    """The process's peak resident memory so far (VmHWM, bytes), or None once it is gone."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return None


def _cgroup_memory() -> tuple[str | None, int | None, int | None]:
    """(the file this process's memory cgroup counts OOM kills in, its count, its memory limit in bytes): cgroup
    v2's memory.events and memory.max, or v1's memory.oom_control and memory.limit_in_bytes; Nones where unreadable."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            number, controllers, path = line.split(":", 2)
            if number == "0" and not controllers:
                folder, events, limit = Path("/sys/fs/cgroup" + path), "memory.events", "memory.max"
            elif "memory" in controllers.split(","):
                folder, events, limit = (
                    Path("/sys/fs/cgroup/memory" + path),
                    "memory.oom_control",
                    "memory.limit_in_bytes",
                )
            else:
                continue
            if not (folder / events).is_file():
                continue
            counts = dict(item.split() for item in (folder / events).read_text().splitlines() if item.strip())
            raw = (folder / limit).read_text().strip() if (folder / limit).is_file() else "max"
            bound = int(raw) if raw.isdigit() and int(raw) < 2**60 else None  # v1 writes "no limit" as ~2**63
            return str(folder / events), int(counts["oom_kill"]), bound
    return None, None, None


def _gib(size: int) -> str:
    return f"{size / 2**30:.2f} GiB"


def describe_exit(record: dict) -> str:
    """Why a worker ended, from its supervisor's record: the signal and what usually sends it, its peak memory, and
    what its cgroup counted."""
    from kvcache_bench.study.input_bounds import BOUNDS_FILE, MAX_ROW_BYTES

    code, peak = record["returncode"], record.get("peak_rss_bytes")
    held = (
        f" Its resident memory peaked at {_gib(peak)} (VmHWM, read every {SAMPLE_SECONDS} s while it ran)."
        if peak
        else ""
    )
    if code >= 0:
        return f"it exited with status {code}.{held}"
    number = -code
    name = signal.Signals(number).name if number in signal.valid_signals() else f"signal {number}"
    if number == signal.SIGKILL:
        kills, events, limit = record.get("oom_kills"), record.get("cgroup_events"), record.get("cgroup_limit_bytes")
        where = f"({events}{f'; its memory limit {_gib(limit)}' if limit else ''})"
        if kills:
            cgroup = f" Its cgroup counted {kills} out-of-memory kill(s) while it ran {where}: the OOM killer ended it."
        elif kills == 0:
            cgroup = (
                f" Its cgroup counted no out-of-memory kill while it ran {where}, so another process sent it (kill -9, "
                "a scheduler's time or memory limit)."
            )
        else:
            cgroup = ""
        return (
            f"it was killed by signal {number} ({name}), which no process can catch or log. The kernel's "
            "out-of-memory killer is its usual sender: it kills the process holding the most memory when the machine, "
            f"or the job's memory limit, runs out.{held}{cgroup} If memory ran out, look at what the cell holds: its "
            f"rows' lengths (at most {MAX_ROW_BYTES // 2**20} MiB each, {BOUNDS_FILE}), its prompts' tokens "
            "(models.<name>.max_context_tokens) and its decode batch (decode_batch_sizes)."
        )
    if number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        return f"it was stopped by signal {number} ({name}): something asked it to end (a scheduler, a shutdown).{held}"
    return (
        f"it was ended by signal {number} ({name}): a crash in native code (torch, a CUDA driver), unless another "
        f"process sent it.{held}"
    )


def worker_exit(log_path: Path, since: float, wait: float = EXIT_RECORD_WAIT_SECONDS) -> dict | None:
    """The supervisor's record of a worker that ended after ``since`` (epoch seconds), waiting up to ``wait`` s for
    it (the client sees the connection close a moment before the supervisor sees the exit)."""
    deadline = time.monotonic() + wait
    while True:
        with contextlib.suppress(OSError, ValueError):
            record = json.loads(exit_record_path(log_path).read_text())
            if record["ended_at"] >= since - 1:
                return record
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.1)


def supervise(arguments: list[str]) -> None:
    """Start the worker as a child and stay its parent: on its exit, write why it ended (``exit_record_path``, and a
    line in its log), then end as it did. Imports nothing heavy; forwards SIGTERM and SIGINT to it."""
    from kvcache_bench.files import write_json_atomic

    log_path = Path(arguments[1])
    events, kills_before, limit = _cgroup_memory()
    child = subprocess.Popen(
        [sys.executable, "-m", "kvcache_bench.runtime.worker", *arguments], stdin=subprocess.DEVNULL
    )
    for forwarded in (signal.SIGTERM, signal.SIGINT):
        signal.signal(forwarded, lambda number, _: child.send_signal(number))
    peak = None
    while True:
        peak = _peak_memory(child.pid) or peak  # VmHWM only grows: the last reading is the best
        try:
            child.wait(timeout=SAMPLE_SECONDS)
            break
        except subprocess.TimeoutExpired:
            continue
    _, kills_after, _ = _cgroup_memory()
    record = {
        "pid": child.pid,
        "returncode": child.returncode,
        "ended_at": time.time(),
        "peak_rss_bytes": peak,
        "cgroup_events": events,
        "oom_kills": kills_after - kills_before if None not in (kills_before, kills_after) else None,
        "cgroup_limit_bytes": limit,
    }
    write_json_atomic(exit_record_path(log_path), record)  # for the client whose cell it was running
    if child.returncode != 0:
        print(f"model worker {child.pid} ended: {describe_exit(record)}", flush=True)
    if child.returncode < 0:  # end as the worker did, so the supervisor's own parent sees the same status
        if -child.returncode != signal.SIGKILL:
            signal.signal(-child.returncode, signal.SIG_DFL)
        os.kill(os.getpid(), -child.returncode)
    sys.exit(child.returncode)


class StoppedBySignal(SystemExit):
    """A worker asked to end (SIGTERM): it leaves through its ``finally`` with exit status 0, as before; a cell it
    was running fails with this, naming the signal, rather than with a bare ``SystemExit: 0``."""

    def __init__(self, number: int):
        super().__init__(0)
        self.number = number

    def __str__(self) -> str:
        return (
            f"model worker {os.getpid()} was stopped by signal {self.number} ({signal.Signals(self.number).name}): "
            "something asked it to end (a scheduler ending the job, a shutdown, a kill)"
        )


def _stopped(number, _frame):
    raise StoppedBySignal(number)


if __name__ == "__main__" and sys.argv[1] == SUPERVISE:
    supervise(sys.argv[2:])
elif __name__ == "__main__":
    signal.signal(signal.SIGTERM, _stopped)  # leave through `finally`: socket removed, manifest written
    # A cell whose client left is stopped by _thread.interrupt_main, which is a SIGINT: a worker started from a job of
    # a Snakemake run under nohup or `&` inherits SIGINT ignored, and the interrupt did nothing (the cell ran on and
    # wrote its outputs after its job was killed). Python's own handler, whatever was inherited.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    serve(sys.argv[1], Path(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    sys.stdout.flush()
    os._exit(0)  # tearing down torch's interpreter state takes seconds on a busy machine and frees nothing more
