"""The ``loopwatch`` command.

``loopwatch report --db PATH [--task-type T ...] [--since DURATION] [--format table|json|toml]``
prints, from whatever is in a store, the stop-reason mix, the hit-the-limit rates, and the
limit verdicts and recommendations per task type; ``--format toml`` prints a limits file that
``LimitPolicy.from_toml`` loads. The store is opened read-only. Exit codes: 0 done, 1 a query
failed, 2 bad usage, a store that cannot be read (missing, locked, not a loopwatch store), a
task type the store has never seen, or nothing to write for ``--format toml`` (an empty limits
file would silently replace a real one when redirected).

The subcommands live in modules of their own (``cli_report``, ``cli_import``, ``cli_serve``,
``cli_demo``); this module holds the parser and the entry point.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, Final, TextIO

from loopwatch.dashboard.cli.args import PROG, UsageError
from loopwatch.instrumentation.runtime.extras import MissingExtraError
from loopwatch.queries.analysis.gateway import QueryError
from loopwatch.queries.store.errors import (
    StoreCorruptError,
    StoreError,
    is_damaged_store_error,
    resolve_db_path,
)

__all__ = ["build_parser", "build_report", "main"]


_COMMANDS: Final[dict[str, tuple[str, str]]] = {
    "report": ("report", "add_report"),
    "import": ("import_logs", "add_import"),
    "serve": ("serve", "add_serve"),
    "dashboard": ("serve", "add_dashboard"),
    "demo": ("demo", "add_demo"),
    "upgrade": ("upgrade", "add_upgrade"),
}
"""Subcommand -> (module of this package, the function that adds its parser), in help order."""


class _VersionAction(argparse.Action):
    """``--version``, the distribution's version read only when asked (the metadata lookup is
    a noticeable part of a short command's start-up)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.update(nargs=0, help="show program's version number and exit")
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        from loopwatch import __version__

        sys.stdout.write(f"{parser.prog} {__version__}\n")
        parser.exit()


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``loopwatch`` argument parser, one subparser per subcommand; ``only``: just that
    subcommand's (what ``main`` builds to run one, so it imports nothing the others need)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="loopwatch: why agent loops stop, and which limits to change.",
    )
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, (module, adder) in _COMMANDS.items():
        if only is None or name == only:
            add = getattr(importlib.import_module(f"{__name__}.{module}"), adder)
            add(sub)
    return parser


def _command(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names, when it is the first argument (else ``None``: the whole
    parser is built, for help, ``--version`` and its error messages)."""
    return argv[0] if argv and argv[0] in _COMMANDS else None


def __getattr__(name: str) -> Any:
    # build_report stays importable from here without every command paying for its imports
    if name == "build_report":
        from loopwatch.dashboard.cli.report import build_report

        return build_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), "build_report"})


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``loopwatch`` script; returns the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_command(argv))
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace, TextIO], int] = args.handler
    try:
        return handler(args, sys.stdout)
    except BrokenPipeError:
        # the reader went away (`loopwatch report | head`): not an error worth a traceback
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except (StoreError, UsageError, MissingExtraError) as exc:
        print(f"{PROG} {args.command}: {exc}", file=sys.stderr)
        return 2
    except QueryError as exc:
        if is_damaged_store_error(exc.__cause__ or exc):
            # the header was fine, the blocks a query read were not: not a query problem
            damaged = StoreCorruptError(resolve_db_path(getattr(args, "db", None)), str(exc))
            print(f"{PROG} {args.command}: {damaged}", file=sys.stderr)
            return 2
        print(f"{PROG} {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
