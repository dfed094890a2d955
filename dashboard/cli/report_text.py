"""The text ``loopwatch report`` prints: one table per question, then the verdicts' sentences."""

from __future__ import annotations

from typing import Any

from loopwatch.dashboard.cli.report_spend import spend_rate_lines
from loopwatch.dashboard.cli.text import (
    clean,
    detector_lines,
    num,
    pct,
    replay_table,
    stops_text,
    table,
)
from loopwatch.queries.analysis.history import ERROR_DETECTORS
from loopwatch.queries.analysis.recommend import file_summary
from loopwatch.queries.analysis.toml_export import file_settings

__all__ = ["report_text"]


def report_text(report: dict[str, Any]) -> str:
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
                clean(e["task_type"]),
                f"{e['runs']:,}",
                pct(shares.get("success", 0.0)),
                pct(shares.get("limit", 0.0)),
                pct(shares.get("stuck", 0.0)),
                pct(sum(v for k, v in shares.items() if k not in ("success", "limit", "stuck"))),
                ", ".join(f"{r['stop_reason']} {pct(r['share'])}" for r in top) or "-",
            ]
        )
    # "completed" = the loop ended by itself; whether the task succeeded is a label, not this.
    lines += table(["task type", "runs", "completed", "limit", "stuck", "other", "top stops"], rows)
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
                    clean(e["task_type"]),
                    d["field"],
                    num(d["current_limit"]),
                    f"{ev['runs']:,}",
                    f"{ev['hits']:,}",
                    pct(ev["hit_rate"]),
                    pct(ev["progressing_share"]) if ev["hits"] else "-",
                ]
            )
    lines += table(["task type", "limit", "value", "runs", "hits", "hit rate", "progressing"], rows)

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
                    clean(e["task_type"]),
                    d["field"],
                    d["verdict"],
                    num(d["current_limit"]),
                    num(ev["success_p95"]),
                    num(d["recommended"]),
                    num(d["proposed"]) + ("+" if d.get("lower_bound") else ""),
                    pct(d.get("observed_cut_share")),
                    pct(d.get("backtest_cut_share")),
                ]
            )
            sentence = clean(d["sentence"])
            if d.get("lower_bound"):
                sentence += (
                    f" (A lower bound: the {ev['hits']:,} runs it cut did not show how much "
                    "they needed; import recorded logs to measure it whole.)"
                )
            sentences.append(f"  {clean(e['task_type'])} {d['field']}: {sentence}")
    lines += table(
        [
            "task type",
            "limit",
            "verdict",
            "current",
            "success p95",
            "recommended",
            "in the file",
            "cuts (fit)",
            "cuts (back-test)",
        ],
        rows,
    )
    lines += ["", *sentences]
    lines += _file_lines(report) + spend_rate_lines(report)
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
            clean(r["task_type"]),
            clean(r["tool"]),
            clean(r["error_code"]),
            f"{int(r['runs']):,}",
            pct(r["share"]),
            clean(_cut(_after_step(r["example"] or ""), 110)),
        ]
        for r in causes
    ]
    lines += table(["task type", "tool", "code", "runs", "share", "what happened"], rows)
    return lines


def _after_step(explanation: str) -> str:
    # "Stopped at step 6: read_file failed 3 times ..." -> "read_file failed 3 times ..."
    head, sep, rest = explanation.partition(": ")
    return rest if sep and head.startswith("Stopped ") else explanation


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


# runs.source: replayed runs, imported or rebuilt from foreign spans (docs/foreign.md)
_SOURCES = {"import": "imported", "foreign": "live, rebuilt"}


def _sources_lines(report: dict[str, Any]) -> list[str]:
    sources = report.get("sources") or []
    if not any(r["source"] in _SOURCES for r in sources):
        return []
    lines = ["", "Imported and live runs (task success = the recorded task label)"]
    rows = []
    for r in sources:
        labeled = int(r["task_successes"]) + int(r["task_failures"])
        rows.append(
            [
                clean(r["task_type"]),
                _SOURCES.get(r["source"], "live"),
                f"{int(r['runs']):,}",
                f"{int(r['conversations']):,}",
                pct(int(r["completed"]) / int(r["runs"]) if r["runs"] else None),
                pct(int(r["task_successes"]) / labeled if labeled else None),
            ]
        )
    lines += table(
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
        rows.append(
            [
                clean(r["task_type"]),
                r["candidate"] or "-",
                f"{r['runs']:,}",
                f"{r['successful_cut']:,}/{r['successful_runs']:,}",
                f"{r['enforced_stopped']:,}/{r['failed_runs']:,}",
                f"{r['shadow_stopped']:,}/{r['failed_runs']:,}",
                f"{num(r['saved_spend'])} {r['spend_measure']} ({pct(r['saved_share'])})",
                stops_text(r["stops"]),
            ]
        )
    lines += table(
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


def _file_lines(report: dict[str, Any]) -> list[str]:
    target = pct(report["thresholds"]["cut_target"]).replace(".0%", "%")
    lines = [
        "",
        f"Limits files judged as a whole (target: at most {target} of successful runs cut; "
        "cuts (fit) = on the runs fit on, cuts (back-test) = fit on the older half of the "
        "window, counted on the newest half). The values are what --format toml writes.",
    ]
    for e in report["task_types"]:
        values = _file_values(e)
        lines.append(f"  {clean(e['task_type'])}: {values}{clean(file_summary(e.get('file')))}.")
    return lines


def _file_values(entry: dict[str, Any]) -> str:
    """``"max_steps = 8, max_same_call = 2 — "``: what the task type's limits file writes."""
    parts = [f"{k} = {v}" for k, v in file_settings(entry["limits"], entry.get("file"))]
    return ", ".join(parts) + " — " if parts else ""


def _imported_lines(report: dict[str, Any]) -> list[str]:
    imported = report.get("imported") or []
    if not imported:
        return []
    lines = [
        "",
        "Imported history replayed under the limits given at import (`loopwatch import "
        "--limits`): what they would have done",
    ]
    lines += replay_table(imported, limits_column=True)
    from loopwatch.instrumentation.runtime.limits import LoopLimits

    defaults = LoopLimits()
    unmeasured = report.get("unclassified_errors") or {}
    detectors = [
        d
        for d in report.get("detectors") or []
        if not (d["task_type"] in unmeasured and d["detector"] in ERROR_DETECTORS)
    ]
    in_file = {
        e["task_type"]: (e.get("file") or {}).get("thresholds") or {} for e in report["task_types"]
    }
    lines += detector_lines(detectors, lambda _: defaults, "default", in_file)
    for task_type, sentence in sorted(unmeasured.items()):
        lines.append(f"  {clean(task_type)}: {clean(sentence)}.")
    return lines
