# Stage 6: figures, one rule (and one script) each, so one figure can be rebuilt alone.
# Each PNG goes into the report (snakemake --report results/report.html) with its caption, and its manifest
# records its layout (kvcache_bench/analysis/layout.py: size, and any text over text, off the figure or under 8 pt).


rule figure_quality_vs_retention:
    input:
        summary=rules.aggregate.output.summary,
    output:
        **figure_outputs("quality_vs_retention", "Quality"),
    log:
        "logs/figures/quality_vs_retention.log",
    localrule: True
    conda:
        "../envs/analysis.yaml"
    params:
        code=package_code("figure_quality_vs_retention.py"),
        title="Answer quality vs KV cache kept",
        band_alpha=0.15,
        highlight=highlighted_methods(),
        report_caption=figure_caption(),
        strongest=config["figures"]["strongest"],
    script:
        "../scripts/figure_quality_vs_retention.py"


# The appendix of a study of more than eight methods: every method in colour, one panel per family.
rule figure_quality_by_family:
    input:
        summary=rules.aggregate.output.summary,
    output:
        **figure_outputs("quality_by_family", "Quality"),
    log:
        "logs/figures/quality_by_family.log",
    localrule: True
    conda:
        "../envs/analysis.yaml"
    params:
        code=package_code("figure_quality_by_family.py"),
        title="Answer quality vs KV cache kept: every method, one panel per family",
        band_alpha=0.15,
        highlight=highlighted_methods(),
        report_caption=figure_caption(),
    script:
        "../scripts/figure_quality_by_family.py"


rule figure_paired_scatter:
    input:
        per_example=rules.aggregate.output.per_example,
    output:
        **figure_outputs("paired_scatter", "Quality"),
    log:
        "logs/figures/paired_scatter.log",
    localrule: True
    conda:
        "../envs/analysis.yaml"
    params:
        code=package_code("figure_paired_scatter.py"),
        title="Per example: method vs full cache",
        point_alpha=0.5,
        highlight=highlighted_methods(),
        report_caption=figure_caption(),
        strongest=config["figures"]["strongest"],
    script:
        "../scripts/figure_paired_scatter.py"


rule figure_batch_size:
    input:
        summary=rules.aggregate.output.summary,
    output:
        **figure_outputs("batch_size", "Batch size"),
    log:
        "logs/figures/batch_size.log",
    localrule: True
    conda:
        "../envs/analysis.yaml"
    params:
        code=package_code("figure_batch_size.py"),
        title="Full cache: does batching change the answers?",
    script:
        "../scripts/figure_batch_size.py"


rule figure_question_change:
    input:
        summary=rules.aggregate.output.summary,
        per_example=rules.aggregate.output.per_example,
    output:
        **figure_outputs("question_change", "Quality"),
    log:
        "logs/figures/question_change.log",
    localrule: True
    conda:
        "../envs/analysis.yaml"
    params:
        code=package_code("figure_question_change.py"),
        title="What a changed question costs: the press saw this question, none, or another",
        band_alpha=0.15,
        seed=SEED,
        n_resamples=config["analysis"]["bootstrap_resamples"],
        highlight=highlighted_methods(),
        report_caption=figure_caption(),
        strongest=config["figures"]["strongest"],
    script:
        "../scripts/figure_question_change.py"


# The multi-turn mode's figure (issue 52), in a study that asks the mode: score against the turn of the conversation.
rule figure_multi_turn:
    input:
        summary=rules.aggregate.output.summary,
        by_turn="results/tables/multi_turn_by_turn.csv",
    output:
        **figure_outputs("multi_turn", "Quality"),
    log:
        "logs/figures/multi_turn.log",
    localrule: True
    conda:
        "../envs/analysis.yaml"
    params:
        code=package_code("figure_multi_turn.py"),
        title="Multi-turn: answer quality at each turn of the conversation",
        band_alpha=0.15,
        highlight=highlighted_methods(),
        report_caption=figure_caption(),
        strongest=config["figures"]["strongest"],
    script:
        "../scripts/figure_multi_turn.py"
