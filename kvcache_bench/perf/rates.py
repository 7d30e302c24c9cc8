"""The device's measured rates the hardware floor is charged at: copy bandwidth and the matrix-multiply rate."""

from __future__ import annotations

import statistics
import time

import torch

from kvcache_bench.engine.loading import DTYPES, pick_device, synchronize


def _median_seconds(fn, device: torch.device, repeats: int) -> float:
    times = []
    for _ in range(repeats + 3):  # three unmeasured: lazy kernel loading, clocks ramping up
        synchronize(device)
        started = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - started)
    return statistics.median(times[3:])


def copy_bytes_per_s(device: torch.device, copy_bytes: int = 2**31, repeats: int = 20) -> float:
    """Bytes read + written per second by a device-to-device copy of ``copy_bytes`` (median of ``repeats``)."""
    source = torch.empty(copy_bytes // 4, device=device, dtype=torch.float32).uniform_()
    target = torch.empty_like(source)
    return 2 * copy_bytes / _median_seconds(lambda: target.copy_(source), device, repeats)


def matmul_flop_per_s(
    device: torch.device, size: int = 8192, dtype: torch.dtype = torch.bfloat16, repeats: int = 20
) -> float:
    """FLOP/s of a square ``size`` x ``size`` matrix product in ``dtype`` (median of ``repeats``)."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    return 2 * size**3 / _median_seconds(lambda: a @ b, device, repeats)


def measure_rates(
    device: str = "auto", dtype: str = "bfloat16", copy_bytes: int = 2**31, matmul_size: int = 8192, repeats: int = 20
) -> dict:
    """Both rates on the job's device, with what they were measured on (rule measure_hardware_rates)."""
    where = pick_device(device)
    return {
        "copy_bytes_per_s": copy_bytes_per_s(where, copy_bytes, repeats),
        "matmul_flop_per_s": matmul_flop_per_s(where, matmul_size, DTYPES[dtype], repeats),
        "dtype": dtype,
        "device": torch.cuda.get_device_name(where) if where.type == "cuda" else "cpu",
        "copy_bytes": copy_bytes,
        "matmul_size": matmul_size,
        "repeats": repeats,
    }
