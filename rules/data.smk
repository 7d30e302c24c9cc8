# Stage 1: the datasets, in LongBench's schema (the models a study builds are in rules/models.smk).


rule download_dataset:
    input:
        unpack(dataset_source_inputs),
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
        hub_id=lookup(dpath="datasets/{dataset}/hub_id", within=config, default=None),
        local_path=lookup(dpath="datasets/{dataset}/local_path", within=config, default=None),
        source_sha256=dataset_content,
        split=lookup(dpath="datasets/{dataset}/split", within=config, default=None),
        data_dir=lookup(dpath="datasets/{dataset}/data_dir", within=config, default=None),
        num_examples=lookup(dpath="datasets/{dataset}/num_examples", within=config, default=None),
        revision=lookup(dpath="datasets/{dataset}/revision", within=config, default=None),
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
        generator=lookup(dpath="datasets/{dataset}/synthetic", within=config, default={}),
        num_examples=lookup(dpath="datasets/{dataset}/num_examples", within=config, default=None),
        seed=SEED,
    script:
        "../scripts/make_synthetic_dataset.py"


rule make_ruler_haystack:
    input:
        tokenizer=lookup(dpath="datasets/{dataset}/ruler_haystack/tokenizer", within=config),
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
        prompt_length=lookup(dpath="datasets/{dataset}/ruler_haystack/prompt_length", within=config),
        questions_per_haystack=lookup(
            dpath="datasets/{dataset}/ruler_haystack/questions_per_haystack", within=config, default=1
        ),
        num_examples=lookup(dpath="datasets/{dataset}/num_examples", within=config, default=None),
        seed=SEED,
        tokenizer_sha256=tokenizer_content("datasets/{dataset}/ruler_haystack/tokenizer"),
        code=package_code("make_ruler_haystack.py"),
    script:
        "../scripts/make_ruler_haystack.py"


rule make_ruler:
    input:
        tokenizer=lookup(dpath="datasets/{dataset}/ruler/tokenizer", within=config),
    output:
        ruler_layout="results/data/{dataset}/ruler/{task}/test.parquet",
        rows="results/data/{dataset}/{task}.jsonl",
        manifest="results/data/{dataset}/{task}.jsonl.manifest.json",
    log:
        "logs/make_ruler/{dataset}/{task}.log",
    wildcard_constraints:
        dataset=_alternatives(RULER_DATASETS),
    conda:
        "../envs/ruler.yaml"
    params:
        max_seq_length=lookup(dpath="datasets/{dataset}/ruler/max_seq_length", within=config),
        num_examples=lookup(dpath="datasets/{dataset}/num_examples", within=config),
        seed=SEED,
        tokenizer_sha256=tokenizer_content("datasets/{dataset}/ruler/tokenizer"),
        code=package_code("make_ruler.py"),
    script:
        "../scripts/make_ruler.py"


rule make_needle_grid:
    input:
        unpack(dataset_source_inputs),
        tokenizer=lookup(dpath="datasets/{dataset}/needle_in_haystack/tokenizer", within=config),
    output:
        rows="results/data/{dataset}/{task}.jsonl",
        manifest="results/data/{dataset}/{task}.jsonl.manifest.json",
    log:
        "logs/make_needle_grid/{dataset}/{task}.log",
    wildcard_constraints:
        dataset=_alternatives(NEEDLE_DATASETS),
        task="needle_in_haystack",
    conda:
        "../envs/ruler.yaml"
    params:
        grid=lookup(dpath="datasets/{dataset}/needle_in_haystack", within=config),
        local_path=lookup(dpath="datasets/{dataset}/local_path", within=config, default=None),
        source_sha256=dataset_content,
        tokenizer_sha256=tokenizer_content("datasets/{dataset}/needle_in_haystack/tokenizer"),
        seed=SEED,
        code=package_code("make_needle_grid.py"),
    script:
        "../scripts/make_needle_grid.py"


rule read_kvpress_dataset:
    input:
        unpack(dataset_source_inputs),
    output:
        rows="results/data/{dataset}/{task}.jsonl",
        manifest="results/data/{dataset}/{task}.jsonl.manifest.json",
    log:
        "logs/read_kvpress_dataset/{dataset}/{task}.log",
    wildcard_constraints:
        dataset=_alternatives(KVPRESS_LAYOUT_DATASETS),
    conda:
        "../envs/data.yaml"
    params:
        source=lookup(dpath="datasets/{dataset}/source", within=config),
        hub_id=kvpress_hub_id,
        local_path=lookup(dpath="datasets/{dataset}/local_path", within=config, default=None),
        source_sha256=dataset_content,
        split=lookup(dpath="datasets/{dataset}/split", within=config),
        num_examples=lookup(dpath="datasets/{dataset}/num_examples", within=config, default=None),
        revision=lookup(dpath="datasets/{dataset}/revision", within=config, default=None),
        seed=SEED,
        code=package_code("read_kvpress_dataset.py"),
    script:
        "../scripts/read_kvpress_dataset.py"
