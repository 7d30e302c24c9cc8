"""Every built-in method's measured properties, shipped with the package so a dry run knows them.

``check_method`` measures a method on a tiny model when its jobs run (``methods.method_properties``);
that is too late for a plan: the needle config once planned kvzip at decode batch 32, and its check refused
the cells ten minutes into a GPU run. The same measurement, run once for every built-in method with
kvpress's default arguments, is committed here (``measured_properties.json``) and read when Snakemake parses,
so ``snakemake -n`` says what each cell will do before any job runs. Regenerate it with

    python -m kvcache_bench.runtime.method_checks --ship

``tests/test_method_properties.py`` checks that it matches what ``check_method`` measures now; a cell's own
check job still measures with the cell's ``method_kwargs`` and has the last word.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

SHIPPED_PATH = Path(__file__).with_name("measured_properties.json")
# The facts a cell's refusal or decode path depends on (cell_checks.measured_problems), and the pad share a
# table may quote. The construction is left out: it is the default arguments', not a cell's.
SHIPPED_KEYS = (
    "removes_tokens",
    "masks_slots",
    "cache_growth",
    "prunes_channels",
    "compresses_while_decoding",
    "reads_question",
    "needs_hub_data",
    "padded_row_pad_share",
    "sliding_layers",
    "status",
    "error",
)
REPO_ROOT = str(Path(__file__).resolve().parents[2])


@functools.cache
def _shipped() -> dict[str, dict]:
    return json.loads(SHIPPED_PATH.read_text())["methods"]


def shipped_properties(method: str) -> dict | None:
    """The measured properties of a built-in method (None for a name the package does not ship)."""
    facts = _shipped().get(method)
    return dict(facts) if facts is not None else None


def shipped_facts(measured: dict) -> dict:
    """What of a ``measure()`` result is shipped: the facts, with this checkout's path taken out of error texts
    (the file is the same in every clone), and a decoding-time press's default budget."""
    from kvcache_bench.methods.constructions import decoding_budget

    facts = {key: measured.get(key) for key in SHIPPED_KEYS}
    for key in ("error", "needs_hub_data"):
        if isinstance(facts[key], str):
            facts[key] = facts[key].replace(REPO_ROOT, "<checkout>")
    if measured.get("compresses_while_decoding"):
        facts["decoding_budget"] = decoding_budget(measured.get("construction"))
    return facts


def comparable(facts: dict | None) -> dict | None:
    """Facts as two machines can agree on them: an error by its exception's name only, as its text names the
    path the check ran in and how the hub failed to answer (offline mode, or no name resolution)."""
    if facts is None:
        return None
    error = facts.get("error")
    return {**facts, "error": error.split(":", 1)[0] if isinstance(error, str) else error}


def parse_time_properties(method: str, config: dict) -> dict | None:
    """What a dry run knows of ``method`` in this config: the shipped facts of a built-in method (None for a
    custom one, which only its check job measures). With ``method_kwargs`` for it, its default decoding budget
    is not the cell's, so that is left to the check job."""
    if method in config.get("custom_methods", {}):
        return None
    facts = shipped_properties(method)
    if facts is not None and config.get("method_kwargs", {}).get(method):
        facts.pop("decoding_budget", None)
    return facts
