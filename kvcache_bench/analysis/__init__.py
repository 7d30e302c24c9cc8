"""Where scores and tables are made: per-example metrics, the summary with its intervals, figures."""
