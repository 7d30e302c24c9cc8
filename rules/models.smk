# Stage 0: models a study makes itself rather than downloads: the demo's random Llama (built from a
# committed config and seed), random-init models of a named shape (cost runs, Llama 3.1's tokenizer), models shipped inside installed Python packages (one GGUF or its chunks, materialised once), and
# Llama 3.1's tokenizer from Meta's llama-models package (name its directory where a tokenizer is asked for).


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
        # the build's own seed, else the study's (build.seed was once accepted and ignored)
        seed=lookup(dpath="models/{model}/build/seed", within=config, default=SEED),
    script:
        "../scripts/build_demo_model.py"


rule build_shaped_model:
    input:
        tokenizer=LLAMA3_TOKENIZER_DIR,
    output:
        model_dir=directory("results/models/{model}"),
    log:
        "logs/build_shaped_model/{model}.log",
    benchmark:
        "benchmarks/build_shaped_model/{model}.tsv"
    wildcard_constraints:
        model=_alternatives(SHAPED_MODELS),
    conda:
        "../envs/generate.yaml"
    resources:
        gpu=1,
    params:
        code=package_code("build_shaped_model.py"),
        shape=lookup(dpath="models/{model}/build/shape", within=config),
        # the build's own seed, else the study's: a random-init shape's weights depend on nothing else
        seed=lookup(dpath="models/{model}/build/seed", within=config, default=SEED),
        dtype=lookup(dpath="models/{model}/dtype", within=config),
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
        package=lookup(dpath="models/{model}/from_package/package", within=config, default=None),
        version=lookup(dpath="models/{model}/from_package/version", within=config, default=None),
        gguf_file=lookup(dpath="models/{model}/from_package/gguf_file", within=config, default=None),
        sha256=lookup(dpath="models/{model}/from_package/sha256", within=config, default=None),
        # a GGUF split over chunk packages (Gemma 3 270M): joined in this order, each chunk checked first
        chunks=lookup(dpath="models/{model}/from_package/chunks", within=config, default=None),
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
