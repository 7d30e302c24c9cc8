"""Outputs changed after the job that made them wrote them: refused at parse, before any job runs.

Every output's manifest records its sha256, and a job that reads an output checks it before use
(manifest.verify_against_manifest, analysis.verified). Inside a job that check comes too late for what the job had
made before: Snakemake removes a job's outputs when it starts it, so a score file edited by hand, refused by the
aggregate job, took the finished summary.csv, summary.md and per_example.csv with it; and a number edited in
summary.csv, which no job checked, was ranked and drawn as it stood (issue 51). So while the workflow is parsed,
every output this study's jobs read is held to its manifest (rules/checks.smk, 5), and the run stops, naming each
changed file, its sha256 recorded and now, and the ``--forcerun`` that remakes it and what was made from it.

A manifest removed is refused too ("has no manifest"): Snakemake does not rerun a job for an output nothing asks
for, and a manifest is one, so the file beside it would be read as it stands. Not refused: a file this run remakes
whatever it holds (``--forcerun`` names it, or a file it is made from), a file Snakemake itself records as
incomplete (a job killed between writing it and its manifest: Snakemake reruns or names it), and a file that does
not exist (Snakemake makes it, or rules/checks.smk's gone-file check names it).
"""

from __future__ import annotations

import functools
import json
import os
from base64 import urlsafe_b64encode
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kvcache_bench.files import sha256_of, write_json_atomic
from kvcache_bench.manifest import content_facts, forcerun_remedy, manifest_path_for

# Beside study.sources' cache of source files' hashes, not in it: an entry here is also keyed by the file's ctime
OUTPUT_HASHES = Path(".snakemake/kvcache-bench/output-hashes.json")

# Options of a snakemake command that run no job and show no output's content: a changed output is no reason to
# refuse them (an --unlock or a --delete-all-output must work whatever results/ holds; --summary lists what a run
# would redo). A dry run (-n) and --report are refused: the one must say what the run would, the other shows tables.
NO_JOB_OPTIONS = (
    "--unlock",
    "--cleanup-metadata",
    "--cm",
    "--delete-all-output",
    "--delete-temp-output",
    "--touch",
    "-t",
    "--lint",
    "--list-rules",
    "-l",
    "--list-target-rules",
    "--lt",
    "--list-changes",
    "--lc",
    "--dag",
    "--rulegraph",
    "--filegraph",
    "--d3dag",
    "--summary",
    "-S",
    "--detailed-summary",
    "-D",
)
FORCE_ALL_OPTIONS = ("--forceall", "-F")


def _described(facts: dict) -> str:
    records = f"{facts['records']} records, " if "records" in facts else ""
    return f"{records}sha256 {facts['sha256'][:12]}"


def content_problem(path: str | os.PathLike, sha256: Callable[[str], str] = sha256_of) -> str | None:
    """Why ``path`` is not byte for byte what its producing job wrote (the manifest's sha256 against the file's
    now), None when it is: in manifest.verify_against_manifest's words, which the score and aggregate jobs print.
    ``sha256`` may be a cached hasher (``output_sha256``): this check reads every output of a study at each parse."""
    manifest_path = manifest_path_for(path)
    if not manifest_path.exists():
        return f"{path} has no manifest ({manifest_path}), so nothing proves how it was made"
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        return f"{path}: its manifest {manifest_path} is not valid JSON ({error})"
    expected = manifest.get("content") if isinstance(manifest, dict) else None
    if not isinstance(expected, dict) or not expected.get("sha256"):
        return f"{path}: its manifest records no checksum (written by an older version)"
    if sha256(str(path)) == expected["sha256"]:
        return None
    try:  # the whole file read only for the message: a record count says "cut" at a glance
        found = content_facts(path)
    except UnicodeDecodeError:  # JSONL no longer UTF-8 text has no record count to give
        found = {"sha256": sha256_of(path)}
    return (
        f"{path} is not the file its manifest describes: the manifest says {_described(expected)}, "
        f"the file has {_described(found)}. It was changed after it was written (edited, cut or copied over)"
    )


