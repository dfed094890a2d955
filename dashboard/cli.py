"""The ``loopwatch`` command.

``loopwatch report --db PATH [--task-type T ...] [--since DURATION] [--format table|json|toml]``
prints, from whatever is in a store, the stop-reason mix, the hit-the-limit rates, and the
limit verdicts and recommendations per task type; ``--format toml`` prints a limits file that
``LimitPolicy.from_toml`` loads. The store is opened read-only. Exit codes: 0 done, 1 a query
failed, 2 bad usage, a store that cannot be read (missing, locked, not a loopwatch store), a
task type the store has never seen, or nothing to write for ``--format toml`` (an empty limits
file would silently replace a real one when redirected).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

from loopwatch.queries.analysis import AnalysisThresholds, LimitAnalysis, analyze_limits
from loopwatch.queries.gateway import QueryError, parse_duration, run_query
from loopwatch.queries.store import (
    StoreCorruptError,
    StoreError,
    connect_read_only,
    is_damaged_store_error,
    resolve_db_path,
)
from loopwatch.queries.toml_export import limits_toml

__all__ = ["build_parser", "build_report", "main"]

PROG = "loopwatch"
FORMATS = ("table", "json", "toml")


def _duration(text: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid count {text!r}: use a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"invalid count {text!r}: must be at least 1")
    return value


def _margin(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid margin {text!r}: use a number like 0.25"
        ) from None
    if not 0 <= value <= 10:
        raise argparse.ArgumentTypeError(f"invalid margin {text!r}: must be between 0 and 10")
    return value


def _add_report(sub: Any) -> None:
    p = sub.add_parser(
        "report",
        help="stop reasons, hit-the-limit rates, limit verdicts and recommendations",
        description=(
            "Read a loopwatch store (read-only) and print, per task type, how runs ended, how "
            "often each limit stopped them, and whether each limit is too tight, too loose, "
            "stuck-not-tight or ok, with the value to set. --format toml prints a limits file "
            "for LimitPolicy.from_toml."
        ),
    )
    p.add_argument(
        "--db",
        metavar="PATH",
        default=None,
        help="the store file (default: $LOOPWATCH_DB, else ./loopwatch.duckdb)",
    )
    p.add_argument(
        "--task-type",
        metavar="T",
        action="append",
        dest="task_types",
        default=None,
        help="only this task type (repeat for several; default: all)",
    )
    p.add_argument(
        "--since",
        metavar="DURATION",
        type=_duration,
        default=None,
        help="only runs started within this long before now, e.g. 30m, 24h, 7d (default: all)",
    )
    p.add_argument(
        "--format", choices=FORMATS, default="table", help="output format (default: table)"
    )
    p.add_argument(
        "--min-runs",
        type=_positive_int,
        default=AnalysisThresholds().min_runs,
        help="fewest runs to judge a limit and successes to recommend one (default: %(default)s)",
    )
    p.add_argument(
        "--margin",
        type=_margin,
        default=AnalysisThresholds().margin,
        help="recommended = p95 of successful runs x (1 + margin), rounded up "
        "(default: %(default)s)",
    )
    p.set_defaults(handler=_report)


def build_parser() -> argparse.ArgumentParser:
    """The ``loopwatch`` argument parser, one subparser per subcommand."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="loopwatch: why agent loops stop, and which limits to change.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    _add_report(sub)
    _add_serve(sub)
    _add_dashboard(sub)
    _add_demo(sub)
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
    except (StoreError, UsageError) as exc:
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


class UsageError(Exception):
    """A request the store cannot answer as asked (exit code 2), with what to do instead."""


# --- serve and dashboard -------------------------------------------------------------------------
def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}: use a number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}: must be 0..65535 (0: any free)")
    return value


