"""Colours, labels and number formats of the dashboard, in one place.

One colour per outcome, shades of it per stop reason, so a chart reads at a glance: green ended
by itself, amber a limit stopped it, red it was stuck, violet the model stopped, grey it was
interrupted, dark red it crashed. Verdicts reuse them: too tight is a limit problem (amber), too
loose wastes budget (blue), stuck-not-tight is a loop (red), ok is green.
"""

from __future__ import annotations

import html
import math
from typing import Any

__all__ = [
    "ACCENT",
    "BUDGET_LABELS",
    "BUDGET_UNITS",
    "OUTCOME_COLORS",
    "STOP_REASON_COLORS",
    "TASK_TYPE_COLORS",
    "VERDICT_COLORS",
    "VERDICT_LABELS",
    "VERDICT_RANK",
    "app_icon",
    "badge_html",
    "fmt_budget",
    "fmt_count",
    "fmt_pct",
    "fmt_usd",
    "plotly_layout",
    "stop_reason_color",
    "task_type_style",
    "text",
    "verdict_label",
]

ACCENT = "#3d5a80"
"""Streamlit's primary colour on served dashboards (sliders, toggles, progress bars, links): a
calm slate blue, not Streamlit's red, which on this dashboard means stuck."""

OUTCOME_COLORS: dict[str, str] = {
    "success": "#2e9d5b",
    "limit": "#e8a33d",
    "stuck": "#d64545",
    "model": "#8e6cc9",
    "interrupted": "#8a8f98",
    "error": "#7a1f3d",
}

STOP_REASON_COLORS: dict[str, str] = {
    "completed": "#2e9d5b",
    "max_steps": "#e8a33d",
    "max_model_calls": "#f2c46d",
    "max_tool_calls": "#c98215",
    "token_budget": "#f6d79b",
    "cost_budget": "#a86a0d",
    "timeout": "#d9913a",
    "tool_failures": "#b83232",
    "repeated_action": "#e57373",
    "repeated_tool_call": "#f4a3a3",
    "repeated_error": "#d64545",
    "no_progress": "#8c2a2a",
    "completion_rejected": "#f06292",
    "output_truncated": "#8e6cc9",
    "refusal": "#b39ddb",
    "cancelled": "#8a8f98",
    "permission_denied": "#b0b4ba",
    "guardrail": "#5f6368",
    "circuit_open": "#7a1f3d",
    "error": "#4a1024",
}

TASK_TYPE_COLORS: tuple[str, ...] = ("#3b7dd8", "#17a2b8", "#1b3a5c", "#4dd0e1", "#90caf9")
"""Series colours for task types (lines over time): blues, teals and cyan, hues the
outcomes do not use, so that no task type reads as "stuck" red or "limit" amber. Past five task
types the colours repeat with another marker shape (:func:`task_type_style`)."""

_TASK_TYPE_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x")


