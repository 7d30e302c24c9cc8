"""A cell its check job refused: the generate job writes why instead of predictions (imports no torch).

The check job (``scripts/check_config.py``) refuses from what it measured when a dry run could not know it (a
custom press, or method_kwargs that change a built-in's budget). Its verdict, not a failed job, travels: an empty
predictions file whose manifest says ``not_run`` and why, carried by the score's manifest into the study's tables,
so one refused cell never keeps the other cells' tables and figures from being made.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from kvcache_bench.io import write_jsonl_atomic
from kvcache_bench.manifest import write_manifest
from kvcache_bench.workflow import logging_to, params_of, settings_of


def refusal_of(job) -> list[str]:
    """Why the cell's check refused it (its verdict, the job's ``ok`` input), or nothing."""
    ok = dict(job.input.items()).get("ok")  # a job run outside the workflow may have no check
    if ok is None:
        return []
    verdict = json.loads(Path(ok).read_text())
    return (verdict.get("problems") or []) if verdict.get("status") == "refused" else []


def write_not_run(job, problems: list[str]) -> None:
    """No model and no GPU: an empty predictions file whose manifest names the refusal (logged to the job's log)."""
    with logging_to(job):
        write_jsonl_atomic(job.output.predictions, [])
        write_manifest(job.output.predictions, params_of(job), settings_of(job).seed, extra={"records": 0, "not_run": problems})
        logging.getLogger("kvcache_bench").error("not run, refused by its check: %s", "; ".join(problems))
