"""Log files a user can send: the app's and the built-in server's, in the user log folder.

* ``halo-weave.log``: the app's own log records, every uncaught exception (main thread
  and worker threads) with its traceback;
* ``server.log``: every line the built-in model server printed (its Python stack too,
  when native code crashes it: the server runs with :mod:`faulthandler` on);
* ``crash.log``: :mod:`faulthandler`'s stacks when the app itself dies in native code.

The first two rotate (:data:`MAX_BYTES`, :data:`BACKUPS` old files kept).  The folder is
:func:`halo_weave.settings.log_dir`; ``halo-weave --help`` prints it and Help → Open log
folder opens it.
"""

from __future__ import annotations

import faulthandler
import logging
import logging.handlers
import sys
import threading
from pathlib import Path

from .settings import log_dir

APP_LOG = "halo-weave.log"
SERVER_LOG = "server.log"
CRASH_LOG = "crash.log"
#: Size at which a log file rotates, and how many older ones are kept.
MAX_BYTES = 2 << 20
BACKUPS = 3
#: The logger the built-in server's output lines go to (not propagated to the app's).
SERVER_OUTPUT_LOGGER = "halo_weave.server_output"

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_crash_file = None  # kept open: faulthandler writes to its descriptor when the process dies


def _rotating(path: Path, fmt: str) -> logging.Handler:
    handler = logging.handlers.RotatingFileHandler(path, maxBytes=MAX_BYTES, backupCount=BACKUPS,
                                                   encoding="utf-8", delay=True)
    handler.setFormatter(logging.Formatter(fmt))
    return handler


def install_app_logging(level: int = logging.INFO) -> Path:
    """Log to stderr and to the app's log file; uncaught exceptions and native crashes
    land there too.  Returns the log folder."""
    global _crash_file
    folder = log_dir()
    root = logging.getLogger()
    root.setLevel(level)
    if not any(isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)
               for h in root.handlers):
        stderr = logging.StreamHandler()
        stderr.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root.addHandler(stderr)
    target = str(folder / APP_LOG)
    if not any(getattr(h, "baseFilename", None) == target for h in root.handlers):
        root.addHandler(_rotating(folder / APP_LOG, _FORMAT))
    log = logging.getLogger("halo_weave")

    def uncaught(kind, value, traceback) -> None:
        if issubclass(kind, KeyboardInterrupt):
            sys.__excepthook__(kind, value, traceback)
            return
        log.critical("uncaught exception", exc_info=(kind, value, traceback))

    def uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
        if args.exc_type is SystemExit:
            return
        log.critical("uncaught exception in thread %s", getattr(args.thread, "name", "?"),
                     exc_info=(args.exc_type, args.exc_value, args.exc_traceback))

    sys.excepthook = uncaught
    threading.excepthook = uncaught_in_thread
    if _crash_file is None:
        _crash_file = open(folder / CRASH_LOG, "a", encoding="utf-8")  # noqa: SIM115 - open for life
        faulthandler.enable(file=_crash_file, all_threads=True)
    return folder


def server_output_log() -> logging.Logger:
    """The logger whose records are the built-in server's output lines, in ``server.log``."""
    logger = logging.getLogger(SERVER_OUTPUT_LOGGER)
    target = str(log_dir() / SERVER_LOG)
    if not any(getattr(h, "baseFilename", None) == target for h in logger.handlers):
        for old in list(logger.handlers):  # the folder changed ($HALO_WEAVE_LOGS, tests)
            logger.removeHandler(old)
            old.close()
        logger.addHandler(_rotating(log_dir() / SERVER_LOG, "%(asctime)s %(message)s"))
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return logger


def server_log_path() -> Path:
    return log_dir() / SERVER_LOG