@functools.cache
def _output_hashes() -> dict:
    try:
        return json.loads(OUTPUT_HASHES.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def output_sha256(path: str | os.PathLike) -> str:
    """The sha256 of an output's bytes, read again only when its size, mtime, inode or ctime moved: a parse after
    the first stats a study's outputs, it does not read them. The ctime (which no tool sets back) because an edit in
    place whose mtime is set back (`touch -r`) keeps the other three; study.sources' cache of source files, read at
    each parse too, keys on those three."""
    stat = os.stat(path)
    identity = [stat.st_size, stat.st_mtime_ns, stat.st_ino, stat.st_ctime_ns]
    key = os.path.realpath(path)
    cached = _output_hashes().get(key)
    if cached and cached[:-1] == identity:
        return cached[-1]
    digest = sha256_of(path)
    _output_hashes()[key] = [*identity, digest]
    return digest


def keep_output_hashes() -> None:
    """Write the hashes of this parse back for the next (once per parse); a read-only checkout hashes again."""
    try:
        OUTPUT_HASHES.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(OUTPUT_HASHES, _output_hashes())
    except OSError:
        pass


@dataclass
class Step:
    """One job of the study, as the check needs it: the outputs it writes, the outputs of other jobs it reads."""

    outputs: list[str]
    inputs: list[str] = field(default_factory=list)


def runs_no_job_or_remakes_all(argv: list[str]) -> bool:
    """Whether the command line runs no job (--unlock, --lint, ...) or remakes everything it reads (--forceall)."""
    options = NO_JOB_OPTIONS + FORCE_ALL_OPTIONS
    return any(arg in options or arg.split("=", 1)[0] in options for arg in argv)


def remade_by_this_run(steps: list[Step], forced: Iterable[str]) -> set[str]:
    """The outputs this run remakes whatever they hold: those ``--forcerun`` names, the other outputs of their
    jobs, and every output made from them, at any depth (Snakemake reruns what a forced file feeds)."""
    remade = {os.path.normpath(path) for path in forced}
    grew = True
    while grew:  # to a fixed point: the steps need not come in the order they are made
        grew = False
        for step in steps:
            outputs = {os.path.normpath(path) for path in step.outputs}
            if outputs <= remade:
                continue
            if outputs & remade or {os.path.normpath(path) for path in step.inputs} & remade:
                remade |= outputs
                grew = True
    return remade


def snakemake_marks_incomplete(path: str, workdir: str | os.PathLike = ".") -> bool:
    """Whether Snakemake records ``path`` as written by a job that did not finish (its own marker in
    .snakemake/incomplete/, named by the path in URL-safe base64, cut into 254-character parts past 255): it
    reruns such a file (--rerun-incomplete) or stops naming it, which says more than a changed checksum would."""
    encoded = urlsafe_b64encode(path.encode()).decode()
    parts = [encoded[start : start + 254] for start in range(0, len(encoded), 254)]
    parts = ["@" + part for part in parts[:-1]] + parts[-1:]
    return Path(workdir, ".snakemake", "incomplete", *parts).exists()


def changed_outputs(
    steps: list[Step],
    forced: Iterable[str] = (),
    also: Callable[[str], str | None] | None = None,
    workdir: str | os.PathLike = ".",
) -> dict[str, str]:
    """{output: why it is not what its job wrote} for every output of ``steps`` this run would read as it is.

    Hashed through ``output_sha256``'s cache; ``also`` adds a check of its own for a file whose bytes are its
    manifest's (the intervals of summary.csv).
    """
    remade = remade_by_this_run(steps, forced)
    candidates = []
    for step in steps:
        for path in step.outputs:
            if path in candidates or os.path.normpath(path) in remade:
                continue
            if not os.path.isfile(path):
                continue  # not made yet, or removed: Snakemake makes it, or the gone-file check names it
            if snakemake_marks_incomplete(path, workdir):
                continue
            candidates.append(path)
    before = dict(_output_hashes())
    problems = {}
    for path in candidates:
        problem = content_problem(path, sha256=output_sha256)
        if problem is None and also is not None:
            problem = also(path)
        if problem:
            problems[path] = problem
    if _output_hashes() != before:
        keep_output_hashes()
    return problems


def changed_outputs_refusal(
    steps: list[Step],
    forced: Iterable[str] = (),
    also: Callable[[str], str | None] | None = None,
    workdir: str | os.PathLike = ".",
) -> str | None:
    """Why this run must not start, with the command that remakes the changed files; None when nothing changed."""
    problems = changed_outputs(steps, forced, also, workdir)
    if not problems:
        return None
    return (
        "outputs were changed after the jobs that made them wrote them, and what reads them (the jobs after them, "
        "the report) would take what they hold now; stopped before any job, so no finished output is removed:\n"
        + "\n".join(f"  - {problem}" for problem in problems.values())
        + "\n"
        + forcerun_remedy(list(problems))
    )
