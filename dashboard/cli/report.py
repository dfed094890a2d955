"""``loopwatch report``: the stop-reason mix, hit-the-limit rates and limit verdicts of a store,
as a table, JSON (:func:`build_report`) or a limits file."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any, TextIO

from loopwatch.dashboard.cli.args import (
    UsageError,
    add_db_option,
    cut_target,
    duration,
    margin,
    positive_int,
)
from loopwatch.dashboard.cli.report_spend import spend_rate_entries
from loopwatch.dashboard.cli.report_text import report_text
from loopwatch.dashboard.cli.text import clean
from loopwatch.queries.analysis.gateway import run_query
from loopwatch.queries.analysis.rates import run_rates
from loopwatch.queries.analysis.recommend import file_dict, read_usage, written_values
from loopwatch.queries.analysis.recommendations import (
    AnalysisThresholds,
    LimitAnalysis,
    analyze_file,
)
from loopwatch.queries.analysis.toml_export import file_toml
from loopwatch.queries.store.errors import resolve_db_path

__all__ = ["FORMATS", "add_report", "build_report"]

FORMATS = ("table", "json", "toml")


def add_report(sub: Any) -> None:
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
    add_db_option(p)
    p.add_argument(
        "--archive",
        metavar="URL",
        default=None,
        help="read the fleet's archive (a directory or s3:// URL written by serve --archive) "
        "instead of --db; it is loaded into a local reader store first (docs/store.md)",
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
        type=duration,
        default=None,
        help="only runs started within this long before now, e.g. 30m, 24h, 7d (default: all)",
    )
    p.add_argument(
        "--format", choices=FORMATS, default="table", help="output format (default: table)"
    )
    p.add_argument(
        "--min-runs",
        type=positive_int,
        default=AnalysisThresholds().min_runs,
        help="fewest runs under a limit to judge it (default: %(default)s)",
    )
    p.add_argument(
        "--cut-target",
        type=cut_target,
        default=AnalysisThresholds().cut_target,
        help="the share of successful runs the recommended limits file may cut, all limits "
        "and detector thresholds together, promised with 95%% confidence (default: %(default)s)",
    )
    p.add_argument(
        "--margin",
        type=margin,
        default=AnalysisThresholds().margin,
        help="where runs a limit cut hid how far they needed to go, raise a too-tight limit "
        "to at least current x (1 + margin) (default: %(default)s)",
    )
    p.add_argument(
        "--spend-rate",
        action="store_true",
        help="fit each task type's limits file with the spend-rate stop (max_cost_per_min, off "
        "by default) and write it with --format toml; without it the stop stays as it is and "
        "its recommendation is shown beside the file (docs/queries.md, Spend rate)",
    )
    p.set_defaults(handler=_report)


def _report(args: argparse.Namespace, out: TextIO) -> int:
    if args.archive is not None:
        from loopwatch.queries.store.archive import reader_store

        path = reader_store(args.archive)
    else:
        path = resolve_db_path(args.db)
    thresholds = AnalysisThresholds(
        min_runs=args.min_runs, margin=args.margin, cut_target=args.cut_target
    )
    now = datetime.now(UTC).replace(tzinfo=None)
    since = now - args.since if args.since is not None else None
    from loopwatch.queries.store.database import (
        connect_read_only,  # the `store` extra, only when used
    )

    con = connect_read_only(path)
    try:
        if args.task_types:
            _check_task_types(con, args.task_types, path)
        report = build_report(con, since=since, task_types=args.task_types, thresholds=thresholds,
                              spend_rate=args.spend_rate)  # fmt: skip
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
        out.write(report_text(report))
    return 0


def _check_task_types(con: Any, wanted: Sequence[str], path: object) -> None:
    known = run_query(con, "task_types", {}, max_rows=1_000_000).column("task_type")
    unknown = [t for t in wanted if t not in set(known)]
    if not unknown:
        return
    names = ", ".join(repr(clean(t)) for t in unknown)
    if not known:
        raise UsageError(f"no task type {names} in {path}: the store has no runs yet.")
    shown = ", ".join(clean(t) for t in sorted(known)[:20])
    more = f" and {len(known) - 20} more" if len(known) > 20 else ""
    raise UsageError(f"no task type {names} in {path}; known task types: {shown}{more}.")


def build_report(
    con: Any,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    task_types: Sequence[str] | None = None,
    thresholds: AnalysisThresholds | None = None,
    spend_rate: bool = False,
) -> dict[str, Any]:
    """The report as plain data (what ``--format json`` prints, less ``store``/``generated_at``).
    ``spend_rate``: every task type's file holds the spend-rate stop (``--spend-rate``)."""
    t = thresholds or AnalysisThresholds()
    types = list(task_types) if task_types else None
    window: dict[str, Any] = {"since": since, "until": until, "task_types": types}
    # The run rates and the history are mostly DuckDB's work, which releases the GIL: they are
    # read on a second thread (its own cursor) while this one fits the limits files in Python
    # (docs/queries.md, "loopwatch report does only the work it prints").
    worker_con = con.cursor()
    try:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="loopwatch-report") as pool:
            rates_read = pool.submit(run_rates, worker_con, **window)
            history_read = pool.submit(_history, worker_con, **window, thresholds=t)
            mix = run_query(con, "stop_reason_mix", window, max_rows=1_000_000).records()
            usage = read_usage(con, **window)  # the successful runs, read once for both fits
            analyses, fits = analyze_file(
                con,
                since=since,
                until=until,
                task_types=types,
                thresholds=t,
                include_off=True,
                spend_rate=spend_rate,
                usage=usage,
            )
            rates = spend_rate_entries(con, analyses, fits, window, t, usage=usage,
                                       rates=rates_read.result())  # fmt: skip
            history = history_read.result()
    finally:
        worker_con.close()
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
        fit = fits.get(entry["task_type"])
        entry["file"] = file_dict(fit, written_values(entry["limits"], fit)) if fit else None
    for task_type, rate in rates.items():
        if task_type in by_type:
            by_type[task_type]["spend_rate"] = rate
    return {
        "since": since.isoformat() + "Z" if since else None,
        "until": until.isoformat() + "Z" if until else None,
        "thresholds": asdict(t),
        "runs": sum(e["runs"] for e in by_type.values()),
        "task_types": [by_type[k] for k in sorted(by_type)],
        **history,
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
    from loopwatch.queries.analysis.history import (
        detector_thresholds,
        error_classification,
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
    # replayed runs: imported, or rebuilt from other instrumentations' spans (docs/foreign.md)
    if any(r["source"] in ("import", "foreign") for r in sources):
        classified = error_classification(con, **window)
        out["unclassified_errors"] = {
            k: c.sentence() for k, c in classified.items() if c.almost_none
        }
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
        f"{report['runs']} runs in {report['store']} (since {since})."
    )
    files = {e["task_type"]: e.get("file") for e in report["task_types"]}
    rates = {e["task_type"]: e["spend_rate"] for e in report["task_types"] if e.get("spend_rate")}
    return file_toml(analyses, files, header=header, spend_rates=rates)


def _analysis_from_dict(d: dict[str, Any]) -> LimitAnalysis:
    from loopwatch.queries.analysis.recommendations import Evidence

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
