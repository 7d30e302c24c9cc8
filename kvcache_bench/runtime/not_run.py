"""A cell judged refused by its own job: it writes why instead of predictions (imports no torch).

A dry run refuses what the properties shipped with the package tell it (rules/common.smk); a generate job judges
its cell again from what its method's check measured (its ``properties`` input: a custom press, or method_kwargs
that change a built-in's budget, are known only then). One job per cell used to do that (``check_config``, a
Python process per cell: a third of a study's jobs). The verdict, not a failed job, travels: an empty predictions
file whose manifest says ``not_run`` and why, carried by the score's manifest into the study's tables, so one
refused cell never keeps the other cells' tables and figures from being made.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from kvcache_bench.files import write_jsonl_atomic
from kvcache_bench.manifest import write_manifest
from kvcache_bench.workflow import logging_to, params_of, settings_of


def refusal_of(job) -> list[str]:
    """Why the job's cell cannot run, judged from its method's measured properties (the ``properties`` input),
    or nothing. A perf cell is question-aware at decode batch 1."""
    from kvcache_bench.study.cell_checks import Cell, problems_with
    from kvcache_bench.study.sliding_layers import sliding_layers_of

    p = settings_of(job)
    inputs = dict(job.input.items())
    # a multi_turn cell on rows whose contexts each have one question has no conversation: said here, not as n = 0
    if getattr(p, "question_mode", None) == "multi_turn" and inputs.get("rows"):
        from kvcache_bench.files import read_jsonl
        from kvcache_bench.study.question_modes import no_conversation_problem

        if problem := no_conversation_problem(read_jsonl(inputs["rows"]), f"{p.dataset}/{p.task}"):
            return [problem]
    properties = inputs.get("properties")  # a job run outside the workflow may have none
    if properties is None:
        return []
    cell = Cell(
        p.dataset,
        p.task,
        p.model,
        p.method,
        getattr(p, "question_mode", "question_aware"),
        p.retention,
        p.batch_size,
        getattr(p, "decode_batch_size", 1),
    )
    measured = json.loads(Path(properties).read_text())
    # the model folder exists now (a made model did not at the parse): whether it has sliding layers is read from it
    model = getattr(p, "model_settings", None) or {}
    sliding_layers = sliding_layers_of(model) if model.get("path") else None
    return problems_with(
        cell,
        getattr(p, "custom_methods", None),
        measured=measured,
        max_new_tokens=getattr(p, "max_new_tokens", None),
        sliding_layers=sliding_layers,
    )


def write_not_run(job, problems: list[str]) -> None:
    """No model and no GPU: an empty predictions file whose manifest names the refusal (logged to the job's log)."""
    with logging_to(job):
        write_jsonl_atomic(job.output.predictions, [])
        write_manifest(
            job.output.predictions, params_of(job), settings_of(job).seed, extra={"records": 0, "not_run": problems}
        )
        logging.getLogger("kvcache_bench").error(
            "not run, refused from its method's measured properties: %s", "; ".join(problems)
        )
