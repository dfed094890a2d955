"""``loopwatch demo``: live mode plus a simulated fleet of agents."""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from loopwatch.dashboard.cli.args import PROG, port, positive_float, positive_int

__all__ = ["add_demo", "duration_s"]


def duration_s(text: str) -> float:
    """A ``--duration``: seconds (``300``) or a duration as ``report --since`` takes (``45s``,
    ``5m``, ``1h``); positive."""
    from loopwatch.queries.analysis.gateway import parse_duration

    try:
        return positive_float(text)
    except argparse.ArgumentTypeError:
        if text.strip().replace(".", "", 1).lstrip("-").isdigit():
            raise
    try:
        seconds = parse_duration(text).total_seconds()
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid duration {text!r}: use seconds (300) or a duration like 45s, 5m, 1h"
        ) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: must be positive")
    return seconds


def add_demo(sub: Any) -> None:
    from loopwatch.dashboard.demo.fleet import FleetPlan

    defaults = FleetPlan()
    p = sub.add_parser(
        "demo",
        help="live mode plus a simulated fleet of agents: every chart and the alert, in one "
        "command",
        description=(
            "Start `loopwatch serve` and a fleet of simulated agents (fake models, the real "
            "guard and instrumentation, spans sent over OTLP from separate processes): task "
            "types with healthy limits, one too tight, one too loose, one looping on a tool, "
            "and a tool outage midway that makes the repeated_error alert fire, then recover. "
            "Prints where to open the dashboard and the metrics. Ctrl-C stops it cleanly."
        ),
    )
    p.add_argument(
        "--db",
        metavar="PATH",
        default="loopwatch-demo.duckdb",
        help="the store file (default: %(default)s; created if missing, appended to if not)",
    )
    p.add_argument(
        "--seed", type=int, default=defaults.seed, help="what the fleet does (default: 0)"
    )
    p.add_argument(
        "--duration",
        type=duration_s,
        default=defaults.duration_s,
        metavar="DURATION",
        help="how long the fleet runs: seconds, or a duration like 45s, 5m, 1h (as report "
        "--since); the outage and the alert windows scale with it (default: %(default)g s)",
    )
    p.add_argument(
        "--rate",
        type=positive_float,
        default=defaults.rate,
        metavar="RUNS_PER_S",
        help="runs started per second, all agents together (default: %(default)g)",
    )
    p.add_argument(
        "--agents",
        type=positive_int,
        default=defaults.agents,
        help="agent processes (default: %(default)s)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    p.add_argument("--otlp-port", type=port, default=4318, metavar="PORT", help="default: 4318")
    p.add_argument("--metrics-port", type=port, default=9464, metavar="PORT", help="default: 9464")
    p.add_argument("--ui-port", type=port, default=8501, metavar="PORT", help="default: 8501")
    p.add_argument(
        "--no-ui",
        dest="ui",
        action="store_false",
        help="headless: no dashboard, and stop when the fleet is done",
    )
    p.set_defaults(handler=_demo)


def _demo(args: argparse.Namespace, out: TextIO) -> int:
    from pathlib import Path

    from loopwatch.dashboard.demo.fleet import FleetPlan
    from loopwatch.dashboard.demo.runner import DemoError, DemoOptions, run_demo

    options = DemoOptions(
        db=Path(args.db),
        plan=FleetPlan(
            seed=args.seed, duration_s=args.duration, rate=args.rate, agents=args.agents
        ),
        host=args.host,
        otlp_port=args.otlp_port,
        metrics_port=args.metrics_port,
        ui_port=args.ui_port,
        ui=args.ui,
    )
    try:
        return run_demo(options, out=out)
    except DemoError as exc:
        print(f"{PROG} demo: {exc}", file=sys.stderr)
        return 2
