# Stage 6: figures, one rule (and one script) each, so one figure can be rebuilt alone.


rule figure_quality_vs_retention:
    input:
        summary="results/tables/summary.csv",
    output:
        png="results/figures/quality_vs_retention.png",
        svg="results/figures/quality_vs_retention.svg",
    log:
        "logs/figures/quality_vs_retention.log",
    params:
        title="Answer quality vs KV cache kept",
    conda:
        "../envs/analysis.yaml"
    script:
        "../scripts/figure_quality_vs_retention.py"
