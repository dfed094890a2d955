"""The tuning story the demo tells (docs/dashboard.md, "The demo"), through serve's API as a
user would: the fleet's limits are served (version 1) and the agent processes follow them; at
:data:`SHADOW_AT` of the plan the too-loose task type gets a shadow candidate — the analysis's
recommendation for its token budget — and at :data:`PROMOTE_AT` the candidate is promoted; the
agents pick it up within their poll interval, the hit-rate chart marks the change and its
before/after report fills. Meanwhile the agents label a share of their runs (task-success
feedback), and from :data:`SPEND_SPIKE` one task type's runs cost five times as much, so the spend
alert fires once.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, Final

from loopwatch.instrumentation.runtime.limits import LimitPolicy

from ..app.settings import ALERT_BASELINE_ENV, ALERT_MIN_RUNS_ENV, ALERT_SHORT_ENV
from .fleet import FEEDBACK_SHARE, SPEND_SPIKE, SPEND_TASK, TASK_TYPES, FleetPlan

__all__ = [
    "FEEDBACK_SHARE",
    "LOOSE_TASK",
    "PROMOTE_AT",
    "SHADOW_AT",
    "SPEND_SPIKE",
    "SPEND_TASK",
    "Story",
    "firing_task_types",
    "fleet_policy",
]

LOOSE_TASK: Final = "summarize_doc"
"""The too-loose task type that gets a shadow candidate."""
SHADOW_AT: Final = 0.35
PROMOTE_AT: Final = 0.55
_FALLBACK_TOKENS: Final = 20_000


def firing_task_types(
    endpoint: str, env: dict[str, str], query_name: str = "repeated_error_alert"
) -> list[str]:
    """Task types whose repeated_error (or spend) alert fires now, asked of serve's JSON API with
    the demo's windows (an empty list when the API cannot answer)."""
    from loopwatch.queries.analysis.gateway import parse_duration

    query = (
        f"short_window_s={parse_duration(env[ALERT_SHORT_ENV]).total_seconds():g}"
        f"&baseline_window_s={parse_duration(env[ALERT_BASELINE_ENV]).total_seconds():g}"
        f"&min_runs={env[ALERT_MIN_RUNS_ENV]}"
    )
    url = f"{endpoint}/api/v1/queries/{query_name}?{query}"
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            rows = json.loads(resp.read().decode()).get("rows", [])
    except (OSError, ValueError, urllib.error.URLError):
        return []
    return [str(r["task_type"]) for r in rows if r.get("firing")]


def fleet_policy() -> LimitPolicy:
    """The fleet's starting limits as the policy serve holds as version 1."""
    return LimitPolicy(task_types={p.name: p.limits for p in TASK_TYPES})


def _call(url: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url,
        data=data,
        headers={"Content-Type": "application/json"},
        method="POST" if data else "GET",
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        answer: dict[str, Any] = json.loads(resp.read().decode())
        return answer


class Story:
    """Drives the tuning story in a thread (see the module); ``say`` prints a line."""

    def __init__(
        self, plan: FleetPlan, endpoint: str, say: Callable[[str], None], stop: threading.Event
    ) -> None:
        self.plan, self.api, self.say, self.stop = plan, endpoint + "/api/v1", say, stop
        self.version = 0

    def serve_fleet_limits(self) -> None:
        """Version 1: the fleet's limits, before any agent starts."""
        current = self._current()
        body = {"toml": fleet_policy().to_toml(), "note": "the demo fleet's limits", "who": "demo"}
        self._write("limits", body, current)

    def run(self, start: float) -> None:
        """Shadow, then promote, at their share of the plan (from ``start``, epoch seconds)."""
        for at, step in ((SHADOW_AT, self._shadow), (PROMOTE_AT, self._promote)):
            if self.stop.wait(max(0.0, start + at * self.plan.duration_s - time.time())):
                return
            try:
                step(time.time() - start)
            except (OSError, ValueError, KeyError) as exc:  # the demo goes on without it
                self.say(f"loopwatch demo: tuning step failed: {exc}")

    def _current(self) -> int:
        try:
            return int(_call(f"{self.api}/limits")["version"])
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return 0
            raise

    def _write(self, path: str, body: dict[str, Any], expected: int) -> dict[str, Any]:
        answer = _call(f"{self.api}/{path}", {**body, "expected_version": expected})
        self.version = int(answer["version"])
        return answer

    def _recommended_tokens(self) -> tuple[float, Any]:
        items = _call(f"{self.api}/recommendations?task_types={LOOSE_TASK}")["items"]
        for item in items:
            if item["field"] == "max_tokens" and item.get("recommended"):
                return float(item["recommended"]), item
        return float(_FALLBACK_TOKENS), None

    def _shadow(self, t: float) -> None:
        tokens, rec = self._recommended_tokens()
        body = {
            "task_type": LOOSE_TASK,
            "overrides": {"max_tokens": int(tokens)},
            "note": f"{LOOSE_TASK}: max_tokens 200000 is too loose; watch {int(tokens)} in shadow",
            "who": "demo",
            "recommendation": rec,
        }
        self._write("limits/shadow", body, self._current())
        self.say(
            f"[{t:5.0f} s] shadow candidate for {LOOSE_TASK}: max_tokens {int(tokens)} "
            f"(version {self.version}); the Limits page shows what it would cut and save"
        )

    def _promote(self, t: float) -> None:
        body = {
            "task_type": LOOSE_TASK,
            "note": "it would have cut no successful run",
            "who": "demo",
        }
        self._write("limits/promote", body, self._current())
        self.say(
            f"[{t:5.0f} s] promoted: {LOOSE_TASK} runs under version {self.version} once the "
            "agents poll (within a second); the Overview's chart marks it and opens its "
            "before/after report"
        )


def agent_following(
    endpoint: str, index: int, seed: int
) -> tuple[LimitPolicy, Callable[[Any], None]]:
    """For one agent process: the limits following serve (polled every second; waits up to five
    seconds for version 1 at start), and the callback that labels :data:`FEEDBACK_SHARE` of its
    runs (completed runs mostly successful, the rest not) through the feedback endpoint."""
    import queue
    import random
    import tempfile
    from pathlib import Path

    from loopwatch.instrumentation.runtime.feedback import FeedbackError, send_feedback
    from loopwatch.instrumentation.runtime.reasons import StopReason

    cache = Path(tempfile.gettempdir()) / f"loopwatch-demo-limits-{index}-{seed}.json"
    policy = LimitPolicy.from_url(endpoint, poll_s=1.0, cache_path=cache, wait_s=5.0)
    rng = random.Random(seed * 7_919 + index)

    labels: queue.SimpleQueue[tuple[Any, bool]] = queue.SimpleQueue()

    def send() -> None:  # in a thread: a run never waits for its label to be sent
        while True:
            result, ok = labels.get()
            # a label lost in the demo is not worth stopping an agent for
            with contextlib.suppress(FeedbackError):
                send_feedback(result, ok, source="demo-evaluator", url=endpoint, timeout_s=2.0)

    threading.Thread(target=send, name="loopwatch-demo-feedback", daemon=True).start()

    def label(result: Any) -> None:
        if rng.random() < FEEDBACK_SHARE:
            labels.put((result, result.stop_reason is StopReason.COMPLETED and rng.random() < 0.9))

    return policy, label
