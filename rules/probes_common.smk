# Helpers of rules/probes.smk: the probes' targets, rows and reports, from the config's `probes:` section.
# Included before it: `rule probes` calls probe_outputs() while that file is parsed.

from kvcache_bench.methods.registry import retentions_for


def padding_probe_retention(wildcards):
    """The configured retention for an evicting press; 1.0 for a method that keeps the whole cache."""
    return retentions_for(wildcards.method, [config["probes"]["padding"]["retention"]])[0]


def padding_probe_rows(wildcards):
    padding = config["probes"]["padding"]
    return [f"results/data/{dataset}/{padding['task']}.jsonl" for dataset in padding["datasets"]]


def padding_probe_reports(wildcards):
    methods = config["probes"]["padding"]["methods"]
    return [f"results/probes/padding/{wildcards.task}/{wildcards.model}/{method}.json" for method in methods]


def probe_outputs():
    """What `snakemake probes` makes: nothing unless the config has a probes section."""
    probes = config.get("probes", {})
    outputs = []
    for model in config["models"]:
        if "attention_sink" in probes:
            sink = probes["attention_sink"]
            outputs.append(f"results/probes/{sink['dataset']}/{sink['task']}/{model}/attention_sink.json")
        if "padding" in probes:
            padding = probes["padding"]
            outputs += [
                f"results/probes/padding/{padding['task']}/{model}/{method}.json" for method in padding["methods"]
            ]
            outputs.append(f"results/figures/padding_probe/{padding['task']}/{model}.png")
    return outputs
