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
import math
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

from loopwatch import __version__
from loopwatch.instrumentation.extras import MissingExtraError
from loopwatch.queries.analysis import AnalysisThresholds, LimitAnalysis, analyze_limits
from loopwatch.queries.gateway import QueryError, parse_duration, run_query
from loopwatch.queries.store_errors import (
    StoreCorruptError,
    StoreError,
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
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    _add_report(sub)
    _add_import(sub)
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
    from loopwatch.dashboard.ports import DEFAULT_METRICS_PORT, DEFAULT_OTLP_PORT, DEFAULT_UI_PORT

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
    from loopwatch.dashboard.ports import DEFAULT_UI_PORT

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
    from loopwatch.queries.store import connect_read_only  # the `store` extra, only when used

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
        **_history(con, since=since, until=until, task_types=types, thresholds=t),
    }


def _history(
    con: Any,
    *,
    since: datetime | None,
    until: datetime | None,
    task_types: Sequence[str] | None,
    thresholds: AnalysisThresholds,
) -> dict[str, Any]:
    """Runs by source (imported vs live) and, for imported runs, the replay and detectors."""
    from loopwatch.queries.history import (
        detector_thresholds,
        imported_replay,
        shadow_evaluations,
    )

    window: dict[str, Any] = {"since": since, "until": until, "task_types": task_types}
    sources = run_query(con, "runs_by_source", window, max_rows=1_000_000).records()
    out: dict[str, Any] = {
        "sources": sources,
        "imported": [],
        "detectors": [],
        "shadow": [s.to_dict() for s in shadow_evaluations(con, **window)],
        "repeated_errors": run_query(
            con, "repeated_error_causes", window, max_rows=1_000_000
        ).records(),
    }
    if any(r["source"] == "import" for r in sources):
        out["imported"] = [r.to_dict() for r in imported_replay(con, **window)]
        out["detectors"] = [
            d.to_dict()
            for d in detector_thresholds(con, **window, target=thresholds.false_stop_target)
        ]
    return out


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
        "Detector thresholds (max_same_call ...) are written where imported history measured "
        "them (the smallest keeping false stops under the target); elsewhere set them in "
        "[defaults]."
    )
    detectors: dict[str, dict[str, tuple[int, str]]] = {}
    for t in report.get("detectors") or []:
        if t["field"] is None or t["suggested"] is None:
            continue
        detectors.setdefault(t["task_type"], {})[t["field"]] = (
            int(t["suggested"]),
            f"imported history: {_pct(t['false_stop_share'])} false stops on "
            f"{t['successful_runs']:,} runs of successful tasks, catches "
            f"{_pct(t['caught_share'])} of {t['failed_runs']:,} in failed ones",
        )
    return limits_toml(analyses, header=header, detectors=detectors)


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
        lower_bound=bool(d.get("lower_bound", False)),
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
    lines += _repeated_error_lines(report)
    lines += _sources_lines(report)

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
                    _num(d["proposed"]) + ("+" if d.get("lower_bound") else ""),
                ]
            )
            sentence = _clean(d["sentence"])
            if d.get("lower_bound"):
                sentence += (
                    f" (A lower bound: the {ev['hits']:,} runs it cut did not show how much "
                    "they needed; import recorded logs to measure it whole.)"
                )
            sentences.append(f"  {_clean(e['task_type'])} {d['field']}: {sentence}")
    lines += _table(
        ["task type", "limit", "verdict", "current", "success p95", "recommended", "set to"], rows
    )
    lines += ["", *sentences]
    lines += _shadow_lines(report)
    lines += _imported_lines(report)
    return "\n".join(lines) + "\n"


def _repeated_error_lines(report: dict[str, Any]) -> list[str]:
    causes = report.get("repeated_errors") or []
    if not causes:
        return []
    lines = [
        "",
        "Behind the repeated_error stops: tool, error code and message (latest run; the message "
        "is shown when content capture is on)",
    ]
    rows = [
        [
            _clean(r["task_type"]),
            _clean(r["tool"]),
            _clean(r["error_code"]),
            f"{int(r['runs']):,}",
            _pct(r["share"]),
            _clean(_cut(_after_step(r["example"] or ""), 110)),
        ]
        for r in causes
    ]
    lines += _table(["task type", "tool", "code", "runs", "share", "what happened"], rows)
    return lines


