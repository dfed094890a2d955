"""The dashboard's Plotly figures, built from query records (plain lists of dicts).

Pure functions: no Streamlit, no database, so each is tested on its own. User data (task types,
tools, error codes) goes into figures escaped: Plotly reads a few HTML tags in labels, and a task
type named ``<b>x</b>`` must show as written.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import plotly.graph_objects as go

from .theme import (
    BUDGET_LABELS,
    BUDGET_UNITS,
    OUTCOME_COLORS,
    VERDICT_COLORS,
    fmt_budget,
    plotly_layout,
    stop_reason_color,
    task_type_style,
    text,
)
from .timeline import run_timeline_figure

__all__ = [
    "MIN_RUNS",
    "hit_rate_figure",
    "limit_change_markers",
    "repeated_error_figure",
    "run_timeline_figure",
    "stop_mix_figure",
    "text",
    "tool_health_figure",
    "usage_figure",
    "what_if_figure",
]

Record = Mapping[str, Any]

MIN_RUNS = 5
"""Time buckets with fewer runs than this are left out of rate-over-time charts."""

_OUTCOME_ORDER = ("success", "limit", "stuck", "model", "interrupted", "error")


def stop_mix_figure(mix: Sequence[Record]) -> go.Figure:
    """How runs ended per task type: one 100% bar per task type, a segment per stop reason,
    coloured by outcome (``stop_reason_mix`` rows)."""
    types = sorted({str(r["task_type"]) for r in mix})
    reasons: dict[str, str] = {}
    for r in mix:
        reasons.setdefault(str(r["stop_reason"]), str(r["outcome"]))
    order = sorted(
        reasons,
        key=lambda s: (
            _OUTCOME_ORDER.index(reasons[s]) if reasons[s] in _OUTCOME_ORDER else 99,
            s,
        ),
    )
    share = {(str(r["task_type"]), str(r["stop_reason"])): r for r in mix}
    fig = go.Figure()
    for reason in order:
        xs, ys, runs = [], [], []
        for t in types:
            row = share.get((t, reason))
            xs.append(float(row["share"]) if row else 0.0)
            runs.append(int(row["runs"]) if row else 0)
            ys.append(text(t))
        fig.add_bar(
            x=xs,
            y=ys,
            orientation="h",
            name=text(reason),
            marker_color=stop_reason_color(reason),
            customdata=[[r, text(reasons[reason])] for r in runs],
            hovertemplate="%{y}<br>" + text(reason) + " (%{customdata[1]}): "
            "%{x:.1%} · %{customdata[0]:,} runs<extra></extra>",
        )
    fig.update_layout(
        **plotly_layout(
            barmode="stack",
            height=max(220, 60 + 38 * len(types)),
            xaxis={"tickformat": ".0%", "range": [0, 1], "title": "share of runs"},
            yaxis={"autorange": "reversed", "title": None},
        )
    )
    return fig


def limit_change_markers(changes: Sequence[Record]) -> list[dict[str, Any]]:
    """Where limits changed: one marker per (task type, limits version) after the first,
    ``{"at", "task_type", "label"}``, from ``limit_changes`` rows."""
    by_type: dict[str, list[Record]] = {}
    for r in changes:
        by_type.setdefault(str(r["task_type"]), []).append(r)
    out: list[dict[str, Any]] = []
    fields = [k for k in (changes[0].keys() if changes else ()) if str(k).startswith("limit_")]
    fields = [f for f in fields if f != "limit_share"]
    for t, rows in by_type.items():
        rows = sorted(rows, key=lambda r: r["first_run"])
        for prev, cur in itertools.pairwise(rows):
            diffs = []
            for f in fields:
                a, b = prev.get(f), cur.get(f)
                if a != b:
                    budget = f[len("limit_") :]
                    diffs.append(f"max_{budget} {fmt_budget(budget, a)} → {fmt_budget(budget, b)}")
            label = ", ".join(diffs) or f"limits version {cur['limits_version']}"
            out.append({"at": cur["first_run"], "task_type": t, "label": label})
    return sorted(out, key=lambda m: m["at"])


def hit_rate_figure(rates: Sequence[Record], markers: Sequence[Mapping[str, Any]]) -> go.Figure:
    """Hit-the-limit rate over time per task type (``limit_hit_rate`` rows with limit_name
    ``any``), a dotted line where a task type's limits changed."""
    fig = go.Figure()
    types = sorted({str(r["task_type"]) for r in rates})
    styles = {t: task_type_style(i) for i, t in enumerate(types)}
    colors = {t: color for t, (color, _) in styles.items()}
    for t in types:
        # a bucket with a handful of runs (the one still filling, in live mode) would draw a
        # 0% or 100% spike that means nothing: such buckets are left out
        rows = [
            r
            for r in rates
            if str(r["task_type"]) == t and r["limit_name"] == "any" and int(r["runs"]) >= MIN_RUNS
        ]
        rows.sort(key=lambda r: r["bucket"])
        fig.add_scatter(
            x=[r["bucket"] for r in rows],
            y=[float(r["hit_rate"]) for r in rows],
            customdata=[[int(r["hits"]), int(r["runs"])] for r in rows],
            mode="lines+markers",
            marker={"size": 5, "symbol": styles[t][1]},
            line={"color": colors[t], "width": 2},
            name=text(t),
            hovertemplate=text(t) + "<br>%{x}<br>hit the limit: %{y:.1%} "
            "(%{customdata[0]:,} of %{customdata[1]:,} runs)<extra></extra>",
        )
    for m in markers:
        color = colors.get(str(m["task_type"]), "#5f6368")
        fig.add_vline(x=m["at"], line={"color": color, "dash": "dot", "width": 1.5})
        fig.add_annotation(
            x=m["at"],
            y=1,
            yref="paper",
            text="limit changed: " + text(m["task_type"]),
            hovertext=text(m["label"]),
            showarrow=False,
            xanchor="left",
            yanchor="top",
            font={"size": 11, "color": color},
            bgcolor="rgba(255,255,255,0.8)",
        )
    fig.update_layout(
        **plotly_layout(
            height=340,
            yaxis={"tickformat": ".0%", "title": "runs stopped by a limit", "rangemode": "tozero"},
            xaxis={"title": None},
        )
    )
    return fig


