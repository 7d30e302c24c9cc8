"""Task prompts at parity with LongBench (and RULER), and turning an example into context and question token ids.

The prompt is split in two: the *context part* (everything up to where the question appears) and the
*question part*. In question-aware mode the press sees both (but the prompt's last token); in
question-agnostic mode it compresses the context part alone and the question part is appended afterwards.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass

# LongBench v1's config/dataset2prompt.json and dataset2maxlen.json (THUDM/LongBench), English tasks.
# Kept verbatim, quirks included ("asconcisely", the space before " Answer" in qasper, the trailing
# spaces after "is:"), because a changed prompt is a different benchmark.
LONGBENCH_PROMPTS = {
    "narrativeqa": (
        "You are given a story, which can be either a novel or a movie script, and a question. Answer the question "
        "asconcisely as you can, using a single phrase if possible. Do not provide any explanation.\n\nStory: "
        "{context}\n\nNow, answer the question based on the story asconcisely as you can, using a single phrase if "
        "possible. Do not provide any explanation.\n\nQuestion: {input}\n\nAnswer:"
    ),
    "qasper": (
        "You are given a scientific article and a question. Answer the question as concisely as you can, "
        "using a single phrase or sentence if possible. If the question cannot be answered based on the "
        'information in the article, write "unanswerable". If the question is a yes/no question, answer '
        '"yes", "no", or "unanswerable". Do not provide any explanation.\n\nArticle: {context}\n\n Answer the '
        "question based on the above article as concisely as you can, using a single phrase or sentence if "
        "possible. If the question cannot be answered based on the information in the article, write "
        '"unanswerable". If the question is a yes/no question, answer "yes", "no", or "unanswerable". Do not '
        "provide any explanation.\n\nQuestion: {input}\n\nAnswer:"
    ),
    "multifieldqa_en": (
        "Read the following text and answer briefly.\n\n{context}\n\nNow, answer the following question based on "
        "the above text, only give me the answer and do not output any other words.\n\nQuestion: {input}\nAnswer:"
    ),
    "hotpotqa": (
        "Answer the question based on the given passages. Only give me the answer and do not output any other "
        "words.\n\nThe following are given passages.\n{context}\n\nAnswer the question based on the given passages. "
        "Only give me the answer and do not output any other words.\n\nQuestion: {input}\nAnswer:"
    ),
    "gov_report": (
        "You are given a report by a government agency. Write a one-page summary of the report.\n\nReport:\n"
        "{context}\n\nNow, write a one-page summary of the report.\n\nSummary:"
    ),
    "qmsum": (
        "You are given a meeting transcript and a query containing a question or instruction. Answer the query in "
        "one or more sentences.\n\nTranscript:\n{context}\n\nNow, answer the query based on the above meeting "
        "transcript in one or more sentences.\n\nQuery: {input}\nAnswer:"
    ),
    "multi_news": (
        "You are given several news passages. Write a one-page summary of all news. \n\nNews:\n{context}\n\n"
        "Now, write a one-page summary of all the news.\n\nSummary:"
    ),
    "trec": (
        "Please determine the type of the question below. Here are some examples of questions.\n\n{context}\n{input}"
    ),
    "triviaqa": (
        "Answer the question based on the given passage. Only give me the answer and do not output any other "
        "words. The following are some examples.\n\n{context}\n\n{input}"
    ),
    "samsum": (
        "Summarize the dialogue into a few short sentences. The following are some examples.\n\n{context}\n\n{input}"
    ),
    "passage_count": (
        "There are some paragraphs below sourced from Wikipedia. Some of them may be duplicates. Please carefully "
        "read these paragraphs and determine how many unique paragraphs there are after removing duplicates. In "
        "other words, how many non-repeating paragraphs are there in total?\n\n{context}\n\nPlease enter the final "
        "count of unique paragraphs after removing duplicates. The output format should only contain the number, "
        "such as 1, 2, 3, and so on.\n\nThe final answer is: "
    ),
    "passage_retrieval_en": (
        "Here are 30 paragraphs from Wikipedia, along with an abstract. Please determine which paragraph the "
        "abstract is from.\n\n{context}\n\nThe following is an abstract.\n\n{input}\n\nPlease enter the number of "
        'the paragraph that the abstract is from. The answer format must be like "Paragraph 1", "Paragraph 2", '
        "etc.\n\nThe answer is: "
    ),
    "lcc": "Please complete the code given below. \n{context}Next line of code:\n",
    "repobench-p": "Please complete the code given below. \n{context}{input}Next line of code:\n",
}
# 2wikimqa and musique share hotpotqa's template in LongBench.
LONGBENCH_PROMPTS["2wikimqa"] = LONGBENCH_PROMPTS["hotpotqa"]
LONGBENCH_PROMPTS["musique"] = LONGBENCH_PROMPTS["hotpotqa"]

LONGBENCH_MAX_NEW_TOKENS = {
    "narrativeqa": 128,
    "qasper": 128,
    "multifieldqa_en": 64,
    "hotpotqa": 32,
    "2wikimqa": 32,
    "musique": 32,
    "gov_report": 512,
    "qmsum": 512,
    "multi_news": 512,
    "trec": 64,
    "triviaqa": 32,
    "samsum": 128,
    "passage_count": 32,
    "passage_retrieval_en": 32,
    "lcc": 64,
    "repobench-p": 64,
}
LONGBENCH_TASKS = tuple(LONGBENCH_MAX_NEW_TOKENS)

# LongBench's pred.py sends these few-shot and code tasks to the model without the chat template
# (the examples in the context already show the answer format).
RAW_PROMPT_TASKS = frozenset({"trec", "triviaqa", "samsum", "lcc", "repobench-p"})
# ... and stops samsum at the first newline after at least one new token (its few-shot answers are one line).
NEWLINE_STOP_TASKS = frozenset({"samsum"})

# RULER's 13 subtasks as kvpress's evaluation stores them (dataset simonjegou/ruler): the row's
# context and question concatenate to RULER's input; answer_prefix starts the model's answer.
RULER_MAX_NEW_TOKENS = {
    "niah_single_1": 128,
    "niah_single_2": 128,
    "niah_single_3": 128,
    "niah_multikey_1": 128,
    "niah_multikey_2": 128,
    "niah_multikey_3": 128,
    "niah_multivalue": 128,
    "niah_multiquery": 128,
    "vt": 30,
    "cwe": 120,
    "fwe": 50,
    "qa_1": 32,
    "qa_2": 32,
}
RULER_TASKS = tuple(RULER_MAX_NEW_TOKENS)
RULER_PROMPTS = {task: "{context}{input}" for task in RULER_TASKS}

# kvpress's needle test (kvcache_bench/data/needle.py): its context holds the wrapped haystack, its question
# follows, its answer prefix opens the answer, as kvpress's pipeline joins them. The answer is one sentence.
NEEDLE_TASK = "needle_in_haystack"
NEEDLE_MAX_NEW_TOKENS = {NEEDLE_TASK: 64}
NEEDLE_PROMPTS = {NEEDLE_TASK: "{context}{input}"}

# kvpress's other datasets in kvpress's layout (kvcache_bench/data/kvpress_datasets.py): the same join. Generation
# lengths are kvpress's (its create_huggingface_dataset.py scripts: LongBench's + 20 for LongBench-e, 16 for
# LongBench-v2, InfiniteBench's table, LooGLE's, ZeroSCROLLS'); AIME25's and MATH500's live only in kvpress's hub
# rows, so 4096 here.
KVPRESS_LAYOUT_MAX_NEW_TOKENS = {
    **{
        f"{task}_e": LONGBENCH_MAX_NEW_TOKENS[task] + 20
        for task in (
            "qasper",
            "multifieldqa_en",
            "hotpotqa",
            "2wikimqa",
            "gov_report",
            "multi_news",
            "trec",
            "triviaqa",
            "samsum",
            "passage_count",
            "passage_retrieval_en",
            "lcc",
            "repobench-p",
        )
    },
    "longbench_v2": 16,
    "passkey": 6,
    "kv_retrieval": 50,
    "number_string": 12,
    "longbook_qa_eng": 40,
    "longbook_choice_eng": 40,
    "longdialogue_qa_eng": 40,
    "code_run": 5,
    "code_debug": 5,
    "math_find": 3,
    "math_calc": 30000,
    # LooGLE's task2maxlen.json and ZeroSCROLLS' lengths, as kvpress's create_huggingface_dataset.py scripts store them
    "shortdep_qa": 300,
    "longdep_qa": 500,
    "longdep_summarization": 500,
    "shortdep_cloze": 50,
    **{
        f"{task}_zs": tokens
        for task, tokens in (
            ("gov_report", 1024),
            ("summ_screen_fd", 512),
            ("qmsum", 512),
            ("qasper", 128),
            ("narrative_qa", 64),
            ("quality", 10),
            ("musique", 32),
            ("squality", 512),
            ("space_digest", 36),
            ("book_sum_sort", 256),
        )
    },
    "aime25": 4096,
    "math500": 4096,
}
KVPRESS_LAYOUT_PROMPTS = {task: "{context}{input}" for task in KVPRESS_LAYOUT_MAX_NEW_TOKENS}
# ZeroSCROLLS withholds its answers (its leaderboard scores predictions): rows without references, no metric
ANSWERS_HIDDEN = frozenset(task for task in KVPRESS_LAYOUT_MAX_NEW_TOKENS if task.endswith("_zs"))

# The offline demo's synthetic task: a qasper-style instruction over a synthetic document.
SYNTHETIC_PROMPTS = {
    "synthetic_qa": (
        "read the document and answer the question .\n\ndocument : {context}\n\nquestion : {input}\nanswer :"
    ),
}
SYNTHETIC_TASK = (
    "synthetic_qa"  # the offline demo's task (kvcache_bench.data.synthetic makes it; the canary trains on it)
)
SYNTHETIC_MAX_NEW_TOKENS = {SYNTHETIC_TASK: 8}
# The generator's defaults, here so the study can count a synthetic dataset's rows without importing data/.
SYNTHETIC_FACTS_PER_DOCUMENT = 4
SYNTHETIC_QUESTIONS_PER_DOCUMENT = 2


def synthetic_row_count(generator: dict) -> int:
    """How many rows ``data.synthetic.make_synthetic_rows(**generator)`` writes:
    asking for more is flagged, not capped."""
    facts = generator.get("facts_per_document", SYNTHETIC_FACTS_PER_DOCUMENT)
    questions = generator.get("questions_per_document", SYNTHETIC_QUESTIONS_PER_DOCUMENT)
    return generator.get("n_documents", 0) * min(questions, facts)


PROMPTS = {**LONGBENCH_PROMPTS, **RULER_PROMPTS, **NEEDLE_PROMPTS, **KVPRESS_LAYOUT_PROMPTS, **SYNTHETIC_PROMPTS}
MAX_NEW_TOKENS = {
    **LONGBENCH_MAX_NEW_TOKENS,
    **RULER_MAX_NEW_TOKENS,
    **NEEDLE_MAX_NEW_TOKENS,
    **KVPRESS_LAYOUT_MAX_NEW_TOKENS,
    **SYNTHETIC_MAX_NEW_TOKENS,
}
KNOWN_TASKS = frozenset(PROMPTS)


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

    def __post_init__(self):
        if self.original_tokens is None:
            object.__setattr__(self, "original_tokens", self.length)

    @property
    def length(self) -> int:
        return len(self.context_ids) + len(self.question_ids)


def max_new_tokens_for(task: str, override: int | None = None) -> int:
    return int(override) if override else MAX_NEW_TOKENS[task]


def uses_chat_template(tokenizer, task: str) -> bool:
    return bool(getattr(tokenizer, "chat_template", None)) and task not in RAW_PROMPT_TASKS


def split_prompt(task: str, context: str, question: str) -> tuple[str, str]:
    """(context part, question part) of the task's prompt; their concatenation is the full prompt."""
    template = PROMPTS[task]
    if "{input}" in template:
        head, tail = template.split("{input}", 1)
        return head.format(context=context), question + tail.format(context=context)
    head, tail = template.split("{context}", 1)
    return head + context, tail


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
    tokenizer, task: str, context: str, question: str, max_context_tokens: int, answer_prefix: str = ""
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
    """
    if not getattr(tokenizer, "is_fast", False):
        raise TypeError(
            f"{type(tokenizer).__name__} is not a fast tokenizer: token offsets are needed to split the prompt"
        )
    context_text, question_text = split_prompt(task, context, question)
    context_text, question_text, truncated, original = _truncate_like_longbench(
        tokenizer, context_text, question_text, max_context_tokens
    )
    chat = uses_chat_template(tokenizer, task)
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
    else:
        text, question_char = context_text + question_text, len(context_text)
        held_back_char = len(text)
    text += answer_prefix
    encoded = tokenizer(text, add_special_tokens=not chat, return_offsets_mapping=True)
    ids, offsets = encoded["input_ids"], encoded["offset_mapping"]
    question_start = _first_token_ending_after(offsets, question_char)
    held_back_start = next(
        (
            i
            for i in range(question_start, len(ids))
            if offsets[i][0] >= held_back_char and offsets[i][1] > offsets[i][0]
        ),
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
    """Task-specific stops beyond the model's end-of-turn tokens (LongBench stops samsum at a newline)."""
    if task in NEWLINE_STOP_TASKS:
        return set(tokenizer.encode("\n", add_special_tokens=False)[-1:])
    return set()