def _add_serve(sub: Any) -> None:
    from loopwatch.dashboard.serve import DEFAULT_METRICS_PORT, DEFAULT_OTLP_PORT, DEFAULT_UI_PORT

    p = sub.add_parser(
        "serve",
        help="live mode: own the store, receive OTLP from any number of agents, serve the "
        "dashboard and /metrics",
        description=(
            "Own a loopwatch store and receive spans over OTLP/HTTP (POST /v1/traces, protobuf "
            "or JSON) from any number of agents, answering only after they are committed; serve "
            "/metrics for Prometheus, a read-only JSON API under /api/v1/ and the dashboard. "
            "Port 0 picks a free port; the bound ports are printed at start-up. Stops cleanly "
            "on SIGTERM or Ctrl-C."
        ),
    )
    p.add_argument(
        "--db",
        metavar="PATH",
        default=None,
        help="the store file (default: $LOOPWATCH_DB, else ./loopwatch.duckdb)",
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address every port binds (default: %(default)s; 0.0.0.0 exposes them to the "
        "network: set --token then)",
    )
    p.add_argument(
        "--otlp-port",
        type=_port,
        default=DEFAULT_OTLP_PORT,
        metavar="PORT",
        help="OTLP/HTTP receiver, /health and the JSON API (default: %(default)s)",
    )
    p.add_argument(
        "--metrics-port",
        type=_port,
        default=DEFAULT_METRICS_PORT,
        metavar="PORT",
        help="Prometheus /metrics (default: %(default)s)",
    )
    p.add_argument(
        "--ui-port",
        type=_port,
        default=DEFAULT_UI_PORT,
        metavar="PORT",
        help="the dashboard (default: %(default)s)",
    )
    p.add_argument(
        "--token",
        default=None,
        help="require 'Authorization: Bearer TOKEN' on every request but GET /health "
        "(default: $LOOPWATCH_TOKEN, else none)",
    )
    p.add_argument(
        "--max-body-mb",
        type=_positive_int,
        default=20,
        metavar="MB",
        help="largest request body, compressed or not; larger ones get 413 (default: %(default)s)",
    )
    p.add_argument(
        "--max-pending-mb",
        type=_positive_int,
        default=64,
        metavar="MB",
        help="request bytes held while being decoded and committed; past it senders get 503 "
        "with Retry-After and retry (default: %(default)s)",
    )
    p.add_argument(
        "--decoders",
        type=int,
        default=0,
        metavar="N",
        help="decoder processes: 0 decodes in a thread of the server (default); N >= 1 decodes "
        "in N processes, on other cores, at ~120 MB each",
    )
    p.add_argument(
        "--memory-mb",
        type=_positive_int,
        default=1024,
        metavar="MB",
        help="cap on DuckDB's memory (cached blocks of the store, query working memory; large "
        "queries spill to disk) (default: %(default)s)",
    )
    p.add_argument(
        "--no-ui",
        dest="ui",
        action="store_false",
        help="no dashboard: only OTLP, /health, the JSON API and /metrics",
    )
    p.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace, out: TextIO) -> int:
    from loopwatch.dashboard.ingest import IngestOptions
    from loopwatch.dashboard.serve import ServeOptions, serve

    token = args.token if args.token is not None else (os.environ.get("LOOPWATCH_TOKEN") or None)
    options = ServeOptions(
        db=resolve_db_path(args.db),
        host=args.host,
        otlp_port=args.otlp_port,
        metrics_port=args.metrics_port,
        ui_port=args.ui_port,
        token=token,
        ui=args.ui,
        max_body_bytes=args.max_body_mb << 20,
        memory_mb=args.memory_mb,
        ingest=IngestOptions(
            max_pending_bytes=args.max_pending_mb << 20, decoders=max(0, args.decoders)
        ),
    )
    try:
        return serve(options, out=out)
    except OSError as exc:
        print(f"{PROG} serve: {exc.strerror or exc}", file=sys.stderr)
        return 2


def _add_dashboard(sub: Any) -> None:
    from loopwatch.dashboard.serve import DEFAULT_UI_PORT

    p = sub.add_parser(
        "dashboard",
        help="file mode: the dashboard over a store file no process is writing (read-only)",
        description=(
            "Serve the dashboard over a loopwatch store file, opened read-only. The file must "
            "not be held by a writer (DuckDB lets no other process open it meanwhile): for a "
            "store that agents are writing, use `loopwatch serve`, which serves the dashboard "
            "itself."
        ),
    )
    p.add_argument("path", metavar="PATH", help="the store file")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    p.add_argument(
        "--port",
        type=_port,
        default=DEFAULT_UI_PORT,
        help="dashboard port (default: %(default)s; 0: any free)",
    )
    p.set_defaults(handler=_dashboard)


def _dashboard(args: argparse.Namespace, out: TextIO) -> int:
    from pathlib import Path

    from loopwatch.dashboard.ui import run_file_dashboard

    try:
        return run_file_dashboard(Path(args.path), host=args.host, port=args.port, out=out)
    except OSError as exc:
        print(f"{PROG} dashboard: {exc}", file=sys.stderr)
        return 2


# --- demo --------------------------------------------------------------------------------------
def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"invalid number {text!r}: must be positive")
    return value