def usage_figure(
    hist: Sequence[Record],
    budget: str,
    *,
    current: float | None,
    recommended: float | None,
    lower_bound: bool,
) -> go.Figure:
    """Usage of ``budget`` by successful runs against stopped ones (``usage_histogram`` rows of
    one task type), with the current limit and the recommended value drawn on it."""
    fig = go.Figure()
    for outcome in _OUTCOME_ORDER:
        rows = [r for r in hist if r["outcome"] == outcome]
        if not rows:
            continue
        label = "successful" if outcome == "success" else f"stopped: {outcome}"
        fig.add_bar(
            x=[(float(r["bin_lo"]) + float(r["bin_hi"])) / 2 for r in rows],
            width=[float(r["bin_hi"]) - float(r["bin_lo"]) for r in rows],
            y=[int(r["runs"]) for r in rows],
            name=label,
            marker_color=OUTCOME_COLORS.get(outcome, "#9aa0a6"),
            opacity=0.85,
            customdata=[[float(r["bin_lo"]), float(r["bin_hi"])] for r in rows],
            hovertemplate=label
            + (
                ": %{y:,} runs used %{x:,.0f} "
                if budget in ("steps", "model_calls", "tool_calls")
                else ": %{y:,} runs used %{customdata[0]:,.4g}–%{customdata[1]:,.4g} "
            )
            + BUDGET_UNITS[budget]
            + "<extra></extra>",
        )
    if current is not None:
        fig.add_vline(x=current, line={"color": "#202124", "width": 2.5})
        fig.add_annotation(
            x=current,
            y=1,
            yref="paper",
            text=f"current limit {fmt_budget(budget, current)}",
            showarrow=False,
            xanchor="right",
            yanchor="bottom",
            font={"size": 12, "color": "#202124"},
        )
    if recommended is not None:
        color = VERDICT_COLORS["too_tight"] if lower_bound else VERDICT_COLORS["ok"]
        word = "at least " if lower_bound else ""
        fig.add_vline(x=recommended, line={"color": color, "width": 2.5, "dash": "dash"})
        fig.add_annotation(
            x=recommended,
            y=0.9,
            yref="paper",
            text=f"recommended {word}{fmt_budget(budget, recommended)}",
            showarrow=False,
            xanchor="left",
            yanchor="bottom",
            font={"size": 12, "color": color},
        )
    top = max(
        [float(r["bin_hi"]) for r in hist] + [current or 0.0, recommended or 0.0, 1.0],
    )
    fig.update_layout(
        **plotly_layout(
            barmode="overlay",
            height=360,
            xaxis={
                "title": f"{BUDGET_LABELS[budget]} used per run ({BUDGET_UNITS[budget]})",
                # room on the right for the labels of lines drawn at the top value
                "range": [0, top * 1.3],
            },
            yaxis={"title": "runs"},
        )
    )
    return fig


