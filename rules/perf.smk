# The performance pass (opt-in: `snakemake perf_all`): latency, memory, KV bytes and energy per
# (model, method, retention, context length), batch 1 by default. Settings: the config's `perf:` section
# (schemas/config.schema.yaml). What the GPU-hours will be before running: rules/plan.smk.


wildcard_constraints:
    context=r"\d+",


rule perf:
    input:
        unpack(perf_inputs),
    output:
        records=f"results/perf/{PERF_PATTERN}.jsonl",
        manifest=f"results/perf/{PERF_PATTERN}.jsonl.manifest.json",
    log:
        f"logs/perf/{PERF_PATTERN}.log",
    benchmark:
        f"benchmarks/perf/{PERF_PATTERN}.tsv"
    conda:
        "../envs/generate.yaml"
    threads: GENERATION["threads"]
    resources:
        gpu=1,
    params:
        **model_job_params("perf.py"),
        # the cell's own check (not_run.refusal_of) reads these with its method's properties
        custom_methods=custom_methods_needed,
        max_new_tokens=max_new_tokens,
        context_source=PERF["context_source"],
        hardware=PERF["hardware"],
        settings=perf_settings,
    script:
        "../scripts/perf.py"


# Where one study cell's time goes (opt-in: ask for the file): its rows under torch.profiler, e.g.
#   snakemake results/perf/profiles/synthetic/synthetic_qa/llama-3.1-8b-shape-random/snapkv/question_aware/retention-0.50_batch-1_decode-32.json --cores 16 --resources gpu=1 --configfile config/reference-h200.yaml
rule profile_cell:
    input:
        unpack(model_inputs),
        rows="results/data/{dataset}/{task}.jsonl",
        properties=rules.check_method.output.properties,
    output:
        profile=f"results/perf/profiles/{CELL_PATTERN}.json",
        table=f"results/perf/profiles/{CELL_PATTERN}.txt",
    log:
        f"logs/profile_cell/{CELL_PATTERN}.log",
    benchmark:
        f"benchmarks/profile_cell/{CELL_PATTERN}.tsv"
    conda:
        "../envs/generate.yaml"
    threads: GENERATION["threads"]
    resources:
        gpu=1,
    params:
        **model_job_params("profile_cell.py"),
        engine=lookup(dpath="models/{model}/engine", within=config),
        max_new_tokens=max_new_tokens,
        method_kwargs=method_kwargs,
        custom_methods=custom_methods_needed,
        press_code=press_code,
        seed=SEED,
    script:
        "../scripts/profile_cell.py"


rule perf_summary:
    input:
        records=perf_record_files(),
    output:
        summary=restored_if_failed("results/tables/perf_summary.csv"),
        manifest=restored_if_failed("results/tables/perf_summary.csv.manifest.json"),
    log:
        "logs/perf_summary.log",
    localrule: True
    conda:
        "../envs/analysis.yaml"
    params:
        code=package_code("perf_summary.py"),
    script:
        "../scripts/perf_summary.py"


# One figure per metric (PERF_FIGURES): the same script, summary and caption file, told apart by {metric}.
rule figure_perf:
    input:
        summary=rules.perf_summary.output.summary,
    output:
        **figure_outputs("perf_{metric}_vs_retention", "Performance", caption="perf_figure"),
    log:
        "logs/figures/perf_{metric}_vs_retention.log",
    wildcard_constraints:
        metric=_alternatives(PERF_FIGURES),
    localrule: True
    conda:
        "../envs/analysis.yaml"
    params:
        code=package_code("perf_figure.py"),
        labels=custom_labels(),
    script:
        "../scripts/perf_figure.py"


rule perf_all:
    input:
        perf_all_outputs,
    localrule: True
