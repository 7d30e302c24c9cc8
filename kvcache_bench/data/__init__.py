"""Where examples and models come from: LongBench/RULER rows, generated tasks, packaged and built models."""
