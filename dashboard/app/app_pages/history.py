"""History & shadow: imported runs next to live ones, what the replayed limits and each detector
would have done on recorded history, and shadow (candidate) limits on live runs."""

from __future__ import annotations

from typing import Any

import streamlit as st
from loopwatch.dashboard.app.limits_fit import limits_file
from loopwatch.dashboard.app.pagekit import PageContext, md_text, render_page
from loopwatch.dashboard.app.theme import fmt_count, fmt_pct
from loopwatch.queries.analysis.history import (
    ERROR_DETECTORS,
    detector_thresholds,
    error_classification,
    imported_replay,
    shadow_evaluations,
)
from loopwatch.queries.analysis.recommend import (
    DETECTOR_NAMES,
    TaskFit,
    file_dict,
    file_summary,
    written_values,
)
from loopwatch.queries.analysis.recommendations import (
    AnalysisThresholds,
    LimitAnalysis,
)

# runs.source: import (loopwatch import), foreign (rebuilt from other instrumentations' spans)
_SOURCE_LABELS = {"import": "imported", "foreign": "live, rebuilt from foreign spans"}


def _spend(value: float, measure: str) -> str:
    if measure == "cost_usd":
        return f"${value:,.2f}"
    return f"{value:,.0f} {measure.replace('_', ' ')}"


def _sources(ctx: PageContext) -> bool:
    rows = ctx.gw.run("runs_by_source", **ctx.window(), max_rows=10_000).records()
    st.subheader("Imported and live runs")
    st.dataframe(
        [
            {
                "task type": r["task_type"],
                "source": _SOURCE_LABELS.get(r["source"], "live"),
                "runs": int(r["runs"]),
                "conversations": int(r["conversations"]),
                "completed": fmt_pct(int(r["completed"]) / int(r["runs"]) if r["runs"] else None),
                "task success": fmt_pct(
                    int(r["task_successes"]) / labelled
                    if (labelled := int(r["task_successes"]) + int(r["task_failures"]))
                    else None
                ),
            }
            for r in rows
        ],
        hide_index=True,
        width="stretch",
    )
    st.caption(
        "“completed”: the loop ended by itself. “task success”: the recorded task label "
        "(`loopwatch import --success`); live runs carry none."
    )
    return any(r["source"] in _SOURCE_LABELS for r in rows)  # replayed: imported or rebuilt


def _imported(ctx: PageContext) -> None:
    st.subheader("Recorded history, replayed through the guard")
    replays = imported_replay(ctx.gw.con, **ctx.window())
    if not replays:
        st.info(
            "No imported runs in the window. `loopwatch import FILE --limits limits.toml` "
            "replays recorded chat logs under the limits you want to try.",
            icon=":material/upload_file:",
        )
        return
    st.dataframe(
        [
            {
                "task type": r.task_type,
                "limits": ", ".join(r.limits_versions),
                "runs": r.runs,
                "successful-task runs cut": f"{r.successful_cut:,} of {r.successful_task_runs:,}",
                "failed-task runs stopped earlier": (
                    f"{r.failed_stopped:,} of {r.failed_task_runs:,}"
                ),
                "spend saved on failed tasks": (
                    f"{_spend(r.saved_spend, r.spend_measure)} ({fmt_pct(r.saved_share)})"
                ),
                "would stop with": ", ".join(f"{s.reason} {s.runs:,}" for s in r.stops) or "—",
            }
            for r in replays
        ],
        hide_index=True,
        width="stretch",
    )
    detectors = detector_thresholds(ctx.gw.con, **ctx.window())
    if not detectors:
        return
    unmeasured = {
        k: c for k, c in error_classification(ctx.gw.con, **ctx.window()).items() if c.almost_none
    }
    for task_type, c in sorted(unmeasured.items()):
        st.warning(f"**{md_text(task_type)}**: {md_text(c.sentence())}.", icon=":material/help:")
    detectors = [
        d for d in detectors if not (d.task_type in unmeasured and d.detector in ERROR_DETECTORS)
    ]
    target = detectors[0].target
    st.markdown(
        f"**Detectors on recorded history** — false stops: runs of successful tasks a threshold "
        f"would have stopped; caught: runs of failed tasks. In the file: the threshold the "
        f"recommended limits file sets (fit together with its other limits, as the Limits "
        f"page's TOML writes it). Alone: the smallest threshold with false stops at or under "
        f"{md_text(fmt_pct(target))} judged by itself — context only, not written anywhere."
    )
    fits = _file(ctx)[1]
    rows: list[dict[str, Any]] = []
    for d in detectors:
        at3 = next((c for c in d.curve if c[0] == 3), None)
        fit = fits.get(d.task_type)
        mine = fit.threshold(d.detector) if fit and d.detector in fit.items else None
        there = next((c for c in d.curve if c[0] == mine), None) if d.field else None
        rows.append(
            {
                "task type": d.task_type,
                "detector": d.detector,
                "setting": d.field or "fixed rule (2 in a row)",
                "false stops at 3": fmt_pct(at3[1]) if at3 else "—",
                "caught at 3": fmt_pct(at3[2]) if at3 else "—",
                "in the file": "—" if d.field is None or mine is None else str(mine),
                "false stops there": fmt_pct(there[1]) if there else "—",
                "caught there": fmt_pct(there[2]) if there else "—",
                "alone (context)": (
                    str(d.suggested)
                    if d.suggested is not None
                    else "—"
                    if d.field is None
                    else f"none ({fmt_count(d.successful_runs)} successful runs)"
                ),
            }
        )
    st.dataframe(rows, hide_index=True, width="stretch")


