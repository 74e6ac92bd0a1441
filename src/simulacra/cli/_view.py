"""The live view's commands: ``simulacra run CONFIG --view`` and ``simulacra view RUN_DIR``.

``--view`` (on ``run CONFIG`` and ``run --resume RUN_DIR``) serves a page on
127.0.0.1, on a free port, with a random token in the URL it prints on
stderr; the page shows the run's charts, its newest events and its cost as it
goes, with play, pause, step and stop (see ``simulacra.LiveView``).
``--paused`` starts it paused, before step 0. ``simulacra view RUN_DIR`` serves
the page for a run directory already written: a finished run is replayed in
it, with a position slider; Ctrl-C ends it (exit 0).

Without the ``view`` extra both say so in one line (``python -m pip install
'.[view]'``) and exit 2 before any work; so do a remote ``--host``
without ``--allow-remote`` and a directory that is not a run directory.

Layer 7: uses the public front door ``simulacra`` only, imported lazily.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["ViewOptions", "add_view_arguments", "add_view_command"]

EXIT_OK = 0
EXIT_USAGE = 2


def add_view_arguments(parser: argparse.ArgumentParser, *, run: bool) -> None:
    """``--host``, ``--port``, ``--allow-remote``; for *run* also ``--view`` and ``--paused``."""
    if run:
        parser.add_argument("--view", action="store_true",
                            help="with CONFIG.yaml or --resume: serve a live view of the run "
                                 "(charts, newest events, cost; play, pause, step, stop) on "
                                 "127.0.0.1; needs the [view] extra")
        parser.add_argument("--paused", action="store_true",
                            help="with --view: start paused, before step 0")
    parser.add_argument("--host", default=None, metavar="HOST",
                        help="the view's host (default 127.0.0.1); another machine's reach "
                             "needs --allow-remote")
    parser.add_argument("--port", type=int, default=None, metavar="N",
                        help="the view's port (default: a free one; a taken one is replaced "
                             "by a free one)")
    parser.add_argument("--allow-remote", action="store_true",
                        help="let --host be an address other machines can reach")


@dataclass(frozen=True, slots=True)
class ViewOptions:
    """What ``--view`` asked for."""

    host: str = "127.0.0.1"
    port: int = 0
    allow_remote: bool = False
    paused: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace, *, view: bool) -> ViewOptions | None:
        """The options given, or None without ``--view``.

        Raises:
            ValueError: A view option without ``--view`` (the message says which).
        """
        given = [flag for flag, value in (("--host", args.host), ("--port", args.port),
                                          ("--allow-remote", args.allow_remote or None),
                                          ("--paused", getattr(args, "paused", None) or None))
                 if value is not None]
        if not view:
            if given:
                raise ValueError(f"{given[0]} goes with --view")
            return None
        if args.port is not None and not 0 <= args.port <= 65535:
            raise ValueError(f"--port must be between 0 and 65535, got {args.port}")
        return cls(args.host or "127.0.0.1", args.port or 0, bool(args.allow_remote),
                   bool(getattr(args, "paused", False)))

    def check(self) -> None:
        """Before any work: the extra is installed and the host may be served.

        Raises:
            ConfigError: It is not, or it may not (one line naming the fix).
        """
        import simulacra  # noqa: PLC0415

        simulacra.LiveView.check(host=self.host, allow_remote=self.allow_remote)

    def start(self, run_dir: str, control: Any, *, name: str, steps: int) -> Any:
        """Serve the view of the run about to write *run_dir*; print its URL on stderr."""
        import simulacra  # noqa: PLC0415

        view = simulacra.LiveView(run_dir, control=control, name=name, steps=steps,
                                  host=self.host, port=self.port,
                                  allow_remote=self.allow_remote)
        url = view.start()
        if view.note is not None:
            print(f"view: {view.note}", file=sys.stderr)
        paused = " (paused before step 0: press play or step)" if self.paused else ""
        print(f"live view: {url}{paused}", file=sys.stderr, flush=True)
        return view


def _cmd_view(args: argparse.Namespace) -> int:
    import simulacra  # noqa: PLC0415

    options = ViewOptions(args.host or "127.0.0.1", args.port or 0, bool(args.allow_remote))
    try:
        options.check()
        view = simulacra.LiveView(args.run_dir, host=options.host, port=options.port,
                                  allow_remote=options.allow_remote, process=False)
        url = view.start()
    except simulacra.ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if view.note is not None:
        print(f"view: {view.note}", file=sys.stderr)
    print(f"view of {args.run_dir}: {url} (Ctrl-C ends it)", file=sys.stderr, flush=True)
    if args.open:
        import webbrowser  # noqa: PLC0415

        webbrowser.open(url)
    try:
        while not view.wait(0.5):
            time.sleep(0)
    except KeyboardInterrupt:
        pass
    finally:
        view.close()
    return EXIT_OK


def add_view_command(commands: Any) -> None:
    """Add ``view RUN_DIR`` to the ``simulacra`` subcommands."""
    view = commands.add_parser(
        "view",
        help="serve the live view of a run directory (a finished run is replayed, with a "
             "position slider)",
        description=("Serve a page on 127.0.0.1 (a free port, a random token in the printed "
                     "URL) with the charts, events and cost of a run directory of "
                     "`simulacra run`; a finished run is replayed with a position slider and "
                     "play, pause and step. Ctrl-C ends it. Needs the [view] extra."),
    )
    view.add_argument("run_dir", metavar="RUN_DIR", help="a run directory of `simulacra run`")
    add_view_arguments(view, run=False)
    view.add_argument("--open", action="store_true", help="open the page in a browser")
    view.set_defaults(command_fn=_cmd_view)
