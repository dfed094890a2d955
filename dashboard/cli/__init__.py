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
import os
import sys
from collections.abc import Callable, Sequence
from typing import TextIO

from loopwatch import __version__
from loopwatch.dashboard.cli.args import PROG, UsageError
from loopwatch.dashboard.cli.demo import add_demo
from loopwatch.dashboard.cli.import_logs import add_import
from loopwatch.dashboard.cli.report import add_report, build_report
from loopwatch.dashboard.cli.serve import add_dashboard, add_serve
from loopwatch.dashboard.cli.upgrade import add_upgrade
from loopwatch.instrumentation.runtime.extras import MissingExtraError
from loopwatch.queries.analysis.gateway import QueryError
from loopwatch.queries.store.errors import (
    StoreCorruptError,
    StoreError,
    is_damaged_store_error,
    resolve_db_path,
)

__all__ = ["build_parser", "build_report", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The ``loopwatch`` argument parser, one subparser per subcommand."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="loopwatch: why agent loops stop, and which limits to change.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    add_report(sub)
    add_import(sub)
    add_serve(sub)
    add_dashboard(sub)
    add_demo(sub)
    add_upgrade(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``loopwatch`` script; returns the exit code."""
    parser = build_parser()
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
