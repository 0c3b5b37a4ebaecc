"""``halo-weave-server`` / ``python -m halo_weave.server``: serve a model over HTTP.

Prints exactly one line to stdout once it accepts connections::

    Halo Weave server ready on http://127.0.0.1:5001 (model Qwen2.5-Coder-0.5B-Instruct-Q4_K_M)

(``--port 0`` picks a free port and reports it there.)  Progress and request logs go
to stderr.  Exit status: 0 after a clean shutdown, 1 if the address is unusable (or is
not loopback and no ``--api-key`` was given), 2 if the model cannot be loaded.

Only loopback by default: ``--host`` beyond it needs ``--api-key``, and every request
then carries ``Authorization: Bearer KEY`` (see :mod:`halo_weave.server.guard`).
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import socket
import sys
from pathlib import Path

from .. import __version__
from ..rules.attention_formats import AGGREGATED, ATTENTION_FORMATS
from .kv_files import DEFAULT_DISK_BYTES
from .saved_caches import EXIT_WAIT_S
from .kv_surgery import TAIL_FIRST_DEFAULT
from .span_store import RESTORE_POLICIES, SAME_CONTEXT

#: Format of the ready line; :mod:`halo_weave.server.launcher` parses it.
READY_LINE = "Halo Weave server ready on {url} (model {model})"

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 5001
#: Default bound of the pruned-span store (``span_store.DEFAULT_STORE_BYTES``, in MiB).
DEFAULT_STORE_MB = 1024
#: Folder under the user cache folder where conversations' KV caches are saved.
KV_STATES_FOLDER = "kv-states"

#: Environment variable holding the API key (keeps it out of the process list).
API_KEY_ENV = "HALO_WEAVE_API_KEY"

log = logging.getLogger("halo_weave.server")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="halo-weave-server",
        description="KoboldCPP-compatible server that streams the model's attention per token.",
    )
    parser.add_argument("--model", default=None,
                        help="a bundled model, qwen (the default: Qwen2.5-Coder-0.5B-Instruct) or smollm2 "
                             "(SmolLM2-135M-Instruct: three times faster, answers from the context poorly); "
                             "or a GGUF file, a directory with one GGUF, or a transformers model directory")
    parser.add_argument("--engine", choices=("auto", "llamacpp", "transformers"), default="auto",
                        help="auto (default): llama.cpp for GGUF files when llama-cpp-python is "
                             "installed, else transformers")
    parser.add_argument("--kv-mode", choices=("surgery", "exact"), default="surgery",
                        help="how a prompt with pruned or resurrected spans meets the KV cache: "
                             "surgery (default: cut, shift, run only inserted spans) or exact "
                             "(re-run everything from the first change)")
    parser.add_argument("--kv-tail-first", action=argparse.BooleanOptionalAction,
                        default=TAIL_FIRST_DEFAULT,
                        help="when a request resurrects spans and adds new tokens, run the new tokens "
                             "first, at the pruned context's size, then put the spans back (default: %(default)s; "
                             "the new tokens' states then do not see the resurrected spans)")
    parser.add_argument("--kv-store-mb", type=int, default=DEFAULT_STORE_MB,
                        help="host memory (MiB) keeping the states of pruned spans, so that resurrecting "
                             "them runs nothing (default %(default)s; 0 turns it off)")
    parser.add_argument("--kv-restore", choices=RESTORE_POLICIES, default=SAME_CONTEXT,
                        help="where kept states of a pruned span are put back: same-context (default: only "
                             "where the tokens before it are those it was kept with, as after an undone "
                             "prune or a reopening; elsewhere the span is run, seeing the context it "
                             "joins) or any (wherever its tokens match: faster, and it costs answers)")
    parser.add_argument("--kv-dir", default=None, metavar="FOLDER",
                        help="where the llama.cpp engine saves each conversation's KV cache when idle, "
                             "to read it back when the conversation is reopened (default: kv-states in "
                             "the user cache folder)")
    parser.add_argument("--kv-disk-mb", type=int, default=DEFAULT_DISK_BYTES >> 20,
                        help="bound on the saved KV caches on disk, least recently saved dropped first; "
                             "0 saves none (default %(default)s)")
    parser.add_argument("--exit-wait", type=float, default=EXIT_WAIT_S, metavar="SECONDS",
                        help="when stopped while a request holds the model (a read-ahead, a prefill), wait "
                             "this long for its current batch to end, then save the KV cache (default "
                             "%(default)s; the app stops its server within 5 s)")
    parser.add_argument("--host", default=DEFAULT_HOST, help="address to bind (default %(default)s)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help="port (default %(default)s; 0 picks a free one)")
    parser.add_argument("--context-size", type=int, default=None,
                        help="largest prompt + generation in tokens (default: the model's trained context)")
    parser.add_argument("--initial-context", type=int, default=None, metavar="TOKENS",
                        help="llama.cpp engine: KV cells to start with (default: the context size); a "
                             "larger request grows the cache up to the context size (its states are "
                             "copied). Fewer cells make every prune cheaper (llama.cpp re-rotates every "
                             "cell's key)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="transformers engine: where the model runs (auto: CUDA when torch sees a GPU)")
    parser.add_argument("--gpu-layers", type=gpu_layers, default=0, metavar="N",
                        help="llama.cpp engine: the model's last N layers (-1: all) run on a GPU, with "
                             "their KV cache; needs a llama-cpp-python built with CUDA, Metal or Vulkan "
                             "(a CPU-only build runs them on the CPU and says so). Default 0: the CPU only")
    parser.add_argument("--attention-format", choices=tuple(ATTENTION_FORMATS), default=AGGREGATED,
                        help="attention format for requests that name none")
    parser.add_argument("--no-attention", action="store_true",
                        help="behave like stock KoboldCPP: never send attention, stream text chunks "
                             "and do not declare attention support (to test clients' fallback)")
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads (default: all cores but one, at least 1)")
    parser.add_argument("--no-model-cache", action="store_true",
                        help="do not save the dequantized model for faster later starts")
    parser.add_argument("--api-key", default=os.environ.get(API_KEY_ENV) or None,
                        help="require 'Authorization: Bearer KEY' on every request (default: "
                             f"${API_KEY_ENV}); required with a --host other than loopback")
    parser.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser


def gpu_layers(text: str) -> int:
    """``--gpu-layers``: a whole number, 0 or more, or -1 for every layer."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < -1:
        raise argparse.ArgumentTypeError(f"0 or more layers (or -1 for all), not {value}")
    return value


