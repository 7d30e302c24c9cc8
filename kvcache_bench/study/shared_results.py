"""One results/ directory, two studies: files another run wrote are not taken for this config's.

Snakemake judges an output by its own records in this working directory's .snakemake/: when a second clone
(a symlinked results/, one results directory on a cluster) overwrites a file, the first clone's records still
say it is up to date, and its table would show the other study's numbers ("Nothing to be done"). Every
manifest names the working directory that made it; a file made from another directory under settings other
than this config's is refused at parse, naming the keys. And while one run writes results/, a run from
another directory is refused (``claim_results_dir``). A working directory moved or copied with its .snakemake/
brings its records along: what it made at its earlier paths is its own (``EARLIER_PATHS``).
"""

from __future__ import annotations

import atexit
import json
import os
import socket
from collections.abc import Iterable
from pathlib import Path

from kvcache_bench.files import write_json_atomic
from kvcache_bench.manifest import forcerun_remedy, settings_differences

RUN_CLAIM = ".kvcache-bench-run.json"
# Beside Snakemake's records, which travel with it: every path this working directory has run jobs from.
EARLIER_PATHS = ".snakemake/kvcache-bench-workdirs.json"


def earlier_paths(workdir: str | os.PathLike = ".") -> list[str]:
    """The paths this working directory ran jobs from before it was moved or copied (with .snakemake/)."""
    try:
        paths = json.loads(Path(workdir, EARLIER_PATHS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [str(path) for path in paths] if isinstance(paths, list) else []


def record_this_path(workdir: str | os.PathLike = ".") -> None:
    """Add where this run makes its files to the directory's earlier paths (a run that executes jobs, not a dry run)."""
    here, paths = os.path.realpath(workdir), earlier_paths(workdir)
    if here not in paths:
        write_json_atomic(Path(workdir, EARLIER_PATHS), [*paths, here])


def gone_intermediates(chains: list[list[str]], forced: Iterable[str] = ()) -> list[str]:
    """Files removed while a file made from them remains: each chain lists a cell's files in the order they are
    made (data, predictions, scores, table). Snakemake 9 would not remake them ("Nothing to be done"), and the
    table would go on listing a cell whose files are gone; one line per such file, naming what remains."""
    return [f"{path} is gone, but {later}, made from it, remains" for path, later in _gone(chains, forced).items()]


def _gone(chains: list[list[str]], forced: Iterable[str]) -> dict[str, str]:
    """{gone file: a file made from it that remains}."""
    remade = {os.path.normpath(path) for path in forced}
    gone: dict[str, str] = {}
    for chain in chains:
        if remade & {os.path.normpath(path) for path in chain}:
            continue  # a file of it is forced: this run remakes it and everything after it, and what it needs
        for index, path in enumerate(chain):
            if path in gone or os.path.exists(path):
                continue
            later = next((made for made in chain[index + 1 :] if os.path.exists(made)), None)
            if later is not None:
                gone[path] = later
    return gone


def gone_intermediates_refusal(chains: list[list[str]], forced: Iterable[str] = ()) -> str | None:
    paths, problems = list(_gone(chains, forced)), gone_intermediates(chains, forced)
    if not problems:
        return None
    return (
        "files were removed while the files made from them remain, so Snakemake would not remake them and the "
        "tables would still show what they held:\n"
        + "\n".join(f"  - {problem}" for problem in problems)
        + "\n"
        + forcerun_remedy(paths)
    )


def forcerun_in_command_line(argv: list[str]) -> set[str]:
    """What ``--forcerun``/``-R`` names in a snakemake command line. Snakemake parses the Snakefile before it sets
    its DAG settings (``workflow.dag_settings`` is None while the rules are read), so a parse-time check reads the
    command line itself."""
    forced, taking = set(), False
    for arg in argv:
        if arg in ("--forcerun", "-R"):
            taking = True
        elif arg.startswith("--forcerun="):
            forced.add(arg.split("=", 1)[1])
        elif arg.startswith("-"):
            taking = False
        elif taking:
            forced.add(arg)
    return forced


def foreign_outputs_refusal(
    expected_by_output: dict[str, dict], workdir: str | os.PathLike = ".", forced: Iterable[str] = ()
) -> str | None:
    """Why this run must not start (another study's files in results/), with the command that remakes them."""
    found = _foreign_outputs(expected_by_output, workdir, forced)
    if not found:
        return None
    paths, problems = [output for output, _ in found], [problem for _, problem in found]
    return (
        "results/ holds another study's files:\n"
        + "\n".join(f"  - {problem}" for problem in problems)
        + "\nRun each study in its own directory, or remake these files for this config. "
        + forcerun_remedy(paths)
    )


def foreign_output_problems(
    expected_by_output: dict[str, dict], workdir: str | os.PathLike = ".", forced: Iterable[str] = ()
) -> list[str]:
    """Outputs whose manifest says another working directory made them, under settings this config does not ask.
    A file this run is told to remake (``--forcerun``, the remedy the refusal prints) is not a problem."""
    return [problem for _, problem in _foreign_outputs(expected_by_output, workdir, forced)]


def _foreign_outputs(expected_by_output: dict[str, dict], workdir, forced: Iterable[str]) -> list[tuple[str, str]]:
    """[(output, why it is refused)] for foreign_output_problems and the refusal that names their remedy."""
    ours = {os.path.realpath(workdir), *earlier_paths(workdir)}
    remade = {os.path.normpath(path) for path in forced}
    problems = []
    for output, expected in expected_by_output.items():
        if os.path.normpath(output) in remade:
            continue
        manifest_path = Path(f"{output}.manifest.json")
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # no manifest (yet): the job that reads the file refuses it
        made_in = manifest.get("workdir")
        if not made_in or os.path.realpath(made_in) in ours:
            continue  # made here (or here before a move): Snakemake's own records rerun it when this config's
            # settings changed
        differences = settings_differences(manifest.get("params") or {}, expected)
        if differences:
            problems.append(
                (output, f"{output} was made by the run in {made_in} under other settings ({'; '.join(differences)})")
            )
    return problems


def _alive(claim: dict) -> bool:
    if claim.get("host") != socket.gethostname():
        return True  # cannot be asked; the message says how to remove the claim
    try:
        os.kill(int(claim["pid"]), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, KeyError, ValueError):
        return True
    return True


def claim_results_dir(results: str | os.PathLike = "results", workdir: str | os.PathLike = ".") -> str | None:
    """Mark results/ as written by this run (until it exits); the problem when a live run of another directory
    holds it (None when the claim was taken). Runs of the same directory are Snakemake's own lock's business."""
    claim_file = Path(results) / RUN_CLAIM
    here = os.path.realpath(workdir)
    try:
        claim = json.loads(claim_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        claim = None
    if claim and claim.get("workdir") != here and _alive(claim):
        return (
            f"{results}/ is being written by another run (pid {claim.get('pid')} on {claim.get('host')}, from "
            f"{claim.get('workdir')}): two studies writing one results directory would mix their files. Wait for it, "
            f"or give this study its own directory. If that run is gone, remove {claim_file}."
        )
    claim_file.parent.mkdir(parents=True, exist_ok=True)
    mine = {"host": socket.gethostname(), "pid": os.getpid(), "workdir": here}
    claim_file.write_text(json.dumps(mine) + "\n", encoding="utf-8")

    def release():
        try:
            if json.loads(claim_file.read_text(encoding="utf-8")) == mine:
                claim_file.unlink()
        except (OSError, ValueError):
            pass

    atexit.register(release)
    return None