def _after_step(explanation: str) -> str:
    # "Stopped at step 6: read_file failed 3 times ..." -> "read_file failed 3 times ..."
    head, sep, rest = explanation.partition(": ")
    return rest if sep and head.startswith("Stopped ") else explanation


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _sources_lines(report: dict[str, Any]) -> list[str]:
    sources = report.get("sources") or []
    if not any(r["source"] == "import" for r in sources):
        return []
    lines = ["", "Imported and live runs (task success = the recorded task label)"]
    rows = []
    for r in sources:
        labeled = int(r["task_successes"]) + int(r["task_failures"])
        rows.append(
            [
                _clean(r["task_type"]),
                "imported" if r["source"] == "import" else "live",
                f"{int(r['runs']):,}",
                f"{int(r['conversations']):,}",
                _pct(int(r["completed"]) / int(r["runs"]) if r["runs"] else None),
                _pct(int(r["task_successes"]) / labeled if labeled else None),
            ]
        )
    lines += _table(
        ["task type", "source", "runs", "conversations", "completed", "task success"], rows
    )
    return lines


def _shadow_lines(report: dict[str, Any]) -> list[str]:
    shadow = report.get("shadow") or []
    if not shadow:
        return []
    lines = [
        "",
        "Shadow limits on live runs (evaluated, not enforced): what the candidate would have "
        "done next to the enforced limits",
    ]
    rows = []
    for r in shadow:
        stops = ", ".join(f"{s['reason']} {s['runs']:,}" for s in r["stops"]) or "-"
        rows.append(
            [
                _clean(r["task_type"]),
                r["candidate"] or "-",
                f"{r['runs']:,}",
                f"{r['successful_cut']:,}/{r['successful_runs']:,}",
                f"{r['enforced_stopped']:,}/{r['failed_runs']:,}",
                f"{r['shadow_stopped']:,}/{r['failed_runs']:,}",
                f"{_num(r['saved_spend'])} {r['spend_measure']} ({_pct(r['saved_share'])})",
                stops,
            ]
        )
    lines += _table(
        [
            "task type",
            "candidate",
            "runs",
            "successful cut",
            "failed: enforced stopped",
            "candidate stops",
            "candidate saves",
            "would stop with",
        ],
        rows,
    )
    return lines


def _imported_lines(report: dict[str, Any]) -> list[str]:
    imported = report.get("imported") or []
    if not imported:
        return []
    lines = [
        "",
        "Imported history replayed under the limits given at import (`loopwatch import "
        "--limits`): what they would have done",
    ]
    rows = []
    for r in imported:
        stops = ", ".join(f"{s['reason']} {s['runs']:,}" for s in r["stops"]) or "-"
        rows.append(
            [
                _clean(r["task_type"]),
                ",".join(r["limits_versions"]) or "-",
                f"{r['runs']:,}",
                f"{r['successful_cut']:,}/{r['successful_task_runs']:,}",
                f"{r['failed_stopped']:,}/{r['failed_task_runs']:,}",
                f"{_num(r['saved_spend'])} {r['spend_measure']} ({_pct(r['saved_share'])})",
                stops,
            ]
        )
    lines += _table(
        [
            "task type",
            "limits",
            "runs",
            "successful cut",
            "failed stopped",
            "saved on failed",
            "would stop with",
        ],
        rows,
    )
    from loopwatch.instrumentation.limits import LoopLimits

    defaults = LoopLimits()
    lines += _detector_lines(report.get("detectors") or [], lambda _: defaults, "default")
    return lines


# --- import ------------------------------------------------------------------------------------
def _error_rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid share {text!r}: use a number like 0.01"
        ) from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"invalid share {text!r}: must be between 0 and 1")
    return value


