"""``loopwatch upgrade PATH``: bring a store file written by an earlier loopwatch to this one's
schema, in place (what opening it for writing does anyway; read-only opens cannot)."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from loopwatch.dashboard.cli.args import UsageError, positive_int

__all__ = ["add_upgrade"]


def add_upgrade(sub: Any) -> None:
    p = sub.add_parser(
        "upgrade",
        help="upgrade a store file written by an earlier loopwatch, in place",
        description=(
            "Open the store file for writing, which upgrades a file of an earlier schema version "
            "in one transaction (a failed upgrade leaves it as it was), and close it. "
            "`loopwatch serve` and `loopwatch import` do the same when they open a file; "
            "`loopwatch dashboard` and `loopwatch report` open files read-only and cannot."
        ),
    )
    p.add_argument("path", metavar="PATH", help="the store file")
    p.add_argument(
        "--memory-mb",
        metavar="MB",
        type=positive_int,
        help="DuckDB's memory limit while upgrading (default: DuckDB's, 80%% of RAM; an upgrade "
        "under a lower limit spills to disk and takes longer)",
    )
    p.set_defaults(handler=_upgrade)


def _upgrade(args: argparse.Namespace, out: TextIO) -> int:
    from pathlib import Path

    from loopwatch.queries.store.database import Store

    path = Path(args.path)
    if not path.is_file():
        raise UsageError(f"{path} does not exist: nothing to upgrade.")
    with Store(path, memory_mb=args.memory_mb) as store:
        row = store.connection.execute("SELECT max(version) FROM schema_version").fetchone()
    out.write(f"{path} has store schema version {row[0] if row else '?'}.\n")
    return 0
