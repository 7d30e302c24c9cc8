# Helpers of rules/perf.smk and rules/plan.smk: the perf cells, paths and params, from the config's `perf:` section.

from kvcache_bench.study.setting_checks import perf_nothing_to_measure

PERF = config["perf"]
PERF_PATTERN = study.PERF_PATTERN
# Judged as the study's cells are (rules/common.smk: cell_problems): a refused perf cell is printed before any job
# and not planned; a cell only its check job refuses (a custom press) fails its perf job, naming why.
PERF_CELLS, REFUSED_PERF_CELLS = study.split_by_check(study.requested_perf_cells(config), cell_problems)


def announce_refused_perf_cells():
    if not workflow.is_main_process:
        return
    for cell in REFUSED_PERF_CELLS:
        typed = study.typed_cell({key: value for key, value in cell.items() if key != "context"})
        target = f"{Cell(**typed).target} (context {cell['context']})"
        print(f"refused perf target {target}, not run: {'; '.join(cell_problems(typed))}", file=sys.stderr)


announce_refused_perf_cells()


def perf_record_files():
    return [study.perf_record_path(cell) for cell in PERF_CELLS]


PERF_FIGURES = ["peak_memory", "itl", "energy_per_token"]


def perf_outputs():
    figures = [f"results/figures/perf_{name}_vs_retention.{ext}" for name in PERF_FIGURES for ext in ("png", "svg")]
    return ["results/tables/perf_summary.csv"] + figures


def perf_all_outputs(wildcards):
    """Evaluated only when perf_all is asked for: with no cell, the summary would fail on no records."""
    if why := perf_nothing_to_measure(config, len(PERF_CELLS), len(REFUSED_PERF_CELLS)):
        raise StudyConfigError(why)
    return perf_outputs()


def perf_inputs(wildcards):
    """The method's measured properties (the job judges its cell from them); the dataset's rows when contexts are
    cut from documents; a built model."""
    cell = dict(wildcards.items(), question_mode="question_aware", decode_batch_size="1")
    inputs = {"properties": rules.check_method.output.properties.format(method=wildcards.method)}
    if PERF["context_source"] == "dataset":
        inputs["rows"] = "results/data/{dataset}/{task}.jsonl".format(**cell)
    inputs.update(model_inputs(wildcards))
    return inputs


def perf_settings(wildcards):
    return dict(
        new_tokens=PERF["new_tokens"],
        warmup=PERF["warmup"],
        repeats=PERF["repeats"],
        seed=SEED,
        power_sample_hz=PERF["power_sample_hz"],
        task=wildcards.task,
        method_kwargs={wildcards.method: method_kwargs(wildcards)},
    )


def perf_estimate_records():
    """Measured perf records the plan estimates from: this workflow's and any the config names."""
    import glob

    found = sorted(glob.glob("results/perf/**/*.jsonl", recursive=True))
    # Named files that do not exist yet (reference records not committed) are skipped, not an error.
    return found + [p for p in PERF["estimate"].get("records", []) if os.path.exists(p)]


# The engine comparison (perf.engine_comparison): the README's performance table from the study's own cells.
ENGINE_COMPARISON = PERF.get("engine_comparison")


def engine_comparison_cells():
    """The accepted cells it tabulates: the first dataset and task, the named method, retention and question
    mode at batch 1, on every model sharing the first such model's weights, in config order."""
    wanted = ENGINE_COMPARISON
    cells = [
        cell
        for cell in STUDY_CELLS
        if cell["method"] == wanted["method"]
        and float(cell["retention"]) == float(wanted["retention"])
        and cell["question_mode"] == wanted["question_mode"]
        and cell["batch_size"] == "1"
    ]
    if not cells:
        raise ValueError(f"perf.engine_comparison {wanted} names no accepted cell of the study")
    first = cells[0]
    path = config["models"][first["model"]]["path"]
    return [
        cell
        for cell in cells
        if (cell["dataset"], cell["task"]) == (first["dataset"], first["task"])
        and config["models"][cell["model"]]["path"] == path
    ]


def engine_comparison_predictions():
    return [cell_path("predictions", cell, ".jsonl") for cell in engine_comparison_cells()]


def engine_comparison_labels():
    models = config["models"]
    return [
        [cell["model"], models[cell["model"]]["engine"], models[cell["model"]].get("kernels", "transformers")]
        for cell in engine_comparison_cells()
    ]


def engine_comparison_model():
    """The compared model's settings; the floor reads its config.json, so its path must be a folder."""
    name = engine_comparison_cells()[0]["model"]
    model = config["models"][name]
    if model["path"] not in MADE_MODEL_PATHS and not os.path.isdir(model["path"]):
        raise ValueError(
            f"perf.engine_comparison compares models.{name}, whose path {model['path']!r} is not a folder: the floor "
            "reads the model's config.json (build it here, e.g. build: {shape: llama-3.1-8b}, or download it)"
        )
    return model


def engine_comparison_outputs():
    if not ENGINE_COMPARISON:
        return []
    return ["results/tables/engine_comparison.md", "results/tables/engine_comparison.csv"]