def what_if_figure(points: Sequence[Any], budget: str, candidate: float) -> go.Figure:
    """The what-if curves (``WhatIfPoint`` list): successful runs cut and spend saved on runs
    that did not succeed, for each candidate value; the chosen candidate marked."""
    xs = [p.candidate for p in points]
    fig = go.Figure()
    fig.add_scatter(
        x=xs,
        y=[p.cut_share or 0.0 for p in points],
        name="successful runs it would cut",
        line={"color": VERDICT_COLORS["stuck_not_tight"], "width": 2.5},
        hovertemplate="limit %{x:,.4g}: cuts %{y:.1%} of successful runs<extra></extra>",
    )
    fig.add_scatter(
        x=xs,
        y=[p.saved_share or 0.0 for p in points],
        name="spend it would save on failed runs",
        line={"color": VERDICT_COLORS["ok"], "width": 2.5},
        hovertemplate="limit %{x:,.4g}: saves %{y:.1%} of failed runs' spend<extra></extra>",
    )
    fig.add_vline(
        x=candidate,
        line={"color": "#202124", "dash": "dot"},
        annotation_text=f"slider: {candidate:,.4g}",
        annotation_position="top left",
        annotation_font={"size": 11, "color": "#202124"},
    )
    fig.update_layout(
        **plotly_layout(
            height=300,
            xaxis={"title": f"candidate {BUDGET_LABELS[budget]} limit ({BUDGET_UNITS[budget]})"},
            yaxis={"tickformat": ".0%", "range": [0, 1.02], "title": None},
        )
    )
    return fig


