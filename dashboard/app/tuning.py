"""The tuning loop on the Limits page (docs/dashboard.md, "Tuning"): the limits serve holds, a
change (a recommendation or a hand-edited value) applied with a note or first set as a shadow
candidate, a candidate promoted, a roll back to any earlier version, and the history of versions.
Every action shows the diff and asks to confirm; a write needs the write token when serve has one.
In file mode the history is shown and nothing can be changed."""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import streamlit as st
from loopwatch.dashboard.app import source
from loopwatch.dashboard.app.limits_fit import window_usage
from loopwatch.dashboard.app.pagekit import PageContext, md_text
from loopwatch.dashboard.app.theme import fmt_pct
from loopwatch.instrumentation.runtime.limits import LimitPolicy, LoopLimits
from loopwatch.queries.analysis.limit_edits import DEFAULTS, promoted, with_shadow, with_values
from loopwatch.queries.analysis.recommendations import AnalysisThresholds, LimitAnalysis
from loopwatch.queries.analysis.spend_rate import SpendRateAdvice, spend_rate_advice
from loopwatch.queries.store.limit_versions import (
    LimitChange,
    LimitVersion,
    VersionMoved,
    append_version,
    current_version,
    diff_policies,
    version_history,
)

__all__ = ["tuning_section"]

_PENDING = "loopwatch.tuning.pending"
_DONE = "loopwatch.tuning.done"
_NUMERIC = [
    f
    for f, spec in LoopLimits.__dataclass_fields__.items()
    if f.startswith("max_") and f not in ("max_calls_per_tool",)
]


@dataclass(frozen=True)
class _Pending:
    """An action reviewed, waiting for its confirmation."""

    action: str
    policy: LimitPolicy
    expected: int
    note: str
    who: str
    recommendation: Any = None
    based_on: int | None = None


def _read(ctx: PageContext) -> tuple[LimitVersion | None, list[LimitVersion]]:
    con: Any = ctx.gw.con
    try:
        return current_version(con), version_history(con, 200)
    except Exception:  # a store of an older schema, read-only: no versions yet
        return None, []


def _change_rows(changes: list[LimitChange]) -> list[dict[str, Any]]:
    return [
        {
            "task type": "defaults" if c.task_type == DEFAULTS else c.task_type,
            "limit": c.field + (" (shadow candidate)" if c.shadow else ""),
            "before": "off" if c.before is None else str(c.before),
            "after": "off" if c.after is None else str(c.after),
        }
        for c in changes
    ]


def _review(pending: _Pending, current: LimitVersion | None) -> None:
    """The diff of a reviewed action and its Confirm / Cancel buttons."""
    changes = diff_policies(current.policy() if current else None, pending.policy)
    with st.container(border=True):
        st.markdown(f"**Review: {pending.action}** — {md_text(pending.note)}")
        if changes:
            st.dataframe(_change_rows(changes), hide_index=True, width="stretch")
        else:
            st.info("This changes no limit.")
        needed = source.write_token()
        token = st.text_input("Write token", type="password") if needed else None
        left, right = st.columns(2)
        if left.button("Confirm", type="primary", key="tuning-confirm"):
            if needed and not hmac.compare_digest((token or "").encode(), needed.encode()):
                st.error("Wrong write token: nothing changed.")
                return
            _commit(pending)
        if right.button("Cancel", key="tuning-cancel"):
            st.session_state.pop(_PENDING, None)
            st.rerun()


def _commit(pending: _Pending) -> None:
    store = source.live_store()
    if store is None:
        st.error("Only `loopwatch serve` can change limits: nothing changed.")
        return
    try:
        version = append_version(
            store,
            pending.policy,
            expected=pending.expected,
            action=pending.action,
            who=pending.who,
            note=pending.note,
            recommendation=pending.recommendation,
            based_on=pending.based_on,
        )
    except VersionMoved as exc:
        st.session_state.pop(_PENDING, None)
        st.error(f"{exc}. Nothing changed.")
        return
    st.session_state.pop(_PENDING, None)
    st.session_state[_DONE] = f"Version {version.version} ({version.action}) is now current."
    st.rerun()


def _propose(make: Callable[[], _Pending]) -> None:
    try:
        st.session_state[_PENDING] = make()
    except ValueError as exc:
        st.error(f"Refused, the current version stays: {exc}")
        return
    st.rerun()


