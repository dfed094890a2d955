"""``loopwatch demo``: live mode plus a simulated fleet, in one command.

It starts ``loopwatch serve`` as a child process (the store, the OTLP receiver, ``/metrics`` and
the dashboard), waits for its ``/health``, then starts the fleet's agents as separate processes
(``python -m loopwatch.dashboard.demo agent ...``) that run :mod:`loopwatch.dashboard.demo.fleet`
through the real guard and send their spans over OTLP/HTTP, as a production agent would. Midway
a tool outage makes repeated_error rise until the alert fires; then the tool recovers.

The demo compresses time: the alert's windows are scaled to ``--duration``
(:func:`demo_alert_env`) and handed to ``serve`` in the environment, so even a one-minute run
shows the alert fire and resolve. Ctrl-C (or SIGTERM) stops the agents first (each flushes what
it has), then ``serve`` (which commits and closes the store).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TextIO

from ..app.settings import ALERT_BASELINE_ENV, ALERT_MIN_RUNS_ENV, ALERT_SHORT_ENV, REFRESH_ENV
from .fleet import OUTAGE_TOOL, SERVICE_NAME, TASK_TYPES, FleetPlan
from .story import Story, firing_task_types

__all__ = [
    "DemoError",
    "DemoOptions",
    "agent_main",
    "demo_alert_env",
    "run_demo",
]

_URL_RE = re.compile(r"^(OTLP/HTTP|metrics|dashboard)\s+(http://\S+)")
_READY_TIMEOUT_S = 90.0


class DemoError(RuntimeError):
    """The demo could not start or run (serve did not come up, an agent failed to start)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DemoOptions:
    """``loopwatch demo``'s options (its flags)."""

    db: Path
    plan: FleetPlan
    host: str = "127.0.0.1"
    otlp_port: int = 4318
    metrics_port: int = 9464
    ui_port: int = 8501
    ui: bool = True
    """Serve the dashboard; with it the demo keeps serving after the fleet is done, until
    Ctrl-C. Without it (``--no-ui``) the demo ends when the fleet is done."""
    python: str = field(default_factory=lambda: sys.executable)


def demo_alert_env(plan: FleetPlan) -> dict[str, str]:
    """The alert windows scaled to the demo's duration, as the dashboard's settings variables.

    Short window: 15% of the run (at least 5 s), so the outage (25% of the run) fills it;
    baseline: the whole run (at least 3 short windows); fewest runs: half of what
    ``support_ticket`` is expected to send in a short window, capped at the production 20.
    """
    short = max(5, round(plan.duration_s * 0.15))
    base = max(3 * short, math.ceil(plan.duration_s))
    share = next(p.weight for p in TASK_TYPES if p.name == "support_ticket") / sum(
        p.weight for p in TASK_TYPES
    )
    expected = share * plan.rate * short
    min_runs = max(5, min(20, int(expected * 0.5)))
    return {
        ALERT_SHORT_ENV: f"{short}s",
        ALERT_BASELINE_ENV: f"{base}s",
        ALERT_MIN_RUNS_ENV: str(min_runs),
        REFRESH_ENV: "3",
    }