def _add_demo(sub: Any) -> None:
    from loopwatch.dashboard.fleet import FleetPlan

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
        type=_positive_float,
        default=defaults.duration_s,
        metavar="SECONDS",
        help="how long the fleet runs; the outage and the alert windows scale with it "
        "(default: %(default)g)",
    )
    p.add_argument(
        "--rate",
        type=_positive_float,
        default=defaults.rate,
        metavar="RUNS_PER_S",
        help="runs started per second, all agents together (default: %(default)g)",
    )
    p.add_argument(
        "--agents",
        type=_positive_int,
        default=defaults.agents,
        help="agent processes (default: %(default)s)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    p.add_argument("--otlp-port", type=_port, default=4318, metavar="PORT", help="default: 4318")
    p.add_argument("--metrics-port", type=_port, default=9464, metavar="PORT", help="default: 9464")
    p.add_argument("--ui-port", type=_port, default=8501, metavar="PORT", help="default: 8501")
    p.add_argument(
        "--no-ui",
        dest="ui",
        action="store_false",
        help="headless: no dashboard, and stop when the fleet is done",
    )
    p.set_defaults(handler=_demo)


def _demo(args: argparse.Namespace, out: TextIO) -> int:
    from pathlib import Path

    from loopwatch.dashboard.demo import DemoError, DemoOptions, run_demo
    from loopwatch.dashboard.fleet import FleetPlan

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


# --- report ------------------------------------------------------------------------------------
def _report(args: argparse.Namespace, out: TextIO) -> int:
    path = resolve_db_path(args.db)
    thresholds = AnalysisThresholds(min_runs=args.min_runs, margin=args.margin)
    now = datetime.now(UTC).replace(tzinfo=None)
    since = now - args.since if args.since is not None else None
    con = connect_read_only(path)
    try:
        if args.task_types:
            _check_task_types(con, args.task_types, path)
        report = build_report(con, since=since, task_types=args.task_types, thresholds=thresholds)
    finally:
        con.close()
    if args.format == "toml" and not any(e["limits"] for e in report["task_types"]):
        window = f" since {report['since']}" if report["since"] else ""
        raise UsageError(
            f"no runs in {path}{window} to recommend limits from: refusing to write an empty "
            "limits file (it would replace a real one when redirected). Widen --since or "
            "check --task-type."
        )
    report["store"] = str(path)
    report["generated_at"] = now.isoformat(timespec="seconds") + "Z"
    if args.format == "json":
        json.dump(report, out, indent=2, sort_keys=False, default=str)
        out.write("\n")
    elif args.format == "toml":
        out.write(_toml(report))
    else:
        out.write(_text(report))
    return 0


def _check_task_types(con: Any, wanted: Sequence[str], path: object) -> None:
    known = run_query(con, "task_types", {}, max_rows=1_000_000).column("task_type")
    unknown = [t for t in wanted if t not in set(known)]
    if not unknown:
        return
    names = ", ".join(repr(_clean(t)) for t in unknown)
    if not known:
        raise UsageError(f"no task type {names} in {path}: the store has no runs yet.")
    shown = ", ".join(_clean(t) for t in sorted(known)[:20])
    more = f" and {len(known) - 20} more" if len(known) > 20 else ""
    raise UsageError(f"no task type {names} in {path}; known task types: {shown}{more}.")


def build_report(
    con: Any,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    task_types: Sequence[str] | None = None,
    thresholds: AnalysisThresholds | None = None,
) -> dict[str, Any]:
    """The report as plain data (what ``--format json`` prints, less ``store``/``generated_at``)."""
    t = thresholds or AnalysisThresholds()
    types = list(task_types) if task_types else None
    window: dict[str, Any] = {"since": since, "until": until, "task_types": types}
    mix = run_query(con, "stop_reason_mix", window, max_rows=1_000_000).records()
    analyses = analyze_limits(
        con,
        since=since,
        until=until,
        task_types=types,
        thresholds=t,
        include_off=True,
    )
    by_type: dict[str, dict[str, Any]] = {}
    for row in mix:
        entry = by_type.setdefault(row["task_type"], {"task_type": row["task_type"], "runs": 0})
        entry["runs"] += int(row["runs"])
        entry.setdefault("stop_reasons", []).append(
            {
                "stop_reason": row["stop_reason"],
                "outcome": row["outcome"],
                "runs": int(row["runs"]),
                "share": float(row["share"]),
            }
        )
    for a in analyses:
        entry = by_type.setdefault(a.task_type, {"task_type": a.task_type, "runs": 0})
        entry.setdefault("limits", []).append(_limit_dict(a))
    for entry in by_type.values():
        entry.setdefault("stop_reasons", [])
        entry.setdefault("limits", [])
    return {
        "since": since.isoformat() + "Z" if since else None,
        "until": until.isoformat() + "Z" if until else None,
        "thresholds": asdict(t),
        "runs": sum(e["runs"] for e in by_type.values()),
        "task_types": [by_type[k] for k in sorted(by_type)],
    }


def _limit_dict(a: LimitAnalysis) -> dict[str, Any]:
    d = a.to_dict()
    d["hits"] = a.evidence.hits
    d["hit_rate"] = a.evidence.hit_rate
    return d


def _toml(report: dict[str, Any]) -> str:
    analyses: list[LimitAnalysis] = []
    for entry in report["task_types"]:
        for d in entry["limits"]:
            analyses.append(_analysis_from_dict(d))
    since = report["since"] or "the first run"
    header = (
        f"Limits recommended by `loopwatch report` at {report['generated_at']} from "
        f"{report['runs']} runs in {report['store']} (since {since}).\n"
        "Load with LimitPolicy.from_toml(path). Each value: the recommendation where the "
        'verdict is too_tight or too_loose, else the current limit; "off" = no limit.\n'
        "Detector thresholds (max_same_call ...) are not in the store: set them in [defaults]."
    )
    return limits_toml(analyses, header=header)


def _analysis_from_dict(d: dict[str, Any]) -> LimitAnalysis:
    from loopwatch.queries.analysis import Evidence

    return LimitAnalysis(
        task_type=d["task_type"],
        budget=d["budget"],
        field=d["field"],
        current_limit=d["current_limit"],
        recommended=d["recommended"],
        proposed=d["proposed"],
        verdict=d["verdict"],
        sentence=d["sentence"],
        evidence=Evidence(**d["evidence"]),
    )


# --- text --------------------------------------------------------------------------------------
def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    if float(x).is_integer():
        return f"{x:,.0f}"
    return f"{x:,.4g}" if abs(x) < 1 else f"{x:,.1f}"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*headers).rstrip(), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*row).rstrip() for row in rows]
    return lines


