"""kvcache-bench: measure what KV-cache compression costs an LLM on long-context QA.

One module per pipeline stage; docs/modules.md maps who imports whom and where each number is made.
The Snakemake scripts in ``scripts/`` are thin adapters over these modules.
"""

__version__ = "0.1.0"
