"""Find, load and cache the model the server serves.

A model is named by ``--model``: nothing (the bundled default, Qwen2.5-Coder-0.5B-Instruct),
the name of a bundled model (``qwen``, ``smollm2``: see :mod:`.bundled`), a ``.gguf`` file,
a directory holding one GGUF file, or a transformers model directory (``config.json``).
Nothing is ever downloaded.

For the transformers engine, dequantizing a GGUF file takes most of a cold start (about
30 s for SmolLM2 on two cores, tokenizer included), so after the first load the dequantized weights and
the tokenizer are saved as safetensors under :func:`halo_weave.settings.cache_dir`,
keyed by the GGUF file's name, size and mtime.  Later starts load that copy; a broken
copy is deleted and the GGUF path is used again.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .. import settings
from . import bundled
from .bundled import ModelNotFound

log = logging.getLogger("halo_weave.server")

#: File written last into a cache entry: an entry without it is incomplete.
CACHE_MARKER = "halo-weave-complete"

#: Sub-directory of the user cache dir holding dequantized models.
CACHE_SUBDIR = "models"


@dataclass
class ModelSource:
    """Where the weights come from: a GGUF file or a transformers directory."""

    path: Path
    gguf_file: str | None = None  # file name inside ``path`` when loading a GGUF
    #: A sentence for the log and the window when this is not the model asked for.
    note: str | None = None

    @property
    def name(self) -> str:
        return Path(self.gguf_file).stem if self.gguf_file else self.path.name

    def cache_key(self) -> str | None:
        """A key that changes whenever the GGUF file does (``None``: not cacheable)."""
        if not self.gguf_file:
            return None
        stat = (self.path / self.gguf_file).stat()
        return f"{self.name}-{stat.st_size}-{stat.st_mtime_ns}"


def bundled_gguf(name: str | None = None) -> Path:
    """The GGUF file of the bundled model ``name`` (None: the default; see :mod:`.bundled`)."""
    return bundled.find(name).path


def resolve(model: str | os.PathLike | None) -> ModelSource:
    """Turn a ``--model`` value into a :class:`ModelSource`: a bundled model's name wins
    over a file of that name in the working directory (``./smollm2`` names the file)."""
    if model is None or bundled.canonical(str(model)):
        found = bundled.find(None if model is None else str(model))
        return ModelSource(found.path.parent, found.path.name, note=found.note)
    path = Path(model).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return ModelSource(path.parent, path.name)
    if path.is_dir():
        if (path / "config.json").is_file():
            return ModelSource(path)
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            return ModelSource(path, ggufs[0].name)
        if ggufs:
            raise ModelNotFound(f"{path} holds several .gguf files; name one of them")
    raise ModelNotFound(f"{model} is neither a bundled model ({', '.join(sorted(bundled.NAMES))}), a .gguf file "
                        "nor a transformers model directory")


def load(source: ModelSource, device: str):
    """Load ``(model, tokenizer, loaded_from_cache)``, using or filling the cache."""
    key = source.cache_key()
    if key is not None:
        entry = settings.cache_dir() / CACHE_SUBDIR / key
        if (entry / CACHE_MARKER).is_file():
            try:
                model, tokenizer = _load_pretrained(entry, None, device)
                return model, tokenizer, True
            except Exception as exc:  # noqa: BLE001 - any broken cache falls back to GGUF
                log.warning("model cache %s is unusable (%s); reloading from GGUF", entry, exc)
                shutil.rmtree(entry, ignore_errors=True)
    model, tokenizer = _load_pretrained(source.path, source.gguf_file, device)
    return model, tokenizer, False


def save_cache_in_background(source: ModelSource, model, tokenizer) -> threading.Thread | None:
    """Write the dequantized copy without delaying the ready line; atomic by rename."""
    key = source.cache_key()
    if key is None:
        return None
    thread = threading.Thread(
        target=_save_cache, args=(key, model, tokenizer), name="model-cache", daemon=True
    )
    thread.start()
    return thread


def _save_cache(key: str, model, tokenizer) -> None:
    root = settings.cache_dir() / CACHE_SUBDIR
    entry = root / key
    if (entry / CACHE_MARKER).is_file():
        return
    tmp = root / f".{key}.tmp-{os.getpid()}"
    started = time.perf_counter()
    try:
        _remove_stale_temps(root)
        tmp.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / CACHE_MARKER).write_text(key)
        shutil.rmtree(entry, ignore_errors=True)
        tmp.rename(entry)
        log.info("cached dequantized model in %s (%.1f s)", entry, time.perf_counter() - started)
    except Exception as exc:  # noqa: BLE001 - a failed cache only costs the next start time
        log.warning("could not cache the dequantized model: %s", exc)
        shutil.rmtree(tmp, ignore_errors=True)


def _remove_stale_temps(root: Path) -> None:
    """Drop half-written entries of processes that died while saving."""
    for tmp in root.glob(".*.tmp-*"):
        pid = tmp.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not bundled.pid_alive(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)


def _load_pretrained(path: Path, gguf_file: str | None, device: str):
    # Imported here so that `--help` and the launcher stay fast.
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    extra = {"gguf_file": gguf_file} if gguf_file else {}
    tokenizer = AutoTokenizer.from_pretrained(path, **extra)
    model = AutoModelForCausalLM.from_pretrained(
        path, attn_implementation="eager", dtype="float32" if device == "cpu" else "auto", **extra
    )
    if gguf_file:
        _forget_gguf_quantization(model)
    model.to(device)
    model.eval()
    return model, tokenizer


def _forget_gguf_quantization(model) -> None:
    """GGUF weights arrive dequantized to plain tensors; dropping the quantizer marks
    lets ``save_pretrained`` write them (it refuses "gguf-quantized" models)."""
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    for attr in ("is_quantized", "quantization_method"):
        if attr in vars(model):
            delattr(model, attr)
