"""Runs: a filterable table of runs, and one run's steps as a timeline with its stop explanation."""

from __future__ import annotations

from typing import Any

import streamlit as st
from loopwatch.dashboard.app import charts
from loopwatch.dashboard.app.filters import clean_text
from loopwatch.dashboard.app.pagekit import PageContext, md_text, render_page
from loopwatch.dashboard.app.theme import fmt_budget, fmt_usd
from loopwatch.instrumentation.runtime.reasons import OUTCOME_OF, Outcome

_RUN_PARAM = "run"
_RUN_KEY = "loopwatch.runs.selected"
_TEXT_KEY = "loopwatch.runs.text"
_SHOWN = 500


def _filters() -> tuple[list[str], list[str], str, bool]:
    c1, c2, c3, c4 = st.columns([1, 1, 1.4, 0.6])
    outcomes = c1.multiselect(
        "Outcome",
        [o.value for o in Outcome],
        placeholder="All outcomes",
        key="loopwatch.runs.outcomes",
    )
    reasons = c2.multiselect(
        "Stop reason",
        [r.value for r in OUTCOME_OF],
        placeholder="All stop reasons",
        key="loopwatch.runs.reasons",
    )
    text = c3.text_input(
        "Run id, trace id or explanation contains",
        key=_TEXT_KEY,
        placeholder="e.g. lookup_order or a run id",
        max_chars=200,
    )
    nudged = c4.checkbox(
        "Nudged only",
        key="loopwatch.runs.nudged",
        help='Runs a detector nudged before they ended (limits with on_stuck = "nudge").',
    )
    return outcomes, reasons, clean_text(text or ""), nudged


def _percent(share: Any) -> float | None:
    return None if share is None else round(float(share) * 100, 1)


def _label(success: bool | None) -> str:
    """A run's task-success label (feedback or import): it decides "successful", when set."""
    return "" if success is None else ("yes" if success else "no")


def _feedback(run: dict[str, Any]) -> str:
    """The run's label and feedback in words, for the run's header ("" when unlabelled)."""
    if run["task_success"] is None:
        return ""
    text = f"task {'succeeded' if run['task_success'] else 'failed'} (label)"
    if run["feedback_score"] is not None:
        text += f" · score {run['feedback_score']:g}"
    if run["feedback_source"]:
        text += f" · from {run['feedback_source']}"
    if run["feedback_comment"]:
        text += f" · “{run['feedback_comment']}”"
    return text


def _table(ctx: PageContext, rows: list[dict[str, Any]]) -> str | None:
    shown = [
        {
            "started (UTC)": r["started_at"],
            "task type": r["task_type"],
            "stop reason": r["stop_reason"],
            "outcome": r["outcome"],
            "steps": r["steps"],
            "tokens": r["tokens"],
            "cost": r["cost_usd"],
            "wall time (s)": r["wall_s"],
            "budget used": _percent(r["max_utilization"]),
            "nudges": r["nudges"],
            "task success": _label(r["task_success"]),
            "score": r["feedback_score"],
            "run id": r["run_id"],
        }
        for r in rows
    ]
    event = st.dataframe(
        shown,
        hide_index=True,
        width="stretch",
        height=360,
        on_select="rerun",
        selection_mode="single-row",
        key="loopwatch.runs.table",
        column_config={
            "started (UTC)": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm:ss"),
            "cost": st.column_config.NumberColumn(format="$%.4f"),
            "wall time (s)": st.column_config.NumberColumn(format="%.2f"),
            "task success": st.column_config.TextColumn(
                help="The task-success label (feedback or import); it decides whether a run "
                "counts as successful. Blank: unlabelled, the run counts by how its loop ended."
            ),
            "score": st.column_config.NumberColumn(
                help="The feedback's score, as sent (shown, never deciding success)."
            ),
            "budget used": st.column_config.ProgressColumn(
                min_value=0.0,
                max_value=100.0,
                format="%.0f%%",
                help="The largest share of any limit the run used up.",
            ),
        },
    )
    picked = getattr(getattr(event, "selection", None), "rows", None) or []
    if picked:
        return str(rows[picked[0]]["run_id"])
    return None


