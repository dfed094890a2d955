"""One run's spans as a timeline, the Runs page's chart (a pure function of ``run_steps`` rows,
like the figures in :mod:`~loopwatch.dashboard.app.charts`, which re-exports it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from .theme import OUTCOME_COLORS, plotly_layout, text

__all__ = ["run_timeline_figure"]

Record = Mapping[str, Any]


def _timeline_bar(r: Record) -> tuple[str, str, str, str]:
    """One span's bar on the run timeline: its label, colour, hover detail and the text beside
    it (a step's: how much of the tightest limit the run had used by its end)."""
    op, step, decision = r["operation"], r["step"], ""
    if op == "chat":
        label = f"step {step} · model {text(r['model'] or '')}"
        color = OUTCOME_COLORS["model"]
        detail = f"tokens in/out: {r['input_tokens'] or 0:,}/{r['output_tokens'] or 0:,}"
    elif op == "execute_tool":
        label = f"step {step} · {text(r['tool_name'] or 'tool')}"
        failed = r["tool_status"] == "error"
        color = OUTCOME_COLORS["stuck"] if failed else OUTCOME_COLORS["success"]
        detail = (
            f"error {text(r['error_code'] or '')} "
            f"(fingerprint {text(r['error_fingerprint'] or '')})"
            if failed
            else f"ok (result {text(r['result_fingerprint'] or '')})"
        )
    else:
        label = f"step {step}" if step is not None else text(r["name"])
        color = "#c5cad3"
        decision = r["guard_decision"] or ""
        detail = f"guard: {text(decision)}"
    util = r["max_utilization"]
    mark = (
        f"{float(util):.0%} of budget" + ("" if decision == "continue" else f" · {text(decision)}")
        if op not in ("chat", "execute_tool") and util is not None
        else ""
    )
    if util is not None:
        detail += f"<br>budget used: {float(util):.0%} of the tightest limit"
    return label, color, detail, mark


def run_timeline_figure(steps: Sequence[Record]) -> go.Figure:
    """One run's spans as a timeline (``run_steps`` rows): model calls, tool calls (red when they
    failed) and steps, on a millisecond axis from the run's start, with budget use on hover."""
    if not steps:
        return go.Figure()
    t0 = min(r["started_at"] for r in steps)
    rows = [r for r in steps if r["operation"] != "invoke_agent"]
    total_ms = max(
        [
            ((r["started_at"] - t0).total_seconds() * 1000 + float(r["duration_ms"] or 0.0))
            for r in steps
        ]
        + [1.0]
    )
    # a call far shorter than the run still gets a visible bar
    min_ms = total_ms / 150
    labels, starts, widths, colors, hover, marks = [], [], [], [], [], []
    for i, r in enumerate(rows, 1):
        label, color, detail, mark = _timeline_bar(r)
        marks.append(mark)
        labels.append(f"{i}. {label}")
        starts.append((r["started_at"] - t0).total_seconds() * 1000)
        widths.append(max(float(r["duration_ms"] or 0.0), min_ms))
        colors.append(color)
        hover.append(f"{label}<br>{float(r['duration_ms'] or 0):.1f} ms<br>{detail}")
    fig = go.Figure()
    fig.add_bar(
        y=labels,
        x=widths,
        base=starts,
        orientation="h",
        marker_color=colors,
        hovertext=hover,
        hoverinfo="text",
        text=marks,
        textposition="outside",
        textfont={"size": 11, "color": "#3c4043"},
        cliponaxis=False,
        showlegend=False,
    )
    fig.update_layout(
        **plotly_layout(
            height=max(220, 40 + 24 * len(rows)),
            xaxis={
                "title": "milliseconds since the run started",
                "range": [0, total_ms * 1.25],
            },
            yaxis={"autorange": "reversed", "title": None, "type": "category"},
            bargap=0.25,
        )
    )
    return fig
