# The README's performance table as workflow outputs (perf.engine_comparison): the device's measured rates,
# then every engine's examples/s on the study's own cells beside the hardware floor at those rates.

if ENGINE_COMPARISON:

    rule measure_hardware_rates:
        output:
            rates="results/perf/hardware_rates.json",
        log:
            "logs/measure_hardware_rates.log",
        benchmark:
            "benchmarks/measure_hardware_rates.tsv"
        conda:
            "../envs/generate.yaml"
        resources:
            gpu=1,
        params:
            code=package_code("measure_hardware_rates.py"),
            device=GENERATION["device"],
            dtype=engine_comparison_model()["dtype"],
            settings=ENGINE_COMPARISON["rates"],
        script:
            "../scripts/measure_hardware_rates.py"

    rule engine_comparison:
        input:
            predictions=engine_comparison_predictions(),
            rates=rules.measure_hardware_rates.output.rates,
            model_dir=engine_comparison_model()["path"],
        output:
            csv=restored_if_failed("results/tables/engine_comparison.csv"),
            md=restored_if_failed("results/tables/engine_comparison.md"),
        log:
            "logs/engine_comparison.log",
        localrule: True
        conda:
            "../envs/analysis.yaml"
        params:
            code=package_code("engine_comparison.py"),
            cells=engine_comparison_labels(),
            dtype=engine_comparison_model()["dtype"],
        script:
            "../scripts/engine_comparison.py"
