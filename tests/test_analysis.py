"""Limit analysis: verdicts and recommendations against known ground truth, what-if by hand."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

import duckdb
import pytest
from loopwatch.instrumentation.runtime.limits import LimitPolicy
from loopwatch.queries.analysis.guarantee import FileFit, ItemFit, runs_needed
from loopwatch.queries.analysis.recommend import TaskFit
from loopwatch.queries.analysis.recommendations import (
    BUDGET_FIELDS,
    AnalysisThresholds,
    DetectorReplay,
    analyze_limits,
    default_candidates,
    judge,
    replay_detectors,
    round_up,
    what_if,
)
from loopwatch.queries.analysis.toml_export import limits_toml, toml_key
from loopwatch.queries.ingest.synthetic import (
    SyntheticRun,
    SyntheticSpan,
    connect_store,
    generate_fleet,
    percentile,
    write_runs,
    write_spans,
)

END = datetime(2026, 11, 1, 12, 0)


def _con() -> Any:
    con = duckdb.connect()
    connect_store(con)
    return con


def _run(rid: str, reason: str = "completed", *, task_type: str = "t", **kw: Any) -> SyntheticRun:
    kw.setdefault("started_at", END - timedelta(minutes=1))
    return SyntheticRun(run_id=rid, task_type=task_type, stop_reason=reason, **kw)


# --- ground truth --------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 7])
def test_every_verdict_and_recommendation_matches_the_ground_truth(seed: int) -> None:
    con = _con()
    truth = generate_fleet(con, seed=seed, end=END)
    analyses = analyze_limits(con, include_off=True)
    assert {a.task_type for a in analyses} == set(truth.task_types)
    seen = 0
    for a in analyses:
        expected = truth.task_types[a.task_type].budgets[a.budget]
        assert a.verdict == expected.verdict, (a.task_type, a.budget, a.sentence)
        assert a.recommended == expected.recommended, (a.task_type, a.budget)
        assert a.current_limit == expected.current_limit
        assert a.field == BUDGET_FIELDS[a.budget]
        seen += a.verdict is not None
    assert seen == 8  # tight 1, loose 2, looping 1, healthy 3, sparse 1
    by = {(a.task_type, a.budget): a for a in analyses}
    tight = by[("tight", "steps")]
    assert tight.proposed is not None and tight.proposed >= round_up(10 * 1.25, 1)
    assert tight.evidence.progressing_share == 1.0 and tight.evidence.hit_rate is not None
    assert tight.evidence.hit_rate > 0.05
    looping = by[("looping", "steps")]
    assert looping.evidence.progressing_share == 0.0 and looping.proposed == 12
    loose = by[("loose", "tokens")]
    assert loose.proposed == loose.recommended and loose.evidence.hits == 0
    assert by[("sparse", "steps")].proposed == 10
    assert by[("tight", "tokens")].verdict is None  # off: recommendation only
    assert (
        by[("tight", "tokens")].recommended
        == truth.task_types["tight"].budgets["tokens"].recommended
    )


def test_sentences_carry_the_evidence() -> None:
    con = _con()
    generate_fleet(con, seed=0, end=END)
    by = {(a.task_type, a.budget): a for a in analyze_limits(con)}
    tight = by[("tight", "steps")]
    pct = f"{tight.evidence.hit_rate * 100:.1f}%"  # type: ignore[operator]
    assert tight.sentence.startswith(
        f"max_steps=10 stopped {pct} of runs and 100.0% of those were still"
    )
    assert f"raise it to {tight.proposed:.0f};" in tight.sentence
    # runs cut at 10 while progressing went further than any successful run: a floor, not a fit
    assert tight.recommended is None and tight.lower_bound
    assert "the data cannot tell how far they needed to go" in tight.promise
    assert "looping" in by[("looping", "steps")].sentence
    loose = by[("loose", "steps")]
    assert f"lower it to {loose.recommended:.0f} to cap runaway spend: " in loose.sentence
    assert loose.promise.startswith(f"max_steps = {loose.recommended:.0f}: cuts at most 2% of")
    assert "95.0% confidence" in loose.promise and "by the whole file" in loose.promise
    assert loose.backtest_runs > 0 and loose.backtest_cut_share is not None
    assert (
        by[("sparse", "steps")].sentence
        == "Only 12 runs under max_steps=10 in the window (need 30); keep it for now."
    )
    assert by[("healthy", "steps")].sentence.startswith("max_steps=12 fits:")
    for a in by.values():
        assert "\n" not in a.sentence


def test_task_type_filter_and_window() -> None:
    con = _con()
    truth = generate_fleet(con, seed=0, end=END, span=timedelta(hours=10))
    only = analyze_limits(con, task_types=["loose"])
    assert {a.task_type for a in only} == {"loose"}
    # a window holding a tenth of the runs leaves too few to judge
    late = analyze_limits(con, since=END - timedelta(minutes=30), task_types=["healthy"])
    assert {a.verdict for a in late} == {"insufficient_data"}
    assert truth.task_types["healthy"].runs == 600


def test_thresholds_are_parameters() -> None:
    con = _con()
    generate_fleet(con, seed=0, end=END)
    # the sparse type is insufficient at min_runs=30; with min_runs=5 it is judged
    by = {
        (a.task_type, a.budget): a
        for a in analyze_limits(con, thresholds=AnalysisThresholds(min_runs=5))
    }
    assert by[("sparse", "steps")].verdict in ("too_tight", "stuck_not_tight")
    # a bigger cut target gives smaller recommendations; a small one refuses, naming the runs needed
    wide = {
        (a.task_type, a.budget): a
        for a in analyze_limits(con, thresholds=AnalysisThresholds(cut_target=0.2))
    }
    assert wide[("loose", "tokens")].recommended < by[("loose", "tokens")].recommended  # type: ignore[operator]
    strict = {
        (a.task_type, a.budget): a
        for a in analyze_limits(con, thresholds=AnalysisThresholds(cut_target=0.001))
    }
    assert strict[("loose", "steps")].recommended is None
    assert strict[("loose", "steps")].runs_needed == runs_needed(0.001, 0.95, 2)
    assert f"{runs_needed(0.001, 0.95, 2):,} needed" in strict[("loose", "steps")].sentence
    with pytest.raises(ValueError, match=r"AnalysisThresholds.cut_target is out of range: 0"):
        AnalysisThresholds(cut_target=0)
    with pytest.raises(ValueError, match=r"AnalysisThresholds.margin is out of range: -0.1"):
        AnalysisThresholds(margin=-0.1)
    with pytest.raises(ValueError, match=r"AnalysisThresholds\.quantile"):
        AnalysisThresholds(quantile=0)


# --- definitions, on hand-made rows --------------------------------------------------------------
def _stats(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "task_type": "t",
        "budget": "steps",
        "current_limit": 10.0,
        "runs": 100,
        "hits": 0,
        "hits_progressing": 0,
        "hits_looping": 0,
        "successes": 100,
        "success_q": 5.0,
        "success_p50": 3.0,
        "success_max": 6.0,
    }
    base.update(kw)
    return base


def _fit(budget: str, value: float | None, runs: int = 400) -> TaskFit:
    """A task type's file holding ``value`` for ``budget`` (``None``: refused for lack of runs)."""
    if value is None:
        ff = FileFit(target=0.02, confidence=0.95, runs=runs, censored=0, needed=runs_needed(0.02))
    else:
        ff = FileFit(
            target=0.02,
            confidence=0.95,
            runs=runs,
            censored=0,
            items=(ItemFit(budget, value, runs, 2),),
            cut=2,
            values={budget: value},
        )
    return TaskFit("t", (budget,), ff, None, {}, ())


