# kvcache-bench: what each KV-cache compression method costs an LLM on long-context QA.
# Every number in results/ traces to files in this DAG. See README.md.

from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config.yaml"


# A --configfile names a whole study: it replaces config.yaml instead of being merged into it.
if workflow.overwrite_configfiles:
    config.clear()
    config.update(workflow.config_settings.overwrite_config)


validate(config, "schemas/config.schema.yaml")


include: "rules/common.smk"
include: "rules/models.smk"
include: "rules/data.smk"
include: "rules/check.smk"
include: "rules/generate.smk"
include: "rules/score.smk"
include: "rules/aggregate.smk"
include: "rules/figures.smk"
include: "rules/perf_common.smk"
include: "rules/perf.smk"
include: "rules/train.smk"
include: "rules/report.smk"


rule all:
    input:
        final_outputs(),
