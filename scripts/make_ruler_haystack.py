"""Snakemake adapter: generate one RULER-style task on natural English filler (kvcache_bench.data.haystack)."""

from kvcache_bench.data.haystack import make_ruler_haystack_dataset
from kvcache_bench.workflow import current_job, logging_to, params_of, settings_of

job = current_job(globals())
with logging_to(job):
    p = settings_of(job)
    facts = make_ruler_haystack_dataset(
        p.task,
        tokenizer_dir=job.input.tokenizer,
        prompt_length=p.prompt_length,
        questions_per_haystack=p.questions_per_haystack,
        num_examples=p.num_examples,
        seed=p.seed,
        ruler_layout_path=job.output.ruler_layout,
        rows_path=job.output.rows,
        params=params_of(job),
    )
    print(
        f"wrote {facts['rows']} rows of {p.dataset}/{p.task}, prompts of "
        f"{min(facts['prompt_lengths'])}-{max(facts['prompt_lengths'])} tokens"
    )
