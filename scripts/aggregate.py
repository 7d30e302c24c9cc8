"""Snakemake adapter: the study's table (CSV + Markdown) and every example's score, from the score files."""

import logging

from kvcache_bench.analysis.aggregate import build_summary, per_example_frame
from kvcache_bench.analysis.measured import flagged_cells
from kvcache_bench.analysis.multi_turn import multi_turn_tables, set_aside_multi_turn_without_examples
from kvcache_bench.analysis.summary_markdown import summary_markdown
from kvcache_bench.files import atomic_path, read_jsonl, write_text_atomic
from kvcache_bench.manifest import require_made_with, verify_against_manifest, write_manifest
from kvcache_bench.study.cell_checks import Cell
from kvcache_bench.workflow import current_job, logging_to, params_of

job = current_job(globals())
with logging_to(job):
    score_files, cells, expected_n = list(job.input.scores), job.params.cells, job.params.expected_n
    manifests = [verify_against_manifest(score_file) for score_file in score_files]
    for score_file, manifest, cell in zip(score_files, manifests, cells):
        require_made_with(score_file, manifest, cell)  # each file is its row's cell
    # Refused by their check jobs (what a dry run could not know): listed with the cells refused before any job.
    not_run = list(job.params.not_run) + [
        {"target": Cell(**cell).target, "problems": manifest["not_run"]}
        for cell, manifest in zip(cells, manifests)
        if manifest.get("not_run")
    ]
    ran = [index for index, manifest in enumerate(manifests) if not manifest.get("not_run")]
    score_files, cells, expected_n = ([values[i] for i in ran] for values in (score_files, cells, expected_n))
    # a multi-turn cell on contexts of one question each has no conversation: listed as not run, never an n = 0 row
    kept = set_aside_multi_turn_without_examples(
        score_files, cells, expected_n, [len(read_jsonl(path)) for path in score_files]
    )
    score_files, cells, expected_n, not_run = kept.score_files, kept.cells, kept.expected_n, not_run + kept.not_run
    summary = build_summary(
        score_files,
        cells,
        expected_n,
        seed=job.params.seed,
        small_n=job.params.small_n,
        n_resamples=job.params.n_resamples,
        labels=job.params.labels,
    )
    for line in flagged_cells(summary):
        logging.getLogger("kvcache_bench").warning("measured other than asked: %s", line)
    for cell in not_run:
        logging.getLogger("kvcache_bench").warning("not run: %s: %s", cell["target"], "; ".join(cell["problems"]))
    with atomic_path(job.output.summary) as tmp:
        summary.to_csv(tmp, index=False)
    per_example = per_example_frame(score_files, cells, job.params.labels)
    with atomic_path(job.output.per_example) as tmp:
        per_example.to_csv(tmp, index=False)
    multi_turn = multi_turn_tables(per_example, job.params.seed, job.params.n_resamples)
    written = [(job.output.summary, summary), (job.output.per_example, per_example), (job.output.markdown, summary)]
    # the multi-turn tables are outputs of a study that asks the mode (rules/common.smk, multi_turn_table_outputs)
    outputs = dict(job.output.items())
    for name, table in (("multi_turn_by_turn", multi_turn.by_turn), ("multi_turn_drop", multi_turn.drop)):
        if name in outputs:
            with atomic_path(job.output[name]) as tmp:
                table.to_csv(tmp, index=False)
            written.append((job.output[name], table))
    write_text_atomic(
        job.output.markdown,
        summary_markdown(summary, job.params.small_n, not_run, job.params.predictions_only, multi_turn),
    )
    for output, rows in written:
        write_manifest(output, params_of(job), job.params.seed, extra={"rows": len(rows)})
