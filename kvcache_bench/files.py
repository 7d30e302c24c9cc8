"""Atomic file output: a reader (or an interrupted job) never sees a half-written file."""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import re
import shutil
import socket
import tempfile
import time
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
    fd, tmp_name = tempfile.mkstemp(prefix=f".{final.name}.{_WRITER}.", suffix=".partial", dir=final.parent)
    os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp makes 0600: colleagues sharing results/ could not read it
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            tmp.unlink()


def current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# Who writes a temporary: its name carries host and process, so a writer removes only a dead writer's leftovers,
# never the live temporary of a concurrent run writing the same path (two runs sharing one results/).
_WRITER = f"{re.sub(r'[^A-Za-z0-9]', '_', socket.gethostname())}-{os.getpid()}"
_WRITER_IN_NAME = re.compile(r"\.(?P<host>[A-Za-z0-9_]+)-(?P<pid>\d+)\.[^.]+\.partial$")
FOREIGN_PARTIAL_MAX_AGE_S = 24 * 3600  # another host's writer cannot be asked whether it is alive


def _writer_alive(leftover: Path) -> bool:
    match = _WRITER_IN_NAME.search(leftover.name)
    if not match:
        return False  # written before temporaries named their writer: only a killed job leaves one
    if match["host"] != _WRITER.rsplit("-", 1)[0]:
        try:
            return time.time() - leftover.stat().st_mtime < FOREIGN_PARTIAL_MAX_AGE_S
        except FileNotFoundError:
            return False
    pid = int(match["pid"])
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_partials(path: str | os.PathLike) -> list[Path]:
    """Delete temporaries a killed writer of ``path`` left behind; a live writer's (another run's) are kept."""
    final = Path(path)
    stale = [p for p in sorted(final.parent.glob(f".{glob.escape(final.name)}.*.partial")) if not _writer_alive(p)]
    for leftover in stale:
        leftover.unlink(missing_ok=True)
    return stale


@contextlib.contextmanager
def atomic_directory(out_dir: str | os.PathLike) -> Iterator[Path]:
    """A staging directory beside ``out_dir`` (permissions from the umask) that replaces it, whole, on success;
    on failure it is removed and ``out_dir`` is left as it was."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".partial", dir=out_dir.parent))
    try:
        os.chmod(staging, 0o777 & ~current_umask())  # mkdtemp's 0700 would make the output private to its writer
        yield staging
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(staging, out_dir)
    finally:
        if staging.exists():
            shutil.rmtree(staging)


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
                raise JsonlError(
                    f"{path}, line {number}: not UTF-8 text (byte {error.start + 1} of the line)"
                ) from None
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as error:
                raise JsonlError(
                    f"{path}, line {number}: not valid JSON ({error.msg} at column {error.colno})"
                ) from None


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
