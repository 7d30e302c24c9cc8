"""A press and the presses inside it (AdaKV's scorer, a composed press's parts, CriticalKV's scorer)."""

from __future__ import annotations


def presses_in(press):
    """``press`` and every press it holds in an attribute or a list of them, depth first, each once.

    The attributes rather than the dataclass fields: CriticalKV takes its scorer in an ``__init__`` of its own, so the
    scorer is no field of it."""
    from kvpress.presses.base_press import BasePress

    seen: set[int] = set()

    def walk(current):
        if id(current) in seen:
            return
        seen.add(id(current))
        yield current
        for value in list(getattr(current, "__dict__", {}).values()):
            for inner in value if isinstance(value, (list, tuple)) else [value]:
                if isinstance(inner, BasePress):
                    yield from walk(inner)

    yield from walk(press)
