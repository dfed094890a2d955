"""Limits: per task type and budget, what successful runs used against stopped ones, the verdict
with its evidence, a what-if for any candidate value, and the recommended limits as TOML."""

from __future__ import annotations

from typing import Any

import streamlit as st
from loopwatch.dashboard.app import charts
from loopwatch.dashboard.app.filters import clean_text
from loopwatch.dashboard.app.limits_fit import limits_file
from loopwatch.dashboard.app.pagekit import PageContext, md_text, render_page
from loopwatch.dashboard.app.theme import (
    BUDGET_LABELS,
    VERDICT_RANK,
    fmt_budget,
    fmt_pct,
    fmt_usd,
    verdict_label,
)
from loopwatch.dashboard.app.tuning import tuning_section
from loopwatch.queries.analysis.recommend import (
    TaskFit,
    file_dict,
    file_summary,
    written_values,
)
from loopwatch.queries.analysis.recommendations import (
    AnalysisThresholds,
    LimitAnalysis,
    default_candidates,
    what_if,
)
from loopwatch.queries.analysis.toml_export import file_settings, file_toml

_PICK_KEY = "loopwatch.limits.pick"
_LIMIT_PARAM = "limit"


def _recommended_text(a: LimitAnalysis) -> str:
    if a.recommended is None:
        return f"≥ {fmt_budget(a.budget, a.proposed)} (lower bound)" if a.lower_bound else "—"
    return fmt_budget(a.budget, a.recommended)


def _table(analyses: list[LimitAnalysis]) -> None:
    rows: list[dict[str, Any]] = []
    for a in analyses:
        ev = a.evidence
        rows.append(
            {
                "task type": a.task_type,
                "limit": a.field,
                "verdict": verdict_label(a.verdict),
                "current": fmt_budget(a.budget, a.current_limit),
                "recommended": _recommended_text(a),
                "in the file": fmt_budget(a.budget, a.proposed),
                "hit rate": ev.hit_rate,
                "runs": ev.runs,
                "stopped": ev.hits,
                "stopped, still progressing": ev.progressing_share,
                "successful runs": ev.successes,
                "success p50": fmt_budget(a.budget, ev.success_p50)
                if ev.success_p50 is not None
                else "—",
                "success p95": fmt_budget(a.budget, ev.success_p95)
                if ev.success_p95 is not None
                else "—",
                "p95 / limit": ev.p95_share_of_limit,
                "cuts (fit)": a.observed_cut_share,
                "cuts (back-test)": a.backtest_cut_share,
                "why": a.sentence,
            }
        )
    st.dataframe(
        rows,
        hide_index=True,
        width="stretch",
        column_config={
            "hit rate": st.column_config.NumberColumn(
                format="percent", help="Runs under the current limit that it stopped."
            ),
            "stopped, still progressing": st.column_config.NumberColumn(
                format="percent",
                help="Of the stopped runs with evidence, the share that still made new calls in "
                "their last steps with no repeated error: high = too tight, low = stuck.",
            ),
            "p95 / limit": st.column_config.NumberColumn(format="percent"),
            "cuts (fit)": st.column_config.NumberColumn(
                format="percent",
                help="Successful runs above the recommendation, of those it was fit on.",
            ),
            "cuts (back-test)": st.column_config.NumberColumn(
                format="percent",
                help="Fit on the older half of the window's successful runs: the share of the "
                "newest half above that value.",
            ),
            "runs": st.column_config.NumberColumn(
                help="Runs in the window under the current limit."
            ),
            "in the file": st.column_config.TextColumn(
                help="The value the downloaded limits file sets (the recommendation where the "
                "verdict is too tight or too loose, else the current limit)."
            ),
            "why": st.column_config.TextColumn(width="large"),
        },
    )


def _pick(analyses: list[LimitAnalysis]) -> LimitAnalysis:
    ordered = sorted(
        analyses, key=lambda a: (VERDICT_RANK.get(a.verdict or "ok", 9), a.task_type, a.budget)
    )
    keys = [f"{a.task_type}\x1f{a.budget}" for a in ordered]
    by_key = dict(zip(keys, ordered, strict=True))
    if st.session_state.get(_PICK_KEY) not in by_key:
        # ?limit=<task type>/<LoopLimits field> picks it (a shared view), else the most pressing
        wanted = clean_text(st.query_params.get(_LIMIT_PARAM, "") or "")
        task_type, _, field = wanted.rpartition("/")
        chosen = next(
            (k for k, a in by_key.items() if a.task_type == task_type and a.field == field),
            keys[0],
        )
        st.session_state[_PICK_KEY] = chosen
    key = st.selectbox(
        "Task type and limit",
        keys,
        key=_PICK_KEY,
        format_func=lambda k: (
            f"{by_key[k].task_type} · {by_key[k].field} — {verdict_label(by_key[k].verdict)}"
        ),
    )
    picked = by_key[key]
    st.query_params[_LIMIT_PARAM] = f"{picked.task_type}/{picked.field}"
    return picked


