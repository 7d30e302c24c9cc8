"""kvpress imported once, without pulling in ``datasets`` (a third of a CPU job's start-up)."""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import types


class _DatasetsOnFirstCall(types.ModuleType):
    """Stands in for ``datasets`` while kvpress imports: each function it hands out imports the real one when called."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)

        def deferred(*args, **kwargs):
            return getattr(importlib.import_module("datasets"), name)(*args, **kwargs)

        return deferred


def import_kvpress():
    """kvpress, without importing ``datasets``.

    kvpress's ``__init__`` imports every press, and two we never build (DuoAttention, ExpectedAttentionStats)
    import ``datasets`` at module level to fetch calibration data from the hub. ``datasets`` (with pandas and
    pyarrow) was a third of a generate job's start-up on CPU; a press that does call it still gets the real one.
    """
    if "kvpress" in sys.modules or "datasets" in sys.modules:
        return importlib.import_module("kvpress")
    importlib.import_module("transformers")  # reads which packages are installed once, before the stand-in
    stand_in = _DatasetsOnFirstCall("datasets")
    stand_in.__spec__ = importlib.machinery.ModuleSpec("datasets", None)
    sys.modules["datasets"] = stand_in
    try:
        return importlib.import_module("kvpress")
    finally:
        if sys.modules.get("datasets") is stand_in:
            del sys.modules["datasets"]
