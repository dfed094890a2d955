"""The spend-rate stop recommended like every other limit (docs/queries.md, "Spend rate"): each
run's rate as the guard sees it, fit with the file's other limits under the binomial promise,
back-tested, censored where the stop ended a run, and shown in ``report``, its TOML and its JSON.
"""

from __future__ import annotations

import json
import math
import random
from datetime import datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from loopwatch.dashboard.cli import main
from loopwatch.instrumentation.runtime.budgets import BudgetAccount
from loopwatch.instrumentation.runtime.limits import LimitPolicy, LoopLimits
from loopwatch.instrumentation.runtime.usage import RunUsage
from loopwatch.queries.analysis.guarantee import Observation, fit_file
from loopwatch.queries.analysis.rates import run_rates
from loopwatch.queries.analysis.recommend import item_for
from loopwatch.queries.analysis.spend_rate import spend_rate_advice
from loopwatch.queries.store.database import Store

T0 = datetime(2026, 1, 1)


def add_runs(store: Store, runs: list[dict[str, Any]]) -> None:
    """Runs (and their model-call spans, ``calls``: [(seconds from start at the call's end, cost)])
    written as ingest writes them."""
    run_rows, span_rows = [], []
    for i, r in enumerate(runs):
        start = T0 + timedelta(seconds=10 * i)
        start_ns = int(start.timestamp() * 1e9)
        wall = r["wall_s"]
        run_rows.append((r["id"], r.get("task", "shop"), r.get("stop", "completed"),
                         r.get("outcome", "success"), r.get("limit"), r["cost"], r.get("tokens"),
                         wall, start, start_ns, start_ns + int(wall * 1e9), r.get("label"),
                         r.get("new_calls"), r.get("steps")))  # fmt: skip
        for j, (at_s, cost) in enumerate(r.get("calls", ())):
            end = start_ns + int(at_s * 1e9)
            span_rows.append((f"{i:032x}", f"{i:08x}{j:08x}", "chat m", "CLIENT", end - 1000, end,
                              "UNSET", "chat", r["id"], cost))  # fmt: skip
    store.connection.executemany(
        "INSERT INTO runs (run_id, task_type, stop_reason, outcome, limit_name, cost_usd, tokens,"
        " wall_s, started_at, start_ns, end_ns, task_success, recent_new_calls, steps)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        run_rows,
    )
    if span_rows:
        store.connection.executemany(
            "INSERT INTO spans (trace_id, span_id, name, kind, start_ns, end_ns, status_code,"
            " operation, run_id, cost_usd) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            span_rows,
        )