@pytest.mark.parametrize(
    ("stats", "rec", "verdict", "proposed"),
    [
        (_stats(), 7.0, "ok", 10.0),  # 10 < 2 * 7
        (_stats(current_limit=14.0), 7.0, "too_loose", 7.0),  # 14 >= 2 * 7
        (_stats(current_limit=14.0, hits=1), 7.0, "ok", 14.0),  # hit rate 1% > 0.5%
        (_stats(success_q=8.0), 10.0, "too_tight", 13.0),  # p95 = 80%: at least 10 * 1.25
        (_stats(), 12.0, "too_tight", 12.0),  # the limit cuts more than the target: raise to it
        (_stats(hits=5, hits_progressing=3, hits_looping=2), 7.0, "too_tight", 13.0),  # 5%, 60%
        (_stats(hits=5, hits_progressing=2, hits_looping=3), 7.0, "stuck_not_tight", 10.0),
        (_stats(hits=4, hits_progressing=4), 7.0, "ok", 10.0),  # 4% < 5%
        (_stats(hits=50), 7.0, "insufficient_data", 10.0),  # high hit rate, no progress evidence
        (_stats(runs=29), 7.0, "insufficient_data", 10.0),
        (_stats(successes=29), None, "insufficient_data", 10.0),  # too few runs for a promise
        (_stats(current_limit=None), 7.0, None, 7.0),  # off: no verdict, the value that would fit
        (_stats(budget="cost_usd", current_limit=1.0, success_q=0.0101), 0.013, "too_loose", 0.013),
        (
            _stats(budget="tokens", current_limit=100000.0, success_q=8000.0),
            10000.0,
            "too_loose",
            10000.0,
        ),
    ],
)
def test_judge_follows_the_documented_order(
    stats: dict[str, Any], rec: float | None, verdict: str | None, proposed: float | None
) -> None:
    a = judge(stats, fit=_fit(stats["budget"], rec))
    assert (a.verdict, a.recommended, a.proposed) == (verdict, rec, proposed), a.sentence


