"""One GPU per job on a multi-GPU machine.

Snakemake's ``--resources gpu=N`` only limits how many GPU jobs run at once; run locally, it does not tell
a job WHICH GPU to use, so every job would land on GPU 0. Each GPU job therefore claims a free GPU itself:
it takes an exclusive lock on ``<lock dir>/gpu-<index>.lock`` and sets ``CUDA_VISIBLE_DEVICES`` to that
index before CUDA starts. The lock is held for the life of the job's process; the operating system drops
it when the process exits, even on a crash or ``kill -9``, so a dead job never keeps a GPU.

GPUs already assigned are obeyed as they are: SLURM sets ``CUDA_VISIBLE_DEVICES`` to the GPU a
``--gpus=1`` job got, and a job inside a scheduler's allocation without that variable is left alone. A
``CUDA_VISIBLE_DEVICES`` listing more GPUs than the job needs is the pool to pick from (e.g.
``CUDA_VISIBLE_DEVICES=2,3 snakemake --resources gpu=2``, or a local run inside a 4-GPU ``salloc``).

Environment:
  KVCACHE_BENCH_GPU_LOCK_DIR  where the locks live (default: <tmp>/kvcache-bench-gpu-locks); all runs
                              that share the machine's GPUs must use the same directory (the default does).
  KVCACHE_BENCH_GPU_COUNT     number of GPUs, overriding detection (NVML, then ``nvidia-smi -L``).
  KVCACHE_BENCH_GPU_TRACE     if set, a JSONL file to which each job appends its GPU, pid and the times
                              it claimed and released it (tools/gpu/multigpu_check.sh uses it).
"""

from __future__ import annotations

import atexit
import errno
import fcntl
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

SCHEDULER_JOB_VARIABLES = ("SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID")
_held_lock_files: list = []  # open lock files: closing one would release its GPU


@dataclass
class GpuPin:
    devices: list[str]  # what CUDA_VISIBLE_DEVICES was set to (or found), one entry per GPU
    source: str  # "lock": claimed here; "scheduler"/"environment": assigned by someone else; "none"
    lock_paths: list[str] = field(default_factory=list)
    waited_seconds: float = 0.0

    def describe(self) -> str:
        shown = ",".join(self.devices) if self.devices else "(none)"
        detail = f", locks {', '.join(self.lock_paths)}" if self.lock_paths else ""
        waited = f", waited {self.waited_seconds:.1f}s for a free GPU" if self.waited_seconds >= 1 else ""
        return f"CUDA_VISIBLE_DEVICES={shown} ({self.source}{detail}{waited})"


def default_lock_dir() -> str:
    return os.environ.get("KVCACHE_BENCH_GPU_LOCK_DIR") or os.path.join(
        tempfile.gettempdir(), "kvcache-bench-gpu-locks"
    )


def detected_gpu_count() -> int:
    """GPUs on this machine, without starting CUDA in this process (that would freeze the device list)."""
    override = os.environ.get("KVCACHE_BENCH_GPU_COUNT")
    if override not in (None, ""):
        return int(override)
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        pass
    if shutil.which("nvidia-smi"):
        try:
            listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=True)
            return sum(1 for line in listing.stdout.splitlines() if line.startswith("GPU "))
        except (subprocess.SubprocessError, OSError):
            pass
    return 0


def local_gpu_slots(environ=None) -> int:
    """How many GPU jobs may run at once here (profiles/local: ``--resources gpu=<this>``).

    The GPUs this process may use (``CUDA_VISIBLE_DEVICES`` if set, else all detected); on a machine
    without GPUs, the CPU count, so GPU rules still run (on CPU) without an extra limit.
    """
    environ = os.environ if environ is None else environ
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        gpus = len([d for d in visible.split(",") if d.strip()])
    else:
        gpus = detected_gpu_count()
    return gpus if gpus > 0 else (os.cpu_count() or 1)


def _under_scheduler(environ) -> bool:
    return any(environ.get(name) for name in SCHEDULER_JOB_VARIABLES)


def _try_lock(path: str):
    """An open file holding an exclusive lock on ``path``, or None when another process holds it."""
    handle = open(path, "a+", encoding="utf-8")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        handle.close()
        if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return None
        raise
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n")
    handle.flush()
    return handle


