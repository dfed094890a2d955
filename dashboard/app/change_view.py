"""Before and after a limits change, on the Overview (docs/dashboard.md, "Tuning"): each version
of the served limits is a marker on the hit-rate chart; clicking one (or picking it below the
chart) opens its report — hit rate, completed share, task success where labelled, spend per run,
before against after, with the number of runs behind each figure."""

from __future__ import annotations

import contextlib
from typing import Any

import plotly.graph_objects as go
import streamlit as st
from loopwatch.dashboard.app.pagekit import PageContext, md_text
from loopwatch.dashboard.app.theme import fmt_pct, fmt_usd
from loopwatch.queries.analysis.change_report import ChangeSide, change_report
from loopwatch.queries.store.limit_versions import LimitVersion, version_history

__all__ = ["add_version_markers", "change_report_view", "served_versions"]

_PICK = "loopwatch.change.pick"


def served_versions(ctx: PageContext) -> list[LimitVersion]:
    """The served limit versions in the page's window, oldest first ([] when none or an older
    store)."""
    try:
        found = version_history(ctx.gw.con)
    except Exception:  # a read-only store without the table
        return []
    since = ctx.window().get("since")
    kept = [v for v in found if since is None or v.created_at >= since.replace(tzinfo=None)]
    return sorted(kept, key=lambda v: v.version)


def add_version_markers(fig: go.Figure, versions: list[LimitVersion]) -> None:
    """One clickable marker per version at the top of the chart (``customdata``: its number)."""
    if not versions:
        return
    fig.add_scatter(
        x=[v.created_at for v in versions],
        y=[1.0] * len(versions),
        customdata=[v.version for v in versions],
        mode="markers+text",
        marker={"symbol": "triangle-down", "size": 13, "color": "#202124"},
        text=[f"v{v.version}" for v in versions],
        textposition="top center",
        name="limits version (click: before/after)",
        hovertext=[f"v{v.version} {v.action}: {v.note or ''}" for v in versions],
        hoverinfo="text",
    )


def _fmt(side: ChangeSide, key: str) -> str:
    if key == "runs":
        return f"{side.runs:,}"
    if key == "hit_rate":
        return f"{fmt_pct(side.hit_rate)} of {side.runs:,}"
    if key == "completed_share":
        return f"{fmt_pct(side.completed_share)} of {side.runs:,}"
    if key == "task_success_rate":
        return f"{fmt_pct(side.task_success_rate)} of {side.labelled:,} labelled"
    if key == "mean_score":
        score = "—" if side.mean_score is None else f"{side.mean_score:.3g}"
        return f"{score} ({side.scored:,} scored)"
    if key == "cost_per_run":
        return f"{fmt_usd(side.cost_per_run)} ({side.costed:,} runs)"
    return "—" if side.tokens_per_run is None else f"{side.tokens_per_run:,.0f} ({side.runs:,})"


_ROWS = (
    ("runs", "runs"),
    ("hit_rate", "hit the limit"),
    ("completed_share", "completed"),
    ("task_success_rate", "task success"),
    ("mean_score", "feedback score"),
    ("cost_per_run", "spend per run"),
    ("tokens_per_run", "tokens per run"),
)


def _picked(event: Any, versions: list[LimitVersion]) -> int | None:
    points: list[Any] = []
    with contextlib.suppress(AttributeError):  # a click on a version marker
        points = list(event.selection.points)
    for p in points:
        data = p.get("customdata")
        if isinstance(data, int | float):
            st.session_state[_PICK] = int(data)
    numbers = [v.version for v in versions]
    if not numbers:
        return None
    chosen = st.session_state.get(_PICK, numbers[-1])
    return int(st.selectbox(
        "Before and after limits version", numbers[::-1],
        index=numbers[::-1].index(chosen) if chosen in numbers else 0,
    ))  # fmt: skip


def change_report_view(ctx: PageContext, event: Any, versions: list[LimitVersion]) -> None:
    """The report of the version clicked on the chart (or picked), below it."""
    number = _picked(event, versions)
    if number is None:
        return
    report = change_report(ctx.gw, number)
    if report is None:
        return
    v = report.version
    st.markdown(f"**v{v.version} {v.action}** by {md_text(v.who or '—')}: {md_text(v.note or '')}")
    if not report.tasks:
        st.caption("This version changed no enforced limit (a shadow candidate only).")
    for task in report.tasks:
        st.dataframe(
            [
                {
                    "task type": task.task_type,
                    "figure": label,
                    "before": _fmt(task.before, key),
                    "after": _fmt(task.after, key),
                }
                for key, label in _ROWS
            ],
            hide_index=True,
            width="stretch",
        )