def _file(ctx: PageContext) -> tuple[list[LimitAnalysis], dict[str, TaskFit]]:
    """The window's recommended limits files, shared with the Limits page (one fit per window
    and store version)."""
    return limits_file(ctx)


def _backtest(ctx: PageContext) -> None:
    """Each recommended limit and detector threshold: what it cuts of the successful runs it was
    fit on, and — fit on the older half of the window — of the newest half."""
    t = AnalysisThresholds()
    analyses, fits = _file(ctx)
    st.subheader("Recommendations checked on runs they were not fit on")
    rows: list[dict[str, Any]] = []
    notes = []
    for task_type, fit in sorted(fits.items()):
        limits = [a.to_dict() for a in analyses if a.task_type == task_type]
        f = file_dict(fit, written_values(limits, fit))
        notes.append(f"**{md_text(task_type)}**: {md_text(file_summary(f))}.")
        bt = f["backtest"] or {}
        for name in fit.items:
            value = f["values"].get(name)
            item = next((i for i in fit.fit.items if i.name == name), None)
            rows.append(
                {
                    "task type": task_type,
                    "limit": name,
                    "value": "—"
                    if value is None
                    else f"threshold {int(value) + 1}"
                    if name in DETECTOR_NAMES
                    else f"{value:,.4g}",
                    "cuts (fit)": item.cut_share if item else None,
                    "cuts (back-test)": (bt.get("per_item") or {}).get(name),
                }
            )
    if rows:
        pct = st.column_config.NumberColumn(format="percent")
        st.dataframe(
            rows,
            hide_index=True,
            width="stretch",
            key="backtest",
            column_config={"cuts (fit)": pct, "cuts (back-test)": pct},
        )
    st.markdown("  \n".join(notes) or "No successful run in the window.")
    st.caption(
        f"Target: each task type's limits and thresholds together cut at most "
        f"{fmt_pct(t.cut_target)} of successful runs (95% confidence). Back-test: the same fit "
        "on the older half of the window's successful runs, counted on the newest half."
    )


def _shadow(ctx: PageContext) -> None:
    st.subheader("Shadow limits on live runs (evaluated, not enforced)")
    evaluations = shadow_evaluations(ctx.gw.con, **ctx.window())
    if not evaluations:
        st.info(
            "No live run carried shadow limits in the window. Add `[shadow.defaults]` or "
            "`[shadow.task_types.NAME]` tables to the limits file: the guard evaluates them "
            "beside the enforced limits without changing any run.",
            icon=":material/visibility:",
        )
        return
    st.dataframe(
        [
            {
                "task type": e.task_type,
                "candidate": e.candidate,
                "runs": e.runs,
                "successful runs it would cut": f"{e.successful_cut:,} of {e.successful_runs:,}",
                "failed runs the enforced limits stopped": (
                    f"{e.enforced_stopped:,} of {e.failed_runs:,}"
                ),
                "failed runs it would stop": f"{e.shadow_stopped:,} of {e.failed_runs:,}",
                "spend it would save": (
                    f"{_spend(e.saved_spend, e.spend_measure)} ({fmt_pct(e.saved_share)})"
                ),
                "would stop with": ", ".join(f"{s.reason} {s.runs:,}" for s in e.stops) or "—",
            }
            for e in evaluations
        ],
        hide_index=True,
        width="stretch",
    )


def _body(ctx: PageContext) -> None:
    if _sources(ctx):
        _imported(ctx)
        _backtest(ctx)
    else:
        st.info(
            "Every run in the window is live. `loopwatch import` adds recorded history "
            "(chat logs, coding agents' logs, OTLP trace files) to compare with; runs rebuilt "
            "from other instrumentations' spans are replayed too.",
            icon=":material/upload_file:",
        )
    _shadow(ctx)


render_page(
    "History & shadow",
    "Try limits before enforcing them: on recorded history (`loopwatch import`) and on live "
    "traffic as shadow limits.",
    _body,
)
