"""The demo's simulated fleet: agents with fake models and real everything else.

Each agent runs the reference loop (:func:`loopwatch.instrumentation.run`, so the real
``LoopGuard``) against scripted models and real tools, and its telemetry goes through the real
instrumentation (:func:`loopwatch.instrumentation.instrument`): over OTLP/HTTP to ``loopwatch
serve`` in live mode, or into a store file in file mode. Only the model is fake.

The fleet (:data:`TASK_TYPES`) is built so that each verdict of the limit analysis shows up:

================== ============================================================ ==================
task type          how its runs behave                                          what the demo shows
================== ============================================================ ==================
``support_ticket`` 3–8 steps under ``max_steps=12``; looks orders up with        ``ok``; the
                   ``lookup_order``, the tool that has the outage               repeated_error alert
``refund_request`` 2–6 steps; ``max_steps`` raised from 10 to 12 at 30% of         ``ok``; a limit
                   the run (a limit change the charts mark); uses ``lookup_order`` change
``code_review``    needs 4–12 steps of new reads under ``max_steps=8``          ``too_tight``
``summarize_doc``  needs 2–5 steps under ``max_steps=40`` and 200k tokens; a    ``too_loose``
                   few runs repeat a fetch and are stopped as stuck
``deploy_watch``   polls a deploy status (repeat-exempt, idle detector off);    ``stuck_not_tight``
                   40% of runs poll until ``max_steps=12``
================== ============================================================ ==================

The outage: from :attr:`FleetPlan.outage_start` to :attr:`FleetPlan.outage_end` (50% to 75% of
the run by default) ``lookup_order`` fails with ``UPSTREAM_UNAVAILABLE`` (HTTP 503, retried once);
runs that look up three orders stop with ``repeated_error``, so its share rises until the
``LoopwatchRepeatedErrorRateRising`` alert fires, then falls back when the tool recovers.

Deterministic: an agent's runs (task type, need, scripted responses, outage) are drawn from
``seed`` and the agent's index, and the outage follows the run's index in the agent's plan,
not the wall clock; only timestamps differ between two runs with the same seed.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from loopwatch.instrumentation.runtime.limits import LimitPolicy, LoopLimits
from loopwatch.instrumentation.runtime.loop import run
from loopwatch.instrumentation.runtime.types import Message, ModelResponse, RunResult, Usage
from loopwatch.instrumentation.testing import FakeModel, text_response, tool_call, tool_response

from .tools import OUTAGE_CODE, OUTAGE_TOOL, DemoTools

__all__ = [
    "AGENT_NAME",
    "FEEDBACK_SHARE",
    "LIMIT_CHANGE_AT",
    "OUTAGE_CODE",
    "OUTAGE_TOOL",
    "SERVICE_NAME",
    "SPEND_SPIKE",
    "SPEND_TASK",
    "TASK_TYPES",
    "FleetPlan",
    "TaskProfile",
    "run_agent",
    "run_fleet_in_process",
]

SERVICE_NAME = "loopwatch-demo"
AGENT_NAME = "demo-agent"
LIMIT_CHANGE_AT = 0.3
"""Share of the plan after which ``refund_request`` runs under its raised ``max_steps``."""
SPEND_TASK = "support_ticket"
SPEND_SPIKE = (0.80, 0.95)
"""Share of the plan during which ``SPEND_TASK``'s model calls cost five times as much (the
spend alert's story, dashboard/demo/story.py)."""
FEEDBACK_SHARE = 0.3
"""Share of runs an agent following serve labels with task-success feedback."""

# $3 per million input tokens, $15 per million output tokens: a mid-size hosted model.
_USD_IN = 3e-6
_USD_OUT = 15e-6


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskProfile:
    """One task type of the fleet: its limits, its share of the traffic, what its runs need."""

    name: str
    weight: float
    limits: LoopLimits
    later_limits: LoopLimits | None = None
    """Limits after :data:`LIMIT_CHANGE_AT` of the plan (a limit change), or ``None``."""
    expected: str
    """The verdict of ``max_steps`` the analysis should reach (what the tests check)."""


