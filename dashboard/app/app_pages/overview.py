"""Overview: firing alerts, the headline rates, a verdict per task type, how runs ended, and the
hit-the-limit rate over time with the moments limits changed."""

from __future__ import annotations

from typing import Any

import streamlit as st
from loopwatch.dashboard.app import charts, settings
from loopwatch.dashboard.app.change_view import (
    add_version_markers,
    change_report_view,
    served_versions,
)
from loopwatch.dashboard.app.limits_fit import limits_file
from loopwatch.dashboard.app.pagekit import (
    PageContext,
    clip_text,
    escape_html,
    md_text,
    render_page,
)
from loopwatch.dashboard.app.spend_view import spend_alert_view
from loopwatch.dashboard.app.summary import alert_sentence, firing_spans, lead_verdicts
from loopwatch.dashboard.app.theme import (
    VERDICT_COLORS,
    VERDICT_LABELS,
    badge_html,
    fmt_count,
    fmt_pct,
    fmt_usd,
)
from loopwatch.queries.analysis.alerts import repeated_error_alerts

_TABLE_CSS = """
<style>
table.lw-types {width:100%; border-collapse:collapse; font-size:0.92rem}
table.lw-types th {text-align:left; color:#5f6368; font-weight:600; padding:6px 8px;
  border-bottom:2px solid #e3e6ea; white-space:nowrap}
table.lw-types td {padding:7px 8px; border-bottom:1px solid #eef0f2; vertical-align:top}
table.lw-types td.num {text-align:right; font-variant-numeric:tabular-nums; white-space:nowrap}
table.lw-types td.why {color:#3c4043; font-size:0.85rem; overflow-wrap:anywhere}
table.lw-types td.type {max-width:20rem; overflow-wrap:anywhere}
</style>
"""


def _alerts(ctx: PageContext) -> None:
    try:
        t = settings.alert_thresholds()
    except settings.SettingsError as exc:
        st.warning(str(exc))
        return
    spend_alert_view(ctx, t)
    states = repeated_error_alerts(
        ctx.gw.con, now=ctx.now, task_types=ctx.filters.task_type_list, thresholds=t
    )
    firing = [a for a in states if a.firing]
    for a in firing:
        st.error(
            f"**Alert firing — repeated_error rate rising.** {md_text(alert_sentence(a, t))} "
            "A tool is probably failing the same way for every run: see *Loops & errors*.",
            icon=":material/notifications_active:",
        )
    if firing:
        st.page_link(
            "app_pages/loops.py", label="Open Loops & errors", icon=":material/sync_problem:"
        )
        return
    history = ctx.alert_history(t)
    earlier = [s for s in firing_spans(history) if not s.ongoing]
    if earlier:
        text = "; ".join(
            f"{s.task_type} {s.start:%H:%M:%S}–{s.end:%H:%M:%S} UTC" for s in earlier[-3:]
        )
        st.warning(
            f"**No alert firing now.** The repeated_error alert fired earlier in this window "
            f"and resolved: {md_text(text)}.",
            icon=":material/notifications_off:",
        )
    else:
        st.success(
            f"No alert firing. The repeated_error alert watches each task type's last "
            f"{t.short_window} against its {t.baseline_window} baseline.",
            icon=":material/check_circle:",
        )


def _kpis(ctx: PageContext, rows: list[dict[str, Any]]) -> None:
    total = next((r for r in rows if r["task_type"] is None), None)
    if total is None:
        return
    runs = int(total["runs"])
    cols = st.columns(6)
    cols[0].metric(
        "Runs",
        fmt_count(runs),
        help=f"Runs started in the window ({ctx.filters.window_label.lower()}).",
    )
    cols[1].metric(
        "Completion rate",
        fmt_pct(total["completed"] / runs),
        help="Runs whose loop ended by itself (stop reason completed).",
    )
    labelled = int(total["labelled"])
    cols[2].metric(
        "Task success rate",
        fmt_pct(total["task_successes"] / labelled) if labelled else "—",
        help=(
            f"Of the {labelled:,} runs with a task label, the share labelled successful."
            if labelled
            else "No run in the window carries a task label (loopwatch import records them; "
            "live runs get one through task-success feedback: POST /api/v1/runs/{id}/feedback "
            "or send_feedback()), so only the completion rate is known."
        ),
    )
    cols[3].metric(
        "Hit-the-limit rate",
        fmt_pct(total["limit_hits"] / runs),
        help="Runs stopped by a step, call, token, cost or time limit.",
    )
    cols[4].metric(
        "Stuck rate",
        fmt_pct(total["stuck"] / runs),
        help="Runs stopped by a stuck detector: repeated actions, calls or errors, tool "
        "failures, no progress, rejected completions.",
    )
    spend = float(total["cost_usd"] or 0.0)
    failed = float(total["failed_cost_usd"] or 0.0)
    cols[5].metric(
        "Spend on failed runs",
        fmt_usd(failed),
        help="Cost of the runs that did not succeed (outcome not success, or a task label "
        "that says failed): "
        f"{fmt_pct(failed / spend if spend else None)} "
        f"of the {fmt_usd(spend)} spent in the window.",
    )


