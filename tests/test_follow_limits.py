"""Agents follow the limits serve holds: real serve, real agent processes, real OTLP.

Two agent processes run with ``LOOPWATCH_LIMITS_URL`` pointing at serve; the test applies,
shadows, promotes and rolls back through the API and checks that both agents switch, that every
run's span records the limits version the agent held, and that with serve stopped the agents go
on under the last good limits (a new agent too, from the cache on disk) and take the newer
version once serve is back.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loopwatch.instrumentation.limits import LimitPolicy

from tests.serving import ServeProcess, request, store_rows

POLL_S = 0.3

AGENT = textwrap.dedent(
    """
    import json, sys, time, pathlib
    from loopwatch.instrumentation import instrument
    from loopwatch.instrumentation.runtime.loop import run
    from loopwatch.instrumentation.runtime.served import followed_from_env
    from loopwatch.instrumentation.testing import FakeModel
    from loopwatch.instrumentation.runtime.tools import ToolRegistry

    otlp, name, stop = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3])
    handle = instrument(otlp_endpoint=otlp, service_name=name)
    registry = ToolRegistry()
    followed = followed_from_env()
    n = 0
    while not stop.exists():
        before = followed.served_version
        started = time.time()
        result = run(FakeModel(["done"]), registry, "q", task_type="support",
                     raise_on_stop=False)
        after = followed.served_version
        print(json.dumps({"run_id": result.run_id, "limits_version": result.limits_version,
                          "before": before, "after": after, "t": started}), flush=True)
        n += 1
        time.sleep(0.05)
    handle.shutdown()
    """
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Agent:
    def __init__(self, name: str, otlp_port: int, tmp: Path, cache: Path) -> None:
        self.stop_file = tmp / f"{name}.stop"
        env = {
            **os.environ,
            "LOOPWATCH_LIMITS_URL": f"http://127.0.0.1:{otlp_port}",
            "LOOPWATCH_LIMITS_POLL_S": str(POLL_S),
            "LOOPWATCH_LIMITS_CACHE": str(cache),
        }
        env.pop("LOOPWATCH_LIMITS", None)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                AGENT,
                f"http://127.0.0.1:{otlp_port}",
                name,
                str(self.stop_file),
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.runs: list[dict[str, Any]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.runs.append(json.loads(line))

    def first_run_under(self, version: int, since: float) -> dict[str, Any] | None:
        return next((r for r in self.runs if r["t"] >= since and r["before"] == version), None)

    def finish(self) -> None:
        self.stop_file.touch()
        assert self.proc.wait(120) == 0


def wait_for(check: Callable[[], Any], what: str, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def write(port: int, path: str, body: dict[str, Any]) -> dict[str, Any]:
    status, _, raw = request(
        port, "POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    assert status == 200, raw
    data: dict[str, Any] = json.loads(raw)
    return data


def switch(agents: list[Agent], port: int, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """Write a version; wait until every agent ran under it; print how long each took."""
    at = time.time()
    version = write(port, path, body)
    number = version["version"]
    for agent in agents:
        run = wait_for(lambda a=agent: a.first_run_under(number, at), f"version {number}")
        print(f"version {number} ({path}): {agent.proc.pid} switched after {run['t'] - at:.2f} s")
    return version


def test_agents_follow_apply_shadow_promote_roll_back_and_outlive_serve(tmp_path: Path) -> None:
    port = free_port()
    db = tmp_path / "live.duckdb"
    server = ServeProcess(db, "--otlp-port", str(port))
    versions: dict[int, dict[str, Any]] = {}
    agents = [Agent(f"agent-{i}", port, tmp_path, tmp_path / f"cache-{i}.json") for i in range(2)]
    late: Agent | None = None
    try:
        api = server.otlp
        base = "[defaults]\nmax_steps = 8\n[task_types.support]\nmax_steps = 12\n"
        v1 = switch(
            agents, api, "/api/v1/limits", {"toml": base, "note": "v1", "expected_version": 0}
        )
        v2 = switch(
            agents,
            api,
            "/api/v1/limits/shadow",
            {"task_type": "support", "overrides": {"max_steps": 6}, "note": "try",
             "expected_version": 1},
        )  # fmt: skip
        v3 = switch(
            agents, api, "/api/v1/limits/promote",
            {"task_type": "support", "note": "promote", "expected_version": 2},
        )  # fmt: skip
        v4 = switch(
            agents, api, "/api/v1/limits/rollback",
            {"to_version": 1, "note": "back", "expected_version": 3},
        )  # fmt: skip
        for v in (v1, v2, v3, v4):
            versions[v["version"]] = v
        assert v3["task_versions"]["support"] != v1["task_versions"]["support"]
        # Serve stops: the agents go on under version 4, and a new agent starts from the cache.
        assert server.stop() == 0
        stopped_at = time.time()
        for agent in agents:
            wait_for(lambda a=agent: len([r for r in a.runs if r["t"] > stopped_at]) >= 5, "runs")
        late = Agent("agent-late", port, tmp_path, tmp_path / "cache-0.json")
        wait_for(lambda: len(late.runs) >= 3, "the late agent's runs")  # type: ignore[union-attr]
        assert all(r["before"] == 4 for r in late.runs)
        # Serve is back (same port, same store): a newer version reaches all three.
        server = ServeProcess(db, "--otlp-port", str(port))
        v5 = switch(
            [*agents, late], server.otlp, "/api/v1/limits",
            {"task_type": "support", "values": {"max_steps": 10}, "note": "v5",
             "expected_version": 4},
        )  # fmt: skip
        versions[5] = v5
        for agent in [*agents, late]:
            agent.finish()
        time.sleep(1.0)  # the last exports reach serve
    finally:
        for agent in [*agents, *([late] if late else [])]:
            if agent.proc.poll() is None:
                agent.proc.kill()
        assert server.stop() == 0
    stored = dict(store_rows(db, "SELECT run_id, limits_version FROM runs"))
    shadowed = dict(store_rows(db, "SELECT run_id, shadow_limits_version FROM runs"))
    checked = 0
    for agent in [*agents, late]:
        assert agent is not None
        for run in agent.runs:
            held = {run["before"], run["after"]}
            expected = {
                versions[v]["task_versions"]["support"]
                if v is not None
                else LimitPolicy().for_task("support").version  # before any version: defaults
                for v in held
            }
            assert run["limits_version"] in expected, run
            if run["run_id"] in stored:  # runs sent while serve was down were not stored
                assert stored[run["run_id"]] == run["limits_version"]
                if run["before"] == run["after"] == 2:
                    shadow = LimitPolicy.from_toml(versions[2]["toml"]).shadow_for("support")
                    assert shadow is not None and shadowed[run["run_id"]] == shadow.version
                checked += 1
    print(f"{checked} stored runs checked against the version their agent held")
    assert checked > 20


def test_a_run_never_waits_for_a_serve_that_does_not_answer(tmp_path: Path) -> None:
    from loopwatch.instrumentation import RunConfig
    from loopwatch.instrumentation.runtime.served import FollowedPolicy

    silent = socket.socket()  # accepts connections, never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        fallback = LimitPolicy.from_toml("[task_types.support]\nmax_steps = 4\n")
        policy = FollowedPolicy(url, cache_path=tmp_path / "none.json", fallback=fallback,
                                timeout_s=30)  # fmt: skip
        resolved = RunConfig(limits=policy, task_type="support").resolve()
        # Resolved from memory while the poll is still waiting for serve's answer.
        assert resolved.limits.max_steps == 4 and policy.last_contact is None
        assert policy.served_version is None
    finally:
        silent.close()


def test_a_damaged_or_foreign_cache_is_ignored(tmp_path: Path) -> None:
    from loopwatch.instrumentation.runtime.served import FollowedPolicy

    cache = tmp_path / "cache.json"
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens
    cache.write_text("{not json")
    assert FollowedPolicy(url, cache_path=cache, start=False).for_task("x").max_steps == 8
    toml = "[defaults]\nmax_steps = 3\n"
    cache.write_text(
        json.dumps({"url": "http://elsewhere/api/v1/limits", "version": 1, "toml": toml})
    )
    assert FollowedPolicy(url, cache_path=cache, start=False).served_version is None
    cache.write_text(json.dumps({"url": url + "/api/v1/limits", "version": 7, "toml": toml}))
    held = FollowedPolicy(url, cache_path=cache, start=False)
    assert held.served_version == 7 and held.for_task("x").max_steps == 3
    assert held.refresh() is False and held.last_error is not None  # unreachable: kept
    assert held.served_version == 7