def test_a_runs_rate_is_the_highest_the_guard_could_see(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    add_runs(store, [
        # $0.40 over two minutes: $0.20 a minute
        {"id": "even", "cost": 0.40, "wall_s": 120.0},
        # ten seconds: the time counts as a minute, so its whole spend in one minute
        {"id": "short", "cost": 0.10, "wall_s": 10.0},
        # $1 over ten minutes on average, but $0.90 of it by 30 s: $0.90 a minute at that check
        {"id": "burst", "cost": 1.0, "wall_s": 600.0, "calls": [(30.0, 0.9), (590.0, 0.1)]},
        # spans that say less than the run's own total never lower its rate
        {"id": "spans short", "cost": 0.6, "wall_s": 180.0, "calls": [(170.0, 0.1)]},
        {"id": "free", "cost": 0.0, "wall_s": 100.0},
    ])  # fmt: skip
    rates = run_rates(store.cursor()).by_run
    got = {k: rates[k].cost_per_min for k in rates}
    assert got["even"] == pytest.approx(0.20) and got["short"] == pytest.approx(0.10)
    assert got["burst"] == pytest.approx(0.90) and got["spans short"] == pytest.approx(0.20)
    assert got["free"] is None  # no spend recorded: not measured, never cut
    store.close()


# --- the promise on heavy-tailed rates, checked against the guard itself -----------------------


def simulated_run(r: random.Random) -> list[tuple[float, float]]:
    """A successful run's model calls as (seconds at the call's end, cost): heavy-tailed call
    costs (Pareto) and call times (lognormal), a few runs front-loaded, some under a minute."""
    calls, t = [], 0.0
    for i in range(1 + int(r.expovariate(0.35))):
        t += r.lognormvariate(1.5, 1.0)
        cost = 0.002 * r.paretovariate(1.4) * (6 if i == 0 and r.random() < 0.2 else 1)
        calls.append((t, cost))
    return calls


def measured_rate(calls: list[tuple[float, float]]) -> float:
    """What the ``spend_rate`` query measures: spend so far over time so far (at least a minute)
    at the end of each call."""
    peak, spent = 0.0, 0.0
    for at, cost in calls:
        spent += cost
        peak = max(peak, spent / (max(at, 60.0) / 60.0))
    return peak


def guard_stops(calls: list[tuple[float, float]], rate: float) -> bool:
    """The real guard's spend-rate check, before each model call after the first."""
    usage = RunUsage()
    account = BudgetAccount(LoopLimits(max_cost_per_min=rate), usage)
    account.started_at = 0.0
    for (_, cost), (next_end, _) in pairwise(calls):
        usage.cost_usd += cost
        # the next call starts just before it ends
        if account.exhausted(model=True, clock=lambda at=next_end - 0.5: at) is not None:
            return True
    return False


def test_the_recommended_rate_cuts_at_most_the_target_of_new_successful_runs() -> None:
    # The rate fit together with a step limit, as a file: over many seeded fits, the share of NEW
    # successful runs the real guard would stop (rate or steps) stays under 2% at least ~95% of
    # the time, and on average well under it.
    r = random.Random(19)
    items = [item_for("steps"), item_for("cost_per_min")]
    trials, over, total = 60, 0, 0.0
    for _ in range(trials):
        runs = [simulated_run(r) for _ in range(700)]
        obs = [Observation([float(len(c)), measured_rate(c)]) for c in runs]
        fit = fit_file(items, obs, target=0.02)
        assert not fit.refused
        steps, rate = fit.values["steps"], fit.values["cost_per_min"]
        assert steps is not None and rate is not None
        fresh = [simulated_run(r) for _ in range(1500)]
        share = sum(len(c) > steps or guard_stops(c, rate) for c in fresh) / len(fresh)
        over += share > 0.02
        total += share
    mean = trials * 0.05
    assert over <= math.ceil(mean + 3.1 * math.sqrt(mean * 0.95) + 2), over
    assert total / trials < 0.02


# --- the recommendation from a store -----------------------------------------------------------


def shop_runs(n_ok: int, seed: int = 3) -> list[dict[str, Any]]:
    r = random.Random(seed)
    runs: list[dict[str, Any]] = []
    for i in range(n_ok):  # heavy-tailed spend over 1-5 minutes
        runs.append({"id": f"ok-{i}", "cost": round(0.01 * r.paretovariate(1.5), 4),
                     "wall_s": 60.0 + 240 * r.random(), "steps": 3.0})  # fmt: skip
    for i in range(12):  # runaways that did not succeed: $3 a minute
        runs.append({"id": f"burn-{i}", "cost": 3.0, "wall_s": 60.0, "stop": "max_steps",
                     "outcome": "limit", "limit": "steps", "label": False})  # fmt: skip
    # the stop ended one run that was still progressing: a censored observation of the rate
    runs.append({"id": "rate-cut", "cost": 0.5, "wall_s": 60.0, "stop": "cost_budget",
                 "outcome": "limit", "limit": "spend_rate", "new_calls": 2})  # fmt: skip
    return runs


def test_advice_states_its_promise_backtest_and_what_it_would_cut(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    add_runs(store, shop_runs(400))
    add_runs(store, [{"id": f"rare-{i}", "task": "rare", "cost": 0.1, "wall_s": 60.0}
                     for i in range(20)])  # fmt: skip
    advice = {a.task_type: a for a in spend_rate_advice(store.cursor(), {"shop": [], "rare": []})}
    shop = advice["shop"]
    assert shop.field == "max_cost_per_min" and shop.recommended is not None
    assert shop.current is None and not shop.in_file and shop.rate_stops == 1
    assert (
        "max_cost_per_min = $" in shop.promise
        and "cuts at most 2% of successful runs" in shop.promise
    )
    assert "; 1 of them cut by a limit)" in shop.promise  # the censored run
    assert shop.file is not None and "cost_per_min" in shop.file["items"]
    assert shop.observed_cut_share is not None and shop.observed_cut_share <= 0.02
    assert shop.backtest_runs > 0 and shop.backtest_cut_share is not None
    assert "fit on the older half, it cuts" in shop.promise
    # the burners and the run it cut: every run that did not succeed spent faster
    assert shop.failed_faster == 13 and shop.failed_runs == 13
    rare = advice["rare"]
    assert rare.recommended is None and rare.runs_needed == 149
    assert "too few to promise" in rare.promise
    store.close()


def report(args: list[str], capsys: Any) -> str:
    assert main(["report", *args]) == 0
    return str(capsys.readouterr().out)


def test_report_shows_it_and_the_toml_keeps_it_off_unless_asked(
    tmp_path: Path, capsys: Any
) -> None:
    path = tmp_path / "s.duckdb"
    store = Store(path)
    add_runs(store, shop_runs(400))
    store.close()
    text = report(["--db", str(path)], capsys)
    block = text[text.index("Spend-rate stop") :]
    assert "max_cost_per_min" in block and "cuts at most 2% of successful runs" in block
    assert "Off now: `report --spend-rate`" in block
    data = json.loads(report(["--db", str(path), "--format", "json"], capsys))
    (shop,) = data["task_types"]
    assert "cost_per_min" not in shop["file"]["items"]  # the report's file does not hold it
    assert shop["spend_rate"]["in_file"] is False
    off = report(["--db", str(path), "--format", "toml"], capsys)
    assert "# max_cost_per_min stays off; recommended if turned on" in off
    assert LimitPolicy.from_toml(off).for_task("shop").max_cost_per_min is None

    asked = json.loads(report(["--db", str(path), "--format", "json", "--spend-rate"], capsys))
    (shop,) = asked["task_types"]
    assert "cost_per_min" in shop["file"]["items"] and shop["spend_rate"]["in_file"]
    value = shop["file"]["values"]["cost_per_min"]
    assert shop["spend_rate"]["recommended"] == value
    on = report(["--db", str(path), "--format", "toml", "--spend-rate"], capsys)
    assert LimitPolicy.from_toml(on).for_task("shop").max_cost_per_min == pytest.approx(value)
    assert "max_cost_per_min stays off" not in on


def test_a_rate_serve_has_on_is_in_the_file_and_an_export_never_turns_it_off(
    tmp_path: Path, capsys: Any
) -> None:
    from loopwatch.queries.store.limit_versions import append_version

    path = tmp_path / "s.duckdb"
    store = Store(path)
    add_runs(store, shop_runs(400))
    add_runs(store, [{"id": f"free-{i}", "task": "free", "cost": 0.0, "wall_s": 60.0}
                     for i in range(400)])  # fmt: skip
    served = LimitPolicy.from_toml(
        "[task_types.shop]\nmax_cost_per_min = 0.5\n[task_types.free]\nmax_cost_per_min = 0.7\n"
    )
    append_version(store, served, expected=0, action="apply", note="on")
    store.close()
    data = json.loads(report(["--db", str(path), "--format", "json"], capsys))
    entries = {e["task_type"]: e for e in data["task_types"]}
    shop = entries["shop"]
    assert shop["spend_rate"]["in_file"] and shop["spend_rate"]["current"] == 0.5
    assert "cost_per_min" in shop["file"]["items"]  # judged with the file's other limits
    # "free" records no spend: nothing to fit, the served value is kept as it is
    assert entries["free"]["spend_rate"]["recommended"] is None
    assert entries["free"]["spend_rate"]["current"] == 0.7
    policy = LimitPolicy.from_toml(report(["--db", str(path), "--format", "toml"], capsys))
    recommended = shop["spend_rate"]["recommended"]
    assert policy.for_task("shop").max_cost_per_min == pytest.approx(recommended)
    assert policy.for_task("free").max_cost_per_min == 0.7
