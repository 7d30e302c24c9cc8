"""Where and how a job runs: GPU slots and locks, model workers, the generate and probe jobs, a cell's refusal."""