def default_threads() -> int:
    """Every core.  The OpenMP pools spin only briefly before they sleep (``GOMP_SPINCOUNT``,
    set in :func:`main`, see :mod:`.omp`), so a thread that waits gives its core back to
    the app's UI and embedder; spinning without bound, 2 threads on a busy 2-core machine
    were ~10x slower than 1."""
    return max(1, os.cpu_count() or 1)


def bind_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named explicitly: asyncio sets TCP_NODELAY on accepted connections only
    # when the listening socket says TCP, and without it every answer waited ~40 ms for
    # a delayed ACK (Nagle), /abort included.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # A crash in native code (llama.cpp, torch) prints the Python stack to stderr, which
    # the app keeps in the server's log file.
    faulthandler.enable()
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # The model ships on disk: never reach for the network.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # Before torch or llama.cpp start OpenMP: waiting threads spin briefly, then sleep
    # (see .omp and default_threads).
    from .omp import configure as configure_openmp

    configure_openmp()

    from .guard import is_loopback

    if not is_loopback(args.host) and not args.api_key:
        print(
            f"halo-weave-server: refusing to listen on {args.host} without a key: anyone on the "
            f"network could use the model. Pass --api-key KEY (or set {API_KEY_ENV}), or use the "
            f"default --host {DEFAULT_HOST}.",
            file=sys.stderr,
        )
        return 1
    try:
        sock = bind_socket(args.host, args.port)
    except OSError as exc:
        print(f"halo-weave-server: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1

    import uvicorn

    from .app import create_app
    from .engine_choice import engine_note, load_engine

    log.info("loading model %s ...", args.model or "(the bundled default)")
    try:
        engine = load_engine(args.engine, args.model, device=args.device, context_size=args.context_size,
                             attention_format=args.attention_format, threads=args.threads or default_threads(),
                             cache_model=not args.no_model_cache, kv_mode=args.kv_mode,
                             kv_tail_first=args.kv_tail_first,
                             store_bytes=max(0, args.kv_store_mb) << 20, kv_restore=args.kv_restore,
                             initial_context=args.initial_context, gpu_layers=args.gpu_layers)
    except Exception as exc:  # noqa: BLE001 - any load failure is reported, not traced
        log.debug("model load failed", exc_info=True)
        print(f"halo-weave-server: cannot load the model: {exc}", file=sys.stderr)
        return 2
    log.info("model %s on %s (%s engine, kv %s%s), context %d tokens%s%s", engine.name, engine.device,
             engine.kind, engine.kv.mode, ", tail first" if engine.kv.tail_first else "", engine.context_size,
             f" ({engine.n_cells} cells to start)" if getattr(engine, "n_cells", None) else "",
             " (from the dequantized cache)" if engine.loaded_from_cache else "")
    note = engine_note(engine.kind, engine.model_note)
    if note:
        log.warning("%s", note)
    if args.kv_disk_mb > 0:
        from ..settings import cache_dir
        from .kv_files import StateFiles

        engine.keep_states(StateFiles(Path(args.kv_dir) if args.kv_dir else cache_dir() / KV_STATES_FOLDER,
                                      max(0, args.kv_disk_mb) << 20))

    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    ready = READY_LINE.format(url=f"http://{shown}:{port}", model=engine.name)

    class ReadyServer(uvicorn.Server):
        async def startup(self, sockets=None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                print(ready, flush=True)

        async def shutdown(self, sockets=None) -> None:
            # The request holding the model stops after its current batch while uvicorn
            # closes the connections, not after (a prefill batch takes seconds on a slow CPU).
            engine.abort()
            await super().shutdown(sockets=sockets)
            # Stopped (SIGTERM from the app quitting, Ctrl+C): the last answer's cache may be
            # younger than the idle save, and a read-ahead may hold the model (it is stopped
            # after its batch).  Here, not after run(): uvicorn re-raises the signal when
            # run() ends.  A memory copy and one file write.
            try:
                engine.save_at_exit(max(0.0, args.exit_wait))
            except Exception:  # noqa: BLE001 - a failed save costs a prefill on reopening, nothing now
                log.exception("saving the KV cache at shutdown failed")

    if args.no_attention:
        log.info("attention disabled (--no-attention): serving like stock KoboldCPP")
    app = create_app(engine, attention=not args.no_attention, api_key=args.api_key)
    config = uvicorn.Config(app, log_level=args.log_level, access_log=True,
                            timeout_graceful_shutdown=1, lifespan="off")
    ReadyServer(config).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
