"""Task prompts at parity with LongBench (and RULER, kvpress's datasets): templates, answer lengths, task lists.

Each task's prompt template and generation length, verbatim from the benchmark that publishes it, and the
sets of tasks treated apart (raw prompts, a newline stop, hidden answers). ``split_prompt`` splits a prompt in
two: the *context part* (everything up to where the question appears) and the *question part*; turning them
into token ids is ``study.prompt_tokens``'s. The study's config checks, the data readers and the scorers import
this module without any tokenizer code.
"""

from __future__ import annotations

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

# A prompt without a chat template (a tokenizer that has none, or models.<name>.chat_template: false) takes the form
# its benchmark's own harness gives a base model. LongBench's pred.py and RULER's `base` model template
# (long_context_eval/data/template.py: "{task_template}", then the answer prefix, data/prepare.py) send the raw text,
# tokenised with the tokenizer's own special tokens (BOS where the tokenizer adds one; vLLM and the HF pipeline of
# RULER's pred/ encode a completion prompt so). kvpress's needle test runs through kvpress's pipeline, whose
# preprocess (kvpress/pipeline.py) for a tokenizer without a chat template writes the tokenizer's bos_token before
# the context and "\n" between the question and the answer prefix, and adds no special tokens when encoding.
KVPRESS_PIPELINE_PROMPT_TASKS = frozenset({NEEDLE_TASK})
KVPRESS_QUESTION_SUFFIX = "\n"  # kvpress/pipeline.py: question_suffix = "\n" "to separate the question from the answer"

# LongBench-e's 13 tasks, by their LongBench names (kvpress's data_dir and the study's task are "<name>_e"). Written
# once, here, for the three places that list them: this table's lengths, the dataset reader's data_dirs
# (data/kvpress_datasets.py) and the scorers' metric table (analysis/metrics.py); both of those import study/.
LONGBENCH_E_TASKS = (
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

# kvpress's other datasets in kvpress's layout (kvcache_bench/data/kvpress_datasets.py): the same join. Generation
# lengths are kvpress's (its create_huggingface_dataset.py scripts: LongBench's + 20 for LongBench-e, 16 for
# LongBench-v2, InfiniteBench's table, LooGLE's, ZeroSCROLLS'); AIME25's and MATH500's live only in kvpress's hub
# rows, so 4096 here.
KVPRESS_LAYOUT_MAX_NEW_TOKENS = {
    **{f"{task}_e": LONGBENCH_MAX_NEW_TOKENS[task] + 20 for task in LONGBENCH_E_TASKS},
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


# How an answer ends (each prediction record's ``stop_rule``), as the task's benchmark ends it, for a base model as for
# an instruct one; every rule also stops at the task's max_new_tokens. None cuts a base model's answer where the answer
# ends: a base model goes on writing the document after it, and that text is scored as the benchmark scores it.
# * "eos": the model's end-of-sequence ids (its generation_config's eos_token_id and the tokenizer's eos_token_id).
#   RULER passes no stop words: scripts/config_tasks.sh sets STOP_WORDS="" for scripts/run.sh, pred/call_api.py's
#   --stop_words defaults to '', and the wheel's entrypoint.py passes none; its evaluate.py then only strips the
#   prediction and turns control characters into "\n" (analysis/metrics.py prepare_prediction), and the string match
#   counts a reference anywhere in it. kvpress's pipeline (kvpress/pipeline.py generate_answer) stops at the
#   generation_config's eos_token_id, and its needle test's calculate_metrics scores the whole answer with ROUGE.
#   LongBench's pred.py stops at the model's EOS too; its eval.py keeps the first line of trec, triviaqa and samsum
#   (analysis/metrics.py FIRST_LINE_TASKS), a cut in the scorer, not in generation.
# * "eos_or_newline": LongBench's pred.py also stops samsum at a newline, after at least one new token.
STOP_AT_EOS = "eos"
STOP_AT_EOS_OR_NEWLINE = "eos_or_newline"


def stop_rule(task: str) -> str:
    """The stop rule the engine runs for ``task`` (``prompt_tokens.extra_stop_ids`` gives its extra ids)."""
    return STOP_AT_EOS_OR_NEWLINE if task in NEWLINE_STOP_TASKS else STOP_AT_EOS


def max_new_tokens_for(task: str, override: int | None = None) -> int:
    return int(override) if override else MAX_NEW_TOKENS[task]


def split_prompt(task: str, context: str, question: str) -> tuple[str, str]:
    """(context part, question part) of the task's prompt; their concatenation is the full prompt."""
    template = PROMPTS[task]
    if "{input}" in template:
        head, tail = template.split("{input}", 1)
        return head.format(context=context), question + tail.format(context=context)
    head, tail = template.split("{context}", 1)
    return head + context, tail
