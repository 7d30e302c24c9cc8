"""Where NVIDIA's RULER generator and the NLTK data it needs are found, offline, and how it describes a task.

The generator is PyPI's ``nvidia-long-context-eval`` (this project reads one version), found through its
distribution's files, importing nothing; a task's settings are the ones its ``data/prepare.py`` assembles from
``synthetic.yaml``, ``constants.py`` and ``template.py``.

The essay haystacks (niah_single_2/3, niah_multikey_1, niah_multivalue, niah_multiquery) split the essays with
NLTK's ``punkt_tab`` sentence model, which NLTK does not ship and would download. It is found, in this order,
under ``NLTK_DATA`` (when set), in the NLTK data that PyPI's ``llama-index-core`` wheel ships (installed with
--no-deps, requirements-no-deps.txt; only its files are read), then in NLTK's default folders; if none has it
the job says so before generating anything.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "nvidia-long-context-eval"
PACKAGE_VERSION = "26.3"
SYNTHETIC = "long_context_eval/data/synthetic"
# kvpress's generate.sh runs prepare.py with --model_template_type base: the prompt is RULER's template alone
# (a chat template, where the model has one, is the study's prompt builder's job).
MODEL_TEMPLATE = "base"

PUNKT = "tokenizers/punkt_tab/english"
PUNKT_FILES = ("collocations.tab", "sent_starters.txt", "abbrev_types.txt", "ortho_context.tab")
PUNKT_WHEEL, PUNKT_WHEEL_DATA = "llama-index-core", "llama_index/core/_static/nltk_cache"
INSTALL_HELP = (
    f"pip install --no-deps {PACKAGE}=={PACKAGE_VERSION} (tools/bootstrap.sh installs it from "
    "requirements-no-deps.txt; its declared dependencies, nemo-evaluator, openai and others, are not needed to "
    "generate data: nltk, wonderwords, scipy and tenacity are pinned in requirements.txt)"
)


class RulerError(RuntimeError):
    pass


@dataclass(frozen=True)
class RulerTask:
    """One RULER task as the package's prepare.py sees it: which script, with which arguments."""

    name: str
    family: str  # the script's name: niah, qa, variable_tracking, ...
    script: Path
    args: dict
    tokens_to_generate: int
    template: str  # the model template around the task template, then the answer prefix

    @property
    def needs_punkt(self) -> bool:
        return self.family == "niah" and self.args.get("type_haystack") == "essay"


def package_dir() -> Path:
    """The installed ``long_context_eval`` folder, found through the distribution's files (importing nothing)."""
    try:
        distribution = importlib.metadata.distribution(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise RulerError(f"{PACKAGE} is not installed: {INSTALL_HELP}") from None
    if distribution.version != PACKAGE_VERSION:
        raise RulerError(
            f"{PACKAGE} {distribution.version} is installed, this project reads {PACKAGE_VERSION}: {INSTALL_HELP}"
        )
    marker = next((f for f in distribution.files or [] if str(f).endswith("long_context_eval/data/prepare.py")), None)
    if marker is None:
        raise RulerError(f"{PACKAGE} {distribution.version} has no long_context_eval/data/prepare.py: {INSTALL_HELP}")
    return Path(distribution.locate_file(marker)).parent.parent


def _module_from(path: Path, name: str):
    """A module of the package loaded from its file (the package's scripts import these the same way)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ruler_task(name: str) -> RulerTask:
    """``name``'s settings as prepare.py assembles them from synthetic.yaml, constants.py and template.py."""
    import yaml

    root = package_dir()
    customised = yaml.safe_load((root / "synthetic.yaml").read_text())
    if name not in customised:
        raise RulerError(f"RULER has no task {name!r}; synthetic.yaml lists {sorted(customised)}")
    settings = dict(customised[name])
    base = _module_from(root / "data/synthetic/constants.py", "_ruler_constants").TASKS[settings["task"]]
    templates = _module_from(root / "data/template.py", "_ruler_templates").Templates
    template = templates[MODEL_TEMPLATE].format(task_template=base["template"]) + base.get("answer_prefix", "")
    return RulerTask(
        name=name,
        family=settings["task"],
        script=root / "data/synthetic" / f"{settings['task']}.py",
        args=dict(settings.get("args", {})),
        tokens_to_generate=int(base["tokens_to_generate"]),
        template=template,
    )


def task_names() -> list[str]:
    import yaml

    return list(yaml.safe_load((package_dir() / "synthetic.yaml").read_text()))


def punkt_data_dir(environ: dict | None = None) -> Path:
    """The NLTK data folder holding punkt_tab's English model, or an error that says where to put one."""
    environ = os.environ if environ is None else environ
    if environ.get("NLTK_DATA"):
        candidates = [Path(p) for p in environ["NLTK_DATA"].split(os.pathsep) if p]
        origin = "NLTK_DATA"
    else:
        candidates = []
        try:
            distribution = importlib.metadata.distribution(PUNKT_WHEEL)
            candidates.append(Path(distribution.locate_file(PUNKT_WHEEL_DATA)))
        except importlib.metadata.PackageNotFoundError:
            pass
        home = Path(os.path.expanduser("~"))
        candidates += [
            home / "nltk_data",
            Path(sys.prefix) / "nltk_data",
            Path(sys.prefix) / "share/nltk_data",
            Path("/usr/share/nltk_data"),
            Path("/usr/local/share/nltk_data"),
        ]
        origin = f"{PUNKT_WHEEL}'s {PUNKT_WHEEL_DATA} or NLTK's default folders"
    for candidate in candidates:
        if all((candidate / PUNKT / name).is_file() for name in PUNKT_FILES):
            return candidate
    raise RulerError(
        f"RULER's essay haystacks split Paul Graham's essays with NLTK's punkt_tab sentence model, which is not in "
        f"{origin} (looked in {', '.join(map(str, candidates)) or 'nothing'}). Either install the wheel that ships it, "
        f"`pip install --no-deps {PUNKT_WHEEL}==0.14.25` (requirements-no-deps.txt), or set NLTK_DATA to a folder "
        f"holding {PUNKT}/ (where there is network: python -m nltk.downloader -d <folder> punkt_tab)."
    )
