"""Write the multi-GPU check's study: the random-model demo (config/demo-random.yaml) with one generation cell per
GPU and a bigger model.

    python tools/gpu/multigpu_config.py --gpus 2 --out <dir> [--rehearsal]

Writes <dir>/multigpu.yaml and <dir>/model_config.json. The model (random init, ~0.4B parameters, bf16)
makes each cell last several seconds on an H200, long enough to see the jobs overlap. --rehearsal keeps
the demo's tiny float32 model so the whole check can be exercised on a CPU machine.

No config/*.yaml instead: the study depends on the GPU count (one cell per GPU) and on --rehearsal's model.
"""

import argparse
import json
from pathlib import Path

import yaml

# One evicting method per GPU after the full cache: every cell is a separate generation job.
METHODS = ["full_cache", "snapkv", "streaming_llm", "knorm", "tova", "pyramidkv", "random", "expected_attention"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rehearsal", action="store_true")
    args = parser.parse_args()
    if not 1 <= args.gpus <= len(METHODS):
        raise SystemExit(f"--gpus must be between 1 and {len(METHODS)}")

    config = yaml.safe_load(Path("config/demo-random.yaml").read_text())
    model = config["models"]["demo-tiny-llama"]
    model_config = json.loads(Path(model["build"]["model_config"]).read_text())
    if not args.rehearsal:
        model_config.update(
            hidden_size=2048,
            intermediate_size=5632,
            num_hidden_layers=8,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=128,
            torch_dtype="bfloat16",
        )
        model["dtype"] = "bfloat16"
        config["datasets"]["synthetic"]["synthetic"].update(n_documents=30, min_words=1500, max_words=3000)
        config["datasets"]["synthetic"]["num_examples"] = 60
        config["generation"]["max_new_tokens"] = {"synthetic_qa": 64}
    model["max_context_tokens"] = 8000
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "model_config.json").write_text(json.dumps(model_config, indent=2))
    model["build"]["model_config"] = str(args.out / "model_config.json")
    model["path"] = "results/models/multigpu-llama"
    config["models"] = {"multigpu-llama": model}
    config["methods"] = METHODS[: args.gpus]
    config["retentions"] = [0.5]
    config.pop("batch_size_overrides", None)  # one generation job per method: N jobs for N GPUs
    config["generation"]["device"] = "auto"  # GPU when there is one; the allocator picks which
    (args.out / "multigpu.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


if __name__ == "__main__":
    main()
