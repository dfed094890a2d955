"""Loops & errors: the repeated_error rate against its alert threshold, the calls and errors runs
repeat most, and tools by error rate and retries."""

from __future__ import annotations

import streamlit as st
from loopwatch.dashboard.app import charts, settings
from loopwatch.dashboard.app.pagekit import PageContext, md_text, render_page
from loopwatch.dashboard.app.summary import firing_spans
from loopwatch.dashboard.app.theme import fmt_pct
from loopwatch.queries.analysis.gateway import parse_duration


def _alert_chart(ctx: PageContext) -> None:
    try:
        t = settings.alert_thresholds()
    except settings.SettingsError as exc:
        st.warning(str(exc))
        return
    st.subheader("repeated_error rate against its alert threshold")
    history = ctx.alert_history(t)
    step = ctx.alert_step(parse_duration(t.short_window).total_seconds())
    fig = charts.repeated_error_figure(
        history, factor=t.repeated_error_factor, min_ratio=t.repeated_error_min_ratio
    )
    st.plotly_chart(fig, width="stretch", key="repeated_error")
    spans = firing_spans(history)
    for s in spans[-5:]:
        when = f"{s.start:%H:%M:%S}–{s.end:%H:%M:%S} UTC"
        if s.ongoing:
            st.error(
                f"**{md_text(s.task_type)}**: the alert is firing since {when}.",
                icon=":material/notifications_active:",
            )
        else:
            st.warning(
                f"**{md_text(s.task_type)}**: the alert fired {when}, then resolved.",
                icon=":material/notifications_off:",
            )
    st.caption(
        f"Solid: the share of runs stopped with repeated_error over the last {t.short_window} "
        f"(evaluated every {step} s). Dashed: the alert threshold, {t.repeated_error_factor:g}× "
        f"the {t.baseline_window} baseline (dotted) and at least "
        f"{fmt_pct(t.repeated_error_min_ratio, 0)}; the alert also needs {t.min_runs} runs in "
        "the short window. Shaded: the alert fired (LoopwatchRepeatedErrorRateRising, same "
        "thresholds as the Prometheus rule)."
    )


def _errors(ctx: PageContext) -> None:
    st.subheader("Errors seen most")
    rows = ctx.gw.run("top_errors", **ctx.window(), top_n=20).records()
    if not rows:
        st.success("No tool returned an error in this window.", icon=":material/check_circle:")
        return
    st.dataframe(
        [
            {
                "tool": r["tool_name"],
                "error code": r["error_code"],
                "message": r["message"],
                "task type": r["task_type"],
                "errors": r["errors"],
                "runs": r["runs"],
                "most in one run": r["max_in_one_run"],
                "runs it stopped": r["runs_stopped"],
                "last seen (UTC)": r["last_seen"],
                "fingerprint": r["error_fingerprint"],
            }
            for r in rows
        ],
        hide_index=True,
        width="stretch",
        column_config={
            "runs it stopped": st.column_config.NumberColumn(
                help="Runs with this error that stopped with repeated_error, tool_failures or "
                "circuit_open."
            ),
            "fingerprint": st.column_config.TextColumn(
                help="Tool + error code + the message with its varying parts normalized: "
                "the same fingerprint is the same error repeating."
            ),
            "message": st.column_config.TextColumn(
                help="The span's status message. Raw tool results are recorded only with "
                "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true."
            ),
        },
    )


def _calls(ctx: PageContext) -> None:
    st.subheader("Calls repeated without learning anything")
    rows = ctx.gw.run("top_call_fingerprints", **ctx.window(), top_n=20).records()
    if not rows:
        st.success(
            "No run repeated a call that returned the same result as before.",
            icon=":material/check_circle:",
        )
        return
    st.dataframe(
        [
            {
                "tool": r["tool_name"],
                "task type": r["task_type"],
                "repeats": r["repeats"],
                "runs": r["runs"],
                "most in one run": r.get("max_in_one_run"),
                "call fingerprint": r["tool_fingerprint"],
            }
            for r in rows
        ],
        hide_index=True,
        width="stretch",
        column_config={
            "repeats": st.column_config.NumberColumn(
                help="Calls that repeated an earlier call of the same run with the same result."
            ),
        },
    )
    st.caption(
        "Same call fingerprint and same result fingerprint in one run: what the "
        "repeated_tool_call detector counts. A repeat-exempt tool (a status poll) shows here too."
    )


def _tools(ctx: PageContext) -> None:
    st.subheader("Tools by error rate and retries")
    rows = ctx.gw.run("tool_health", **ctx.window(), max_rows=10_000).records()
    if not rows:
        st.info("No tool calls in this window.", icon=":material/build:")
        return
    st.plotly_chart(charts.tool_health_figure(rows), width="stretch", key="tools")


def _nudges(ctx: PageContext) -> None:
    st.subheader("Runs nudged before they stopped")
    rows = ctx.gw.run("nudge_recoveries", **ctx.window()).records()
    if not rows:
        st.caption(
            "No run was nudged in this window. Detectors stop a run at their first trip unless "
            'the limits say on_stuck = "nudge" (see docs/runtime.md, "Nudges").'
        )
        return
    recovered = sum(int(r["recovered"]) for r in rows)
    nudged = sum(int(r["nudged_runs"]) for r in rows)
    st.metric("Recovered after a nudge", f"{recovered:,} of {nudged:,} nudged runs")
    st.dataframe(
        [
            {
                "task type": r["task_type"],
                "nudged runs": r["nudged_runs"],
                "recovered": r["recovered"],
                "stopped anyway": r["stopped_anyway"],
                "nudges": r["nudges"],
                "recovered (%)": round(float(r["recovered_share"]) * 100, 1),
            }
            for r in rows
        ],
        hide_index=True,
        width="stretch",
    )


def _body(ctx: PageContext) -> None:
    _alert_chart(ctx)
    # one table under the other: side by side, half a page wide, they cut off their columns
    _errors(ctx)
    _calls(ctx)
    _tools(ctx)
    _nudges(ctx)


render_page(
    "Loops & errors",
    "Runs that repeat themselves: the repeated_error alert, the errors and calls behind it, "
    "and the tools that fail.",
    _body,
)
