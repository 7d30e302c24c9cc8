# The needle test's heat maps (kvpress's needle_in_haystack): per press, depth x length scores beside the full cache
# (helpers in rules/needle_common.smk).


rule figure_needle_heatmap:
    input:
        rows="results/data/{dataset}/needle_in_haystack.jsonl",
        scores=needle_panel_scores,
    output:
        **figure_outputs("{method}", folder="results/figures/needle/{dataset}/{model}/{question_mode}"),
    log:
        "logs/figure_needle_heatmap/{dataset}/{model}/{question_mode}/{method}.log",
    localrule: True
    conda:
        "../envs/analysis.yaml"
    params:
        labels=needle_panel_labels,
        title=lambda wildcards: f"Needle in a haystack ({wildcards.dataset}), {wildcards.model}, {wildcards.question_mode}",
        code=package_code("figure_needle_heatmap.py"),
    script:
        "../scripts/figure_needle_heatmap.py"
