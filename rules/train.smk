# The canary model of the offline demo: trained here so its committed weights (resources/canary/) are
# reproducible. Not a target of `rule all`; run it on a GPU (about 8 minutes on one H200):
#   snakemake --cores all results/models/canary
# then review results/models/canary/training_log.json and copy the directory over resources/canary/.

import yaml

CANARY_TRAIN_SETTINGS = "config/canary-train.yaml"


def canary_train_settings():
    with open(os.path.join(workflow.basedir, CANARY_TRAIN_SETTINGS)) as handle:
        return yaml.safe_load(handle)


rule train_canary:
    input:
        settings=CANARY_TRAIN_SETTINGS,
    output:
        model_dir=directory("results/models/canary"),
    log:
        "logs/train_canary.log",
    params:
        settings=canary_train_settings(),
    threads: 8
    resources:
        gpu=1,
    conda:
        "../envs/generate.yaml"
    script:
        "../scripts/train_canary.py"
