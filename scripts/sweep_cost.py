"""Snakemake adapter: the study's generate jobs, wall time against the records' seconds plus model loads."""

from kvcache_bench.analysis.sweep_cost import sweep_cost
from kvcache_bench.analysis.verified import verified_files
from kvcache_bench.files import write_json_atomic
from kvcache_bench.manifest import write_manifest
from kvcache_bench.workflow import current_job, logging_to, params_of

job = current_job(globals())
with logging_to(job):
    report = sweep_cost(verified_files(job.input.predictions), list(job.params.benchmarks))
    write_json_atomic(job.output.report, report)
    write_manifest(job.output.report, params_of(job), None, extra=report)
    print(
        f"wall {report['wall_seconds']} s for {report['work_seconds']} s of work and "
        f"{report['worker_start_seconds']} s of "
        f"{report['model_workers']} worker start(s): {report['wall_over_work_plus_loads']}x"
    )
