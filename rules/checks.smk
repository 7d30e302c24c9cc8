# The checks that run while Snakemake parses the workflow: each prints or refuses before any job, in a dry run
# (-n) too, so that a study is told what is wrong with it before it spends GPU time; the one lock is taken in
# onstart. The prints and the refusals 3 and 4 are the main process's only (cluster jobs parse these files again).
# In the order of the parse:
#
# 1. check_study_config (kvcache_bench.study.config_checks: study_config_problems), called in rules/common.smk on
#    the config made whole, before any cell is computed from it. Refuses (StudyConfigError, "the study config is
#    refused before any job runs:", every problem listed) what would silently change the measurement or fail
#    mid-run: method_kwargs under no method's name or setting compression_ratio, an unknown method or a bad custom
#    press, a model or dataset path that does not exist, a made model's path, a local model or tokenizer folder
#    transformers would misread (no tokenizer files, no or an unknown model_type: study.model_folders), a setting
#    filed under a task, dataset or model the study does not have, an unknown device, and what a library would
#    refuse only mid-job (kvcache_bench.study.setting_checks): flash_attention_2 on a CPU or without flash_attn, a
#    press seed that is no integer, source: hub without hub_id, a .parquet local_path that is not parquet. At parse:
#    the cells are computed from this config (an unknown method would stop the parse in the registry instead), and
#    each job would meet it only mid-run, once per job. Tests: tests/test_bad_inputs.py
#    (test_bad_config_is_named_before_any_job), tests/test_model_folder_errors.py, tests/test_library_errors.py.
# 2. announce_before_any_job, when this file is included (after rules/common.smk, before the other rules). Prints
#    (stderr) every refused cell and why ("refused target ..., not run (listed in results/tables/summary.md)", or
#    "..., nothing runs"), what an accepted cell will do other than its name says ("note: ..."), and a WARNING for
#    another Snakemake run's locks in this directory and for each model with trust_remote_code. At parse: a dry
#    run must show them; a job would print them mid-run. Tests: tests/test_bad_inputs.py
#    (test_bad_config_is_named_before_any_job, test_another_run_holding_the_directory_is_named),
#    tests/test_workflow.py (test_a_dry_run_says_what_a_masking_press_will_do_before_any_job,
#    test_eviction_with_batching_is_refused_before_any_job_and_listed_while_valid_targets_complete).
# 3. refuse_a_study_with_nothing_to_run, just after it. Refuses a study whose every cell is refused ("every one of
#    this study's N cell(s) is refused"): its tables could say nothing, and the run would exit 0 with empty ones.
#    At parse, before the other rules are read from an empty study. Tests: tests/test_bad_inputs.py
#    (test_refused_cells_alone_write_no_table_or_figure).
# 4. refuse_another_studys_outputs, called by the Snakefile after every rule is defined (the settings a file must
#    have been made under are read from the rules that make it: rule_settings). Refuses a file in results/ that
#    another directory's run made under other settings (its data, predictions, the table), then a file removed
#    while what was made from it remains; each names the --forcerun that remakes it (study.shared_results). At
#    parse: Snakemake would otherwise reuse the other study's file, or leave the gone one unmade, and a dry run
#    must say so. Tests: tests/test_inputs_in_dag.py (test_another_studys_predictions_in_results_stop_the_dry_run,
#    test_another_studys_data_made_under_other_settings_is_refused_first), tests/test_rerun.py
#    (test_a_removed_prediction_is_named_with_the_command_that_remakes_it_and_its_table,
#    test_a_cell_added_to_a_finished_study_is_no_file_gone).
# 5. refuse_changed_outputs, called by the Snakefile just after 4. Refuses an output of this study that is no longer
#    what its manifest records, among those its jobs read (data, method checks, predictions, scores, summary.csv and
#    per_example.csv, the padding probe's reports and tables, perf records and their summary) and the run's final
#    ones (summary.md, ranking.md, the figures, the engine comparison): "outputs were changed after the jobs that
#    made them wrote them", each file with its sha256 recorded and now (or its manifest gone), and an interval of
#    summary.csv or a padding table that does not hold its point (the row named); then the --forcerun that remakes
#    them (study.changed_outputs). At parse: inside the reading job the refusal came after Snakemake had removed that
#    job's finished outputs (a hand-edited score file cost summary.csv, summary.md and per_example.csv), and a table
#    no job checked was ranked and drawn as edited (issue 51). Each reading job checks its inputs again
#    (analysis.verified), and its outputs are update() outputs, which Snakemake puts back when the job fails
#    (restored_if_failed, rules/common.smk). Tests: tests/test_rerun.py
#    (test_a_hand_edited_summary_is_refused_before_any_job_and_the_printed_remedy_remakes_the_tables,
#    test_a_hand_edited_score_file_is_refused_and_every_table_stays,
#    test_an_interval_that_does_not_hold_its_point_is_refused_naming_the_file), tests/test_bad_inputs.py
#    (test_a_changed_output_is_refused_not_tabulated), tests/test_changed_outputs.py.
# 6. claim_results_before_any_job, in onstart: not while parsing but when jobs are about to run (Snakemake calls
#    onstart for a run that runs jobs, not for a dry run, --lint or --list, so these take no claim). Takes
#    results/ for this run, refused while a live run of another directory holds it, and records this directory's
#    path (study.shared_results). Tests: tests/test_inputs_in_dag.py
#    (test_a_run_is_refused_before_any_job_while_another_directorys_run_writes_results,
#    test_a_second_run_of_another_directory_on_the_same_results_is_refused,
#    test_a_directory_moved_with_its_records_still_owns_what_it_made_there).
#
# Checked before the parse: a --configfile holding a YAML tag (!!python/...) is refused by the workflow profile
# (profiles/default/config.yaml, read with YTE before Snakemake reads any config file: study.config_tags), naming file,
# line and tag; Snakemake would say only "not valid JSON or YAML". Tests: tests/test_config_file_tags.py.
#
# Checked at parse elsewhere, where what they judge is read: the Snakefile's config-file checks and its schema
# validation (before rules/common.smk; an error is the key, its value and the rule, not the whole schema); a
# generation.device GPU this machine lacks, when the jobs run here (rules/common.smk, after 1; a job names it too,
# before it loads: engine.loading.device_problem); perf_all with no perf cell to measure (its input function,
# rules/perf_common.smk) (these three: tests/test_library_errors.py); highlighted_methods (rules/common.smk), raised
# when rules/figures.smk's params name a figures.highlight that is no method (tests/test_workflow.py,
# test_a_highlighted_method_that_is_no_method_is_refused_naming_the_closest); rules/perf_common.smk's refused perf
# cells (printed) and its perf.engine_comparison errors.