def test_round_up_ignores_float_noise() -> None:
    assert round_up(12.000000000001, 1) == 12
    assert round_up(12.01, 1) == 13
    assert round_up(0.0101 * 1.25, 0.001) == 0.013
    assert round_up(8.0 * 1.25, 1) == 10


def test_still_making_progress_is_new_calls_and_no_repeated_error() -> None:
    con = _con()
    limits = {"limit_steps": 10.0, "steps": 10.0}
    runs = [_run(f"ok{i}", steps=3.0, limit_steps=10.0) for i in range(40)]
    runs += [
        _run("p1", "max_steps", recent_new_calls=1, max_same_error=1, **limits),  # progressing
        _run("p2", "max_steps", recent_new_calls=3, max_same_error=0, **limits),  # progressing
        _run(
            "l1", "max_steps", recent_new_calls=0, max_same_error=0, **limits
        ),  # looping: nothing new
        _run(
            "l2", "max_steps", recent_new_calls=2, max_same_error=2, **limits
        ),  # looping: repeated error
        _run("u1", "max_steps", **limits),  # no evidence: neither
    ]
    write_runs(con, runs)
    (a,) = analyze_limits(con)
    ev = a.evidence
    assert (ev.runs, ev.hits, ev.hits_progressing, ev.hits_looping) == (45, 5, 2, 2)
    assert ev.progressing_share == 0.5 and a.verdict == "too_tight"
    stricter = AnalysisThresholds(progress_min_new_calls=2)
    (b,) = analyze_limits(con, thresholds=stricter)
    assert (b.evidence.hits_progressing, b.evidence.hits_looping, b.verdict) == (
        1,
        3,
        "stuck_not_tight",
    )


def test_hit_rates_count_runs_under_the_current_limit_only() -> None:
    con = _con()
    old = [
        _run(
            f"o{i}",
            "max_steps" if i < 20 else "completed",
            steps=5.0,
            limit_steps=5.0,
            recent_new_calls=2,
            max_same_error=0,
            started_at=END - timedelta(hours=3, minutes=i),
        )
        for i in range(40)
    ]
    new = [
        _run(f"n{i}", steps=6.0, limit_steps=20.0, started_at=END - timedelta(minutes=i))
        for i in range(40)
    ]
    write_runs(con, old + new)
    (a,) = analyze_limits(con)
    assert a.current_limit == 20.0
    assert (a.evidence.runs, a.evidence.hits) == (40, 0)
    assert a.evidence.successes == 60  # successes of either limit size the recommendation
    (before,) = analyze_limits(con, until=END - timedelta(hours=1))
    assert (before.current_limit, before.evidence.hits, before.verdict) == (5.0, 20, "too_tight")


def test_failed_task_labels_are_not_successes() -> None:
    con = _con()
    runs = [_run(f"a{i}", steps=2.0, limit_steps=10.0) for i in range(30)]
    runs += [_run(f"b{i}", steps=9.0, limit_steps=10.0, task_success=False) for i in range(30)]
    write_runs(con, runs)
    (a,) = analyze_limits(con)
    assert a.evidence.successes == 30 and a.evidence.success_p95 == 2.0


