"""The ground-truth fleet of :mod:`loopwatch.queries.ingest.synthetic`, run through the real loop.

:func:`run_reference_fleet` drives the reference loop and its guard with scripted models on a
fake clock and returns the same kind of :class:`~.synthetic.FleetTruth` that
:func:`~.synthetic.generate_fleet` does (docs/queries.md).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from loopwatch.instrumentation.runtime.reasons import LIMIT_OF
from loopwatch.instrumentation.runtime.semconv import BUDGETS

from .synthetic import (
    DETECTOR_PEAKS,
    HEALTHY,
    KINDS,
    LOOPING,
    LOOSE,
    SPARSE,
    TIGHT,
    USD_PER_TOKEN,
    FleetTruth,
    TaskTypeTruth,
    budget_truths,
)

__all__ = ["reference_fleet_limits", "run_reference_fleet"]


def reference_fleet_limits() -> dict[str, Any]:
    """The ``LoopLimits`` of each kind for :func:`run_reference_fleet`."""
    from loopwatch.instrumentation.runtime.limits import LoopLimits

    return {
        TIGHT: LoopLimits(max_steps=10),
        LOOSE: LoopLimits(max_steps=40, max_tokens=200_000),
        LOOPING: LoopLimits(max_steps=12, max_idle_turns=None),
        HEALTHY: LoopLimits(max_steps=12, max_tokens=12_000, max_wall_s=30),
        SPARSE: LoopLimits(max_steps=10),
    }


def run_reference_fleet(
    *,
    runs_per_type: int = 120,
    sparse_runs: int = 12,
    seed: int = 0,
    kinds: Iterable[str] = KINDS,
    margin: float = 0.25,
    min_runs: int = 30,
) -> FleetTruth:
    """Run the ground-truth fleet through the reference loop (:func:`loopwatch.instrumentation.
    loop.run`) and its real guard, with scripted models on a fake clock, and return the truth.

    Telemetry goes wherever the caller wired it (``instrument(store=...)``). Kinds behave as in
    :func:`generate_fleet`: ``tight`` runs need 4–13 steps of new calls under ``max_steps=10``;
    ``loose`` ones 2–6 under 40 steps and 200k tokens; ``looping`` ones loop on a polling tool
    (repeat-exempt, idle detector off) until ``max_steps=12`` 40% of the time; ``healthy`` ones
    need 2–7 steps, with 2% needing 14; ``sparse`` has a dozen runs.
    """
    from loopwatch.instrumentation.runtime.limits import LoopLimits
    from loopwatch.instrumentation.runtime.loop import run
    from loopwatch.instrumentation.runtime.tools import ToolRegistry
    from loopwatch.instrumentation.testing import FakeClock, FakeModel

    def lookup(q: str) -> str:
        """Look something up."""
        return f"result for {q}"

    def poll(job: str) -> str:
        """Ask whether a job is done."""
        return "pending"

    registry = ToolRegistry(breaker=None)
    registry.register(lookup)
    registry.register(poll, repeat_exempt=True)
    limits: dict[str, LoopLimits] = reference_fleet_limits()
    rng = random.Random(seed)
    truths: dict[str, TaskTypeTruth] = {}
    total = 0
    for kind in kinds:
        n = sparse_runs if kind == SPARSE else runs_per_type
        lim = limits[kind]
        results = []
        for i in range(n):
            need, looping = _reference_need(rng, kind, i, n)
            script = _reference_script(rng, kind, i, need, looping)
            clock = FakeClock()
            latency = rng.uniform(1.5, 2.4)
            model = FakeModel(script, clock=clock, latency_s=latency)
            result = run(
                model,
                registry,
                f"task {i}",
                limits=lim,
                task_type=kind,
                clock=clock,
                raise_on_stop=False,
                agent_name="reference",
            )
            results.append((result, looping))
        total += n
        lim_map = {b: lim.limit_of(b) for b in BUDGETS}
        ok = [r for r, _ in results if r.outcome.value == "success"]
        rows = _truth_rows(kind, results)
        budgets = budget_truths(kind, kind, rows, lim_map)
        results_only = [r for r, _ in results]
        hits = sum(1 for r in results_only if r.outcome.value == "limit")
        truths[kind] = TaskTypeTruth(kind, kind, n, len(ok), hits, lim_map, budgets)
    now = datetime.now(UTC).replace(tzinfo=None)
    return FleetTruth(truths, now, now, total, 0, margin, min_runs)


def _reference_script(rng: random.Random, kind: str, i: int, need: int, looping: bool) -> list[Any]:
    """Run ``i``'s scripted model responses: ``need`` steps of new lookups ending in an answer,
    or polls of one job that never end."""
    from loopwatch.instrumentation.runtime.types import ModelResponse, ToolCall, Usage
    from loopwatch.instrumentation.testing import text_response, tool_response

    script: list[ModelResponse] = []
    for step in range(1, need + 1):
        usage = Usage(rng.randint(600, 900), rng.randint(200, 300))
        usage = Usage(usage.input_tokens, usage.output_tokens, usage.total_tokens * USD_PER_TOKEN)
        if step == need and not looping:
            script.append(text_response(f"answer {i}", usage=usage))
        elif looping:
            script.append(tool_response(ToolCall(f"p{step}", "poll", {"job": "j1"}), usage=usage))
        else:
            call = ToolCall(f"c{step}", "lookup", {"q": f"{kind}-{i}-{step}"})
            script.append(tool_response(call, usage=usage))
    return script


def _truth_rows(kind: str, results: list[tuple[Any, bool]]) -> list[dict[str, Any]]:
    """The usage rows the truth is computed from: successful runs, and runs a limit cut that
    were not looping (censored: they needed more)."""
    rows = []
    for r, looping in results:
        censored = r.outcome.value == "limit" and not looping
        if r.outcome.value != "success" and not censored:
            continue
        row: dict[str, Any] = {"task_type": kind, "censored": censored}
        row["hit"] = LIMIT_OF.get(r.stop_reason) if censored else None
        for b in BUDGETS:
            v = r.counters.get(b)
            row[b] = None if not v and b in ("tokens", "cost_usd", "wall_s") else v
        rows.append(row | {f"peak_{d}": None for d in DETECTOR_PEAKS})
    return rows


def _reference_need(rng: random.Random, kind: str, i: int, n: int) -> tuple[int, bool]:
    """(steps the run needs, whether it loops instead) for run ``i`` of ``n``."""
    if kind == TIGHT:
        return rng.randint(4, 13), False
    if kind == LOOSE:
        return rng.randint(2, 6), False
    if kind == LOOPING:
        return (12, True) if rng.random() < 0.4 else (rng.randint(2, 7), False)
    if kind == HEALTHY:
        return (14, False) if i % 50 == 0 else (rng.randint(2, 7), False)
    return rng.randint(3, 12), False
