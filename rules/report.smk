# The HTML report: snakemake --report results/report.html [--configfile ...] after a run.
# It collects every output wrapped in report() (figures, tables) with its caption in report/*.rst.


report: "../report/workflow.rst"
