"""Each example's seconds in a decode-batch cell, measured without stopping the GPU between examples.

Timing an example by waiting for the GPU at its end (``torch.cuda.synchronize``) empties the GPU's queue: the next
example's first kernels then wait for the host to launch them, and wherever the host launches more slowly than the GPU
runs (SnapKV's scoring, Liger's Triton kernels) the GPU idles, with no lead built up to cover it. On one H200 the 8B
shape's prefills under SnapKV left the GPU idle 4.5 ms per example on transformers' kernels (3 ms of it at each
example's start) and, on Liger's, 43 ms under the profiler, about 20 ms without it (tools/gpu/prefill_gaps_h200.py,
docs/perf-reference.md). So between the prefills of a decode batch nothing waits: each example's end is a CUDA event on
the GPU's own timeline, and its seconds are the time from the previous mark to it. The marks partition the GPU's
timeline, so a cell's seconds still add up to its wall time, idle included; what goes is the idle the waits caused.

On other devices (CPU) work runs as it is called, and the marks are the host's clock.

``KVCACHE_BENCH_PREFILL_WAITS=per_example`` waits for the GPU after each prefill, as before: one checkout then measures
what the waits cost on one machine (a model worker's key holds the variable, so each setting gets its own worker), and
records say which ran (``prefill_waits``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch


class DeviceClock:
    """Marks on a device's timeline: on a GPU, CUDA events, recorded in the stream's order and read without a sync
    until ``finish`` (or a mark's own wait); on other devices (CPU) work runs as it is called, and the marks are the
    host's clock. The perf runs (``perf.runs``) time TTFT and inter-token gaps with it, a decode batch's prefills their
    examples (``ExampleClock``)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.events = device.type == "cuda"

    def mark(self):
        if not self.events:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def finish(self) -> None:
        """Wait for every mark made so far."""
        if self.events:
            torch.cuda.synchronize(self.device)

    def seconds(self, start, end) -> float:
        """Seconds from mark ``start`` to mark ``end``, both reached (after ``finish``, or ``end``'s own wait)."""
        return start.elapsed_time(end) / 1e3 if self.events else end - start


@dataclass(frozen=True)
class Lap:
    """One example's span on the clock: from the previous mark to this example's end."""

    clock: DeviceClock
    start: object  # a mark of ``clock``
    end: object

    def seconds(self) -> float:
        """The span's seconds; on a GPU this waits for the span's end event (not for later work)."""
        if self.clock.events:
            self.end.synchronize()
        return self.clock.seconds(self.start, self.end)


class ExampleClock:
    """Marks on the device's timeline: ``lap()`` at each example's end, ``restart()`` after work timed otherwise (a
    decode batch times itself), so that work belongs to no example's lap."""

    def __init__(self, device: torch.device):
        self.clock = DeviceClock(device)
        self.restart()

    def restart(self) -> None:
        self._last = self.clock.mark()

    def lap(self) -> Lap:
        mark = self.clock.mark()
        lap = Lap(self.clock, self._last, mark)
        self._last = mark
        return lap


PREFILL_WAITS_VARIABLE = "KVCACHE_BENCH_PREFILL_WAITS"
PREFILL_WAITS = ("per_decode_batch", "per_example")


def waits_per_example() -> bool:
    """Whether a decode batch's prefills wait for the GPU one by one (``KVCACHE_BENCH_PREFILL_WAITS=per_example``)."""
    setting = os.environ.get(PREFILL_WAITS_VARIABLE, PREFILL_WAITS[0])
    if setting not in PREFILL_WAITS:
        raise ValueError(f"{PREFILL_WAITS_VARIABLE}={setting!r}: set it to one of {', '.join(PREFILL_WAITS)}")
    return setting == "per_example"


def prefill_waits(decode_batch_prefills: bool) -> str:
    """A record's ``prefill_waits``: ``per_decode_batch`` where a decode batch's prefills ran with no wait between
    them (``decode_batch_prefills``: the cell prefills one example at a time for a decode batch), else ``per_example``
    (every other strategy times each example, or each shared context, to its end)."""
    return PREFILL_WAITS[1] if not decode_batch_prefills or waits_per_example() else PREFILL_WAITS[0]
