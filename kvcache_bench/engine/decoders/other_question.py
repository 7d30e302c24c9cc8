"""Context + another question on it compressed once, that question's slots removed, each question decoded from the
rest (other_question; same_question with the prompt's own): what a cache reused for another question keeps."""

from __future__ import annotations

from kvcache_bench.engine.batched_decode import DecodePath
from kvcache_bench.engine.decoders import Decoding, in_prompt_order, shared_context_groups
from kvcache_bench.engine.other_question import OtherQuestionGroup, generate_other_question
from kvcache_bench.engine.single_decode import Generation
from kvcache_bench.study.prompts import PromptTokens


def decode(
    settings: Decoding, prompts: list[PromptTokens], others: list[list[int]] | None = None
) -> tuple[list[Generation], DecodePath]:
    groups = shared_context_groups(prompts, others)
    generations, path = generate_other_question(
        settings.model,
        [
            OtherQuestionGroup(prompts[g[0]].context_ids, others[g[0]], [prompts[i].question_ids for i in g])
            for g in groups
        ],
        settings.press,
        settings.max_new_tokens,
        settings.stop_ids,
        settings.decode_batch_size,
        make_cache=settings.make_cache,
        min_new_tokens=settings.min_new_tokens,
    )
    return in_prompt_order(groups, generations), path
