"""What the ``loopwatch`` command line accepts: the value types of its options, and the error
for a request the store cannot answer as asked.

A value type turns the text given into a value or raises ``argparse.ArgumentTypeError``, which
argparse prints as ``argument --port: invalid port 'x': use a number`` (exit code 2). The
bounds are checked by :mod:`loopwatch.instrumentation.runtime.validate`, the one validator of option
values; the messages here speak of the text typed, not of a Python value.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import timedelta
from typing import TypeVar

from loopwatch.instrumentation.runtime.validate import check_int, check_number
from loopwatch.queries.analysis.gateway import parse_duration

__all__ = [
    "PROG",
    "UsageError",
    "add_db_option",
    "cut_target",
    "duration",
    "margin",
    "port",
    "positive_float",
    "positive_int",
    "share",
    "value_type",
    "worker_count",
]

PROG = "loopwatch"

T = TypeVar("T")


class UsageError(Exception):
    """A request the store cannot answer as asked (exit code 2), with what to do instead."""


def value_type(
    noun: str,
    parse: Callable[[str], T],
    check: Callable[[str, T], object],
    *,
    unparsed: str,
    out_of_bounds: str,
) -> Callable[[str], T]:
    """An argparse ``type=``: ``parse(text)``, then ``check(noun, value)`` (a ``validate``
    check); a failure of either reads ``invalid <noun> '<text>'`` and then ``unparsed`` or
    ``: <out_of_bounds>``."""

    def convert(text: str) -> T:
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid {noun} {text!r}{unparsed}") from None
        try:
            check(noun, value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid {noun} {text!r}: {out_of_bounds}") from None
        return value

    convert.__name__ = noun
    return convert


positive_int = value_type(
    "count",
    int,
    lambda name, v: check_int(name, v, minimum=1),
    unparsed=": use a whole number",
    out_of_bounds="must be at least 1",
)
worker_count = value_type(
    "worker count",
    int,
    lambda name, v: check_int(name, v, minimum=0, maximum=64),
    unparsed=": use a whole number",
    out_of_bounds="must be 0..64 (0: read in this process)",
)
port = value_type(
    "port",
    int,
    lambda name, v: check_int(name, v, minimum=0, maximum=65535),
    unparsed=": use a number",
    out_of_bounds="must be 0..65535 (0: any free)",
)
margin = value_type(
    "margin",
    float,
    lambda name, v: check_number(name, v, minimum=0, maximum=10),
    unparsed=": use a number like 0.25",
    out_of_bounds="must be between 0 and 10",
)
cut_target = value_type(
    "cut target",
    float,
    lambda name, v: check_number(name, v, minimum=0.0001, maximum=0.5),
    unparsed=": use a share like 0.02 (2%)",
    out_of_bounds="must be between 0.0001 and 0.5",
)
share = value_type(
    "share",
    float,
    lambda name, v: check_number(name, v, minimum=0, maximum=1),
    unparsed=": use a number like 0.01",
    out_of_bounds="must be between 0 and 1",
)
positive_float = value_type(
    "number",
    float,
    lambda name, v: check_number(name, v, positive=True),
    unparsed="",
    out_of_bounds="must be positive",
)


def add_db_option(parser: argparse.ArgumentParser) -> None:
    """``--db PATH``: the store a subcommand opens (resolved by ``resolve_db_path``)."""
    parser.add_argument(
        "--db",
        metavar="PATH",
        default=None,
        help="the store file (default: $LOOPWATCH_DB, else ./loopwatch.duckdb)",
    )


def duration(text: str) -> timedelta:
    """A duration such as ``30m``, ``24h`` or ``7d`` (``parse_duration``'s message on error)."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
