"""A method's check: its measured properties (``methods.method_properties``) with the engine's run of it on a model
with sliding-window layers (``engine.sliding_probe``), for the check_method rule and the table the package ships.

Here rather than in ``methods/``: the engine's probe runs the press through the engine, which ``methods/`` (upstream
of the engine) does not import.
"""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

from kvcache_bench.engine.sliding_probe import on_sliding_layers
from kvcache_bench.methods.method_properties import PROBE_TOKENIZER
from kvcache_bench.methods.method_properties import measure as measure_on_llama


def measure(
    method: str, method_kwargs: dict | None = None, custom_methods: dict | None = None, workdir: str = "."
) -> dict:
    """A method's measured properties, ``sliding_layers`` included (what the shipped table and the checks read)."""
    probe = partial(on_sliding_layers, name_or_path=str(PROBE_TOKENIZER))
    return measure_on_llama(method, method_kwargs, custom_methods, workdir, probes={"sliding_layers": probe})


def run_check_job(job) -> None:
    """The check_method rule's job: one method's properties and their manifest."""
    from kvcache_bench.files import write_json_atomic
    from kvcache_bench.manifest import write_manifest
    from kvcache_bench.methods.custom import refuse_failing_user_code
    from kvcache_bench.workflow import logging_to, params_of, settings_of

    with logging_to(job):
        p = settings_of(job)
        # before measure(), which records a press that raises as one that "fails" (its cells not run, exit 0): a
        # press module that exits, crashes or hangs at import fails this job, naming the file
        refuse_failing_user_code(p.method, p.custom_methods, os.getcwd())
        properties = measure(p.method, p.method_kwargs, p.custom_methods, os.getcwd())
        write_json_atomic(job.output.properties, properties)
        write_manifest(job.output.properties, params_of(job), None)


def write_shipped_properties(path: str | None = None) -> Path:
    """Measure every built-in method with kvpress's default arguments and write the table the package ships
    (``methods.shipped_properties``): what a dry run knows about a cell before its check job measures it."""
    import json
    import sys
    from importlib.metadata import version

    from kvcache_bench.methods.registry import METHODS
    from kvcache_bench.methods.shipped_properties import SHIPPED_PATH, shipped_facts

    target = Path(path) if path else SHIPPED_PATH
    methods = {}
    for name in METHODS:
        methods[name] = shipped_facts(measure(name))
        print(f"{name}: {methods[name]}", file=sys.stderr, flush=True)
    document = {
        "kvpress": version("kvpress"),
        "transformers": version("transformers"),
        "measured_by": "kvcache_bench.runtime.method_checks.measure",
        "methods": methods,
    }
    target.write_text(json.dumps(document, indent=1, sort_keys=False) + "\n")
    return target


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=write_shipped_properties.__doc__)
    parser.add_argument("--ship", action="store_true", help="write kvcache_bench/methods/measured_properties.json")
    parser.add_argument("--to", default=None, help="write there instead")
    arguments = parser.parse_args()
    if not arguments.ship:
        parser.error("nothing to do: pass --ship")
    print(write_shipped_properties(arguments.to))
