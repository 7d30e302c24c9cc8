# kvcache-bench: what each KV-cache compression method costs an LLM on long-context QA.
# Every number in results/ traces to files in this DAG. See README.md.

from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config.yaml"


import sys
from pathlib import Path

import yaml
from jsonschema.exceptions import ValidationError
from snakemake.exceptions import WorkflowError

sys.path.insert(0, workflow.basedir)
from kvcache_bench.study.config_checks import StudyConfigError
from kvcache_bench.study.setting_checks import validation_error_message
from kvcache_bench.study.config_files import (
    check_config_files,
    keep_workflow_config,
    refuse_numbers_as_text,
    study_config_files,
)

# Before the schema: a key written twice is named with its line, a number list written as text is named with
# where it came from (`--config` alone, or a config file and its lines) and what to write instead, and
# `--config k=v` alone keeps config.yaml.
check_config_files(workflow)
refuse_numbers_as_text(
    workflow.config_settings.config,
    yaml.safe_load(Path(workflow.basedir, "schemas/config.schema.yaml").read_text()),
    study_config_files(workflow),
)
if (kept := keep_workflow_config(config, workflow)) and workflow.is_main_process:
    print(kept, file=sys.stderr)


# A --configfile names a whole study: it replaces config.yaml instead of being merged into it
# (profiles/default/config.yaml sets replace-workflow-config, which Snakemake reads on every run).
# Snakemake's own message prints the whole schema and the whole config: the key, its value and the rule instead.
try:
    validate(config, "schemas/config.schema.yaml")
except WorkflowError as error:
    if not isinstance(error.__context__, ValidationError):  # raised while Snakemake handled jsonschema's error
        raise
    raise StudyConfigError(validation_error_message(error.__context__)) from None


include: "rules/common.smk"
include: "rules/checks.smk"
include: "rules/models.smk"
include: "rules/data.smk"
include: "rules/check.smk"
include: "rules/generate.smk"
include: "rules/score.smk"
include: "rules/aggregate.smk"
include: "rules/figures.smk"
include: "rules/perf_common.smk"
include: "rules/perf.smk"
include: "rules/engines.smk"
include: "rules/plan.smk"
include: "rules/train.smk"
include: "rules/report.smk"
include: "rules/probes_common.smk"
include: "rules/probes.smk"
include: "rules/reference_common.smk"
include: "rules/reference.smk"
include: "rules/export.smk"
include: "rules/needle_common.smk"
include: "rules/needle.smk"


# after every rule is defined: the data's settings are read from the rules that make it (rules/checks.smk)
refuse_another_studys_outputs()
# then every output a job of this study reads is held to its manifest, before any job (rules/checks.smk, 5)
refuse_changed_outputs()


rule all:
    input:
        final_outputs(),
        needle_figures(),