def task_type_style(i: int) -> tuple[str, str]:
    """The colour and marker symbol of the ``i``-th task type in a chart."""
    n = len(TASK_TYPE_COLORS)
    return TASK_TYPE_COLORS[i % n], _TASK_TYPE_SYMBOLS[(i // n) % len(_TASK_TYPE_SYMBOLS)]


VERDICT_COLORS: dict[str, str] = {
    "too_tight": "#e8a33d",
    "too_loose": "#3b7dd8",
    "stuck_not_tight": "#d64545",
    "ok": "#2e9d5b",
    "insufficient_data": "#8a8f98",
}

VERDICT_LABELS: dict[str, str] = {
    "too_tight": "too tight",
    "too_loose": "too loose",
    "stuck_not_tight": "stuck, not tight",
    "ok": "ok",
    "insufficient_data": "not enough data",
}

VERDICT_RANK: dict[str, int] = {
    "stuck_not_tight": 0,
    "too_tight": 1,
    "too_loose": 2,
    "ok": 3,
    "insufficient_data": 4,
}
"""Which verdict speaks for a task type when its budgets disagree (lower first)."""

BUDGET_LABELS: dict[str, str] = {
    "steps": "steps",
    "model_calls": "model calls",
    "tool_calls": "tool calls",
    "tokens": "tokens",
    "cost_usd": "cost",
    "wall_s": "wall time",
}

BUDGET_UNITS: dict[str, str] = {
    "steps": "steps",
    "model_calls": "calls",
    "tool_calls": "calls",
    "tokens": "tokens",
    "cost_usd": "USD",
    "wall_s": "seconds",
}


def stop_reason_color(reason: str) -> str:
    return STOP_REASON_COLORS.get(reason, "#9aa0a6")


def verdict_label(verdict: str | None) -> str:
    """``"too tight"``: a verdict as a table cell (plain text, no markup)."""
    if verdict is None:
        return "off"
    return VERDICT_LABELS.get(verdict, verdict)


def badge_html(text: str, color: str) -> str:
    """A coloured pill; ``text`` is escaped (task types and verdicts are user data)."""
    return (
        f'<span style="background:{html.escape(color)};color:#fff;border-radius:0.8em;'
        f'padding:0.1em 0.65em;font-size:0.85em;font-weight:600;white-space:nowrap">'
        f"{html.escape(text)}</span>"
    )


def _finite(x: Any) -> bool:
    return x is not None and isinstance(x, int | float) and math.isfinite(x)


def fmt_pct(x: Any, digits: int = 1) -> str:
    return f"{x * 100:.{digits}f}%" if _finite(x) else "—"


def fmt_count(x: Any) -> str:
    return f"{x:,.0f}" if _finite(x) else "—"


def fmt_usd(x: Any) -> str:
    if not _finite(x):
        return "—"
    if x == 0:
        return "$0"
    return f"${x:,.2f}" if abs(x) >= 1 else f"${x:,.4f}"


def fmt_budget(budget: str, x: Any) -> str:
    """A value of ``budget`` with its unit: ``12 steps``, ``$0.040``, ``31.5 s``."""
    if x is None:
        return "off"
    if not _finite(x):
        return "—"
    if budget == "cost_usd":
        return fmt_usd(x)
    if budget == "wall_s":
        # sub-second runs are common: 0.04 s, not 0.0 s
        return f"{x:,.2f} s" if abs(x) < 10 else f"{x:,.1f} s"
    text = f"{x:,.0f}" if float(x).is_integer() else f"{x:,.1f}"
    return f"{text} {BUDGET_UNITS[budget]}"


def plotly_layout(**overrides: Any) -> dict[str, Any]:
    """The layout every chart starts from: quiet grid, legend on top, tight margins."""
    layout: dict[str, Any] = {
        "template": "plotly_white",
        "margin": {"l": 10, "r": 10, "t": 40, "b": 10},
        "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0, "title": None},
        "font": {"size": 13},
        "hoverlabel": {"namelength": -1},
    }
    layout.update(overrides)
    return layout


def app_icon() -> Any:
    """The browser tab's icon, drawn here: a Material icon as ``page_icon`` makes the browser
    fetch it from fonts.gstatic.com, and a served dashboard must not call out."""
    from PIL import Image, ImageDraw

    size = 64
    img = Image.new("RGBA", (size, size), (0, 0, 0, 0))
    draw = ImageDraw.Draw(img)
    draw.ellipse((4, 4, size - 4, size - 4), outline=ACCENT, width=9)
    # a gap with an arrow head: the loop
    draw.rectangle((size // 2 - 2, 0, size // 2 + 14, 20), fill=(0, 0, 0, 0))
    draw.polygon([(size // 2 - 6, 0), (size // 2 + 10, 9), (size // 2 - 6, 20)], fill=ACCENT)
    return img


def text(value: Any) -> str:
    """A value as Plotly label text: shown as written, never as markup."""
    return html.escape(str(value), quote=False)