import json
from pathlib import Path
from types import SimpleNamespace

from kvcache_bench.analysis.verified import summary_interval_problem
from kvcache_bench.study.cell_checks import decode_note
from kvcache_bench.study.changed_outputs import Step, changed_outputs_refusal, runs_no_job_or_remakes_all
from kvcache_bench.study.config_checks import StudyConfigError, lock_holder_warning, remote_code_warning
from kvcache_bench.study.shared_results import (
    claim_results_dir,
    forcerun_in_command_line,
    foreign_outputs_refusal,
    gone_intermediates_refusal,
    record_this_path,
)
from kvcache_bench.workflow import wildcards_of

# ----------------------------------------------------------------------------- 2, 3: the study's cells


def decode_notes():
    """What accepted cells will do other than their names say (a press that compresses while decoding, at decode
    batch 32, decodes alone)."""
    notes = {}  # by their text: a note that names no question mode is printed once for all of a cell's modes
    for cell in STUDY_CELLS:
        decode = int(cell["decode_batch_size"])
        properties = parse_time_properties(cell["method"], config)
        note = decode_note(cell["method"], properties, decode)
        if note:
            notes[note] = None
    return list(notes)


def announce_before_any_job():
    """Printed once when the workflow is parsed (dry runs too): what would otherwise surface mid-run."""
    if not workflow.is_main_process:
        return
    outcome = "not run (listed in results/tables/summary.md)" if STUDY_CELLS else "nothing runs"
    refusals = [f"refused target {c['target']}, {outcome}: {'; '.join(c['problems'])}" for c in not_run_cells()]
    refusals += [f"note: {note}" for note in decode_notes()]
    warnings = [
        lock_holder_warning("."),
        *(remote_code_warning(model, name) for name, model in config["models"].items()),
    ]
    for line in [f"WARNING: {warning}" for warning in warnings if warning] + refusals:
        print(line, file=sys.stderr)


def refuse_a_study_with_nothing_to_run():
    """Every cell refused: no table could say anything, so the run (dry runs too) stops at parse, the refusals
    printed just above it, rather than exiting 0 with empty tables."""
    if REFUSED_CELLS and not STUDY_CELLS and workflow.is_main_process:
        raise StudyConfigError(
            f"every one of this study's {len(REFUSED_CELLS)} cell(s) is refused (why is printed above), so "
            "nothing would run: change the config as each refusal says."
        )


