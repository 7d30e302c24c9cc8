"""Where cost numbers are made: timed runs, hardware counters, their tables, figures and the GPU-hour plan."""