def _change_form(
    base: LimitPolicy, expected: int, analyses: list[LimitAnalysis], picked: LimitAnalysis | None
) -> None:
    """Set one value (prefilled with the picked recommendation): apply it or shadow it."""
    tasks = [*sorted({a.task_type for a in analyses} | set(base.task_types)), DEFAULTS]
    default_task = picked.task_type if picked else tasks[0]
    with st.form("tuning-change"):
        st.markdown("**Change a limit** — prefilled with the recommendation picked above")
        c1, c2, c3 = st.columns(3)
        task = c1.selectbox("Task type", tasks, index=tasks.index(default_task))
        field = c2.selectbox("Limit", _NUMERIC, index=_NUMERIC.index(picked.field) if picked else 0)
        proposed = picked.proposed if picked and picked.proposed is not None else 8
        value = c3.number_input("Value", min_value=0.0, value=float(proposed), step=1.0,
                                format="%g")  # fmt: skip
        how = st.radio("How", ["Apply now", "Shadow first"], horizontal=True)
        note = st.text_input("Note", placeholder="why this change")
        who = st.text_input("Who", value="dashboard")
        if not st.form_submit_button("Review the change"):
            return
    if not note.strip():
        st.error("Write a note saying why: it is kept with the version.")
        return
    whole = field not in ("max_cost_usd", "max_wall_s", "max_cost_per_min")
    number: int | float = int(value) if whole else value
    rec = None
    if picked and (task, field) == (picked.task_type, picked.field) and value == picked.proposed:
        rec = picked.to_dict()
    shadow = how == "Shadow first"
    _propose(
        lambda: _Pending(
            "shadow" if shadow else "apply",
            with_shadow(base, task, {**base.shadow.get(task, {}), field: number})
            if shadow
            else with_values(base, task, {field: number}),
            expected,
            note,
            who,
            rec,
        )
    )


def _shadow_panel(ctx: PageContext, base: LimitPolicy, expected: int) -> None:
    """Each shadow candidate, what it would have done on live runs, and its Promote button."""
    if not base.shadow:
        return
    st.markdown("**Shadow candidates** — evaluated on live runs, not enforced")
    rows = ctx.gw.run("shadow_limits", **ctx.window()).records()
    for task, overrides in sorted(base.shadow.items()):
        candidate = base.shadow_for(task)
        mine = [r for r in rows if r["task_type"] == task and candidate
                and r["candidate"] == candidate.version]  # fmt: skip
        runs = sum(int(r["runs"]) for r in mine)
        cut = sum(int(r["successful_runs"]) for r in mine if r["decision"] != "finish")
        ok = sum(int(r["successful_runs"]) for r in mine)
        stops = sum(int(r["failed_runs"]) for r in mine if r["decision"] != "finish")
        st.markdown(
            f"- {md_text(task)}: {md_text(', '.join(f'{k} = {v}' for k, v in overrides.items()))}"
            f" — on {runs} runs it would have cut {cut} of {ok} successful runs "
            f"({fmt_pct(cut / ok if ok else None)}) and stopped {stops} that did not succeed"
        )
        with st.form(f"tuning-promote-{task}"):
            note = st.text_input("Note", key=f"promote-note-{task}", placeholder="why promote")
            if st.form_submit_button(f"Review promoting {task}") and note.strip():
                _propose(_promotion(base, task, expected, note))


def _promotion(base: LimitPolicy, task: str, expected: int, note: str) -> Callable[[], _Pending]:
    return lambda: _Pending("promote", promoted(base, task), expected, note, "dashboard")


def _spend_rate(
    ctx: PageContext, analyses: list[LimitAnalysis], base: LimitPolicy, expected: int, live: bool
) -> None:
    """The spend-rate stop per task type (off by default): its recommendation fit with the task
    type's other limits, its promise, and (on serve) a form to apply it with a note."""
    on: dict[str, list[str]] = {}
    for a in analyses:
        on.setdefault(a.task_type, []).append(a.budget)
    since, types = ctx.window().get("since"), ctx.filters.task_type_list
    advice = ctx.memo(f"spend-rate:{expected}", lambda: spend_rate_advice(
        ctx.gw.con, on, since=since, task_types=types, usage=window_usage(ctx)))  # fmt: skip
    if not advice:
        return
    st.markdown("**Spend-rate stop** (`max_cost_per_min`, off by default)")
    pct = st.column_config.NumberColumn(format="percent")
    st.dataframe(
        [spend_rate_row(a) for a in advice],
        hide_index=True,
        width="stretch",
        key="spend_rate_table",
        column_config={"cuts (fit)": pct, "cuts (back-test)": pct,
                       "promise": st.column_config.TextColumn(width="large")},
    )  # fmt: skip
    st.caption(
        "Each run's rate is the highest spend a minute the guard could have seen (spend so far "
        "over time so far, the time counted as at least a minute). The value is fit with the "
        "task type's other limits and detector thresholds, so the file as a whole keeps its "
        f"promise of cutting at most {fmt_pct(AnalysisThresholds().cut_target)} of successful "
        "runs. It stays off until you apply it."
    )
    if live:
        for one in advice:
            if one.field and one.recommended is not None and one.recommended != one.current:
                _apply_rate_form(one, base, expected)


