"""The ``halo-weave`` command line: parse options, build the window, run the app.

The console script is ``halo_weave.app:main``, which hands its controller class to
:func:`run`: this module wires settings, that controller and the
:class:`~halo_weave.ui.main_window.MainWindow` together (the ui layer never imports app).
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
from pathlib import Path

from .. import __version__
from .. import settings as settings_mod
from ..settings import Settings
from .control.connection import DEFAULT_SERVER_URL


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's layout, but paths in the description stay whole (no break at a hyphen)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import textwrap

        return textwrap.fill(" ".join(text.split()), width, initial_indent=indent, subsequent_indent=indent,
                             break_on_hyphens=False, break_long_words=False)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="halo-weave",
        formatter_class=_HelpFormatter,
        description=(
            "Halo Weave: an endless conversation with your own LLM inside a fixed context "
            "window. The model's attention decides what stays; pruned chunks wait in the "
            "graveyard and come back when a later message needs them."
        ),
        epilog=(
            "Without a server at the configured URL the built-in model server starts "
            "automatically on a free loopback port and stops when the window closes. "
            "Conversations are SQLite files in the data directory ($HALO_WEAVE_HOME). "
            f"Settings: {_settings_file()} ($HALO_WEAVE_CONFIG). "
            f"Logs (the app's, the built-in server's, crash stacks): {_log_folder()} ($HALO_WEAVE_LOGS)."
        ),
    )
    parser.add_argument(
        "--server-url", metavar="URL",
        help="model server: ours, KoboldCPP, llama-server or any OpenAI-compatible one (default: the saved setting, "
             f"initially {DEFAULT_SERVER_URL}); kept in the settings",
    )
    parser.add_argument(
        "--model", metavar="NAME|FILE",
        help="the built-in model server's model: qwen (the bundled default, Qwen2.5-Coder-0.5B-Instruct), "
             "qwen1.5b (Qwen2.5-Coder-1.5B-Instruct, the large extra: answers from memory best, half as fast), "
             "smollm2 (SmolLM2-135M-Instruct, faster, reads its memory poorly) or a GGUF file; kept in the "
             "settings ('' goes back to the default)",
    )
    parser.add_argument(
        "--data-dir", metavar="DIR", type=Path,
        help="where conversations live, and then the settings too (default: $HALO_WEAVE_HOME or the "
             "platform's user data directory, with the settings in the user config directory, "
             "$HALO_WEAVE_CONFIG)",
    )
    parser.add_argument(
        "--conversation", metavar="FILE", type=Path,
        help="open this conversation file instead of the last one",
    )
    parser.add_argument(
        "--no-autostart", action="store_true",
        help="never start the built-in model server; wait for the configured one",
    )
    parser.add_argument(
        "--probe", metavar="URL",
        help="say what model server answers at URL as one JSON line (kind, version, context size, "
             "attention, token_ids, exact_tokens) and exit: 0 when it is usable, 1 otherwise; "
             "an API key comes from $HALO_WEAVE_API_KEY or the one stored for URL",
    )
    parser.add_argument(
        "--api", choices=("auto", "completions", "chat"), default="auto",
        help="with --probe: how to speak to an OpenAI-compatible server: /v1/completions, "
             "/v1/chat/completions, or auto (chat completions only where the server has no "
             "/v1/completions; default)",
    )
    parser.add_argument(
        "--check", metavar="FILE", type=Path,
        help="verify a conversation file (SQLite integrity and every checksum), say what is "
             "wrong, and exit: 0 when sound, 1 when damaged or not a conversation",
    )
    parser.add_argument(
        "--install-desktop-entry", action="store_true",
        help="add Halo Weave to the desktop's application menu, with its icon (for this user: "
             "$XDG_DATA_HOME/applications and icons), and exit",
    )
    parser.add_argument(
        "--remove-desktop-entry", action="store_true",
        help="take the desktop entry and the icon that --install-desktop-entry wrote away again, and exit",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser


def _model_choice(value: str) -> str:
    """A bundled model's name as given, a file as an absolute path (the server may start
    from another folder)."""
    from ..server.bundled import canonical

    value = value.strip()
    return value if not value or canonical(value) else str(Path(value).expanduser().resolve())


def desktop_entry_main(install: bool) -> int:
    """``--install-desktop-entry`` / ``--remove-desktop-entry``: say which files changed."""
    from . import desktop_entry

    if install:
        for path in desktop_entry.install():
            print(f"wrote {path}")
        return 0
    removed = desktop_entry.remove()
    print("\n".join(f"removed {path}" for path in removed) or "no desktop entry was installed")
    return 0


def _settings_file() -> str:
    try:
        return str(settings_mod.config_dir(create=False) / settings_mod.SETTINGS_FILE)
    except OSError as exc:
        return f"(none: {exc})"


def _log_folder() -> str:
    try:
        return str(settings_mod.log_dir())
    except OSError as exc:  # an unwritable home: say so instead of failing --help
        return f"(none: {exc})"


def probe_main(url: str, api: str = "auto") -> int:
    """``halo-weave --probe URL``: one JSON line, exit 0 when something usable answers."""
    import json

    from ..backends.api_keys import get_key
    from ..backends import probe

    result = probe(url, api_key=os.environ.get("HALO_WEAVE_API_KEY") or get_key(url), api=api)
    print(json.dumps(result.as_json()), flush=True)
    return 0 if result.usable else 1


def run(argv: list[str] | None, controller_class) -> int:
    """The ``halo-weave`` console script, with :class:`~halo_weave.app.TurnController`."""
    args = build_parser().parse_args(argv)
    if args.data_dir:
        os.environ["HALO_WEAVE_HOME"] = str(args.data_dir.expanduser())
    if args.probe:
        return probe_main(args.probe, args.api)
    if args.install_desktop_entry or args.remove_desktop_entry:
        return desktop_entry_main(args.install_desktop_entry)
    if args.check:
        from ..storage.files import check_file

        sound, lines = check_file(args.check)
        print("\n".join(lines))
        return 0 if sound else 1
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from ..logs import install_app_logging

    install_app_logging(logging.INFO)  # stderr and the log folder, uncaught exceptions too
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per token otherwise

    from .platform_check import platform_problem

    problem = platform_problem()  # Qt would abort with a message that names no fix
    if problem:
        print(problem, file=sys.stderr)
        return 1

    from PySide6.QtWidgets import QApplication

    from .desktop_entry import APP_ID
    from .main_window import MainWindow, app_icon, app_qsettings

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Halo Weave")
    app.setOrganizationName("halo-weave")
    app.setApplicationVersion(__version__)
    app.setDesktopFileName(APP_ID)  # Wayland matches the window to the installed desktop entry
    app.setWindowIcon(app_icon())
    data_dir = settings_mod.data_dir()
    qsettings = app_qsettings()
    from .theme import THEME_KEY, apply_theme, follow_system

    apply_theme(app, str(qsettings.value(THEME_KEY, "system")))
    follow_system(app, lambda: str(qsettings.value(THEME_KEY, "system")))
    settings = _load_settings(qsettings)
    if args.server_url:
        settings = settings.replace(server_url=args.server_url)
    if args.model is not None:
        settings = settings.replace(server_model=_model_choice(args.model))
    if args.server_url or args.model is not None:
        _save_settings(settings, qsettings)
    autostart = settings.server.autostart_server and not args.no_autostart
    controller = controller_class(settings, data_dir, autostart=autostart)
    window = MainWindow(controller, qsettings)
    window.show()
    app.processEvents()
    controller.start(args.conversation)
    _quit_on_signals(app)
    code = app.exec()
    controller.shutdown()  # also stops the bundled server we started
    # Everything is saved and closed: the objects left go with the process.  Left to the
    # interpreter's last collections, torch's and transformers' millions of objects made
    # quitting take about 3.5 s more (scripts/bench_quit.py).
    gc.freeze()
    return code


def _quit_on_signals(app) -> None:
    """Ctrl+C or SIGTERM closes the window cleanly (so the bundled server stops too)."""
    import signal

    from PySide6.QtCore import QTimer as _Timer

    def quit_app(*_) -> None:
        for widget in app.topLevelWidgets():
            widget.close()
        app.quit()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, quit_app)
    # Python runs signal handlers only between bytecodes: wake it up now and then.
    timer = _Timer(app)
    timer.timeout.connect(lambda: None)
    timer.start(250)


def _load_settings(qsettings) -> Settings:
    try:
        from .settings_io import load_settings
    except ImportError:
        return Settings()
    return load_settings(qsettings)


def _save_settings(settings: Settings, qsettings) -> None:
    try:
        from .settings_io import save_settings
    except ImportError:
        return
    save_settings(settings, qsettings)