# --- what-if -------------------------------------------------------------------------------------
def test_what_if_matches_a_hand_computation() -> None:
    con = _con()
    runs = [_run(f"s{i}", steps=float(s), cost_usd=0.1) for i, s in enumerate([2, 4, 6, 8])]
    runs += [
        _run("f1", "max_steps", steps=10.0, cost_usd=1.0),
        _run("f2", "repeated_error", steps=5.0, cost_usd=0.5),
        _run("other", steps=50.0, cost_usd=9.0, task_type="u"),  # another task type: ignored
    ]
    write_runs(con, runs)
    points = what_if(con, "t", "steps", [3, 5, 7, 10])
    # successful cut = share of [2, 4, 6, 8] above v
    assert [p.cut_share for p in points] == [0.75, 0.5, 0.25, 0.0]
    # saved = sum over failed runs with steps > v of cost * (1 - v / steps), of 1.5 failed spend:
    # v=3: 1.0*(1-3/10) + 0.5*(1-3/5) = 0.7 + 0.2 = 0.9; v=5: 0.5; v=7: 0.3; v=10: 0
    expected = [0.9 / 1.5, 0.5 / 1.5, 0.3 / 1.5, 0.0]
    for p, share in zip(points, expected, strict=True):
        assert p.saved_share is not None and math.isclose(p.saved_share, share, abs_tol=1e-12)
        assert p.failed_spend == pytest.approx(1.5) and p.spend_measure == "cost_usd"
    assert [p.stopped_earlier for p in points] == [2, 1, 1, 0]


def test_what_if_falls_back_to_tokens_without_cost() -> None:
    con = _con()
    write_runs(
        con, [_run("s", steps=2.0, tokens=200.0), _run("f", "max_steps", steps=4.0, tokens=400.0)]
    )
    (p,) = what_if(con, "t", "steps", [1])
    assert (
        p.spend_measure == "tokens"
        and p.saved_spend == pytest.approx(300.0)
        and p.saved_share == 0.75
    )


def test_default_candidates_span_usage_and_the_current_limit() -> None:
    con = _con()
    truth = generate_fleet(con, seed=0, end=END, kinds=["loose"])
    assert truth.task_types["loose"].limits["steps"] == 40
    cands = default_candidates(con, "loose", "steps", points=10)
    assert cands == sorted(set(cands)) and cands[0] >= 1 and cands[-1] == 50.0
    points = what_if(con, "loose", "steps", points=10)
    assert [p.candidate for p in points] == cands
    assert points[-1].cut_share == 0.0


# --- detector replay -----------------------------------------------------------------------------
def test_detector_replay_by_hand() -> None:
    con = _con()
    runs = [_run(f"s{i}", max_same_call=c, max_same_error=0) for i, c in enumerate([1, 1, 2, 3])]
    runs += [
        _run(f"f{i}", "max_steps", max_same_call=c, max_same_error=e)
        for i, (c, e) in enumerate([(4, 3), (2, 0)])
    ]
    write_runs(con, runs)
    rep = replay_detectors(
        con,
        max_threshold=4,
        thresholds=AnalysisThresholds(false_stop_target=0.3),
        from_spans=False,
    )
    calls = [
        (r.threshold, r.false_stops, r.caught, r.suggested)
        for r in rep
        if r.detector == "repeated_tool_call"
    ]
    # successes max_same_call [1, 1, 2, 3]; failures [4, 2]
    assert calls == [(2, 2, 2, False), (3, 1, 1, True), (4, 0, 1, False)]
    errors = [(r.threshold, r.false_stops, r.caught) for r in rep if r.detector == "repeated_error"]
    assert errors == [(2, 0, 1), (3, 0, 1), (4, 0, 0)]


def _tool_span(run: str, step: int, fp: str, res: str, *, error: bool = False) -> SyntheticSpan:
    t = 1_800_000_000_000_000_000 + step * 1_000_000
    return SyntheticSpan(
        trace_id=run.ljust(32, "0"),
        span_id=f"{run}{step}".ljust(16, "0"),
        name="execute_tool x",
        start_ns=t,
        end_ns=t + 1,
        operation="execute_tool",
        run_id=run,
        task_type="t",
        step=step,
        tool_name="x",
        tool_status="error" if error else "ok",
        tool_fingerprint=fp,
        result_fingerprint=res,
    )