def spend_rate_row(a: SpendRateAdvice) -> dict[str, Any]:
    """One row of the spend-rate table."""
    return {
        "task type": a.task_type,
        "limit": a.field or "-",
        "current": "off" if a.current is None else a.current,
        "recommended": a.recommended,
        "unit": a.unit,
        "successful runs": a.successful_runs,
        "cuts (fit)": a.observed_cut_share,
        "cuts (back-test)": a.backtest_cut_share,
        "failed runs faster": f"{a.failed_faster}/{a.failed_runs}",
        "stopped by it": a.rate_stops,
        "promise": a.promise,
    }


def _apply_rate_form(a: SpendRateAdvice, base: LimitPolicy, expected: int) -> None:
    assert a.field is not None and a.recommended is not None
    field, value, task = a.field, a.recommended, a.task_type
    with st.form(f"tuning-rate-{task}"):
        note = st.text_input("Note", key=f"rate-note-{task}", placeholder="why stop fast spenders")
        label = f"Review setting {field} = {value:g} for {task}"
        if not st.form_submit_button(label) or not note.strip():
            return
    rec = {k: v for k, v in a.to_dict().items() if k != "file"}
    _propose(lambda: _Pending("apply", with_values(base, task, {field: value}), expected, note,
                              "dashboard", rec))  # fmt: skip


def _history(history: list[LimitVersion], current: LimitVersion | None) -> None:
    st.markdown("**History of versions**")
    st.dataframe(
        [
            {
                "version": v.version,
                "action": v.action + (f" to v{v.based_on}" if v.based_on else ""),
                "when (UTC)": v.created_at.strftime("%Y-%m-%d %H:%M:%S"),
                "who": v.who or "",
                "note": v.note or "",
                "from a recommendation": "yes" if v.recommendation else "",
            }
            for v in history
        ],
        hide_index=True,
        width="stretch",
    )
    earlier = [v.version for v in history if current and v.version != current.version]
    if not earlier or current is None or source.live_store() is None:
        return
    with st.form("tuning-rollback"):
        target = st.selectbox("Roll back to version", earlier)
        note = st.text_input("Note", key="rollback-note", placeholder="why roll back")
        submitted = st.form_submit_button("Review the roll back")
    if submitted and note.strip():
        chosen = next(v for v in history if v.version == target)
        _propose(lambda: _Pending("rollback", chosen.policy(), current.version, note,
                                  "dashboard", None, chosen.version))  # fmt: skip


def tuning_section(
    ctx: PageContext, analyses: list[LimitAnalysis], picked: LimitAnalysis | None
) -> None:
    """The served limits, their changes and history (see the module)."""
    st.subheader("Served limits: apply, shadow, promote, roll back")
    if done := st.session_state.pop(_DONE, None):
        st.success(done)
    current, history = _read(ctx)
    live = source.live_store() is not None
    if current is None:
        st.caption("No limits version yet: agents that follow serve run under their fallback.")
    else:
        st.markdown(
            f"**Current: version {current.version}** ({current.action}, "
            f"{current.created_at:%Y-%m-%d %H:%M:%S} UTC, {md_text(current.who or '')}): "
            f"{md_text(current.note or '')}"
        )
    if not live:
        st.info("File mode: the history is shown, and only `loopwatch serve` can change limits.")
    base = current.policy() if current else LimitPolicy()
    expected = current.version if current else 0
    pending = st.session_state.get(_PENDING)
    if live and isinstance(pending, _Pending):
        _review(pending, current)
    elif live:
        _change_form(base, expected, analyses, picked)
        _shadow_panel(ctx, base, expected)
    if not isinstance(pending, _Pending):
        _spend_rate(ctx, analyses, base, expected, live)
    if history:
        _history(history, current)
