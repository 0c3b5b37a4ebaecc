"""Small C sources shipped with the package, compiled on first use into a cache folder.

The attention readout's filter (:mod:`halo_weave.server.llamacpp.filter`) and the
search's first pass (:mod:`halo_weave.memory.scan`) are each one C file.  The library is
named after a hash of its source, so a changed source is compiled anew and an unchanged
one never again; it is built in a temporary folder beside its place and moved there in
one step, so a concurrent start sees no file or a whole one.  A caller that gets an
error runs its Python path instead.  Qt-free.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

#: Seconds a compile may take.
COMPILE_TIMEOUT_S = 60


def compiled(source: bytes, file_name: str, folder: Path, stem: str, optimize: str = "-O2") -> Path:
    """The shared library of C ``source`` (``file_name`` its name) in ``folder`` as
    ``<stem>-<hash>.so``, compiled now if it is not there.  Raises RuntimeError when no
    compiler is found or the compile fails."""
    digest = hashlib.sha256(source).hexdigest()[:16]
    target = Path(folder) / f"{stem}-{digest}{'.dll' if os.name == 'nt' else '.so'}"
    if target.exists():
        return target
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        raise RuntimeError("no C compiler found (cc, gcc, or $CC)")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{stem}-") as work:
        source_path = Path(work) / file_name
        source_path.write_bytes(source)
        built = Path(work) / target.name
        done = subprocess.run([compiler, optimize, "-shared", "-fPIC", "-o", str(built), str(source_path)],
                              capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
        if done.returncode != 0 or not built.exists():
            raise RuntimeError(f"{compiler} failed: {done.stderr.strip() or done.returncode}")
        os.replace(built, target)
    return target
