# Stage 5: the study's table, one row per cell.


rule aggregate:
    input:
        scores=all_score_files(),
    output:
        summary="results/tables/summary.csv",
        manifest="results/tables/summary.csv.manifest.json",
    log:
        "logs/aggregate.log",
    params:
        cells=cells_for_table(),
        expected_n=[expected_examples(cell) for cell in study_cells()],
    conda:
        "../envs/analysis.yaml"
    script:
        "../scripts/aggregate.py"