def _clean(text: str) -> str:
    # task types are user data: keep control characters out of the terminal
    return "".join(c if c.isprintable() else "?" for c in text)


def _text(report: dict[str, Any]) -> str:
    since = f"since {report['since']}" if report["since"] else "all time"
    lines = [f"loopwatch report — {report['store']}, {since}, {report['runs']} runs", ""]
    if not report["task_types"]:
        lines.append("No runs in the window. Instrument your agents with instrument(store=PATH).")
        return "\n".join(lines) + "\n"

    lines.append("Stop reasons")
    rows = []
    for e in report["task_types"]:
        shares: dict[str, float] = {}
        for r in e["stop_reasons"]:
            shares[r["outcome"]] = shares.get(r["outcome"], 0.0) + r["share"]
        top = [r for r in e["stop_reasons"] if r["outcome"] != "success"][:3]
        rows.append(
            [
                _clean(e["task_type"]),
                f"{e['runs']:,}",
                _pct(shares.get("success", 0.0)),
                _pct(shares.get("limit", 0.0)),
                _pct(shares.get("stuck", 0.0)),
                _pct(sum(v for k, v in shares.items() if k not in ("success", "limit", "stuck"))),
                ", ".join(f"{r['stop_reason']} {_pct(r['share'])}" for r in top) or "-",
            ]
        )
    # "completed" = the loop ended by itself; whether the task succeeded is a label, not this.
    lines += _table(
        ["task type", "runs", "completed", "limit", "stuck", "other", "top stops"], rows
    )

    lines += ["", "Hit-the-limit rates (runs under the current limit)"]
    rows = []
    for e in report["task_types"]:
        for d in e["limits"]:
            if d["current_limit"] is None:
                continue
            ev = d["evidence"]
            rows.append(
                [
                    _clean(e["task_type"]),
                    d["field"],
                    _num(d["current_limit"]),
                    f"{ev['runs']:,}",
                    f"{ev['hits']:,}",
                    _pct(ev["hit_rate"]),
                    _pct(ev["progressing_share"]) if ev["hits"] else "-",
                ]
            )
    lines += _table(
        ["task type", "limit", "value", "runs", "hits", "hit rate", "progressing"], rows
    )

    lines += ["", "Verdicts"]
    rows = []
    sentences = []
    for e in report["task_types"]:
        for d in e["limits"]:
            if d["verdict"] is None:
                continue
            ev = d["evidence"]
            rows.append(
                [
                    _clean(e["task_type"]),
                    d["field"],
                    d["verdict"],
                    _num(d["current_limit"]),
                    _num(ev["success_p95"]),
                    _num(d["recommended"]),
                    _num(d["proposed"]),
                ]
            )
            sentences.append(f"  {_clean(e['task_type'])} {d['field']}: {_clean(d['sentence'])}")
    lines += _table(
        ["task type", "limit", "verdict", "current", "success p95", "recommended", "set to"], rows
    )
    lines += ["", *sentences]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())


if __name__ == "__main__":
    sys.exit(main())