announce_before_any_job()
refuse_a_study_with_nothing_to_run()


# ----------------------------------------------------------------------------- 4: files another run made


# Params that decide how a job runs, not what it writes: two studies' files are not compared on them
HOW_NOT_WHAT = ("code", "model_workers")


def rule_settings(rule, wildcards):
    """What a job of ``rule`` records in its manifest's params for these wildcards (wildcards_of + its params,
    HOW_NOT_WHAT aside), evaluated from the rule's own params so that no second list can drift from them; None
    when a param needs more than wildcards (the job's own checks remain)."""
    from snakemake.iocontainers import Wildcards

    try:
        params = {
            name: value(Wildcards(fromdict=wildcards)) if callable(value) else value
            for name, value in rule.params.items()
        }
    except Exception:
        return None
    return wildcards_of(SimpleNamespace(wildcards=wildcards)) | {
        name: value for name, value in params.items() if name not in HOW_NOT_WHAT
    }


def expected_generation_settings(cell):
    """What the generate job of this cell puts in its predictions' manifest: a manifest must agree."""
    return rule_settings(rules.generate, cell)


def expected_data_settings(dataset, task):
    """The params a manifest of this dataset's rows must agree with, those of the rule that makes them here (a
    study of other synthetic-data settings once read another study's questions)."""
    for maker in workflow.rules:
        if maker.name != "all" and maker.is_producer(f"results/data/{dataset}/{task}.jsonl"):
            return rule_settings(maker, {"dataset": dataset, "task": task})
    return None


def tabulated_cells(table):
    """The cells a table's manifest says it tabulated (as sorted JSON), none when it has no manifest."""
    try:
        cells = json.loads(Path(f"{table}.manifest.json").read_text())["params"]["cells"]
    except (OSError, ValueError, KeyError, TypeError):
        return set()
    return {json.dumps(cell, sort_keys=True) for cell in cells}


def refuse_another_studys_outputs():
    """Files another directory's run wrote into results/ under other settings are refused at parse, before any
    job (study.shared_results): the data first, then predictions and the table."""
    if not workflow.is_main_process:
        return
    expected = {}
    for dataset, task in dict.fromkeys((cell["dataset"], cell["task"]) for cell in STUDY_CELLS):
        settings = expected_data_settings(dataset, task)
        if settings is not None:
            expected[f"results/data/{dataset}/{task}.jsonl"] = settings
    for cell in STUDY_CELLS:
        settings = expected_generation_settings(cell)
        if settings is not None:
            expected[cell_path("predictions", cell, ".jsonl")] = settings
    expected["results/tables/summary.csv"] = dict(
        cells=cells_for_table(), expected_n=expected_examples_per_cell(), seed=SEED
    )
    # the files --forcerun names are remade by this run: the refusal's own remedy
    forced = forcerun_in_command_line(sys.argv)
    refusal = foreign_outputs_refusal(expected, forced=forced)
    if refusal:
        raise StudyConfigError(refusal)
    # a file `rm`-ed while what was made from it remains (once this project's own advice): remade only when asked.
    # The table counts only for the cells it tabulated: a cell added to the study is no file gone.
    tabulated = tabulated_cells("results/tables/summary.csv")
    chains = [
        [
            f"results/data/{cell['dataset']}/{cell['task']}.jsonl",
            cell_path("predictions", cell, ".jsonl"),
            cell_path("scores", cell, ".jsonl"),
            *(["results/tables/summary.csv"] if json.dumps(typed, sort_keys=True) in tabulated else []),
        ]
        for cell, typed in zip(SCORED_CELLS, cells_for_table())
    ]
    if refusal := gone_intermediates_refusal(chains, forced):
        raise StudyConfigError(refusal)


# ----------------------------------------------------------------------------- 5: files changed after they were made


def data_path(dataset, task):
    return f"results/data/{dataset}/{task}.jsonl"