def _timeline(ctx: PageContext, wanted: str) -> None:
    # By exact id (a run id, or a trace id), never by text: an explanation that quotes another
    # run's id must not open that run instead (runs_search's text filter is the search box's).
    found = ctx.gw.run("run_by_id", id=wanted, top_n=1).records()
    run = found[0] if found else None
    run_id = str(run["run_id"]) if run is not None else wanted
    steps = ctx.gw.run("run_steps", run_id=run_id, max_rows=5_000).records()
    if not steps:
        st.info(f"No spans recorded for run “{md_text(run_id)}”.", icon=":material/search_off:")
        if run is not None and (feedback := _feedback(run)):
            st.markdown(md_text(feedback))
        return
    st.subheader("One run, step by step")
    if run is not None:
        head = (
            f"**{md_text(run['task_type'])}** · stop reason **{md_text(run['stop_reason'])}** "
            f"({md_text(run['outcome'])}) · {fmt_budget('steps', run['steps'])} · "
            f"{fmt_budget('tokens', run['tokens'])} · {fmt_usd(run['cost_usd'])} · "
            f"{fmt_budget('wall_s', run['wall_s'])}"
        )
        st.markdown(head)
        explanation = run["explanation"] or "The run completed."
        if run["outcome"] == "success":
            st.success(md_text(explanation), icon=":material/check_circle:")
        elif run["outcome"] == "limit":
            st.warning(md_text(explanation), icon=":material/straighten:")
        else:
            st.error(md_text(explanation), icon=":material/block:")
        if feedback := _feedback(run):
            st.markdown(md_text(feedback))
        st.caption(f"run id {md_text(run_id)} · trace id {md_text(run['trace_id'] or '—')}")
    st.plotly_chart(charts.run_timeline_figure(steps), width="stretch", key="timeline")
    with st.expander("Every span of the run"):
        st.dataframe(
            [
                {
                    "span": s["name"],
                    "step": s["step"],
                    "duration (ms)": s["duration_ms"],
                    "tool status": s["tool_status"],
                    "error code": s["error_code"],
                    "guard decision": s["guard_decision"],
                    "tokens in": s["input_tokens"],
                    "tokens out": s["output_tokens"],
                    "budget used (%)": _percent(s["max_utilization"]),
                    "call fingerprint": s["tool_fingerprint"],
                    "result fingerprint": s["result_fingerprint"],
                }
                for s in steps
            ],
            hide_index=True,
            width="stretch",
        )


def _recovered_note(rows: list[dict[str, Any]]) -> str:
    nudged = [r for r in rows if r["nudges"]]
    if not nudged:
        return ""
    recovered = sum(1 for r in nudged if r["outcome"] == "success")
    return f" {len(nudged):,} of them were nudged; {recovered:,} recovered after the nudge."


def _body(ctx: PageContext) -> None:
    outcomes, reasons, text, nudged = _filters()
    rows = ctx.gw.run(
        "runs_search",
        **ctx.window(),
        outcomes=outcomes or None,
        stop_reasons=reasons or None,
        text=text or None,
        nudged=True if nudged else None,
        top_n=_SHOWN,
    ).records()
    if not rows:
        st.info(
            "No run matches these filters. Clear the outcome, stop reason or text filter, or "
            "choose a longer time window.",
            icon=":material/search_off:",
        )
        return
    st.caption(
        f"The newest {len(rows):,} matching runs"
        + (f" (at most {_SHOWN})" if len(rows) == _SHOWN else "")
        + ". Select a row to see its steps."
        + _recovered_note(rows)
    )
    picked = _table(ctx, rows)
    if picked is not None:
        st.query_params[_RUN_PARAM] = picked
    run_id = picked or clean_text(st.query_params.get(_RUN_PARAM, "") or "")
    if not run_id:
        stopped = next((r for r in rows if r["outcome"] != "success"), rows[0])
        run_id = str(stopped["run_id"])
    _timeline(ctx, run_id)


render_page(
    "Runs",
    "Every run: filter by outcome, stop reason or text, then open one to see each call, error "
    "and the guard's decision.",
    _body,
)
