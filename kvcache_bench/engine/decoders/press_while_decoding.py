"""Each example alone, the press active over its question and its decoding (kvpress's decoding presses)."""

from __future__ import annotations

import time
from dataclasses import replace

import torch

from kvcache_bench.engine.caches import clear_key_masks, mean_cache_length
from kvcache_bench.engine.decoders import Decoding, at_batch_one
from kvcache_bench.engine.greedy import DecodePath, Generation, greedy_decode
from kvcache_bench.engine.loading import synchronize
from kvcache_bench.engine.prefill import prefill, pressed_and_trailing
from kvcache_bench.study.prompt_tokens import PromptTokens
from kvcache_bench.study.question_modes import QuestionMode

WHILE_DECODING_FALLBACK = (
    "the press compresses while decoding, and its hooks keep one sequence's step counts and hidden states: "
    "decoded at batch 1"
)


def presses_while_decoding(press) -> tuple[bool, bool] | None:
    """(press over the prefill, press over question and decoding) as kvpress's pipeline applies ``press``, for a press
    that compresses while decoding; None for one that compresses the prompt alone.

    Read from the press's classes, as the pipeline's ``_forward`` reads them: a ``DecodingPress`` (CAMPress among
    them) prefills the context without the press; a ``PrefillDecodingPress`` and a decoding ``DMSPress`` keep it
    active for the prefill too."""
    if press is None:
        return None
    from kvpress import DecodingPress, DMSPress, PrefillDecodingPress

    if isinstance(press, DecodingPress):
        return False, True
    if isinstance(press, PrefillDecodingPress) or (isinstance(press, DMSPress) and press.decoding):
        return True, True
    return None


@torch.inference_mode()
def generate_one_pressing_while_decoding(settings: Decoding, prompt: PromptTokens) -> Generation:
    """Batch-1 greedy generation with a press that compresses while decoding, as kvpress's pipeline runs it.

    The tokens ``pressed_and_trailing`` gives the press (the context, question-agnostic; context and question but
    the held-back tail, question-aware) are prefilled, under the press only where the pipeline prefills under it
    (``presses_while_decoding``); the rest of the prompt (the pipeline's question) and every greedy step then run
    inside one ``with press(model)``, at the original positions. ``kept_tokens`` is what the cache held after the
    last step and ``pressed_tokens`` every token that went through it (the prompt and the answer but its last
    token), so their ratio is the share the press left."""
    start = time.perf_counter()
    model, press = settings.model, settings.press
    over_prefill, _ = presses_while_decoding(press)
    clear_key_masks(model)  # an earlier example's masks (a masking base press) must not hide this one's keys
    cache = settings.make_cache()
    pressed_ids, trailing_ids = pressed_and_trailing(prompt, settings.mode)
    last_logits = prefill(model, cache, pressed_ids, press if over_prefill else None)
    with press(model):  # not press_context: a prefill press's masks stay, as the pipeline leaves them
        if trailing_ids:
            last_logits = prefill(model, cache, trailing_ids, None, start_position=len(pressed_ids))
        generated = greedy_decode(settings, cache, last_logits, prompt.length)
    synchronize(model.device)
    held = prompt.length + len(generated) - 1
    return Generation(generated, prompt.length, mean_cache_length(cache), time.perf_counter() - start, held)


def decode(settings: Decoding, prompts: list[PromptTokens], others=None) -> tuple[list[Generation], DecodePath]:
    if settings.mode == QuestionMode.MULTI_TURN:
        # each turn alone, from its first prompt: the press over what it sees of it, then active over every appended
        # turn and the answer (``others``: each turn's appended ids)
        from kvcache_bench.engine.decoders.multi_turn import ConversationTurn, as_question_aware

        prompts = [as_question_aware(ConversationTurn(p, list(a))) for p, a in zip(prompts, others)]
        settings = replace(settings, mode=QuestionMode.QUESTION_AWARE)
    generations = [generate_one_pressing_while_decoding(settings, prompt) for prompt in prompts]
    return generations, at_batch_one(settings, WHILE_DECODING_FALLBACK)


def generate_turns_in_order(
    settings: Decoding, conversations: list
) -> tuple[list[list[Generation]], list[list], DecodePath]:
    """``multi_turn.generate_turns_in_order`` for a press that compresses while decoding: one turn at a time, each from
    its first prompt with the press active over every appended turn (the model's earlier answers among them) and its
    answer. ``conversations``: ``multi_turn.ConversationInOrder``."""
    from kvcache_bench.engine.decoders.multi_turn import ConversationTurn, as_question_aware

    aware = replace(settings, mode=QuestionMode.QUESTION_AWARE)
    generations, asked = [], []
    for conversation in conversations:
        answered: list[Generation] = []
        turns: list[ConversationTurn] = []
        appended: list[int] = []
        for turn in range(1, conversation.turns + 1):
            if turn > 1:
                appended = appended + conversation.appended_for(turn, [g.token_ids for g in answered])
            turns.append(ConversationTurn(conversation.first_turn, list(appended)))
            answered.append(generate_one_pressing_while_decoding(aware, as_question_aware(turns[-1])))
        generations.append(answered)
        asked.append(turns)
    return generations, asked, at_batch_one(settings, WHILE_DECODING_FALLBACK)
