# Stage 1: the datasets, in LongBench's schema, and (for the demo) the model, built locally.


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


rule build_demo_model:
    input:
        model_config=built_model_setting("model_config"),
        tokenizer=built_model_setting("tokenizer"),
    output:
        model_dir=directory("results/models/{model}"),
    log:
        "logs/build_demo_model/{model}.log",
    wildcard_constraints:
        model=_alternatives(BUILT_MODELS),
    conda:
        "../envs/generate.yaml"
    params:
        code=package_code("build_demo_model.py"),
        seed=SEED,
    script:
        "../scripts/build_demo_model.py"