def study_steps():
    """The jobs of this study whose outputs other jobs of it read, each with the outputs it reads: what the
    changed-outputs check holds to their manifests, and what a --forcerun of one remakes after it."""
    methods = dict.fromkeys(cell["method"] for cell in STUDY_CELLS + PERF_CELLS)
    properties = {method: rules.check_method.output.properties.format(method=method) for method in methods}
    steps = [Step([path]) for path in properties.values()]
    rows = {(cell["dataset"], cell["task"]) for cell in STUDY_CELLS}
    padding = config.get("probes", {}).get("padding")
    if padding:
        rows |= {(dataset, padding["task"]) for dataset in padding["datasets"]}
    if PERF["context_source"] == "dataset":
        rows |= {(cell["dataset"], cell["task"]) for cell in PERF_CELLS}
    steps += [Step([data_path(*pair)]) for pair in sorted(rows)]
    for cell in STUDY_CELLS:
        reads = [data_path(cell["dataset"], cell["task"]), properties[cell["method"]]]
        steps.append(Step([cell_path("predictions", cell, ".jsonl")], reads))
    scores = [cell_path("scores", cell, ".jsonl") for cell in SCORED_CELLS]
    steps += [Step([score], [cell_path("predictions", cell, ".jsonl")]) for score, cell in zip(scores, SCORED_CELLS)]
    if SCORED_CELLS:
        # the tables and figures no job reads but `snakemake --report` shows: an edited summary.md or ranking.md
        # would disagree with summary.csv there
        tables = [rules.aggregate.output.summary, rules.aggregate.output.per_example, rules.aggregate.output.markdown]
        tables += [f"results/tables/{table}" for table in MULTI_TURN_TABLES]
        steps.append(Step(tables, scores))
        steps.append(Step([rules.ranking.output.ranking], [rules.aggregate.output.summary]))
        # each figure reads summary.csv and per_example.csv, but the multi-turn one, which reads its by-turn table
        steps += [
            Step([figure], tables[:2] if figure != rules.figure_multi_turn.output.png else [tables[0], tables[3]])
            for figure in figure_files()
            if figure.endswith(".png")
        ]
    if padding:
        rows_read = [data_path(dataset, padding["task"]) for dataset in padding["datasets"]]
        for model in config["models"]:
            reports = [f"results/probes/padding/{padding['task']}/{model}/{m}.json" for m in padding["methods"]]
            steps += [Step([report], rows_read) for report in reports]
            steps.append(Step([f"results/tables/padding_probe/{padding['task']}/{model}.csv"], reports))
    records = [study.perf_record_path(cell) for cell in PERF_CELLS]
    for record, cell in zip(records, PERF_CELLS):
        reads = [properties[cell["method"]]]
        if PERF["context_source"] == "dataset":
            reads.append(data_path(cell["dataset"], cell["task"]))
        steps.append(Step([record], reads))
    if records:
        steps.append(Step(["results/tables/perf_summary.csv"], records))
    if ENGINE_COMPARISON:
        rates = "results/perf/hardware_rates.json"
        steps.append(Step([rates]))
        steps.append(Step(engine_comparison_outputs(), [*engine_comparison_predictions(), rates]))
    # the needle heat maps, which the study's run makes and nothing reads but a person
    steps += [Step([figure], scores) for figure in needle_figures()]
    return steps


def forced_outputs(steps, forced):
    """--forcerun's files, and the outputs of the rules it names (``--forcerun aggregate``)."""
    by_name = {rule.name: rule for rule in workflow.rules}
    forced_rules = [by_name[name] for name in forced if name in by_name]
    made = {path for step in steps for path in step.outputs if any(rule.is_producer(path) for rule in forced_rules)}
    return set(forced) | made


def drawn_table_problem(path):
    """A table a figure draws intervals from (summary.csv, a multi-turn table, a padding table): each interval holds
    its point."""
    multi_turn = [f"results/tables/{table}" for table in MULTI_TURN_TABLES]
    if path == rules.aggregate.output.summary or path in multi_turn or path.startswith("results/tables/padding_probe/"):
        return summary_interval_problem(path)
    return None


def refuse_changed_outputs():
    """An output this study reads that is not what its job wrote stops the run (dry runs too) before any job, so
    no job's finished outputs are removed for it (study.changed_outputs); not for a command that runs no job."""
    if not workflow.is_main_process or runs_no_job_or_remakes_all(sys.argv):
        return
    steps = study_steps()
    refusal = changed_outputs_refusal(
        steps, forced_outputs(steps, forcerun_in_command_line(sys.argv)), also=drawn_table_problem
    )
    if refusal:
        raise StudyConfigError(refusal)


# ----------------------------------------------------------------------------- 6: the claim on results/


def claim_results_before_any_job():
    """A run that runs jobs (Snakemake calls onstart then only: not for a dry run, --lint or --list) takes
    results/, refused while a live run of another directory holds it, and adds its path to this directory's
    (study.shared_results): moved or copied with .snakemake/, the directory still knows its files as its own."""
    if held := claim_results_dir():
        raise StudyConfigError(held)
    record_this_path()


onstart:
    claim_results_before_any_job()
