"""An example's prompt as token ids, its context part and its question part, tokenised once as LongBench's pred.py.

``study.prompts`` says what each task's prompt is (its template, where the question starts); this module turns
an example's text into the ids the engine prefills: ``build_prompt_tokens`` truncates an over-long raw prompt
in its middle as LongBench does, wraps it in the model's chat template where the task uses one, and splits the
ids where the question begins. In question-aware mode the press sees both parts (but the held-back tail); in
question-agnostic mode it compresses the context part alone and the question part is appended afterwards.
Kept apart from the templates because only what tokenises (the engine, the canary, the probes) needs it: the
study's config checks, the data readers and the scorers read the templates and lengths alone.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from dataclasses import KW_ONLY, dataclass, replace

from kvcache_bench.study.prompts import (
    KVPRESS_PIPELINE_PROMPT_TASKS,
    KVPRESS_QUESTION_SUFFIX,
    NEWLINE_STOP_TASKS,
    RAW_PROMPT_TASKS,
    split_prompt,
)

MAX_CONTEXT_TOKENS, MODEL_CONTEXT = "max_context_tokens", "model_context"  # a record's truncated_by


@dataclass(frozen=True)
class PromptTokens:
    context_ids: list[int]  # compressed by the press in every question mode
    question_ids: list[int]  # seen by the press only in question-aware mode (but its held-back tail)
    _: KW_ONLY
    truncated: bool = False
    # the raw prompt's tokens before truncation (LongBench's count, special tokens included); None: context + question
    original_tokens: int | None = None
    chat_template: bool = False
    # Trailing tokens of question_ids no press ever sees: the chat template's generation suffix (e.g.
    # "<|im_end|>\n<|im_start|>assistant\n") and RULER's answer prefix. kvpress's pipeline runs them after
    # compressing; pressed, a press could evict the very header the model answers from.
    held_back_tokens: int = 0
    # which limit cut the prompt: "max_context_tokens" (the study's setting, LongBench's max_length) or
    # "model_context" (the model's trained positions less the answer's max_new_tokens: prompt_within_context)
    truncated_by: str | None = None

    def __post_init__(self):
        if self.original_tokens is None:
            object.__setattr__(self, "original_tokens", self.length)
        if self.truncated and self.truncated_by is None:
            object.__setattr__(self, "truncated_by", MAX_CONTEXT_TOKENS)

    @property
    def length(self) -> int:
        return len(self.context_ids) + len(self.question_ids)


def uses_chat_template(tokenizer, task: str, chat_template: bool = True) -> bool:
    """Whether ``task``'s prompt is wrapped in the tokenizer's chat template: the model takes one
    (``models.<name>.chat_template``, default true; false for a base model whose tokenizer carries a template it was
    never trained on), the tokenizer has one, and LongBench does not send the task raw."""
    return chat_template and bool(getattr(tokenizer, "chat_template", None)) and task not in RAW_PROMPT_TASKS


# Marks where the question starts inside the user turn while the chat template renders it; removed after.
_QUESTION_MARK = "\u2063KVCACHE_BENCH_QUESTION\u2063"


def _truncate_like_longbench(tokenizer, context_text: str, question_text: str, max_tokens: int):
    """LongBench's pred.py: over-long raw prompts keep their first and last max_length/2 tokens, decoded.

    The raw prompt (no chat template) is tokenised with the tokenizer's own special tokens, cut, and
    decoded (special tokens skipped); the chat template comes afterwards. Returns the (possibly cut)
    context and question text, whether it was cut, and the raw token count.
    """
    raw_text = context_text + question_text
    encoded = tokenizer(raw_text, add_special_tokens=True, return_offsets_mapping=True)
    raw_ids = encoded["input_ids"]
    if len(raw_ids) <= max_tokens:
        return context_text, question_text, False, len(raw_ids)
    half = int(max_tokens / 2)
    head_text = tokenizer.decode(raw_ids[:half], skip_special_tokens=True)
    tail_ids = raw_ids[-half:]
    tail_text = tokenizer.decode(tail_ids, skip_special_tokens=True)
    cut_text = head_text + tail_text
    question_start = _first_token_ending_after(encoded["offset_mapping"], len(context_text))
    kept_question = tokenizer.decode(raw_ids[question_start:], skip_special_tokens=True)
    if question_start >= len(raw_ids) - half and tail_text.endswith(kept_question):
        boundary = len(cut_text) - len(kept_question)
    elif question_text and question_text in tail_text:
        boundary = len(head_text) + tail_text.rindex(question_text)
    else:  # the question itself was cut: what survives of it is question text all the same
        boundary = len(head_text)
    return cut_text[:boundary], cut_text[boundary:], True, len(raw_ids)


def _first_token_ending_after(offsets, char_index: int) -> int:
    """Index of the first token that reaches past ``char_index`` (a token straddling it belongs to what follows)."""
    return next((i for i, (_, end) in enumerate(offsets) if end > char_index), len(offsets))


def _held_back_from(text: str, offset: tuple[int, int], held_back_char: int) -> bool:
    """Whether the token at ``offset`` is the first of the held-back tail: it starts there, or reaches into it with
    nothing but whitespace before it. A raw RULER prompt's answer prefix is RULER's " Answer: ..." (its space left in
    the question by kvpress's layout), and a byte-level BPE encodes it as "ĠAnswer": held back whole. A token that
    carries the user's words stays with them (zero-width tokens, e.g. an appended EOS, never start the tail)."""
    start, end = offset
    if end <= start or end <= held_back_char:
        return False
    return start >= held_back_char or not text[start:held_back_char].strip()


def _generation_suffix(tokenizer) -> str:
    """What the chat template appends after the user's words (kvpress finds it the same way)."""
    separator = "#" * 32
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": "x" + separator}],
        add_generation_prompt=True,
        tokenize=False,
        enable_thinking=False,
    )
    return rendered.split(separator, 1)[1]