def _add_import(sub: Any) -> None:
    from loopwatch.queries.chatlogs import FORMATS as LOG_FORMATS

    p = sub.add_parser(
        "import",
        help="import recorded chat logs as runs, replayed through the guard under given limits",
        description=(
            "Read recorded conversations (JSON array, JSONL, or a JSON object of conversations; "
            ".gz too) in the OpenAI chat or Anthropic Messages format, split each into one run "
            "per user message, replay every run through the guard under --limits, and store "
            "the runs (source 'import') with their recorded usage, loop end, task label and "
            "what the guard would have done. Importing the same file again replaces its runs. "
            "Malformed records are reported with their position and skipped."
        ),
    )
    p.add_argument("file", metavar="FILE", help="the log file (.json, .jsonl, .ndjson, .gz)")
    p.add_argument(
        "--format",
        dest="log_format",
        choices=LOG_FORMATS,
        default="openai-chat",
        help="the messages' format (default: %(default)s)",
    )
    p.add_argument(
        "--messages",
        metavar="KEY",
        default="messages",
        help="the key each conversation keeps its messages under; a dotted path reaches into "
        "nested objects (default: %(default)s)",
    )
    p.add_argument(
        "--task-type",
        metavar="FIELD|VALUE",
        default=None,
        help="the field holding each conversation's task type, or, when the first "
        "conversation has no such field, the task type of all (default: 'default')",
    )
    p.add_argument(
        "--success",
        metavar="FIELD",
        default=None,
        help="the field holding the task's success label: true/false, a number (success at or "
        "above --success-min), or a word like passed/failed",
    )
    p.add_argument(
        "--success-min",
        metavar="X",
        type=float,
        default=1.0,
        help="a numeric label counts as success at or above this (default: %(default)s)",
    )
    p.add_argument(
        "--id",
        dest="id_field",
        metavar="FIELD",
        default=None,
        help="the field holding the conversation id (default: conversation_id or id if "
        "present, else the record's key, else a digest of the record)",
    )
    p.add_argument(
        "--error-prefix",
        metavar="TEXT",
        action="append",
        default=None,
        help="tool results starting with TEXT are failures, e.g. 'Error:' (repeat for several; "
        'results with {"error": ...} bodies or is_error are failures anyway)',
    )
    p.add_argument(
        "--limits",
        metavar="TOML",
        default=None,
        help="the limits to replay under, a LimitPolicy TOML file (default: $LOOPWATCH_LIMITS, "
        "else the built-in defaults)",
    )
    p.add_argument(
        "--db",
        metavar="PATH",
        default=None,
        help="the store file (default: $LOOPWATCH_DB, else ./loopwatch.duckdb)",
    )
    p.add_argument(
        "--layout",
        choices=("auto", "jsonl", "array", "object"),
        default="auto",
        help="how records are laid out in the file (default: decided from its name and start)",
    )
    p.add_argument(
        "--false-stop-target",
        metavar="SHARE",
        type=_error_rate,
        default=AnalysisThresholds().false_stop_target,
        help="detector thresholds suggested keep false stops on runs of successful tasks at or "
        "under this share (default: %(default)s)",
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON instead of text")
    p.add_argument(
        "--no-progress", action="store_true", help="no progress bar (it shows only on a terminal)"
    )
    p.set_defaults(handler=_import)


def _progress_bar(stream: TextIO) -> Callable[[int, int, int], None]:
    def show(done: int, total: int, runs: int) -> None:
        share = done / total if total else 1.0
        filled = int(share * 30)
        bar = "#" * filled + "-" * (30 - filled)
        stream.write(
            f"\rimporting [{bar}] {share * 100:5.1f}%  {done / 1e6:,.1f}/{total / 1e6:,.1f} MB"
            f"  {runs:,} runs"
        )
        if done >= total:
            stream.write("\n")
        stream.flush()

    return show


def _import(args: argparse.Namespace, out: TextIO) -> int:
    from pathlib import Path

    from loopwatch.instrumentation.limits import LimitPolicy, resolve_limits
    from loopwatch.queries.chatlogs import ChatLogOptions
    from loopwatch.queries.history import detector_thresholds, imported_replay
    from loopwatch.queries.importer import ImportOptions, import_chat_log
    from loopwatch.queries.store import Store, StoreLockedError

    file = Path(args.file)
    if not file.is_file():
        raise UsageError(f"{file} does not exist or is not a file.")
    limits = None
    if args.limits is not None:
        try:
            limits = LimitPolicy.from_toml(args.limits)
        except (OSError, ValueError) as exc:
            raise UsageError(f"--limits: {exc}") from None
    try:
        chat = ChatLogOptions(
            format=args.log_format,
            messages_key=args.messages,
            task_type=args.task_type,
            success=args.success,
            success_min=args.success_min,
            id_field=args.id_field,
            error_prefixes=tuple(p for p in (args.error_prefix or ()) if p),
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    options = ImportOptions(chat=chat, limits=limits, layout=args.layout)
    show = None
    if not args.no_progress and sys.stderr.isatty():
        show = _progress_bar(sys.stderr)
    path = resolve_db_path(args.db)
    try:
        store = Store(path)
    except StoreLockedError as exc:
        holder = f" ({exc.program}, PID {exc.pid})" if exc.pid is not None else ""
        raise UsageError(
            f"{path} is held by another process{holder}: DuckDB lets one process write a store. "
            "Import into another file (--db) and open both, or stop that process and import "
            "again."
        ) from None
    with store:
        try:
            summary = import_chat_log(file, store, options, progress=show)
        except OSError as exc:
            raise UsageError(f"cannot read {file}: {exc}") from None
        con = store.cursor()
        try:
            types = sorted(summary.task_types)
            replays = imported_replay(con, task_types=types) if types else []
            detectors = (
                detector_thresholds(con, task_types=types, target=args.false_stop_target)
                if types
                else []
            )
        finally:
            con.close()
    data = summary.to_dict()
    data["store"] = str(path)
    data["replay"] = [r.to_dict() for r in replays]
    data["detectors"] = [d.to_dict() for d in detectors]
    if args.json:
        json.dump(data, out, indent=2, default=str)
        out.write("\n")
    else:
        out.write(_import_text(data, lambda task_type: resolve_limits(limits, task_type)))
    for line in summary.bad_records:
        print(f"{PROG} import: skipped {_clean(line)}", file=sys.stderr)
    if summary.bad > len(summary.bad_records):
        print(
            f"{PROG} import: ... and {summary.bad - len(summary.bad_records)} more skipped records",
            file=sys.stderr,
        )
    if summary.conversations == 0:
        print(
            f"{PROG} import: no conversation imported from {file}: check --format and --messages.",
            file=sys.stderr,
        )
        return 1
    return 0


def _import_text(d: dict[str, Any], current: Callable[[str], Any]) -> str:
    lines = [
        f"Imported {d['conversations']:,} conversations ({d['runs']:,} runs, "
        f"{d['messages']:,} messages) from {_clean(d['path'])} into {_clean(d['store'])} "
        f"in {d['seconds']:.1f} s ({d['layout']}).",
    ]
    if d["replaced"]:
        lines.append(
            f"{d['replaced']:,} runs were already in the store (imported before) and were replaced."
        )
    labels = d["labels"]
    lines.append(
        f"Task labels: {labels.get('success', 0):,} successful, {labels.get('failure', 0):,} "
        f"failed, {labels.get('unlabeled', 0):,} unlabeled conversations; task type from "
        f"{_clean(d['task_type_source'])}."
    )
    ends = ", ".join(f"{k} {v:,}" for k, v in sorted(d["loop_ends"].items()))
    lines.append(f"Recorded loop ends: {ends or '-'}.")
    if d["bad"]:
        lines.append(
            f"Skipped {d['bad']:,} malformed records (listed on stderr)"
            + (" — the file ends inside a record (truncated?)." if d["truncated"] else ".")
        )
    if d["problems"]:
        lines.append(f"Skipped {d['problems']:,} odd messages inside conversations, e.g.:")
        lines += [f"  {_clean(p)}" for p in d["problem_list"][:5]]
    lines += ["", "What the guard would have done (replayed under the limits given)"]
    rows = []
    for r in d["replay"]:
        stops = ", ".join(f"{s['reason']} {s['runs']:,}" for s in r["stops"]) or "-"
        rows.append(
            [
                _clean(r["task_type"]),
                f"{r['runs']:,}",
                f"{r['successful_cut']:,}/{r['successful_task_runs']:,}",
                f"{r['failed_stopped']:,}/{r['failed_task_runs']:,}",
                f"{_num(r['saved_spend'])} {r['spend_measure']} ({_pct(r['saved_share'])})",
                stops,
            ]
        )
    lines += _table(
        [
            "task type",
            "runs",
            "successful cut",
            "failed stopped",
            "saved on failed",
            "would stop with",
        ],
        rows,
    )
    lines += _detector_lines(d["detectors"], current, "replayed")
    return "\n".join(lines) + "\n"


def _detector_lines(
    detectors: Sequence[dict[str, Any]], current: Callable[[str], Any], label: str
) -> list[str]:
    """The detector table; ``current(task_type)`` gives the limits the "at" columns use."""
    if not detectors:
        return []
    target = detectors[0]["target"]
    lines = [
        "",
        f"Detectors on imported history: false stops = runs of successful tasks stopped, "
        f"caught = runs of failed tasks stopped; suggested = smallest threshold with false "
        f"stops <= {_pct(target)}",
    ]
    rows = []
    for t in detectors:
        at = {c[0]: c for c in t["curve"]}
        field = t["field"]
        now = 2 if field is None else getattr(current(t["task_type"]), field)
        point = at.get(now) if now is not None else None
        if field is None:
            suggested = "(fixed rule)"
        elif t["suggested"] is not None:
            suggested = str(t["suggested"])
        elif t["successful_runs"] < math.ceil(1 / target) if target > 0 else True:
            suggested = f"n/a ({t['successful_runs']} ok runs)"
        else:
            suggested = f"> {max(at)}"
        rows.append(
            [
                _clean(t["task_type"]),
                t["detector"],
                field or "-",
                "off" if now is None else str(now),
                _pct(point[1]) if point else "-",
                _pct(point[2]) if point else "-",
                suggested,
                _pct(t["false_stop_share"]) if field else "-",
                _pct(t["caught_share"]) if field else "-",
            ]
        )
    lines += _table(
        [
            "task type",
            "detector",
            "setting",
            label,
            "false stops",
            "caught",
            "suggested",
            "false stops",
            "caught",
        ],
        rows,
    )
    return lines


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())


if __name__ == "__main__":
    sys.exit(main())