def _types_table(ctx: PageContext, rows: list[dict[str, Any]]) -> None:
    everything, _ = limits_file(ctx)  # the same fit as the Limits page's, shared
    analyses = [a for a in everything if a.current_limit is not None]
    lead = lead_verdicts(analyses)
    head = (
        "<tr><th>Task type</th><th>Verdict</th><th>Runs</th><th>Completed</th>"
        "<th>Hit a limit</th><th>Stuck</th><th>Spend on failed runs</th><th>Why</th></tr>"
    )
    body = []
    for r in rows:
        if r["task_type"] is None:
            continue
        t = str(r["task_type"])
        runs = int(r["runs"])
        a = lead.get(t)
        verdict = a.verdict if a is not None and a.verdict else "insufficient_data"
        label = VERDICT_LABELS[verdict]
        if a is not None and a.verdict not in (None, "ok", "insufficient_data"):
            label += f" · {a.field}"
        why = a.sentence if a is not None else "No limit is set for this task type."
        body.append(
            "<tr>"
            f'<td class="type" title="{escape_html(t)}"><b>{escape_html(clip_text(t))}</b></td>'
            f"<td>{badge_html(label, VERDICT_COLORS[verdict])}</td>"
            f'<td class="num">{runs:,}</td>'
            f'<td class="num">{fmt_pct(r["completed"] / runs)}</td>'
            f'<td class="num">{fmt_pct(r["limit_hits"] / runs)}</td>'
            f'<td class="num">{fmt_pct(r["stuck"] / runs)}</td>'
            f'<td class="num">{fmt_usd(r["failed_cost_usd"])}</td>'
            f'<td class="why" title="{escape_html(why)}">{escape_html(clip_text(why, 400))}</td>'
            "</tr>"
        )
    st.markdown(
        _TABLE_CSS + f'<table class="lw-types">{head}{"".join(body)}</table>',
        unsafe_allow_html=True,
    )
    st.caption(
        "Verdict: the most pressing one over the task type's limits (stuck, then too tight, "
        "too loose). The *Limits* page has every limit, its evidence and the value to set."
    )


def _body(ctx: PageContext) -> None:
    _alerts(ctx)
    kpis = ctx.gw.run("overview_kpis", **ctx.window()).records()
    _kpis(ctx, kpis)

    st.subheader("Task types")
    _types_table(ctx, kpis)

    left, right = st.columns([1, 1])
    with left:
        st.subheader("How runs ended")
        mix = ctx.gw.run("stop_reason_mix", **ctx.window(), max_rows=100_000).records()
        st.plotly_chart(charts.stop_mix_figure(mix), width="stretch", key="mix")
    with right:
        st.subheader("Hit-the-limit rate over time")
        rates = ctx.gw.run(
            "limit_hit_rate", **ctx.window(), bucket_s=ctx.bucket_s(24), max_rows=200_000
        ).records()
        # the columns of limit_changes a marker reads, without its shares and quantiles
        changes = ctx.gw.run("limit_change_points", **ctx.window(), max_rows=10_000).records()
        markers = charts.limit_change_markers(changes)
        fig = charts.hit_rate_figure(rates, markers)
        versions = served_versions(ctx)
        add_version_markers(fig, versions)
        event = st.plotly_chart(
            fig, width="stretch", key="hits", on_select="rerun", selection_mode="points"
        )
        change_report_view(ctx, event, versions)
        if markers:
            st.caption(
                "Dotted lines: a task type's limits changed — "
                + md_text("; ".join(f"{m['task_type']}: {m['label']}" for m in markers[-4:]))
            )


render_page(
    "Overview",
    "Why your agent loops stopped, which limits to change, and what is firing.",
    _body,
)
