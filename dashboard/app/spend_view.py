"""The spend alert on the Overview (docs/dashboard.md, "Spend alert"): a banner per task type
whose spend per run rose past its baseline (the rule ``LoopwatchSpendPerRunRising`` evaluated on
the store, same thresholds), and the spend-per-run chart behind it."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st
from loopwatch.dashboard.app.pagekit import PageContext, md_text
from loopwatch.dashboard.app.theme import fmt_usd, task_type_style
from loopwatch.queries.analysis.alerts import AlertThresholds
from loopwatch.queries.analysis.spend_alerts import SpendAlertState, spend_alerts

__all__ = ["spend_alert_view"]


def _sentence(a: SpendAlertState, t: AlertThresholds) -> str:
    return (
        f"{a.task_type}: {fmt_usd(a.per_run_short)} a run over the last {t.short_window} "
        f"({a.runs_short:,} runs) against {fmt_usd(a.per_run_baseline)} over "
        f"{t.baseline_window} ({a.runs_baseline:,} runs), at least {t.spend_factor:g}×."
    )


def _chart(ctx: PageContext, task_types: list[str]) -> None:
    rows = ctx.gw.run(
        "spend_trend", **{**ctx.window(), "task_types": task_types}, bucket_s=ctx.bucket_s(24)
    ).records()
    fig = go.Figure()
    for i, t in enumerate(task_types):
        mine = [r for r in rows if r["task_type"] == t]
        fig.add_scatter(
            x=[r["bucket"] for r in mine],
            y=[float(r["cost_per_run"]) for r in mine],
            customdata=[int(r["runs"]) for r in mine],
            mode="lines+markers",
            line={"color": task_type_style(i)[0]},
            name=t,
            hovertemplate=t + "<br>%{x}<br>$%{y:.4f} a run (%{customdata:,} runs)<extra></extra>",
        )
    fig.update_layout(height=260, margin={"t": 10, "b": 10}, yaxis_title="USD per run")
    st.plotly_chart(fig, width="stretch", key="spend")


def spend_alert_view(ctx: PageContext, t: AlertThresholds) -> None:
    """A banner per firing task type, with the spend-per-run chart of those task types."""
    states = spend_alerts(ctx.gw.con, now=ctx.now, task_types=ctx.filters.task_type_list,
                          thresholds=t)  # fmt: skip
    firing = [a for a in states if a.firing]
    for a in firing:
        st.error(
            f"**Alert firing — spend per run rising.** {md_text(_sentence(a, t))} Runs may be "
            "looping longer, or a model or price changed.",
            icon=":material/payments:",
        )
    if firing:
        _chart(ctx, [a.task_type for a in firing])
