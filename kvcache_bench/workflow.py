"""What every script in ``scripts/`` shares: its inputs (from Snakemake or the command line) and its log.

Under Snakemake a script receives the ``snakemake`` object. For debugging outside Snakemake the same
script takes them on the command line:

    python scripts/score.py --input predictions=p.jsonl --output scores=s.jsonl \
        --wildcards '{"task": "qasper"}' --log /dev/stderr

A job's settings are its wildcards (what its output path says) and its params (what the path does not
say); ``settings_of`` gives both, wildcards typed, so a rule never restates a wildcard as a param.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys


class NamedList(list):
    """A list whose items can also be reached by name, like Snakemake's ``input``/``output``."""

    def __init__(self, named: dict):
        super().__init__(named.values())
        self.__dict__.update(named)

    def __getitem__(self, key):
        return self.__dict__[key] if isinstance(key, str) else super().__getitem__(key)

    def items(self):
        return self.__dict__.items()


# Wildcards that are numbers in every rule that has them (the path spells them as text).
NUMERIC_WILDCARDS = {"retention": float, "batch_size": int, "decode_batch_size": int, "context": int}


class ScriptJob:
    def __init__(
        self, input: dict, output: dict, params: dict, log: list[str], threads: int = 1, wildcards: dict | None = None
    ):
        self.input = NamedList(input)
        self.output = NamedList(output)
        self.params = NamedList(params)
        self.wildcards = NamedList(wildcards or {})
        self.log = NamedList({f"log{i}": path for i, path in enumerate(log)})
        self.threads = threads


def _pairs(items: list[str]) -> dict:
    named = {}
    for item in items or []:
        name, _, value = item.partition("=")
        if not value:
            raise SystemExit(f"expected name=path, got {item!r}")
        named.setdefault(name, [])
        named[name].append(value)
    return {name: values[0] if len(values) == 1 else values for name, values in named.items()}


def job_from_argv(argv: list[str] | None = None) -> ScriptJob:
    parser = argparse.ArgumentParser(description="Run a pipeline script outside Snakemake")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=PATH")
    parser.add_argument("--output", action="append", default=[], metavar="NAME=PATH")
    parser.add_argument("--wildcards", default="{}", help="JSON object of the rule's wildcards")
    parser.add_argument("--params", default="{}", help="JSON object of the rule's params")
    parser.add_argument("--log", default="/dev/stderr")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    return ScriptJob(
        _pairs(args.input),
        _pairs(args.output),
        json.loads(args.params),
        [args.log],
        args.threads,
        json.loads(args.wildcards),
    )


def export_package_path(checkout: str) -> None:
    """Put the checkout first on PYTHONPATH for every job Snakemake starts (local, conda or cluster)."""
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (checkout, os.environ.get("PYTHONPATH")) if p)


def wildcards_of(job) -> dict:
    """The job's wildcards, numbers as numbers."""
    wildcards = getattr(job, "wildcards", None) or {}
    return {name: NUMERIC_WILDCARDS.get(name, str)(value) for name, value in wildcards.items()}


def params_of(job) -> dict:
    """Everything that decides the job's output, wildcards and params, as a plain dict (manifests, config hashes)."""
    return {**wildcards_of(job), **{name: value for name, value in job.params.items()}}


def settings_of(job) -> NamedList:
    """``params_of`` with attribute access: ``settings_of(job).task`` whether task is a wildcard or a param."""
    return NamedList(params_of(job))


def current_job(script_globals: dict):
    """The Snakemake job when run by Snakemake, otherwise one built from the command line."""
    return script_globals["snakemake"] if "snakemake" in script_globals else job_from_argv()


@contextlib.contextmanager
def logging_to(job):
    """Send logging, warnings and progress bars (stderr) to the rule's log file for the job's duration."""
    path = job.log[0] if len(job.log) else None
    if not path or path == "/dev/stderr":
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        yield
        return
    with open(path, "a", encoding="utf-8", buffering=1) as handle:
        previous = sys.stderr
        sys.stderr = handle
        handler = logging.StreamHandler(handle)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        logging.captureWarnings(True)
        try:
            yield
        except BaseException:
            logging.getLogger("kvcache_bench").exception("job failed")
            raise
        finally:
            root.removeHandler(handler)
            sys.stderr = previous


def print_and_log(job, text: str) -> None:
    """For rules with no output (plan, doctor): the text goes to stdout and, under Snakemake, to the rule's log."""
    sys.stdout.write(text)
    if len(job.log) and job.log[0] != "/dev/stderr":
        with open(job.log[0], "w", encoding="utf-8") as handle:
            handle.write(text)