def build_prompt_tokens(
    tokenizer,
    task: str,
    context: str,
    question: str,
    max_context_tokens: int,
    answer_prefix: str = "",
    *,
    chat_template: bool = True,
) -> PromptTokens:
    """Tokenise an example once, as a whole, and split the ids where the question begins.

    As LongBench's pred.py: the raw prompt is truncated first (its middle, measured in raw-prompt tokens
    against ``max_context_tokens``), then wrapped in the model's chat template where the task uses it.
    Raw prompts are tokenised with the tokenizer's own special tokens (pred.py's ``tokenizer(prompt)``);
    templated ones without (the template carries them, as kvpress encodes them; pred.py would add a second
    BOS to a Llama-3 template). The whole prompt is tokenised in one go and the context/question boundary
    is found on token boundaries, so the ids equal the whole prompt's: a byte-level BPE merges the space of
    "Question: " into the question's first word, and two separate encodes would not.
    ``answer_prefix`` (RULER) opens the assistant's turn.

    ``chat_template=False`` (``models.<name>.chat_template: false``) sends every task raw, as a tokenizer without a
    template does. A raw prompt takes the form its benchmark gives a base model (``prompts.KVPRESS_PIPELINE_PROMPT_
    TASKS``): LongBench's and RULER's the text itself with the tokenizer's special tokens; kvpress's needle test's
    the tokenizer's bos_token, the context, the question, "\\n", the answer prefix, with none added (kvpress's
    pipeline), the "\\n" held back with the answer prefix as a chat template's generation suffix is.
    """
    if not getattr(tokenizer, "is_fast", False):
        raise TypeError(
            f"{type(tokenizer).__name__} is not a fast tokenizer: token offsets are needed to split the prompt"
        )
    context_text, question_text = split_prompt(task, context, question)
    context_text, question_text, truncated, original = _truncate_like_longbench(
        tokenizer, context_text, question_text, max_context_tokens
    )
    chat = uses_chat_template(tokenizer, task, chat_template)
    add_special_tokens = not chat
    if chat:
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": context_text + _QUESTION_MARK + question_text}],
            add_generation_prompt=True,
            tokenize=False,
            enable_thinking=False,
        )
        question_char = rendered.index(_QUESTION_MARK)
        text = rendered.replace(_QUESTION_MARK, "", 1)
        suffix = _generation_suffix(tokenizer)
        if not text.endswith(suffix):
            raise ValueError(f"the chat template's generation suffix {suffix!r} does not end the rendered prompt")
        held_back_char = len(text) - len(suffix)
    elif task in KVPRESS_PIPELINE_PROMPT_TASKS:
        # kvpress/pipeline.py preprocess, no chat template: context = bos_token + context, each question + "\n" +
        # answer_prefix, encoded with add_special_tokens=False. (A tokenizer whose bos_token is None makes kvpress's
        # `bos_token + context` raise; here it gets no BOS, as its tokenizer would add none.)
        bos = tokenizer.bos_token or ""
        text = bos + context_text + question_text + KVPRESS_QUESTION_SUFFIX
        question_char = len(bos) + len(context_text)
        held_back_char = len(text) - len(KVPRESS_QUESTION_SUFFIX)
        add_special_tokens = False
    else:
        text, question_char = context_text + question_text, len(context_text)
        held_back_char = len(text)
    text += answer_prefix
    encoded = tokenizer(text, add_special_tokens=add_special_tokens, return_offsets_mapping=True)
    ids, offsets = encoded["input_ids"], encoded["offset_mapping"]
    question_start = _first_token_ending_after(offsets, question_char)
    held_back_start = next(
        (i for i in range(question_start, len(ids)) if _held_back_from(text, offsets[i], held_back_char)),
        len(ids),
    )
    return PromptTokens(
        ids[:question_start],
        ids[question_start:],
        truncated=truncated,
        original_tokens=original,
        chat_template=chat,
        held_back_tokens=len(ids) - held_back_start,
    )


