"""A `--configfile` holding a YAML tag (`!!python/object/apply:os.system [...]`), refused before Snakemake reads it.

Snakemake reads a config file with YAML's FullLoader: a Python tag is (safely) not executed, but the run stops with
"Config file is not valid JSON or YAML. In case of YAML, make sure to not mix whitespace and tab indentation.",
naming neither the file, the line nor the tag (and `!!python/tuple`, which it does build, stopped the Snakefile's own
reading of the file with a traceback). The workflow profile (profiles/default/config.yaml, which Snakemake reads on
every run before any config file) runs ``refuse_tagged_config_files`` through YTE: each `--configfile` is scanned
with YAML's parser, which resolves tags without constructing anything, and one holding a tag that YAML's safe loader
cannot read is refused naming file, line and tag and what to write instead, before anything runs.

The profile loads this file by its path (the package is not importable there), so it imports nothing of the
package: the standard library and yaml only.
"""

from __future__ import annotations

import sys

import yaml

YAML_TAGS = "tag:yaml.org,2002:"
# The tags a config may hold: those YAML's safe loader reads (!!str, !!int, !!float, !!bool, !!null, !!seq, !!map,
# !!set, !!timestamp, !!binary ...); `!` alone is YAML's "not resolved" mark (a quoted-like plain string).
SAFE_TAGS = frozenset(tag for tag in yaml.SafeLoader.yaml_constructors if tag is not None) | {"!"}

PLAIN_VALUES = (
    "a number (seed: 42), a string (name: demo; quote one that starts with !, as in note: '!!python is text'), "
    "a list (retentions: [0.25, 0.5]) or a mapping (method_kwargs: {snapkv: {window_size: 64}})"
)


def shown_tag(tag: str) -> str:
    """A tag as it is written: `tag:yaml.org,2002:python/tuple` is `!!python/tuple`."""
    return "!!" + tag[len(YAML_TAGS) :] if tag.startswith(YAML_TAGS) else tag


def tags_in(text: str) -> list[tuple[int, str]]:
    """(line, tag) of each node of ``text`` whose explicit tag YAML's safe loader cannot read, in order: the
    parser's events only (tags resolved, %TAG directives and `!<...>` included), no object constructed. Text
    that is not YAML yields what was found before the error (Snakemake names the error itself)."""
    if "!" not in text:
        return []  # no tag can be written without one
    found = []
    try:
        for event in yaml.parse(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
            tag = getattr(event, "tag", None)
            if tag is not None and tag not in SAFE_TAGS:
                found.append((event.start_mark.line + 1, shown_tag(tag)))
    except yaml.YAMLError:
        pass
    return found


def configfile_arguments(argv: list[str]) -> list[str]:
    """The paths given to `--configfile`/`--configfiles` in a Snakemake command line (``--configfile a b``,
    ``--configfile=a``, and argparse's abbreviations down to `--configf`), as argparse reads them: the words after
    the option up to the next option."""
    paths, taking = [], False
    for word in argv:
        if word == "--":
            break
        if word.startswith("-"):
            option, equals, value = word.partition("=")
            taking = len(option) >= len("--configf") and "--configfiles".startswith(option)
            if taking and equals:
                paths.append(value)
                taking = False
        elif taking:
            paths.append(word)
    return paths


def tag_refusal(paths: list[str]) -> str | None:
    """What to tell the user about the tags in these config files, None when none holds one. A file that does
    not exist or is not UTF-8 is left to Snakemake's and the Snakefile's own messages."""
    lines = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError):
            continue
        for line, tag in tags_in(text):
            lines.append(f"  {path}, line {line}: the tag {tag}")
    if not lines:
        return None
    return "\n".join(
        [
            "refused before Snakemake reads the config file (nothing was run): a YAML tag asks YAML to build a "
            "Python object or a type of its own, which a study config never holds (Snakemake would stop with only "
            "'not valid JSON or YAML ... tab indentation'):",
            *lines,
            f"Write a plain YAML value in place of each tag: {PLAIN_VALUES}.",
        ]
    )


def refuse_tagged_config_files(argv: list[str] | None = None) -> None:
    """Exit 1 with the refusal when a `--configfile` of this command line holds a tag (run by the workflow profile,
    before Snakemake reads any config file)."""
    refusal = tag_refusal(configfile_arguments(sys.argv[1:] if argv is None else argv))
    if refusal:
        print(refusal, file=sys.stderr)
        sys.exit(1)