def repeated_error_figure(
    history: Sequence[Record],
    *,
    factor: float,
    min_ratio: float,
) -> go.Figure:
    """The repeated_error share per task type over time (short window, as the alert sees it)
    against its threshold (max(factor × baseline, min_ratio)) and baseline; shaded where the
    alert fired (``repeated_error_alert_history`` rows)."""
    fig = go.Figure()
    types = sorted({str(r["task_type"]) for r in history})
    shapes: list[dict[str, Any]] = []
    for i, t in enumerate(types):
        rows = sorted(
            (r for r in history if str(r["task_type"]) == t), key=lambda r: r["evaluated_at"]
        )
        color, symbol = task_type_style(i)
        xs = [r["evaluated_at"] for r in rows]
        fig.add_scatter(
            x=xs,
            y=[float(r["ratio_short"] or 0.0) for r in rows],
            name=text(t),
            legendgroup=text(t),
            mode="lines+markers",
            marker={"size": 4, "symbol": symbol},
            line={"color": color, "width": 2.5},
            customdata=[[int(r["repeated_short"]), int(r["runs_short"])] for r in rows],
            hovertemplate=text(t) + "<br>%{x}<br>repeated_error: %{y:.1%} "
            "(%{customdata[0]:,} of %{customdata[1]:,} runs)<extra></extra>",
        )
        fig.add_scatter(
            x=xs,
            y=[max(factor * float(r["ratio_baseline"] or 0.0), min_ratio) for r in rows],
            name=text(t) + " threshold",
            legendgroup=text(t),
            showlegend=False,
            line={"color": color, "width": 1.2, "dash": "dash"},
            hovertemplate=text(t) + " alert threshold: %{y:.1%}<extra></extra>",
        )
        fig.add_scatter(
            x=xs,
            y=[float(r["ratio_baseline"] or 0.0) for r in rows],
            name=text(t) + " baseline",
            legendgroup=text(t),
            showlegend=False,
            line={"color": color, "width": 1, "dash": "dot"},
            hovertemplate=text(t) + " baseline: %{y:.1%}<extra></extra>",
        )
        # one layout update for every span: add_vrect per span is quadratic in Plotly
        shapes += [
            {
                "type": "rect",
                "xref": "x",
                "yref": "paper",
                "x0": start,
                "x1": end,
                "y0": 0,
                "y1": 1,
                "fillcolor": VERDICT_COLORS["stuck_not_tight"],
                "opacity": 0.12,
                "line": {"width": 0},
                "layer": "below",
            }
            for start, end in _firing_spans(rows)
        ]
    fig.update_layout(shapes=shapes)
    fig.update_layout(
        **plotly_layout(
            height=360,
            yaxis={
                "tickformat": ".0%",
                "title": "runs stopped on repeated_error",
                "rangemode": "tozero",
            },
            xaxis={"title": None},
        )
    )
    return fig


def _firing_spans(rows: Sequence[Record]) -> list[tuple[datetime, datetime]]:
    spans: list[tuple[datetime, datetime]] = []
    start = None
    last = None
    for r in rows:
        if r["firing"]:
            start = start or r["evaluated_at"]
            last = r["evaluated_at"]
        elif start is not None and last is not None:
            spans.append((start, r["evaluated_at"]))
            start = None
    if start is not None and last is not None:
        spans.append((start, last))
    return spans


def tool_health_figure(tools: Sequence[Record]) -> go.Figure:
    """Tools by error rate (bars) with their retries (markers), one row per task type and tool."""
    rows = sorted(tools, key=lambda r: (float(r["error_rate"]), int(r["retries"])))[-15:]
    labels = [f"{text(r['tool_name'])} · {text(r['task_type'])}" for r in rows]
    fig = go.Figure()
    fig.add_bar(
        y=labels,
        x=[float(r["error_rate"]) for r in rows],
        orientation="h",
        name="error rate",
        marker_color=OUTCOME_COLORS["stuck"],
        customdata=[
            [int(r["errors"]), int(r["calls"]), text(r["top_error_code"] or "—")] for r in rows
        ],
        hovertemplate="%{y}<br>%{x:.1%} of calls failed (%{customdata[0]:,} of "
        "%{customdata[1]:,}); most common: %{customdata[2]}<extra></extra>",
    )
    fig.add_scatter(
        y=labels,
        x=[int(r["retries"]) for r in rows],
        xaxis="x2",
        mode="markers",
        name="retries",
        marker={"color": OUTCOME_COLORS["limit"], "size": 11, "symbol": "diamond"},
        hovertemplate="%{y}<br>%{x:,} retries<extra></extra>",
    )
    fig.update_layout(
        **plotly_layout(
            height=max(240, 70 + 30 * len(rows)),
            xaxis={"tickformat": ".0%", "title": "error rate (bars)", "rangemode": "tozero"},
            xaxis2={
                "overlaying": "x",
                "side": "top",
                "title": "retries (diamonds)",
                "rangemode": "tozero",
                "showgrid": False,
                # counts: whole-number ticks of its own, not ticks lined up with the rate's grid
                "tickmode": "auto",
                "tickformat": ",d",
                "dtick": None,
            },
            yaxis={"title": None},
            # no legend: wherever it sat it met one of the two axes' ticks; the titles say it
            showlegend=False,
            margin={"l": 10, "r": 10, "t": 50, "b": 10},
        )
    )
    return fig
