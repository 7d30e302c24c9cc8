"""The benchmarks' scoring functions, one module per benchmark, each matched to the benchmark's own evaluator.

Matched definition by definition, quirks kept, so a number here can be set beside a published one.

Each function scores one prediction against one reference (or, InfiniteBench's, against the example's whole
reference list) and returns a number in [0, 1]. Which task uses which, how the references are combined and
what is done to a prediction first is ``analysis.metrics``'s: the scorers know nothing of tasks.
"""
