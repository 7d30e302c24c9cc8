"""The config files themselves, as the Snakefile reads them: a key written twice, and `--config` alone.

Snakemake reads config files with a YAML loader that keeps the last of two equal keys: a `methods:` written
twice drops the first list without a word. The files are read again here with a loader that refuses that,
naming key and lines. And with `replace-workflow-config` (profiles/default), `--config seed=7` without a
`--configfile` would replace the whole of config.yaml by `{seed: 7}`: it is applied on top of config.yaml.
And the order keys are written in is not a setting: the config reaches the rules with its keys in one order.
"""

from __future__ import annotations

import io
import os
import shlex

import yaml


class ConfigFileError(ValueError):
    pass


class DuplicateKeyLoader(yaml.SafeLoader):
    """A YAML loader that refuses a mapping holding the same key twice."""

    def construct_mapping(self, node, deep=False):
        first_line: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if key in first_line:
                raise ConfigFileError(
                    f"{key_node.start_mark.name}, line {line}: key {key!r} is written twice in the same mapping "
                    f"(first at line {first_line[key]}); YAML would keep only the last one. Merge them or remove one."
                )
            first_line[key] = line
        return super().construct_mapping(node, deep)


# Values a config may hold once its aliases are expanded: config.yaml holds a few hundred; a YAML "billion laughs"
# (aliases of aliases, nine levels) expands to billions, and grew the run to 2.4 GB without a word.
MAX_EXPANDED_VALUES = 100_000


def expanded_size(node: yaml.Node) -> int:
    """How many values ``node`` stands for with every alias written out: each node counted once per reference,
    computed once per node (so the count itself takes no time on a bomb)."""
    sizes: dict[int, int] = {}

    def size(item: yaml.Node) -> int:
        if id(item) not in sizes:
            sizes[id(item)] = 0  # a recursive alias counts once, not forever
            if isinstance(item, yaml.MappingNode):
                total = 1 + sum(size(key) + size(value) for key, value in item.value)
            elif isinstance(item, yaml.SequenceNode):
                total = 1 + sum(size(value) for value in item.value)
            else:
                total = 1
            sizes[id(item)] = min(total, MAX_EXPANDED_VALUES + 1)
        return sizes[id(item)]

    return size(node)


def _refuse_alias_bombs(path, text: str) -> None:
    if "*" not in text:
        return  # no alias, nothing to expand
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    if node is not None and expanded_size(node) > MAX_EXPANDED_VALUES:
        raise ConfigFileError(
            f"{path}: its aliases (*name) expand to more than {MAX_EXPANDED_VALUES:,} values; no study config "
            "holds that many (a YAML 'billion laughs'?). Write the values out, or use fewer nested aliases."
        )


