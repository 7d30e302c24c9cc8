"""Snakemake adapter: train the canary model (kvcache_bench.canary.train) into the rule's model directory."""

from kvcache_bench.canary.settings import TrainSettings
from kvcache_bench.canary.train import train_canary
from kvcache_bench.runtime.gpu_job import gpu_job
from kvcache_bench.workflow import current_job

job = current_job(globals())
with gpu_job(job):  # the canary is built here from its settings, not loaded
    # DataLoader workers as the settings ask (the rule's threads = num_workers + 1), fewer if Snakemake gave fewer cores
    workers = min(job.params.settings.get("num_workers", 0), max(0, int(job.threads) - 1))
    settings = TrainSettings.from_dict({**job.params.settings, "num_workers": workers})
    record = train_canary(settings, job.output.model_dir)
    print(f"trained the canary for {record['steps_done']} steps in {record['seconds']} s")
