# Stage 1: the datasets, in LongBench's schema (the models a study builds are in rules/models.smk).


rule download_dataset:
    output:
        rows="results/data/{dataset}/{task}.jsonl",
        manifest="results/data/{dataset}/{task}.jsonl.manifest.json",
    log:
        "logs/download_dataset/{dataset}/{task}.log",
    wildcard_constraints:
        dataset=_alternatives(HUB_DATASETS),
    conda:
        "../envs/data.yaml"
    params:
        code=package_code("download_dataset.py"),
        dataset="{dataset}",
        task="{task}",
        hub_id=dataset_setting("hub_id"),
        local_path=dataset_setting("local_path"),
        split=dataset_setting("split"),
        data_dir=dataset_setting("data_dir"),
        num_examples=dataset_setting("num_examples"),
        seed=SEED,
    script:
        "../scripts/download_dataset.py"


rule make_synthetic_dataset:
    output:
        rows="results/data/{dataset}/{task}.jsonl",
        manifest="results/data/{dataset}/{task}.jsonl.manifest.json",
    log:
        "logs/make_synthetic_dataset/{dataset}/{task}.log",
    wildcard_constraints:
        dataset=_alternatives(SYNTHETIC_DATASETS),
    conda:
        "../envs/data.yaml"
    params:
        code=package_code("make_synthetic_dataset.py"),
        dataset="{dataset}",
        task="{task}",
        generator=dataset_setting("synthetic", {}),
        num_examples=dataset_setting("num_examples"),
        seed=SEED,
    script:
        "../scripts/make_synthetic_dataset.py"


rule make_ruler_haystack:
    input:
        tokenizer=ruler_haystack_setting("tokenizer"),
    output:
        ruler_layout="results/data/{dataset}/ruler/{task}/test.parquet",
        rows="results/data/{dataset}/{task}.jsonl",
        manifest="results/data/{dataset}/{task}.jsonl.manifest.json",
    log:
        "logs/make_ruler_haystack/{dataset}/{task}.log",
    wildcard_constraints:
        dataset=_alternatives(RULER_HAYSTACK_DATASETS),
    conda:
        "../envs/generate.yaml"
    params:
        dataset="{dataset}",
        task="{task}",
        prompt_length=ruler_haystack_setting("prompt_length"),
        questions_per_haystack=ruler_haystack_setting("questions_per_haystack"),
        num_examples=dataset_setting("num_examples"),
        seed=SEED,
        code=package_code("make_ruler_haystack.py"),
    script:
        "../scripts/make_ruler_haystack.py"
