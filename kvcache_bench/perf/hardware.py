"""Hardware counters for the perf pass: power, energy, device memory and SM clock, read while a run is timed.

Two backends: NVML on a real NVIDIA GPU, and a fake one (CPU time, peak RSS, a constant 100 W) so the
pipeline runs without a GPU. Records name their backend; ``perf_tables`` never mixes two.
"""

from __future__ import annotations

import contextlib
import resource
import threading
import time

import torch

FAKE_POWER_WATTS = 100.0  # the fake backend's constant "power draw", so energy columns exist on CPU


class HardwareUnavailableError(RuntimeError):
    pass


class PowerSampler:
    """A thread sampling power (W), device memory in use (bytes) and SM clock (MHz) at ``hz``.

    Energy comes from the driver's cumulative counter when the backend has one (exact), otherwise from
    integrating the sampled power over the run (trapezoids, edges held at the nearest sample).
    """

    def __init__(self, read_power_w, read_memory_bytes, read_sm_clock_mhz=None, read_energy_mj=None, hz: float = 20.0):
        if hz < 10:
            raise ValueError(f"power sampling below 10 Hz misses short runs; got {hz} Hz")
        self._read_power_w = read_power_w
        self._read_memory_bytes = read_memory_bytes
        self._read_sm_clock_mhz = read_sm_clock_mhz
        self._read_energy_mj = read_energy_mj
        self._period = 1.0 / hz
        self._stop = threading.Event()
        self._samples: list[tuple[float, float, float, float | None]] = []
        self._thread = threading.Thread(target=self._loop, name="power-sampler", daemon=True)

    def _sample(self) -> None:
        clock = self._read_sm_clock_mhz() if self._read_sm_clock_mhz else None
        self._samples.append((time.perf_counter(), self._read_power_w(), self._read_memory_bytes(), clock))

    def _loop(self) -> None:
        while not self._stop.wait(self._period):
            self._sample()

    def __enter__(self):
        # The thread starts (and, on exit, stops) outside the measured window: at milliseconds per run,
        # thread start-up would otherwise count as energy the run did not use.
        self._thread.start()
        self._energy_start = self._read_energy_mj() if self._read_energy_mj else None
        self._start = time.perf_counter()
        self._sample()
        return self

    def __exit__(self, *exc_info):
        self._sample()
        self._end = time.perf_counter()
        self._energy_end = self._read_energy_mj() if self._read_energy_mj else None
        self._stop.set()
        self._thread.join()
        self._samples = [s for s in self._samples if s[0] <= self._end]  # the thread may sample once more
        return False

    def result(self) -> dict:
        times = [s[0] for s in self._samples]
        watts = [s[1] for s in self._samples]
        integrated = watts[0] * (times[0] - self._start) + watts[-1] * (self._end - times[-1])
        integrated += sum((t1 - t0) * (w0 + w1) / 2 for t0, t1, w0, w1 in zip(times, times[1:], watts, watts[1:]))
        duration = max(self._end - self._start, 1e-12)
        clocks = [s[3] for s in self._samples if s[3] is not None]
        counter = None
        if self._energy_start is not None and self._energy_end is not None:
            counter = (self._energy_end - self._energy_start) / 1000.0
        return {
            "energy_j": counter if counter is not None else integrated,
            "energy_source": "nvml_energy_counter" if counter is not None else "integrated_power_samples",
            "energy_integrated_j": integrated,
            "power_mean_w": integrated / duration,
            "power_samples": len(self._samples),
            "power_sample_hz": (len(self._samples) - 1) / duration,
            "driver_peak_memory_bytes": max(s[2] for s in self._samples),
            "sm_clock_mean_mhz": sum(clocks) / len(clocks) if clocks else None,
        }


class FakeHardware:
    """Lets the pipeline run without a GPU. Its numbers are the CPU's time and the process's peak RSS,
    and a constant 100 W: they show the plumbing works, never what a GPU costs."""

    backend = "fake"

    def describe(self) -> dict:
        return {
            "hardware_backend": self.backend,
            "gpu_name": "none (fake backend)",
            "driver_version": None,
            "cuda_version": None,
            "gpu_memory_total_bytes": None,
            "sm_clock_max_mhz": None,
            "memory_clock_max_mhz": None,
            "power_limit_w": None,
        }

    def sampler(self, hz: float) -> PowerSampler:
        # ru_maxrss is KiB on Linux: the process's peak resident memory, the nearest thing to a device peak.
        return PowerSampler(
            lambda: FAKE_POWER_WATTS, lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, hz=hz
        )


class NvmlHardware:
    """A real NVIDIA GPU read through NVML (nvidia-ml-py): power, energy counter, memory, clocks."""

    backend = "nvml"

    def __init__(self, device: torch.device):
        try:
            import pynvml
        except ImportError as error:
            raise HardwareUnavailableError(f"nvidia-ml-py is not installed: {error}") from error
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as error:
            raise HardwareUnavailableError(f"NVML did not initialise: {error}") from error
        self.nvml = pynvml
        self.handle = self._handle_for(device)
        try:
            pynvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)
            self.has_energy_counter = True
        except pynvml.NVMLError:
            self.has_energy_counter = False

    def _handle_for(self, device: torch.device):
        """NVML numbers GPUs physically; CUDA_VISIBLE_DEVICES renumbers them: match by PCI bus id."""
        index = device.index if device.index is not None else torch.cuda.current_device()
        properties = torch.cuda.get_device_properties(index)
        bus = getattr(properties, "pci_bus_id", None)
        if bus is not None:
            bus_id = (
                f"{getattr(properties, 'pci_domain_id', 0):08X}:{bus:02X}:"
                f"{getattr(properties, 'pci_device_id', 0):02X}.0"
            )
            with contextlib.suppress(self.nvml.NVMLError):
                return self.nvml.nvmlDeviceGetHandleByPciBusId(bus_id)
        return self.nvml.nvmlDeviceGetHandleByIndex(index)

    @staticmethod
    def _text(value) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    def describe(self) -> dict:
        nvml, handle = self.nvml, self.handle

        def optional(read):
            with contextlib.suppress(nvml.NVMLError):
                return read()
            return None

        return {
            "hardware_backend": self.backend,
            "gpu_name": self._text(nvml.nvmlDeviceGetName(handle)),
            "driver_version": self._text(nvml.nvmlSystemGetDriverVersion()),
            "cuda_version": torch.version.cuda,
            "gpu_memory_total_bytes": int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
            "sm_clock_max_mhz": optional(lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM)),
            "memory_clock_max_mhz": optional(lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_MEM)),
            "power_limit_w": optional(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0),
        }

    def sampler(self, hz: float) -> PowerSampler:
        nvml, handle = self.nvml, self.handle
        return PowerSampler(
            lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
            lambda: int(nvml.nvmlDeviceGetMemoryInfo(handle).used),
            lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),
            (lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle)) if self.has_energy_counter else None,
            hz=hz,
        )


def pick_hardware(requested: str, device: torch.device):
    """``auto``: NVML on a CUDA device where NVML works, the fake backend otherwise."""
    if requested not in ("auto", "nvml", "fake"):
        raise ValueError(f"unknown hardware backend {requested!r}; use auto, nvml or fake")
    if requested == "fake" or (requested == "auto" and device.type != "cuda"):
        return FakeHardware()
    if device.type != "cuda":
        raise HardwareUnavailableError(f"hardware backend nvml needs a CUDA device, got {device}")
    try:
        return NvmlHardware(device)
    except HardwareUnavailableError:
        if requested == "nvml":
            raise
        return FakeHardware()