_COUNT_BUDGETS = ("steps", "model_calls", "tool_calls")


def _distribution(ctx: PageContext, a: LimitAnalysis) -> None:
    since = ctx.window()["since"]
    if a.budget in _COUNT_BUDGETS:
        # exact counts: a limit of 8 steps sits between the bars of 8 and 9
        values = ctx.gw.run(
            "usage_values", task_type=a.task_type, budget=a.budget, since=since, max_rows=10_000
        ).records()
        hist = [
            {
                "outcome": r["outcome"],
                "bin_lo": float(r["value"]) - 0.4,
                "bin_hi": float(r["value"]) + 0.4,
                "runs": r["runs"],
            }
            for r in values
        ]
    else:
        hist = ctx.gw.run(
            "usage_histogram",
            budget=a.budget,
            since=since,
            task_types=[a.task_type],
            bins=40,
            max_rows=10_000,
        ).records()
    fig = charts.usage_figure(
        hist,
        a.budget,
        current=a.current_limit,
        recommended=a.proposed if a.verdict == "too_tight" else a.recommended,
        lower_bound=a.lower_bound,
    )
    st.plotly_chart(fig, width="stretch", key="usage")
    sentence = md_text(a.sentence)
    if a.verdict == "too_tight":
        bound = (
            "\n\nRuns this limit stopped never showed how far they needed to go, so the "
            "recommendation is a **lower bound**: raise the limit, then look again."
            if a.lower_bound
            else ""
        )
        st.warning(
            f"**{md_text(verdict_label(a.verdict))}.** {sentence}{bound}",
            icon=":material/straighten:",
        )
    elif a.verdict == "stuck_not_tight":
        st.error(
            f"**{md_text(verdict_label(a.verdict))}.** {sentence}", icon=":material/sync_problem:"
        )
    elif a.verdict == "too_loose":
        st.info(f"**{md_text(verdict_label(a.verdict))}.** {sentence}", icon=":material/savings:")
    else:
        st.success(
            f"**{md_text(verdict_label(a.verdict))}.** {sentence}", icon=":material/check_circle:"
        )


def _what_if(ctx: PageContext, a: LimitAnalysis) -> None:
    st.subheader("What if the limit were …")
    since = ctx.window()["since"]
    cands = default_candidates(ctx.gw.con, a.task_type, a.budget, since=since, points=40)
    lo, hi = min(cands), max(cands)
    start = a.proposed if a.proposed is not None else a.current_limit
    start = min(max(start if start is not None else hi, lo), hi)
    key = f"loopwatch.whatif.{a.task_type}\x1f{a.budget}"
    if a.budget == "cost_usd":
        value = float(
            st.slider(
                f"Candidate {a.field} (USD)",
                float(lo),
                float(hi),
                float(start),
                step=0.001,
                format="$%.3f",
                key=key,
            )
        )
    else:
        value = float(
            st.slider(
                f"Candidate {a.field} ({BUDGET_LABELS[a.budget]})",
                int(lo),
                max(int(hi), int(lo) + 1),
                round(start),
                step=1,
                key=key,
            )
        )
    # the candidate picked and the curve's candidates in one pass over the runs
    both = what_if(ctx.gw.con, a.task_type, a.budget, [*cands, value], since=since)
    point = next(p for p in both if p.candidate == value)
    c1, c2, c3 = st.columns(3)
    c1.metric(
        "Successful runs it would cut",
        fmt_pct(point.cut_share),
        help=f"{point.successful_cut:,} of {point.successful_runs:,} successful runs used more "
        f"than {fmt_budget(a.budget, value)}.",
    )
    saved = (
        fmt_usd(point.saved_spend)
        if point.spend_measure == "cost_usd"
        else f"{point.saved_spend:,.0f} tokens"
    )
    c2.metric(
        "Spend it would save on failed runs",
        fmt_pct(point.saved_share),
        help=f"{saved} of what runs that did not succeed spent, had they stopped at "
        f"{fmt_budget(a.budget, value)} (spend taken as proportional to "
        f"{BUDGET_LABELS[a.budget]}).",
    )
    c3.metric(
        "Failed runs it would stop earlier",
        f"{point.stopped_earlier:,}",
        help=f"Of {point.failed_runs:,} runs that did not succeed.",
    )
    shown = set(cands)
    points = [p for p in both if p.candidate in shown]
    st.plotly_chart(charts.what_if_figure(points, a.budget, value), width="stretch", key="whatif")


