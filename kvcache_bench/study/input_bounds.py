"""How large a data row and a local data file may be: bounds from what real long-context benchmarks need.

Issue 51: a local JSONL with one 200 MB row went through the data job unread for what it was, and a model worker
tokenised it (the whole raw prompt is tokenised once, with its offsets, before LongBench's middle cut) until the
kernel killed it at 11.6 GB, 287 s later, the job saying only that its worker had died. Now the data job measures
each row and file before it loads anything, and refuses one past its bound naming the file, the line, the size and
the bound; the parse refuses a local file past its bound by its size alone (a stat), before the DAG hashes it.

The bounds, and why:

* a row, ``MAX_ROW_BYTES`` (32 MiB): a JSONL line's bytes, or a parquet or hub row's text in UTF-8. The longest rows
  of the benchmarks this project reads: LongBench v2's contexts run to 2M words (its dataset card), about 12 MB of
  English at 6 bytes a word; InfiniteBench's longest tasks average 171k-193k tokens (En.Sum, En.QA; its README),
  about 0.8 MB; RULER at 128k tokens is about 0.5 MB; LongBench's rows are tens of kB. 32 MiB is 2.5 times the
  longest of them; a worker tokenising a row of 32 MiB holds about 2 GB for it, by the issue's 11.6 GB for 200 MB.
* a file, ``MAX_DATA_FILE_BYTES`` (4 GiB): a whole task's rows, read into the data job's memory. LongBench v2's
  503 rows are 162 MB as parquet; RULER at 128k with 500 rows per task is about 0.25 GB a task, all 13 of its
  tasks in one file about 3.3 GB.

Both are constants here, not settings: a study that needs more is a change to this file, reviewed as one.
"""

from __future__ import annotations

import os
from pathlib import Path

MAX_ROW_BYTES = 32 * 2**20
MAX_DATA_FILE_BYTES = 4 * 2**30
BOUNDS_FILE = "kvcache_bench/study/input_bounds.py"
_BLOCK = 1 << 20


def _mib(size: int) -> str:
    return f"{size / 2**20:,.1f} MiB" if size < 2**30 else f"{size / 2**30:,.2f} GiB"


def data_file_problem(path: str | os.PathLike) -> str | None:
    """A local data file past ``MAX_DATA_FILE_BYTES``, told by its size alone (nothing is read)."""
    size = Path(path).stat().st_size
    if size <= MAX_DATA_FILE_BYTES:
        return None
    return (
        f"{path} is {size:,} bytes ({_mib(size)}); a data file may be at most {MAX_DATA_FILE_BYTES:,} bytes "
        f"({_mib(MAX_DATA_FILE_BYTES)}, {BOUNDS_FILE}: a benchmark's task needs far less, LongBench v2's 503 rows "
        "are 162 MB of parquet, RULER's 500 rows at 128k tokens about 0.25 GB). Nothing was read. Split it into one "
        "file per task (<task>.jsonl or <task>/*.parquet in the local_path folder), or keep the rows you run."
    )


def oversized_jsonl_line(path: str | os.PathLike, bound: int = MAX_ROW_BYTES) -> tuple[int, int] | None:
    """(1-based line number, its bytes without the newline) of the first line of ``path`` longer than ``bound``, or
    None. Read in 1 MiB blocks, never a whole line: a 200 MB line costs this scan 1 MiB of memory."""
    number, length = 1, 0
    with open(path, "rb") as handle:
        while block := handle.read(_BLOCK):
            start = 0
            while (end := block.find(b"\n", start)) != -1:
                length += end - start
                if length > bound:
                    return number, length
                number, length, start = number + 1, 0, end + 1
            length += len(block) - start
            if length > bound:  # the rest of the line is counted, not kept, to say how long it is
                while (more := handle.read(_BLOCK)) and (end := more.find(b"\n")) == -1:
                    length += len(more)
                return number, length + (end if more else 0)
    return None


def row_size_problem(size: int, measured: str = "the row") -> str:
    """What a row past ``MAX_ROW_BYTES`` is told (after its file and line)."""
    return (
        f"{measured} is {size:,} bytes ({_mib(size)}); a row may be at most {MAX_ROW_BYTES:,} bytes "
        f"({_mib(MAX_ROW_BYTES)}, {BOUNDS_FILE}: LongBench v2's longest context, 2M words, is about 12 MB). No model "
        "was given it. Shorten or remove the row (a prompt is cut to models.<name>.max_context_tokens tokens anyway, "
        "LongBench's first and last halves kept)."
    )


def row_text_bytes(value) -> int:
    """The UTF-8 bytes of every text in a row's fields (lists and mappings walked), what a prompt is built from."""
    if isinstance(value, str):
        return len(value) if value.isascii() else len(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, dict):
        return sum(row_text_bytes(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return sum(row_text_bytes(item) for item in value)
    return 0