# A model worker serves many cells of the same rows: their prompts are tokenised once per tokenizer (a sweep's
# 43 cells of 100 needles spent 0.9 s each tokenising them again). Bounded by the tokens held, per tokenizer; a
# tokenizer's memo goes with it.
PROMPT_MEMO_TOKENS = 8_000_000
_PROMPT_MEMOS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class _PromptMemo(OrderedDict):
    """One tokenizer's prompts, least recently used first, and the tokens they hold."""

    tokens = 0


def row_prompt_tokens(
    tokenizer, task: str, row: dict, max_context_tokens: int, *, chat_template: bool = True
) -> PromptTokens:
    """``build_prompt_tokens`` of a data row (its context, input and answer prefix), remembered per tokenizer.

    ``chat_template``: the model's ``models.<name>.chat_template`` (``ModelSettings.chat_template``). The same text,
    task, limit and setting give the same ``PromptTokens`` (frozen; its id lists are read, never changed).
    """
    key = (task, row["context"], row["input"], max_context_tokens, row.get("answer_prefix") or "")
    try:
        memo = _PROMPT_MEMOS.setdefault(tokenizer, _PromptMemo())
    except TypeError:  # a tokenizer that cannot be weakly referenced is not remembered
        return build_prompt_tokens(tokenizer, *key, chat_template=chat_template)
    if (key, chat_template) in memo:
        memo.move_to_end((key, chat_template))
        return memo[key, chat_template]
    prompt = memo[key, chat_template] = build_prompt_tokens(tokenizer, *key, chat_template=chat_template)
    memo.tokens += prompt.length
    while memo.tokens > PROMPT_MEMO_TOKENS and len(memo) > 1:
        memo.tokens -= memo.popitem(last=False)[1].length
    return prompt


def prompt_within_context(
    tokenizer,
    task: str,
    row: dict,
    max_context_tokens: int,
    *,
    model_context: int | None,
    answer_tokens: int,
    chat_template: bool = True,
) -> PromptTokens:
    """``row_prompt_tokens`` under two limits: ``max_context_tokens`` (LongBench's max_length, on the raw prompt) and
    the model's trained positions ``model_context`` less the ``answer_tokens`` its answer may take.

    LongBench cuts the raw prompt, and the chat template, the held-back suffix and a re-encoding of the cut text
    then add tokens, so the prompt as prefilled is measured: while it and its answer do not fit, the raw limit is
    lowered by the excess and the prompt built again (once, most often), cut in its middle as LongBench cuts.
    ``truncated_by`` then says ``model_context``. None for ``model_context``: the model's config names no length.
    """
    prompt = row_prompt_tokens(tokenizer, task, row, max_context_tokens, chat_template=chat_template)
    if model_context is None:
        return prompt
    room, limit, cut = model_context - answer_tokens, max_context_tokens, False
    while prompt.length > room:
        # LongBench keeps int(limit / 2) tokens at each end: a limit below 2 would keep the whole prompt ([-0:])
        limit = min(limit, prompt.original_tokens) - (prompt.length - room)
        if limit < 2:
            raise ValueError(
                f"example {row.get('_id')!r}: the model has {model_context} positions and its answer may take "
                f"{answer_tokens} (max_new_tokens), which leaves {room} for the prompt, but what the chat template "
                f"and the answer prefix add to any text already takes more. Lower generation.max_new_tokens for task "
                f"{task}, or use a model trained on a longer context."
            )
        prompt, cut = row_prompt_tokens(tokenizer, task, row, limit, chat_template=chat_template), True
    return replace(prompt, truncated_by=MODEL_CONTEXT) if cut else prompt


def vocabulary_problem(
    prompts: list[PromptTokens], ids: list[str], embedding_rows: int, tokenizer_path: str
) -> str | None:
    """A prompt token id the model has no embedding for: the tokenizer is not this model's (torch would stop
    with "IndexError: index out of range in self", naming neither)."""
    for prompt, example in zip(prompts, ids):
        largest = max(prompt.context_ids + prompt.question_ids, default=-1)
        if largest >= embedding_rows:
            return (
                f"example {example!r}: its prompt holds token id {largest}, but the model has embeddings for ids "
                f"0..{embedding_rows - 1} only: the tokenizer in {tokenizer_path!r} is not this model's (a tokenizer "
                "of a larger vocabulary). Use the tokenizer the model was trained with."
            )
    return None