def _files(all_limits: list[LimitAnalysis], fits: dict[str, TaskFit]) -> dict[str, Any]:
    files: dict[str, Any] = {}
    for task_type, fit in fits.items():
        limits = [a.to_dict() for a in all_limits if a.task_type == task_type]
        files[task_type] = file_dict(fit, written_values(limits, fit))
    return files


def _download(
    ctx: PageContext, all_limits: list[LimitAnalysis], files: dict[str, Any], target: float
) -> None:
    header = (
        f"Limits recommended by the loopwatch dashboard at {ctx.now:%Y-%m-%d %H:%M:%S} UTC from "
        f"{ctx.runs} runs ({ctx.filters.window_label.lower()})."
    )
    toml = file_toml(all_limits, files, header=header)
    st.download_button(
        "Download recommended limits (TOML)",
        icon=":material/download:",
        data=toml,
        file_name="loopwatch-limits.toml",
        mime="application/toml",
        help="A limits file for LimitPolicy.from_toml(), one table per task type.",
        type="secondary",
    )
    _file_table(files, all_limits, target)
    with st.expander("Preview the TOML"):
        st.code(toml, language="toml")


def _file_table(files: dict[str, Any], all_limits: list[LimitAnalysis], target: float) -> None:
    """Each task type's file judged as a whole, next to the download: what it sets (as the TOML
    holds it) and what it promises."""
    rows = [
        {
            "task type": task_type,
            "sets": ", ".join(
                f"{k} = {v}"
                for k, v in file_settings(
                    [a.to_dict() for a in all_limits if a.task_type == task_type], f
                )
            )
            or "—",
            "cuts (fit)": f["cut_share"],
            "as written": f["written_cut_share"],
            "cuts (back-test)": (f["backtest"] or {}).get("cut_share"),
            "promise": file_summary(f),
        }
        for task_type, f in sorted(files.items())
    ]
    st.caption(
        f"The file as a whole: every limit and detector threshold of a task type together cuts "
        f"at most {fmt_pct(target)} of successful runs (95% confidence)."
    )
    pct = st.column_config.NumberColumn(format="percent")
    st.dataframe(
        rows,
        hide_index=True,
        width="stretch",
        key="limits_file",
        column_config={
            "cuts (fit)": pct,
            "as written": pct,
            "cuts (back-test)": pct,
            "sets": st.column_config.TextColumn(
                width="medium", help="What the downloaded TOML sets for the task type."
            ),
            "promise": st.column_config.TextColumn(width="large"),
        },
    )


def _body(ctx: PageContext) -> None:
    t = AnalysisThresholds()
    all_limits, fits = limits_file(ctx, t)
    analyses = [a for a in all_limits if a.current_limit is not None]
    if not analyses:
        st.info(
            "No run in the window ran under a limit (every budget was off), so there is nothing "
            "to judge. Set limits with LoopLimits or a LimitPolicy TOML.",
            icon=":material/straighten:",
        )
        tuning_section(ctx, [], None)
        return
    top = st.columns([2, 1])
    with top[1]:
        files = ctx.memo(f"limits-files:{t!r}", lambda: _files(all_limits, fits))
        _download(ctx, all_limits, files, t.cut_target)
    with top[0]:
        a = _pick(analyses)
    st.subheader(f"{a.field}: successful runs against stopped ones")
    _distribution(ctx, a)
    _what_if(ctx, a)
    st.subheader("Every limit, its verdict and evidence")
    _table(analyses)
    st.caption(
        f"Judged on runs under the current limit value (at least {t.min_runs}). Recommended: "
        f"the task type's limits and detector thresholds fit together so that they cut at most "
        f"{fmt_pct(t.cut_target)} of successful runs with 95% confidence (order statistics, "
        "a binomial bound; docs/queries.md); too few runs: none, and how many are needed. "
        "Too tight: hit rate ≥ 5% with stopped runs still progressing, or p95 ≥ 80% of the limit. "
        "Too loose: hit rate ≤ 0.5% and the limit ≥ 2× the recommendation. "
        "Stuck, not tight: hit rate high but the stopped runs were looping."
    )
    tuning_section(ctx, analyses, a)


render_page(
    "Limits",
    "Which limits are too tight or too loose, the evidence, and the values to set.",
    _body,
)
