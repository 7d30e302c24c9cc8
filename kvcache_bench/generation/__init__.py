"""Where predictions are made: loading a model, prefill under a press, decoding, one cell's job."""