def extra_stop_ids(tokenizer, task: str) -> set[int]:
    """Task-specific stops beyond the model's end-of-turn tokens (LongBench stops samsum at a newline); the same for a
    base model: neither RULER nor kvpress stops one before its EOS or the token budget (``prompts.stop_rule``)."""
    if task in NEWLINE_STOP_TASKS:
        return set(tokenizer.encode("\n", add_special_tokens=False)[-1:])
    return set()


# Marks the first user turn while the chat template renders a conversation: what follows it is the same whatever
# the first turn's (long, possibly cut) context was, so the conversation is rendered with this in its place.
_FIRST_TURN_MARK = "\u2063KVCACHE_BENCH_FIRST_TURN\u2063"
RAW_TURN_SEPARATOR = "\n\n"  # a base model's conversation: between an answer and the next question's text


def _question_text(task: str, row: dict) -> str:
    """The question part of a row's prompt (``split_prompt``): the words a later turn's user asks."""
    return split_prompt(task, row["context"], row["input"])[1]


def _tokens(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"] if text else []


def appended_turn_ids(
    tokenizer, task: str, rows: list[dict], answers: list[str], *, chat_template: bool = True
) -> list[list[int]]:
    """Per turn of a conversation on one context (``rows[t - 1]`` asks turn t; ``answers[t - 1]`` is turn t's answer
    its history keeps), the token ids appended after turn t - 1's prompt: [] for turn 1 (its prompt is
    ``build_prompt_tokens``'s), then the end of the previous answer's turn and the next question in the model's form.

    Each turn's ids are made of segments tokenised apart, none with special tokens added: the previous answer, the
    template's text up to the next question, the question, the template's text after it (the generation prompt) and
    the row's answer prefix. So turn 1's prompt ids followed by every appended list are the conversation a plain run
    would be given, and no answer's tokens merge with the template's. A chat model's turns are rendered by its chat
    template (as ``build_prompt_tokens`` renders turn 1); a template that rewrites earlier turns once a later one
    follows (e.g. one that drops reasoning from past answers) is refused, since a cache cannot be rewritten.
    A base model's (or a raw task's) later turn is the answer, a blank line, the question part of the task's prompt.
    """
    if len(answers) < len(rows) - 1:
        raise ValueError(f"a conversation of {len(rows)} turns needs {len(rows) - 1} answers, got {len(answers)}")
    appended: list[list[int]] = [[]]
    chat = uses_chat_template(tokenizer, task, chat_template)
    pipeline_suffix = KVPRESS_QUESTION_SUFFIX if not chat and task in KVPRESS_PIPELINE_PROMPT_TASKS else ""
    messages = [{"role": "user", "content": _FIRST_TURN_MARK}]
    previous_prefix = rows[0].get("answer_prefix") or ""
    previous_end = pipeline_suffix + previous_prefix or _question_text(task, rows[0])  # what turn 1's prompt ends with
    before = _render(tokenizer, messages) if chat else ""
    for turn in range(1, len(rows)):
        row, answer = rows[turn], answers[turn - 1].strip()
        question, prefix = _question_text(task, row), row.get("answer_prefix") or ""
        if chat:
            messages = messages + [
                {"role": "assistant", "content": previous_prefix + answer},
                {"role": "user", "content": question},
            ]
            rendered = _render(tokenizer, messages)
            if not rendered.startswith(before + previous_prefix + answer):
                raise ValueError(
                    f"the chat template of {getattr(tokenizer, 'name_or_path', 'this tokenizer')!r} renders earlier "
                    "turns differently once a later turn follows: a multi_turn cache cannot be rewritten. Use a model "
                    "whose template only appends, or models.<name>.chat_template: false."
                )
            rest = rendered[len(before + previous_prefix + answer) :]
            # the segments are cut from the rendering itself: a template that trims a message (Gemma's, Llama 3's)
            # renders the question without its outer whitespace, and the ids must spell what it renders
            question = question.strip()
            at = rest.find(question)
            if at < 0:
                raise ValueError(f"the chat template does not render the question {question!r} as given")
            between, after = rest[:at], rest[at + len(question) :]
            before = rendered
        else:
            # the answer continues the previous turn's text as a base model writes it: a space after a word
            answer = answer if not previous_end or previous_end[-1].isspace() else " " + answer
            between, after = RAW_TURN_SEPARATOR, pipeline_suffix
            previous_end = after + prefix or question
        segments = [answer, between, question, after, prefix]
        appended.append([token for segment in segments for token in _tokens(tokenizer, segment)])
        previous_prefix = prefix
    return appended


def _render(tokenizer, messages: list[dict]) -> str:
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, enable_thinking=False)
