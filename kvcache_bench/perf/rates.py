"""The device's measured rates the hardware floor is charged at: copy bandwidth and the matrix-multiply rate."""

from __future__ import annotations

import statistics
import time

import torch

from kvcache_bench.generation.loading import DTYPES, pick_device, synchronize


def _median_seconds(fn, device: torch.device, repeats: int) -> float:
    times = []
    for _ in range(repeats + 3):  # three unmeasured: lazy kernel loading, clocks ramping up
        synchronize(device)
        started = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - started)
    return statistics.median(times[3:])


def _copy_seconds(copy_bytes: int, device: torch.device, repeats: int) -> float:
    source = torch.empty(copy_bytes // 4, device=device, dtype=torch.float32).uniform_()
    target = torch.empty_like(source)
    return _median_seconds(lambda: target.copy_(source), device, repeats)


def _matmul_seconds(size: int, dtype: torch.dtype, device: torch.device, repeats: int) -> float:
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    return _median_seconds(lambda: a @ b, device, repeats)


def measure_rates(device: str = "auto", dtype: str = "bfloat16", copy_bytes: int = 2**31, matmul_size: int = 8192, repeats: int = 20) -> dict:
    """Bytes/s of a device-to-device copy (read + write counted) and FLOP/s of a square matmul in ``dtype``."""
    where = pick_device(device)
    copy = 2 * copy_bytes / _copy_seconds(copy_bytes, where, repeats)
    matmul = 2 * matmul_size**3 / _matmul_seconds(matmul_size, DTYPES[dtype], where, repeats)
    name = torch.cuda.get_device_name(where) if where.type == "cuda" else "cpu"
    return {"copy_bytes_per_s": copy, "matmul_flop_per_s": matmul, "dtype": dtype, "device": name,
            "copy_bytes": copy_bytes, "matmul_size": matmul_size, "repeats": repeats}