# --- the serve child ---------------------------------------------------------------------------
class _Serve:
    def __init__(self, options: DemoOptions, out: TextIO) -> None:
        self.options = options
        self.out = out
        self.urls: dict[str, str] = {}
        self.lines: list[str] = []
        self._got_urls = threading.Event()
        env = dict(os.environ)
        env.update(demo_alert_env(options.plan))
        cmd = [
            options.python,
            "-m",
            "loopwatch.dashboard.cli",
            "serve",
            "--db",
            str(options.db),
            "--host",
            options.host,
            "--otlp-port",
            str(options.otlp_port),
            "--metrics-port",
            str(options.metrics_port),
            "--ui-port",
            str(options.ui_port),
        ]
        if not options.ui:
            cmd.append("--no-ui")
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,  # Ctrl-C reaches the demo, which stops serve last
        )
        self._reader = threading.Thread(target=self._read, name="loopwatch-demo-serve", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            self.lines.append(line)
            m = _URL_RE.match(line)
            if m:
                self.urls[m[1]] = m[2]
                if len(self.urls) == (3 if self.options.ui else 2):
                    self._got_urls.set()
        self._got_urls.set()

    def wait_ready(self, timeout_s: float = _READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        self._got_urls.wait(timeout_s)
        otlp = self.urls.get("OTLP/HTTP")
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise DemoError(
                    "loopwatch serve exited during start-up (code "
                    f"{self.proc.returncode}):\n" + "\n".join(self.lines[-20:])
                )
            if otlp is not None and _health(otlp) is not None:
                return
            time.sleep(0.1)
            otlp = self.urls.get("OTLP/HTTP")
        raise DemoError(
            f"loopwatch serve did not answer /health within {timeout_s:.0f} s:\n"
            + "\n".join(self.lines[-20:])
        )

    @property
    def endpoint(self) -> str:
        """The OTLP/HTTP base URL (``http://host:port``)."""
        return _base(self.urls["OTLP/HTTP"])

    def stop(self, timeout_s: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)
        return self.proc.returncode


def _base(url: str) -> str:
    m = re.match(r"^(https?://[^/]+)", url)
    return m[1] if m else url


def _health(otlp_url: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(_base(otlp_url) + "/health", timeout=2) as resp:
            if resp.status != 200:
                return None
            data: dict[str, Any] = json.loads(resp.read().decode())
            return data
    except (OSError, ValueError, urllib.error.URLError):
        return None


# --- the demo ------------------------------------------------------------------------------------
def _agent_cmd(options: DemoOptions, index: int, endpoint: str, start_epoch: float) -> list[str]:
    p = options.plan
    return [
        options.python,
        "-m",
        "loopwatch.dashboard.demo",
        "agent",
        "--index",
        str(index),
        "--agents",
        str(p.agents),
        "--seed",
        str(p.seed),
        "--duration",
        repr(p.duration_s),
        "--rate",
        repr(p.rate),
        "--endpoint",
        endpoint,
        "--start",
        repr(start_epoch),
    ]


def run_demo(options: DemoOptions, *, out: TextIO = sys.stdout) -> int:
    """Run the demo; returns the exit code (0 after a clean stop, also on Ctrl-C)."""
    plan = options.plan
    env = demo_alert_env(plan)
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    say = _Printer(out)
    say(
        f"loopwatch demo: {plan.agents} agents, {plan.rate:g} runs/s for {plan.duration_s:g} s "
        f"(seed {plan.seed}), task types " + ", ".join(p.name for p in TASK_TYPES) + "."
    )
    say(
        f"  {OUTAGE_TOOL} fails from {plan.outage_start:.0f} s to {plan.outage_end:.0f} s; the "
        f"repeated_error alert compares the last {env[ALERT_SHORT_ENV]} with "
        f"{env[ALERT_BASELINE_ENV]} (at least {env[ALERT_MIN_RUNS_ENV]} runs)."
    )
    serve = _Serve(options, out)
    agents: list[_Agent] = []
    try:
        serve.wait_ready()
        endpoint = serve.endpoint
        if "dashboard" in serve.urls:
            say(f"  dashboard   {serve.urls['dashboard']}   <- open this")
        say(f"  metrics     {serve.urls.get('metrics', '-')}")
        say(f"  OTLP/HTTP   {serve.urls['OTLP/HTTP']}")
        say(f"  store       {options.db}")
        story = Story(plan, endpoint, say, stop)
        story.serve_fleet_limits()
        start = time.time() + 1.0
        for i in range(plan.agents):
            agents.append(_Agent(_agent_cmd(options, i, endpoint, start)))
        threading.Thread(target=story.run, args=(start,), daemon=True).start()
        _watch(plan, serve, agents, env, stop, say, start)
        if stop.is_set():
            say("loopwatch demo: stopping (Ctrl-C) ...")
        failed = _stop_agents(agents)
        for code, err in failed:
            say(f"loopwatch demo: an agent exited with code {code}:\n{err}")
        health = _health(serve.urls["OTLP/HTTP"]) or {}
        say(
            f"loopwatch demo: fleet done, {health.get('runs', '?')} runs and "
            f"{health.get('spans', '?')} spans stored."
        )
        if options.ui and not stop.is_set():
            say(f"  The dashboard stays up at {serve.urls.get('dashboard', '-')}: Ctrl-C to stop.")
            while not stop.wait(0.5):
                if serve.proc.poll() is not None:
                    break
        return 1 if failed else 0
    finally:
        _stop_agents(agents)
        code = serve.stop()
        say(f"loopwatch demo: stopped (serve exited with {code}).")
        for s, h in previous.items():
            signal.signal(s, h)


class _Printer:
    def __init__(self, out: TextIO) -> None:
        self.out = out

    def __call__(self, text: str) -> None:
        print(text, file=self.out, flush=True)


def _watch(
    plan: FleetPlan,
    serve: _Serve,
    agents: Sequence[_Agent],
    env: dict[str, str],
    stop: threading.Event,
    say: _Printer,
    start: float,
) -> None:
    """Report progress every few seconds until the agents are done or Ctrl-C."""
    every = max(5.0, min(15.0, plan.duration_s / 8))
    next_report = start + every
    phase = "before"
    fired: set[str] = set()
    said: set[str] = set()
    next_spend = start + 1.0
    while not stop.wait(0.25):
        if all(a.proc.poll() is not None for a in agents):
            return
        if serve.proc.poll() is not None:
            raise DemoError("loopwatch serve exited:\n" + "\n".join(serve.lines[-20:]))
        t = time.time() - start
        now_phase = (
            "before" if t < plan.outage_start else "outage" if t < plan.outage_end else "after"
        )
        if now_phase != phase:
            phase = now_phase
            if phase == "outage":
                say(f"[{t:5.0f} s] {OUTAGE_TOOL} is down: runs start stopping on repeated_error")
            else:
                say(f"[{t:5.0f} s] {OUTAGE_TOOL} has recovered")
        if time.time() >= next_spend:  # the spend alert is short-lived: looked at every second
            next_spend += 1.0
            spend = [
                f for f in firing_task_types(serve.endpoint, env, "spend_alert") if f not in said
            ]
            if spend:
                said.update(spend)
                say(f"[{t:5.0f} s] ALERT firing: spend per run rising for " + ", ".join(spend))
        if time.time() >= next_report:
            next_report += every
            health = _health(serve.urls["OTLP/HTTP"]) or {}
            firing = firing_task_types(serve.endpoint, env)
            new = [f for f in firing if f not in fired]
            fired.update(firing)
            line = f"[{t:5.0f} s] {health.get('runs', '?')} runs stored"
            if firing:
                line += "; ALERT firing: repeated_error rising for " + ", ".join(firing)
            say(line)
            if new:
                say("         (see it on the Overview and Loops & errors pages)")


class _Agent:
    """One agent process; its stderr goes to a file, so a chatty agent never blocks on a pipe."""

    def __init__(self, cmd: list[str]) -> None:
        self.err: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stderr_text)
        self.proc = subprocess.Popen(
            cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=self.err
        )

    def stderr_text(self) -> str:
        if self.err.closed:
            return ""
        self.err.seek(0)
        data = self.err.read()
        self.err.close()
        return data.decode(errors="replace")


def _stop_agents(agents: Sequence[_Agent]) -> list[tuple[int, str]]:
    for a in agents:
        if a.proc.poll() is None:
            a.proc.send_signal(signal.SIGTERM)
    failed: list[tuple[int, str]] = []
    for a in agents:
        try:
            a.proc.wait(30)
        except subprocess.TimeoutExpired:
            a.proc.kill()
            a.proc.wait()
        err = a.stderr_text()
        if a.proc.returncode not in (0, -signal.SIGTERM):
            failed.append((a.proc.returncode, err[-2000:]))
    return failed


# --- one agent process ---------------------------------------------------------------------------
def agent_main(argv: Sequence[str] | None = None) -> int:
    """One agent of the demo fleet, as a process: instrumented with ``otlp_endpoint``, runs its
    share of the plan, flushes and exits on SIGTERM or when done."""
    p = argparse.ArgumentParser(prog="python -m loopwatch.dashboard.demo agent")
    p.add_argument("--index", type=int, required=True)
    p.add_argument("--agents", type=int, required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--duration", type=float, required=True)
    p.add_argument("--rate", type=float, required=True)
    p.add_argument("--endpoint", required=True)
    p.add_argument("--start", type=float, required=True, help="wall-clock start (epoch seconds)")
    args = p.parse_args(argv)

    from loopwatch.instrumentation import instrument

    from .fleet import run_agent
    from .story import agent_following

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    plan = FleetPlan(seed=args.seed, duration_s=args.duration, rate=args.rate, agents=args.agents)
    inst = instrument(otlp_endpoint=args.endpoint, service_name=SERVICE_NAME)
    try:
        start = time.monotonic() + (args.start - time.time())
        policy, label = agent_following(args.endpoint, args.index, args.seed)
        run_agent(plan, args.index, stop=stop, start=start, on_run=label, policy=policy)
    finally:
        inst.force_flush(30_000)
        inst.shutdown()
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "agent":
        sys.exit(agent_main(sys.argv[2:]))
    print("usage: python -m loopwatch.dashboard.demo agent ... (use `loopwatch demo`)")
    sys.exit(2)
