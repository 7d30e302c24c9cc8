"""Snakemake adapter: does the ranking hold? Each press's rank on one model against another's, with Spearman's rho and
Kendall's tau-b and their bootstrap intervals, for the comparisons reference/ranking-across-models.yaml declares."""

from kvcache_bench.analysis.ranking_across_models import (
    compare_all,
    comparisons_from_params,
    ranking_across_models_markdown,
    read_run_tables,
    runs_of,
)
from kvcache_bench.files import atomic_path, sha256_of, write_text_atomic
from kvcache_bench.manifest import write_manifest
from kvcache_bench.workflow import current_job, logging_to, params_of

job = current_job(globals())
with logging_to(job):
    p = job.params
    comparisons = comparisons_from_params(p.comparisons)
    # the inputs list each run's two tables in runs_of's order; each is refused unless its manifest describes it
    summaries, per_examples = list(job.input.summaries), list(job.input.per_examples)
    tables = read_run_tables(runs_of(comparisons), summaries, per_examples)
    correlations, presses = compare_all(comparisons, tables, seed=p.seed, n_resamples=p.n_resamples)
    for output, frame in ((job.output.correlations, correlations), (job.output.presses, presses)):
        with atomic_path(output) as tmp:
            frame.to_csv(tmp, index=False)
    write_text_atomic(job.output.markdown, ranking_across_models_markdown(correlations, presses))
    # which committed tables, byte for byte, the numbers come from
    inputs = {path: sha256_of(path) for path in summaries + per_examples}
    for output, rows in (
        (job.output.correlations, correlations),
        (job.output.presses, presses),
        (job.output.markdown, correlations),
    ):
        write_manifest(output, params_of(job), p.seed, extra={"rows": len(rows), "inputs": inputs})
