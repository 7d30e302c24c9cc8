# Probes of a real model (opt-in: `snakemake probes --configfile config/smollm2.yaml`): does it lean on
# an attention sink, and does the published padding collapse happen to it? See kvcache_bench/runtime/probes.py.


rule probes:
    input:
        probe_outputs(),


rule probe_attention_sink:
    input:
        unpack(model_inputs),
        rows="results/data/{dataset}/{task}.jsonl",
    output:
        report="results/probes/{dataset}/{task}/{model}/attention_sink.json",
        manifest="results/probes/{dataset}/{task}/{model}/attention_sink.json.manifest.json",
    log:
        "logs/probe_attention_sink/{dataset}/{task}/{model}.log",
    benchmark:
        "benchmarks/probe_attention_sink/{dataset}/{task}/{model}.tsv"
    conda:
        "../envs/generate.yaml"
    threads: GENERATION["threads"]
    resources:
        gpu=1,
    params:
        **model_job_params("probe_attention_sink.py"),
        examples=lookup(dpath="probes/attention_sink/examples", within=config, default=None),
        seed=SEED,
    script:
        "../scripts/probe_attention_sink.py"


rule probe_padding:
    input:
        unpack(model_inputs),
        rows=padding_probe_rows,
    output:
        report="results/probes/padding/{task}/{model}/{method}.json",
        manifest="results/probes/padding/{task}/{model}/{method}.json.manifest.json",
    log:
        "logs/probe_padding/{task}/{model}/{method}.log",
    benchmark:
        "benchmarks/probe_padding/{task}/{model}/{method}.tsv"
    conda:
        "../envs/generate.yaml"
    threads: GENERATION["threads"]
    resources:
        gpu=1,
    params:
        **model_job_params("probe_padding.py"),
        retention=padding_probe_retention,
        batch_size=lookup(dpath="probes/padding/batch_size", within=config, default=None),
        examples_per_dataset=lookup(dpath="probes/padding/examples_per_dataset", within=config, default=None),
        max_new_tokens=max_new_tokens,
        method_kwargs=method_kwargs,
        seed=SEED,
        model_workers=GENERATION["model_workers"],
    script:
        "../scripts/probe_padding.py"


rule padding_probe_table:
    input:
        reports=padding_probe_reports,
    output:
        table=restored_if_failed("results/tables/padding_probe/{task}/{model}.csv"),
        markdown=restored_if_failed("results/tables/padding_probe/{task}/{model}.md"),
        manifest=restored_if_failed("results/tables/padding_probe/{task}/{model}.csv.manifest.json"),
        markdown_manifest=restored_if_failed("results/tables/padding_probe/{task}/{model}.md.manifest.json"),
    log:
        "logs/padding_probe_table/{task}/{model}.log",
    localrule: True
    conda:
        "../envs/analysis.yaml"
    params:
        code=package_code("padding_probe_table.py"),
        labels=custom_labels(),
        seed=SEED,
        n_resamples=config["analysis"]["bootstrap_resamples"],
    script:
        "../scripts/padding_probe_table.py"


rule figure_padding_probe:
    input:
        table=rules.padding_probe_table.output.table,
    output:
        **figure_outputs("{model}", "Padding", folder="results/figures/padding_probe/{task}", caption="padding_probe"),
    log:
        "logs/figures/padding_probe/{task}/{model}.log",
    localrule: True
    conda:
        "../envs/analysis.yaml"
    params:
        code=package_code("figure_padding_probe.py"),
        title="Left padding: what each press lost, and how many pads it kept",
        labels=custom_labels(),
    script:
        "../scripts/figure_padding_probe.py"
