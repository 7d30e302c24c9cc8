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
        code=package_code("perf.py"),
        model=model_settings,
        model_name="{model}",
        method="{method}",
        retention=wildcard_float("retention"),
        batch_size=wildcard_int("batch_size"),
        context_tokens=wildcard_int("context"),
        context_source=PERF["context_source"],
        hardware=PERF["hardware"],
        settings=perf_settings,
    script:
        "../scripts/perf.py"


rule perf_summary:
    input:
        records=perf_record_files(),
    output:
        summary="results/tables/perf_summary.csv",
        manifest="results/tables/perf_summary.csv.manifest.json",
    log:
        "logs/perf_summary.log",
    conda:
        "../envs/analysis.yaml"
    params:
        code=package_code("perf_summary.py"),
    script:
        "../scripts/perf_summary.py"


rule figure_perf_peak_memory:
    input:
        summary=rules.perf_summary.output.summary,
    output:
        png=report(
            "results/figures/perf_peak_memory_vs_retention.png",
            caption="../report/perf_peak_memory.rst",
            category="Figures",
            subcategory="Performance",
        ),
        svg="results/figures/perf_peak_memory_vs_retention.svg",
        manifest="results/figures/perf_peak_memory_vs_retention.png.manifest.json",
    log:
        "logs/figures/perf_peak_memory_vs_retention.log",
    conda:
        "../envs/analysis.yaml"
    params:
        code=package_code("perf_figure.py"),
        metric="peak_memory",
    script:
        "../scripts/perf_figure.py"


rule figure_perf_itl:
    input:
        summary=rules.perf_summary.output.summary,
    output:
        png=report(
            "results/figures/perf_itl_vs_retention.png",
            caption="../report/perf_itl.rst",
            category="Figures",
            subcategory="Performance",
        ),
        svg="results/figures/perf_itl_vs_retention.svg",
        manifest="results/figures/perf_itl_vs_retention.png.manifest.json",
    log:
        "logs/figures/perf_itl_vs_retention.log",
    conda:
        "../envs/analysis.yaml"
    params:
        code=package_code("perf_figure.py"),
        metric="itl",
    script:
        "../scripts/perf_figure.py"


rule figure_perf_energy_per_token:
    input:
        summary=rules.perf_summary.output.summary,
    output:
        png=report(
            "results/figures/perf_energy_per_token_vs_retention.png",
            caption="../report/perf_energy_per_token.rst",
            category="Figures",
            subcategory="Performance",
        ),
        svg="results/figures/perf_energy_per_token_vs_retention.svg",
        manifest="results/figures/perf_energy_per_token_vs_retention.png.manifest.json",
    log:
        "logs/figures/perf_energy_per_token_vs_retention.log",
    conda:
        "../envs/analysis.yaml"
    params:
        code=package_code("perf_figure.py"),
        metric="energy_per_token",
    script:
        "../scripts/perf_figure.py"


rule perf_all:
    input:
        perf_outputs(),


localrules:
    perf_summary,
    figure_perf_peak_memory,
    figure_perf_itl,
    figure_perf_energy_per_token,
    perf_all,
