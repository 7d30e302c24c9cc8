"""Atomic file output: a reader (or an interrupted job) never sees a half-written file."""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only if the block succeeds.

    The temporary file lives in the same directory so the final ``os.replace`` is atomic on POSIX.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_partials(final)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".partial", dir=final.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            tmp.unlink()


def remove_stale_partials(path: str | os.PathLike) -> list[Path]:
    """Delete temporaries a killed writer of ``path`` left behind (one job writes a path at a time)."""
    final = Path(path)
    stale = sorted(final.parent.glob(f".{glob.escape(final.name)}.*.partial"))
    for leftover in stale:
        leftover.unlink(missing_ok=True)
    return stale


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json_atomic(path: str | os.PathLike, obj) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def write_jsonl_atomic(path: str | os.PathLike, records: Iterable[dict]) -> int:
    count = 0
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n")
                count += 1
    return count


class JsonlError(ValueError):
    pass


def numbered_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, object]]:
    """(1-based line number, parsed value) of each non-blank line; a broken line is named by file and line."""
    with open(path, "rb") as handle:  # bytes: a line that is not UTF-8 is named like a broken one
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise JsonlError(f"{path}, line {number}: not UTF-8 text (byte {error.start + 1} of the line)") from None
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as error:
                raise JsonlError(f"{path}, line {number}: not valid JSON ({error.msg} at column {error.colno})") from None


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    return [record for _, record in numbered_jsonl(path)]


def count_records(path: str | os.PathLike) -> int:
    """Non-blank lines of a JSONL file (what ``read_jsonl`` would return, without parsing them)."""
    with open(path, encoding="utf-8") as handle:
        return sum(1 for line in handle if line.strip())


def sha256_of(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
