"""The promise of a recommended limits file (docs/queries.md, "What a recommendation promises"):
with 95% confidence it cuts at most the target share of NEW successful runs.

Property tests draw successful runs from known distributions — integer step counts, lognormal
and Pareto (heavy-tailed) tokens and cost, several budgets independent or moving together, runs
censored by a limit — fit a file on them, and measure the share of fresh runs it cuts. Over many
seeded fits the share stays under the target at least ~95% of the time (a binomial allowance for
the finite number of trials), and on average well under it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from loopwatch.queries.analysis.guarantee import (
    FileFit,
    Item,
    Observation,
    allowed_cuts,
    fit_file,
    fit_one,
    runs_needed,
)

Draw = Callable[[random.Random], list[float]]


def steps(r: random.Random) -> list[float]:
    return [float(min(60, 1 + int(r.expovariate(0.3))))]


def lognormal_tokens(r: random.Random) -> list[float]:
    return [round(r.lognormvariate(8, 1.2))]


def pareto_cost(r: random.Random) -> list[float]:
    return [round(0.01 * r.paretovariate(1.3), 6)]


def together(r: random.Random) -> list[float]:
    # steps, tool calls and tokens move together (one need drives them), tokens heavy-tailed
    need = 1 + int(r.expovariate(0.25))
    return [float(need), float(max(0, need - 1)), round(need * 900 * r.paretovariate(2.5))]


def independent(r: random.Random) -> list[float]:
    # three unrelated usages: the union of their cuts is as large as it can be
    return [
        float(1 + int(r.expovariate(0.3))),
        round(r.lognormvariate(7, 1.5)),
        round(r.paretovariate(1.2), 3),
    ]


DISTRIBUTIONS: dict[str, Draw] = {
    "integer steps": steps,
    "lognormal tokens": lognormal_tokens,
    "pareto cost": pareto_cost,
    "three budgets together": together,
    "three independent budgets": independent,
}


def items_for(k: int) -> list[Item]:
    return [Item(f"b{i}", resolution=1e-6) for i in range(k)]


def new_share(fit: FileFit, items: list[Item], draw: Draw, r: random.Random, n: int) -> float:
    values = [fit.values[it.name] for it in items]
    cut = 0
    for _ in range(n):
        usage = draw(r)
        cut += any(v is not None and x > v for x, v in zip(usage, values, strict=True))
    return cut / n


def coverage(draw: Draw, n: int, target: float, trials: int, seed_: int) -> tuple[int, int, float]:
    """(fits whose share of new runs exceeded the target, fits made, mean share)."""
    r = random.Random(seed_)
    k = len(draw(r))
    items = items_for(k)
    over = made = 0
    total = 0.0
    for _ in range(trials):
        runs = [Observation(draw(r)) for _ in range(n)]
        fit = fit_file(items, runs, target=target)
        assert not fit.refused
        share = new_share(fit, items, draw, r, 4000)
        made += 1
        total += share
        over += share > target
    return over, made, total / made


def allowance(trials: int, rate: float = 0.05) -> int:
    # the most fits out of `trials` that may exceed the target when each does with `rate`,
    # with one chance in a thousand of a false alarm (plus a share of noise from the 4,000 draws)
    mean = trials * rate
    return math.ceil(mean + 3.1 * math.sqrt(mean * (1 - rate)) + 2)


@pytest.mark.parametrize("name", sorted(DISTRIBUTIONS))
def test_the_share_of_new_runs_cut_stays_under_the_target(name: str) -> None:
    over, made, mean = coverage(DISTRIBUTIONS[name], n=800, target=0.02, trials=120, seed_=17)
    assert over <= allowance(made), (name, over, made, mean)
    assert mean < 0.02, (name, mean)


@seed(20261201)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    target=st.sampled_from([0.01, 0.02, 0.05, 0.1]),
    n=st.integers(min_value=40, max_value=1500),
    k=st.integers(min_value=1, max_value=6),
    s=st.integers(min_value=0, max_value=10**6),
)
def test_a_file_keeps_its_promise_or_names_the_runs_needed(
    target: float, n: int, k: int, s: int
) -> None:
    r = random.Random(s)
    runs = [Observation([r.lognormvariate(0, 1 + i) for i in range(k)]) for _ in range(n)]
    items = items_for(k)
    fit = fit_file(items, runs, target=target)
    needed = runs_needed(target, 0.95, k)
    if n < needed:
        assert fit.refused and fit.needed == needed
        return
    assert not fit.refused and fit.items
    m = allowed_cuts(n, target)
    assert m is not None
    # the runs it cuts, plus one for each further limit, stay within the binomial allowance
    assert math.ceil(fit.cut) + (k - 1) <= m
    for item in fit.items:
        assert item.cut <= fit.cut + 1e-9


def test_one_limit_is_the_order_statistic_of_the_binomial_bound() -> None:
    # 369 runs at 2%: at most 2 of them may lie above the value (P(Bin(369, 0.02) <= 2) < 0.05)
    assert allowed_cuts(369, 0.02) == 2
    runs = [Observation([float(i)]) for i in range(1, 370)]
    fit = fit_file([Item("steps")], runs)
    assert fit.values["steps"] == 367.0 and fit.items[0].cut == 2
    # too few runs: how many are needed instead of a number
    few = fit_file([Item("steps")], runs[:24])
    assert few.refused and few.needed == runs_needed(0.02) == 149 and not few.values


def test_censored_runs_count_by_how_far_successful_runs_went_past_them() -> None:
    # 300 runs that finished at 1..300 steps and 10 that a limit of 100 stopped while progressing
    exact = [Observation([float(i)]) for i in range(1, 301)]
    cut = [Observation([100.0], censored_item=0) for _ in range(10)]
    fit = fit_file([Item("steps")], exact + cut, target=0.05)
    assert not fit.refused and not fit.lower_bound
    value = fit.values["steps"]
    assert value is not None and value > 100
    # Kaplan–Meier: a cut run goes past v as often as the finished runs past 100 went past v
    past_100 = sum(1 for o in exact if o.usage[0] is not None and o.usage[0] > 100)
    beyond = sum(1 for o in exact if o.usage[0] is not None and o.usage[0] > value)
    assert fit.cut == pytest.approx(beyond + 10 * beyond / past_100)
    # when no finished run went past the cut, the data cannot tell: no value, a lower bound
    short = [Observation([float(i % 50 + 1)]) for i in range(300)]
    stuck = fit_file([Item("steps")], short + cut, target=0.02)
    assert stuck.refused and stuck.lower_bound


def test_censored_runs_keep_the_promise_under_independent_censoring() -> None:
    # need ~ lognormal; live runs under a limit of L are cut at L when their need exceeds it
    r = random.Random(5)
    over = 0
    trials = 80
    for _ in range(trials):
        runs = []
        for i in range(1200):
            need = r.lognormvariate(3, 0.8)
            limit = 120.0 if i % 2 else 1e9  # half the runs ran under a limit of 120
            runs.append(
                Observation([need]) if need <= limit else Observation([limit], censored_item=0)
            )
        fit = fit_file([Item("tokens", resolution=1e-6)], runs, target=0.02)
        assert not fit.refused
        v = fit.values["tokens"]
        assert v is not None
        over += sum(r.lognormvariate(3, 0.8) > v for _ in range(4000)) / 4000 > 0.02
    assert over <= allowance(trials)


@seed(7)
@settings(max_examples=30, deadline=None)
@given(
    values=st.lists(st.integers(min_value=1, max_value=40), min_size=0, max_size=600),
    target=st.sampled_from([0.02, 0.05, 0.1]),
)
def test_one_limit_without_censoring_is_the_file_fit(values: list[int], target: float) -> None:
    usage = [float(v) for v in values]
    one = fit_one(Item("steps"), usage, target=target)
    fit = fit_file([Item("steps")], [Observation([x]) for x in usage], target=target)
    assert (one.values, one.needed, one.cut) == (fit.values, fit.needed, fit.cut)