def claim_gpus(
    wanted: int,
    *,
    candidates: list[str],
    lock_dir: str | None = None,
    timeout: float | None = None,
    poll_seconds: float = 0.5,
):
    """Lock ``wanted`` of ``candidates`` (GPU ids), waiting while all are taken. Returns (ids, open locks).

    The locks last as long as the returned files stay open (or the process lives). ``timeout`` None waits
    for as long as it takes: every holder is a live process that will finish.
    """
    if wanted > len(candidates):
        raise RuntimeError(f"a job wants {wanted} GPU(s) but only {len(candidates)} exist here: {candidates}")
    lock_dir = lock_dir or default_lock_dir()
    os.makedirs(lock_dir, mode=0o777, exist_ok=True)
    start = time.monotonic()
    announced = False
    while True:
        claimed, handles = [], []
        for gpu in candidates:
            handle = _try_lock(os.path.join(lock_dir, f"gpu-{gpu}.lock"))
            if handle is not None:
                claimed.append(gpu)
                handles.append(handle)
                if len(claimed) == wanted:
                    return claimed, handles
        for handle in handles:  # all or nothing: never sit on part of what we need
            handle.close()
        if timeout is not None and time.monotonic() - start >= timeout:
            raise TimeoutError(f"no free GPU among {candidates} after {timeout:.0f}s (locks in {lock_dir})")
        if not announced:
            log.info("all GPUs %s are taken (locks in %s); waiting for one to free up", candidates, lock_dir)
            announced = True
        time.sleep(poll_seconds)


def pin_gpus(
    wanted: int = 1,
    *,
    environ=None,
    count: int | None = None,
    lock_dir: str | None = None,
    timeout: float | None = None,
) -> GpuPin:
    """Point this process's CUDA at ``wanted`` free GPUs (or obey a scheduler's choice). Call before CUDA starts."""
    environ = os.environ if environ is None else environ
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        raise RuntimeError("pin_gpus must run before CUDA is initialised: CUDA reads CUDA_VISIBLE_DEVICES once")
    assigned = environ.get("CUDA_VISIBLE_DEVICES")
    scheduled = _under_scheduler(environ)
    if assigned is not None:
        listed = [d.strip() for d in assigned.split(",") if d.strip()]
        if len(listed) <= wanted:
            return GpuPin(listed, "scheduler" if scheduled else "environment")
        # more GPUs than this job needs (a user's list, or a whole `salloc` allocation): pick from them
        candidates = listed
    elif scheduled:  # the scheduler confines GPUs its own way (cgroups) or gave none: do not guess
        return GpuPin([], "scheduler")
    else:
        gpus = detected_gpu_count() if count is None else count
        if gpus == 0:
            return GpuPin([], "none")
        candidates = [str(index) for index in range(gpus)]
        # detected indices are nvidia-smi's (PCI bus order); CUDA's default order may differ, so align them
        environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    if lock_dir is None and scheduled:
        # inside an allocation, indices are the allocation's own: keep its locks apart from other jobs'
        lock_dir = f"{default_lock_dir()}-job{next(environ[v] for v in SCHEDULER_JOB_VARIABLES if environ.get(v))}"
    start = time.monotonic()
    claimed, handles = claim_gpus(wanted, candidates=candidates, lock_dir=lock_dir, timeout=timeout)
    _held_lock_files.extend(handles)
    environ["CUDA_VISIBLE_DEVICES"] = ",".join(claimed)
    return GpuPin(claimed, "lock", [h.name for h in handles], time.monotonic() - start)


def _trace(path: str, record: dict) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.write(json.dumps(record) + "\n")


def _cuda_evidence() -> dict:
    """Which physical GPU this process actually used (its UUID, as nvidia-smi prints it), if CUDA ran."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return {"cuda_used": False}
    properties = torch.cuda.get_device_properties(0)
    return {
        "cuda_used": True,
        "cuda_device_name": properties.name,
        "cuda_device_uuid": f"GPU-{properties.uuid}",
        "max_memory_allocated": int(torch.cuda.max_memory_allocated(0)),
    }


def pin_gpus_for_job(job) -> GpuPin:
    """Pin the GPUs a Snakemake job asked for (``resources: gpu=N``); nothing for CPU jobs or device: cpu."""
    resources = getattr(job, "resources", None) or {}
    wanted = int(resources.get("gpu", 0) or 0) if hasattr(resources, "get") else 0
    params = getattr(job, "params", None)
    model = getattr(params, "model_settings", None) or getattr(params, "model", None)  # rules name it model_settings
    device = model.get("device", "auto") if isinstance(model, dict) else getattr(params, "device", None) or "auto"
    if wanted == 0 or str(device).startswith("cpu"):
        return GpuPin([], "none")
    pin = pin_gpus(wanted)
    log.info("GPU: %s", pin.describe())
    trace_path = os.environ.get("KVCACHE_BENCH_GPU_TRACE")
    if trace_path:
        outputs = list(getattr(job, "output", []))
        claimed_at = time.time()

        def record_release():
            record = {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "devices": pin.devices,
                "source": pin.source,
                "output": outputs[0] if outputs else None,
                "claimed_at": claimed_at,
                "released_at": time.time(),
            }
            record.update(_cuda_evidence())
            _trace(trace_path, record)

        atexit.register(record_release)
    return pin
