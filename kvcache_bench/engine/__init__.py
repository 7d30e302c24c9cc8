"""Predictions in torch and kvpress only: loading, caches, prefill under a press, decoders, one cell's run.

Knows neither Snakemake nor GPUs (runtime/ places a job and hands it here); tests/test_module_imports.py says so.
"""