TASK_TYPES: tuple[TaskProfile, ...] = (
    TaskProfile(
        name="support_ticket",
        weight=0.30,
        limits=LoopLimits(max_steps=12, max_tokens=16_000),
        expected="ok",
    ),
    TaskProfile(
        name="refund_request",
        weight=0.15,
        limits=LoopLimits(max_steps=10, max_tokens=12_000),
        later_limits=LoopLimits(max_steps=12, max_tokens=12_000),
        expected="ok",
    ),
    TaskProfile(
        name="code_review",
        weight=0.20,
        limits=LoopLimits(max_steps=8),
        expected="too_tight",
    ),
    TaskProfile(
        name="summarize_doc",
        weight=0.15,
        limits=LoopLimits(max_steps=40, max_tokens=200_000),
        expected="too_loose",
    ),
    TaskProfile(
        name="deploy_watch",
        weight=0.20,
        limits=LoopLimits(max_steps=12, max_idle_turns=None),
        expected="stuck_not_tight",
    ),
)


@dataclass(frozen=True, kw_only=True, slots=True)
class FleetPlan:
    """What the fleet does: how long, how fast, how many agents, when the outage is."""

    seed: int = 0
    duration_s: float = 300.0
    """How long the fleet runs (the outage is placed inside it)."""
    rate: float = 12.0
    """Runs started per second, all agents together."""
    agents: int = 3
    """Agents (processes in live mode, threads in file mode) sharing the rate."""
    outage_from: float = 0.5
    """Share of the plan at which ``lookup_order`` starts failing ..."""
    outage_to: float = 0.75
    """... and at which it recovers."""
    latency_s: tuple[float, float] = (0.002, 0.010)
    """A fake model call sleeps this long (uniform), so runs take real time."""

    def __post_init__(self) -> None:
        if not self.duration_s > 0:
            raise ValueError(f"duration must be positive, got {self.duration_s!r}")
        if not self.rate > 0:
            raise ValueError(f"rate must be positive, got {self.rate!r}")
        if self.agents < 1:
            raise ValueError(f"agents must be at least 1, got {self.agents!r}")
        if not 0 <= self.outage_from < self.outage_to <= 1:
            raise ValueError("outage_from and outage_to must satisfy 0 <= from < to <= 1")

    @property
    def runs_per_agent(self) -> int:
        return max(1, math.ceil(self.duration_s * self.rate / self.agents))

    @property
    def outage_start(self) -> float:
        """Seconds after the start at which the outage begins."""
        return self.duration_s * self.outage_from

    @property
    def outage_end(self) -> float:
        """Seconds after the start at which the tool recovers."""
        return self.duration_s * self.outage_to


# --- the model -----------------------------------------------------------------------------------
class _PacedModel:
    """A scripted model whose calls take real (short) time, so runs have a real duration."""

    def __init__(self, script: Sequence[ModelResponse], latency_s: float, name: str) -> None:
        self._inner = FakeModel(script, then=text_response("Done."))
        self._latency_s = latency_s
        self.model = name

    def complete(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
    ) -> ModelResponse:
        time.sleep(self._latency_s)
        return self._inner.complete(messages, tools)


def _usage(rng: random.Random, price: float = 1.0) -> Usage:
    i, o = rng.randint(600, 900), rng.randint(150, 300)
    return Usage(i, o, round((i * _USD_IN + o * _USD_OUT) * price, 6))


def _script(
    profile: str, rng: random.Random, serial: str, price: float = 1.0
) -> list[ModelResponse]:
    """The model's responses for one run of ``profile`` (the run's need, drawn from ``rng``)."""
    out: list[ModelResponse] = []

    def call(name: str, **args: Any) -> None:
        out.append(tool_response(tool_call(name, **args), usage=_usage(rng, price)))

    def answer(text: str) -> None:
        out.append(text_response(text, usage=_usage(rng, price)))

    if profile == "support_ticket":
        # one run in fifty needs 14 steps and hits max_steps: a healthy, low hit rate
        need = 14 if rng.random() < 0.02 else rng.randint(3, 8)
        for s in range(1, need):
            if s % 2:
                call("lookup_order", order_id=f"A-{rng.randint(1000, 99999)}")
            else:
                call("search_kb", query=f"ticket {serial} step {s}")
        answer(f"Ticket {serial}: resolved.")
    elif profile == "refund_request":
        need = rng.randint(2, 6)
        for s in range(1, need):
            if s == 1:
                call("lookup_order", order_id=f"R-{rng.randint(1000, 99999)}")
            else:
                call("check_policy", rule=f"refund-{serial}-{s}")
        answer(f"Refund {serial}: approved.")
    elif profile == "code_review":
        need = rng.randint(4, 12)
        for s in range(1, need):
            call("read_file", path=f"src/module_{serial}/part_{s}.py")
        answer(f"Review {serial}: 2 comments.")
    elif profile == "summarize_doc":
        if rng.random() < 0.03:
            # fetches the same page again and again: repeated_tool_call stops it
            page = f"https://docs.example.com/{serial}"
            for _ in range(6):
                call("fetch_page", url=page)
        else:
            need = rng.randint(2, 5)
            for s in range(1, need):
                call("fetch_page", url=f"https://docs.example.com/{serial}/{s}")
            answer(f"Summary of document {serial}.")
    elif profile == "deploy_watch":
        deploy = f"d-{serial}"
        if rng.random() < 0.4:
            # the deploy never finishes: polls until max_steps, learning nothing
            for _ in range(14):
                call("check_status", deploy_id=deploy)
        else:
            for _ in range(rng.randint(1, 6)):
                call("check_status", deploy_id=deploy)
            answer(f"Deploy {deploy} is live.")
    else:
        raise ValueError(f"unknown task type {profile!r}")
    return out