def got_all(rep: list[DetectorReplay], detector: str, n: int) -> tuple[int, int, int, int]:
    (r,) = [r for r in rep if r.detector == detector and r.threshold == n]
    return (r.successful_runs, r.false_stops, r.failed_runs, r.caught)


def test_sequence_detectors_replayed_on_spans_by_hand() -> None:
    con = _con()
    write_runs(con, [_run("s1"), _run("s2"), _run("f1", "max_steps"), _run("s3")])
    spans = [
        _tool_span("s1", 1, "A", "r1"),
        _tool_span("s1", 2, "B", "r2"),
        _tool_span("s1", 3, "C", "r3"),
        # cd('..') twice: the same call in a row, new results each time
        _tool_span("s2", 1, "A", "r1"),
        _tool_span("s2", 2, "A", "r2"),
        _tool_span("s2", 3, "B", "x", error=True),
        # the same failing call three times: same result each time
        _tool_span("f1", 1, "A", "e", error=True),
        _tool_span("f1", 2, "A", "e", error=True),
        _tool_span("f1", 3, "A", "e", error=True),
    ]  # s3 answered without tools
    write_spans(con, spans)
    rep = replay_detectors(con, max_threshold=4)
    got = {
        (r.detector, r.threshold): (r.successful_runs, r.false_stops, r.failed_runs, r.caught)
        for r in rep
        if r.detector in ("repeated_action", "tool_failures", "no_progress")
    }
    # longest streak of one (call, result) in a row: s1 1, s2 1 (new results), s3 0 | f1 3
    assert got[("repeated_action", 2)] == (3, 0, 1, 1)
    assert got[("repeated_action", 3)] == (3, 0, 1, 1)
    assert got[("repeated_action", 4)] == (3, 0, 1, 0)
    # longest error streak: s2 1 | f1 3
    assert got[("tool_failures", 2)] == (3, 0, 1, 1)
    assert got[("tool_failures", 4)] == (3, 0, 1, 0)
    # steps with no call and no result new to the run: f1 steps 2 and 3
    assert got[("no_progress", 2)] == (3, 0, 1, 1)
    assert got[("no_progress", 3)] == (3, 0, 1, 0)
    suggested = [(r.detector, r.threshold) for r in rep if r.suggested]
    assert ("repeated_action", 2) in suggested and ("tool_failures", 2) in suggested
    # the same detector objects judged the counts: f1's one (call, result) and error, 3 times
    assert got_all(rep, "repeated_tool_call", 3) == (3, 0, 1, 1)
    assert got_all(rep, "repeated_error", 3) == (3, 0, 1, 1)
    assert got_all(rep, "repeated_error", 4) == (3, 0, 1, 0)
    # without spans only the run-level counts are replayed (none recorded here)
    assert replay_detectors(con, from_spans=False) == []


# --- TOML ----------------------------------------------------------------------------------------
def test_recommendations_toml_loads_back_through_limit_policy() -> None:
    con = _con()
    names = {
        "tight": 'support "tickets"',
        "healthy": "工单",
        "loose": "a.b",
        "looping": "line\nbreak",
    }
    generate_fleet(con, seed=0, end=END, names=names)
    analyses = analyze_limits(con, include_off=True)
    policy = LimitPolicy.from_toml(limits_toml(analyses, header="test\nexport"))
    assert set(policy.task_types) == set(names.values()) | {"sparse"}
    for a in analyses:
        got = policy.for_task(a.task_type).limit_of(a.budget)
        if a.current_limit is None:
            assert got is None
        else:
            assert got == a.proposed, (a.task_type, a.budget)
    assert policy.for_task('support "tickets"').max_steps == 13


def test_toml_keys_are_quoted_when_they_must_be() -> None:
    assert toml_key("support_ticket-2") == "support_ticket-2"
    assert toml_key("工单") == '"工单"'  # bare keys are ASCII only
    assert toml_key('a"b\\c\n\x01') == '"a\\"b\\\\c\\n\\u0001"'
    assert toml_key("") == '""'


def test_percentile_is_linear_interpolation() -> None:
    assert percentile([1, 2, 3, 4, 10], 0.95) == pytest.approx(8.8)
    assert percentile([5], 0.95) == 5
