# Helpers of rules/perf.smk: the perf cells, paths and params, computed from the config's `perf:` section.

PERF = config.get("perf", {})
PERF_PATTERN = "{dataset}/{task}/{model}/{method}/context-{context}/retention-{retention}_batch-{batch_size}"


def perf_dataset_and_task():
    """Contexts are cut from this dataset's documents; cells are checked as its task's cells."""
    dataset = PERF.get("dataset") or next(iter(config["datasets"]))
    task = PERF.get("task") or config["datasets"][dataset]["tasks"][0]
    return dataset, task


def requested_perf_cells():
    dataset, task = perf_dataset_and_task()
    cells = []
    for model in config["models"]:
        for method in PERF.get("methods") or config["methods"]:
            for retention in retentions_for(method, PERF.get("retentions") or config["retentions"]):
                for batch_size in PERF.get("batch_sizes", [1]):
                    for context in PERF.get("context_lengths", []):
                        cells.append(
                            dict(
                                dataset=dataset,
                                task=task,
                                model=model,
                                method=method,
                                question_mode="question_aware",
                                retention=f"{retention:.2f}",
                                batch_size=str(batch_size),
                                decode_batch_size="1",
                                context=str(context),
                            )
                        )
    return cells


def perf_cells():
    """The perf cells the config check accepts (the same check as generation: eviction + batch > 1 is refused)."""
    return [cell for cell in requested_perf_cells() if not _is_refused({k: v for k, v in cell.items() if k != "context"})]


def refused_perf_checks():
    return sorted(
        {
            f"results/checks/{CELL_PATTERN.format(**cell)}.ok"
            for cell in requested_perf_cells()
            if _is_refused({k: v for k, v in cell.items() if k != "context"})
        }
    )


def perf_record_files():
    return [f"results/perf/{PERF_PATTERN.format(**cell)}.jsonl" for cell in perf_cells()]


PERF_FIGURES = ["peak_memory", "itl", "energy_per_token"]


def perf_outputs():
    figures = [f"results/figures/perf_{name}_vs_retention.{ext}" for name in PERF_FIGURES for ext in ("png", "svg")]
    return refused_perf_checks() + ["results/tables/perf_summary.csv"] + figures


def perf_inputs(wildcards):
    """The cell's config check; the dataset's rows when contexts are cut from documents; a built model."""
    cell = dict(wildcards.items(), question_mode="question_aware", decode_batch_size="1")
    inputs = {"ok": f"results/checks/{CELL_PATTERN.format(**cell)}.ok"}
    if PERF.get("context_source", "dataset") == "dataset":
        inputs["rows"] = "results/data/{dataset}/{task}.jsonl".format(**cell)
    inputs.update(built_model_inputs(wildcards))
    return inputs


def perf_settings(wildcards):
    return dict(
        new_tokens=PERF.get("new_tokens", 64),
        warmup=PERF.get("warmup", 1),
        repeats=PERF.get("repeats", 3),
        seed=SEED,
        power_sample_hz=PERF.get("power_sample_hz", 20.0),
        task=wildcards.task,
        method_kwargs={wildcards.method: method_kwargs(wildcards)},
    )