# --- one agent -----------------------------------------------------------------------------------
def _pick(rng: random.Random) -> TaskProfile:
    x = rng.random() * sum(p.weight for p in TASK_TYPES)
    for p in TASK_TYPES:
        x -= p.weight
        if x < 0:
            return p
    return TASK_TYPES[-1]


def run_agent(
    plan: FleetPlan,
    index: int,
    *,
    stop: threading.Event | None = None,
    start: float | None = None,
    on_run: Callable[[RunResult], None] | None = None,
    policy: LimitPolicy | None = None,
) -> int:
    """Run agent ``index``'s share of the plan, paced on the wall clock from ``start`` (default
    now); returns the runs it made. Telemetry goes wherever the process was instrumented.
    ``stop`` ends it early (between runs); ``policy``: limits to follow (serve's) instead of
    the task types' own."""
    rng = random.Random(plan.seed * 1_000_003 + index)
    tools = DemoTools(random.Random(rng.random()))
    registry = tools.registry()
    n = plan.runs_per_agent
    interval = plan.agents / plan.rate
    t0 = time.monotonic() if start is None else start
    # agents start staggered so their runs interleave
    offset = interval * index / plan.agents
    done = 0
    for k in range(n):
        due = t0 + offset + k * interval
        wait = due - time.monotonic()
        if wait > 0 and (stop.wait(wait) if stop is not None else _sleep(wait)):
            break
        if stop is not None and stop.is_set():
            break
        share = k / n
        tools.outage = plan.outage_from <= share < plan.outage_to
        profile = _pick(rng)
        served = policy.current() if policy is not None else None  # one snapshot per run
        limits = served.for_task(profile.name) if served is not None else profile.limits
        shadow = served.shadow_for(profile.name) if served is not None else None
        if profile.later_limits is not None and share >= LIMIT_CHANGE_AT:
            limits = profile.later_limits
        serial = f"{index}-{k}"
        spike = profile.name == SPEND_TASK and SPEND_SPIKE[0] <= share < SPEND_SPIKE[1]
        script = _script(profile.name, rng, serial, 5.0 if spike else 1.0)
        model = _PacedModel(script, rng.uniform(*plan.latency_s), "demo-model-1")
        result = run(
            model,
            registry,
            f"{profile.name.replace('_', ' ')} #{serial}",
            limits=limits,
            task_type=profile.name,
            raise_on_stop=False,
            agent_name=AGENT_NAME,
            shadow=shadow,
        )
        done += 1
        if on_run is not None:
            on_run(result)
    return done


def _sleep(seconds: float) -> bool:
    time.sleep(seconds)
    return False


@dataclass(kw_only=True)
class _Counter:
    runs: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, _result: RunResult) -> None:
        with self.lock:
            self.runs += 1


def run_fleet_in_process(plan: FleetPlan, *, stop: threading.Event | None = None) -> int:
    """File mode: every agent as a thread of this process (which must be instrumented already,
    e.g. ``instrument(store=path)``). Returns the runs made."""
    stop = stop or threading.Event()
    counter = _Counter()
    start = time.monotonic()
    threads = [
        threading.Thread(
            target=run_agent,
            args=(plan, i),
            kwargs={"stop": stop, "start": start, "on_run": counter},
            name=f"loopwatch-demo-agent-{i}",
            daemon=True,
        )
        for i in range(plan.agents)
    ]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.2)
    except KeyboardInterrupt:
        stop.set()
        for t in threads:
            t.join()
        raise
    return counter.runs