def read_config_file(path: str | os.PathLike) -> dict:
    """A config file as Snakemake reads it, but a duplicate key, or text that is not UTF-8, names file and line,
    and aliases expanding past any study's size are refused (before anything walks the expanded values)."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except UnicodeDecodeError as error:
        raise ConfigFileError(f"{path}: not UTF-8 text (byte {error.start})") from None
    _refuse_alias_bombs(path, text)
    stream = io.StringIO(text)
    stream.name = str(path)  # YAML's marks (a key written twice, line N) name the file, not "<unicode string>"
    return yaml.load(stream, Loader=DuplicateKeyLoader) or {}


def study_config_files(workflow) -> list[str]:
    """The files the study's config comes from: the --configfile ones if any
    (they replace config.yaml), else config.yaml."""
    return [str(path) for path in workflow.overwrite_configfiles] or [str(path) for path in workflow.configfiles]


def check_config_files(workflow) -> None:
    for path in study_config_files(workflow):
        if os.path.exists(path):
            read_config_file(path)


class CommandLineConfigError(ValueError):
    """A `--config` value that would reach the config as something other than what was typed."""


def _number_from_text(text: str, integer: bool):
    """The number a text item stands for (``"0.25"``; ``"50%"`` as 0.5 where a fraction is taken), or None."""
    stripped = text.strip()
    percent = stripped.endswith("%") and not integer
    try:
        value = float(stripped.removesuffix("%") if percent else stripped)
    except ValueError:
        return None
    if value != value or value in (float("inf"), float("-inf")):
        return None
    if percent:
        return round(value / 100, 12)
    if integer:
        return int(value) if value.is_integer() else None
    return int(value) if value.is_integer() and "." not in stripped else value


def _numbers_as_text(value, items: dict):
    """(the items that are text, the list written as numbers or None when one of them is no number)."""
    texts = [item for item in value if isinstance(item, str)]
    integer = items.get("type") == "integer"
    numbers = [_number_from_text(item, integer) if isinstance(item, str) else item for item in value]
    return texts, None if any(number is None for number in numbers) else numbers


def _flow_list(key: str, numbers: list) -> str:
    return f"{key}: [{', '.join(repr(n) for n in numbers)}]"


def _number_lists(schema: dict):
    """{key: its item schema} for each top-level setting whose items are numbers."""
    lists = {}
    for key, setting in (schema.get("properties") or {}).items():
        items = (setting or {}).get("items") or {}
        if items.get("type") in ("number", "integer"):
            lists[key] = items
    return lists


def _what_it_takes(key: str, schema: dict, items: dict) -> str:
    description = ((schema.get("properties") or {}).get(key) or {}).get("description")
    return f"{key} takes {'whole ' if items.get('type') == 'integer' else ''}numbers" + (
        f" ({description})" if description else ""
    )


def _where_in_file(path: str, key: str) -> tuple[int, int] | None:
    """The first and last line of a top-level ``key`` and its list in a YAML file (1-based), or None."""
    with open(path, encoding="utf-8") as handle:
        root = yaml.compose(handle, Loader=yaml.SafeLoader)
    if not isinstance(root, yaml.MappingNode):
        return None
    for key_node, value_node in root.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
            if isinstance(value_node, yaml.SequenceNode) and not value_node.flow_style and value_node.value:
                last = value_node.value[-1].end_mark  # a block list ends where the next key starts
            else:
                last = value_node.end_mark
            ends_next_line = last.column == 0 and last.line > key_node.start_mark.line
            return key_node.start_mark.line + 1, last.line + 1 - ends_next_line
    return None


def _shown(path: str) -> str:
    relative = os.path.relpath(path)
    return relative if not relative.startswith("..") else str(path)


def refuse_numbers_as_text(overrides: dict, schema: dict, config_files=()) -> None:
    """A list of numbers that reaches the config as text is refused naming where it came from and what to write.

    ``overrides`` are the values given with `--config` alone (Snakemake's ``config_settings.config``; its
    ``overwrite_config`` also holds every --configfile's values, and a config file's ``retentions: ['50%']`` was
    once blamed on --config). `--config retentions=[0.25]` reaches the config as ``['0.25']``: Snakemake parses a
    bare value as a number but a list's items as text; the remedy is a file, written by a command that works as
    printed (`echo`: the old `printf 'retentions: [50%]\\n'` failed in printf, `%` being its format character,
    and `[50%]` was still text in YAML). ``config_files`` are the study's config files, in the order Snakemake
    merges them: a list there holding text (``'0.25'``, ``50%``) is named with the file and its lines, and the
    line to write instead. The schema alone would only say "'0.25' is not of type 'number'"."""
    lists = _number_lists(schema)
    overrides = dict(overrides or {})
    for key, value in overrides.items():
        if key not in lists or not isinstance(value, list):
            continue
        texts, numbers = _numbers_as_text(value, lists[key])
        if not texts:
            continue
        message = (
            f"--config {key}=[...] gave the list {value!r}: Snakemake passes a list's items as text, and "
            f"{_what_it_takes(key, schema, lists[key])}. "
        )
        if numbers is None:
            raise CommandLineConfigError(message + f"Write each of {texts!r} as a number, in a config file.")
        files = " ".join(shlex.quote(_shown(path)) for path in config_files) or "<the study's config file>"
        raise CommandLineConfigError(
            message + "Put the list in a file, with this command:\n"
            f"    echo '{_flow_list(key, numbers)}' > my-{key}.yaml\n"
            f"then run your command again without `--config {key}=...`, adding at its end:\n"
            f"    --configfile {files} my-{key}.yaml"
        )
    # a file's value counts where no later file and no --config replaces it (Snakemake merges them in that order)
    last_file = {}
    for path in config_files:
        if os.path.exists(path):
            for key, value in (read_config_file(path) or {}).items():
                last_file[key] = (path, value)
    for key, (path, value) in last_file.items():
        if key not in lists or key in overrides or not isinstance(value, list):
            continue
        texts, numbers = _numbers_as_text(value, lists[key])
        if not texts:
            continue
        first, last = _where_in_file(path, key) or (None, None)
        if first is None:  # not found where YAML put it (not expected): the file alone
            where = _shown(path)
        elif first == last:
            where = f"{_shown(path)}, line {first}"
        else:
            where = f"{_shown(path)}, lines {first}-{last}"
        message = (
            f"{where}: {key} holds {texts!r}, text and not numbers (YAML reads a quoted value, or one with %, as "
            f"text), and {_what_it_takes(key, schema, lists[key])}. "
        )
        if numbers is None:
            raise ConfigFileError(message + f"Write each of {texts!r} as a number.")
        lines = "this line" if first == last else f"these {last - first + 1} lines"
        raise ConfigFileError(message + f"Write instead of {lines}:\n    {_flow_list(key, numbers)}")


def keep_workflow_config(config: dict, workflow, default_file: str = "config.yaml") -> str | None:
    """`--config k=v` without `--configfile`: config.yaml with k=v on top, not `{k: v}` alone. Returns what
    to tell the user (None when nothing was changed)."""
    from snakemake.utils import update_config

    overrides = workflow.config_settings.overwrite_config
    if not overrides or workflow.overwrite_configfiles or not os.path.exists(default_file):
        return None
    merged = read_config_file(default_file)
    update_config(merged, overrides)
    config.clear()
    config.update(merged)
    return f"--config {' '.join(sorted(overrides))} applied on top of {default_file} (the rest of {default_file} kept)"


# The maps whose order is the study's: its cells, tables and figures follow the order these are written in.
STUDY_ORDER_MAPS = ("models", "datasets", "custom_methods")


def _keys_sorted(value):
    if isinstance(value, dict):
        return {key: _keys_sorted(value[key]) for key in sorted(value, key=str)}
    if isinstance(value, list):
        return [_keys_sorted(item) for item in value]
    return value


def sort_setting_keys(config: dict) -> dict:
    """Every mapping of the config with its keys sorted, in place, except the order of the study's models,
    datasets and custom methods (their settings are sorted too). Snakemake compares a job's params by their
    ``repr``, in which a dict's key order shows: the same settings written in another order, in another config
    file or with a default filled in where the other file wrote the key, would rerun every job that takes them
    (a synthetic dataset's generator, and so every cell of the study)."""
    canonical = {}
    for key in sorted(config, key=str):
        value = config[key]
        if key in STUDY_ORDER_MAPS and isinstance(value, dict):
            canonical[key] = {name: _keys_sorted(settings) for name, settings in value.items()}
        else:
            canonical[key] = _keys_sorted(value)
    config.clear()
    config.update(canonical)
    return config
