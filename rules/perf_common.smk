# Helpers of rules/perf.smk and rules/plan.smk: the perf cells, paths and params, from the config's `perf:` section.

PERF = config["perf"]
PERF_PATTERN = study.PERF_PATTERN
PERF_CELLS, REFUSED_PERF_CELLS = study.split_by_check(study.requested_perf_cells(config), problems_of)


def refused_perf_checks():
    return sorted({cell_path("checks", cell, ".ok") for cell in REFUSED_PERF_CELLS})


def perf_record_files():
    return [study.perf_record_path(cell) for cell in PERF_CELLS]


PERF_FIGURES = ["peak_memory", "itl", "energy_per_token"]


def perf_outputs():
    figures = [f"results/figures/perf_{name}_vs_retention.{ext}" for name in PERF_FIGURES for ext in ("png", "svg")]
    return refused_perf_checks() + ["results/tables/perf_summary.csv"] + figures


def perf_inputs(wildcards):
    """The cell's config check; the dataset's rows when contexts are cut from documents; a built model."""
    cell = dict(wildcards.items(), question_mode="question_aware", decode_batch_size="1")
    inputs = {"ok": cell_path("checks", cell, ".ok")}
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
