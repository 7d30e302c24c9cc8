"""Snakemake adapter: fetch one LongBench-schema task (hub or local copy) into results/data/."""

from kvcache_bench.data.longbench import load_longbench_rows, normalise_rows, write_dataset
from kvcache_bench.study.sources import resolved_revision
from kvcache_bench.workflow import current_job, logging_to, params_of, settings_of

job = current_job(globals())
with logging_to(job):
    p = settings_of(job)
    rows = load_longbench_rows(
        p.task,
        dataset_name=p.dataset,
        hub_id=p.hub_id,
        local_path=p.local_path,
        split=p.split,
        data_dir=p.data_dir,
        revision=p.revision,
    )
    # local files are inputs; a hub copy records the commit it was read at (the pinned one, or the cache's)
    source = {"hub_revision": None if p.local_path else resolved_revision(p.hub_id, "dataset", p.revision)}
    facts = write_dataset(
        normalise_rows(rows, p.task, p.num_examples), job.output.rows, params_of(job), p.seed, extra=source
    )
    print(f"wrote {facts['rows']} rows of {p.dataset}/{p.task} (sha256 {facts['sha256'][:12]})")
