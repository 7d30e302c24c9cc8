# The canary model of the offline demo: trained here so its committed weights (resources/canary/) are
# reproducible. Not a target of `rule all`; run it on a GPU (414 s on one H200 for the committed weights):
#   snakemake --cores all results/models/canary
# then review results/models/canary/training_log.json and copy the directory over resources/canary/.

import yaml

CANARY_TRAIN_CONFIG = "config/canary-train.yaml"
with open(os.path.join(workflow.basedir, CANARY_TRAIN_CONFIG)) as handle:
    CANARY_TRAIN_SETTINGS = yaml.safe_load(handle)


rule train_canary:
    input:
        settings=CANARY_TRAIN_CONFIG,
    output:
        model_dir=directory("results/models/canary"),
    log:
        "logs/train_canary.log",
    benchmark:
        "benchmarks/train_canary.tsv"
    conda:
        "../envs/generate.yaml"
    threads: CANARY_TRAIN_SETTINGS["num_workers"] + 1
    resources:
        gpu=1,
    params:
        code=package_code("train_canary.py"),
        settings=CANARY_TRAIN_SETTINGS,
    script:
        "../scripts/train_canary.py"
