"""Re-verify the Phoenix recipe of docs/telemetry.md against a live Phoenix.

Not part of the suite (Phoenix is heavy). Run Phoenix in its own venv, offline, e.g.:

    python3 -m venv /tmp/phx-venv && /tmp/phx-venv/bin/pip install arize-phoenix==20.26.1
    PHOENIX_TELEMETRY_ENABLED=false PHOENIX_HOST=127.0.0.1 PHOENIX_PORT=6006 \
      PHOENIX_GRPC_PORT=4317 PHOENIX_WORKING_DIR=/tmp/phx-wd /tmp/phx-venv/bin/phoenix serve

then, from loopwatch's venv:

    python benchmarks/check_phoenix.py http://127.0.0.1:6006

It sends three runs in one session (two answered, one stopped by ``repeated_action``) with a
priced model and a loopwatch cost that deliberately differs from Phoenix's price, plus one run
with a model Phoenix has no price for, then reads them back through Phoenix's GraphQL API and
checks kinds, session grouping, model, provider, tokens and cost. Exit status 0 when all hold.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
import uuid

TAG = uuid.uuid4().hex[:8]
PROJECT = f"loopwatch-check-{TAG}"
# Phoenix's session ids are unique per server, not per project: one seen before stays with its
# first project, so each check uses fresh ones
S1, S2 = f"phx-session-1-{TAG}", f"phx-session-2-{TAG}"
# Phoenix files spans under the resource attribute openinference.project.name (not service.name)
os.environ["OTEL_RESOURCE_ATTRIBUTES"] = f"openinference.project.name={PROJECT}"

from loopwatch.instrumentation.runtime.loop import run  # noqa: E402
from loopwatch.instrumentation.runtime.tools import ToolRegistry  # noqa: E402
from loopwatch.instrumentation.runtime.types import Usage  # noqa: E402
from loopwatch.instrumentation.telemetry.pipeline import instrument  # noqa: E402
from loopwatch.instrumentation.testing import (  # noqa: E402
    FakeModel,
    LoopingModel,
    text_response,
    tool_call,
    tool_response,
)

QUERY = """{ projects { edges { node { name traceCount
  sessions(first: 10) { edges { node { sessionId numTraces
    tokenUsage { prompt completion total } costSummary { total { cost } } } } }
  spans(first: 200) { edges { node { name spanKind statusCode tokenCountPrompt
    tokenCountCompletion costSummary { total { cost } }
    attributes } } } } } } }"""


def _named(model: FakeModel | LoopingModel, name: str) -> FakeModel | LoopingModel:
    model.model = name  # type: ignore[misc]
    model.provider = "openai"  # type: ignore[attr-defined]
    return model


def send(base: str) -> None:
    telemetry = instrument(service_name="support-agent", otlp_endpoint=f"{base}/v1/traces")
    registry = ToolRegistry()

    @registry.tool
    def lookup(order_id: str) -> str:
        """Look an order up."""
        return f"order {order_id}: refunded"

    # loopwatch says $1 per call; Phoenix's own price for gpt-4o-mini is far lower
    usage = Usage(input_tokens=1000, output_tokens=100, cost_usd=1.0)
    for i in range(2):
        script = [
            tool_response(tool_call("lookup", order_id=f"A{i}"), usage=usage),
            text_response("Refund issued.", usage=usage),
        ]
        run(
            _named(FakeModel(script), "gpt-4o-mini"),
            registry,
            "Where is my refund?",
            agent_name="support-agent",
            conversation_id=S1,
        )
    looping = LoopingModel(tool_call("lookup", order_id="A0"), usage=usage)
    result = run(
        _named(looping, "gpt-4o-mini"),
        registry,
        "Where is my refund?",
        agent_name="support-agent",
        conversation_id=S1,
        raise_on_stop=False,
    )
    assert result.stop_reason == "repeated_action", result.stop_reason
    script = [text_response("hi", usage=usage)]
    run(
        _named(FakeModel(script), "acme-unpriced-1"),
        registry,
        "hi",
        agent_name="support-agent",
        conversation_id=S2,
    )
    assert telemetry.force_flush(), "spans were lost on the way to Phoenix"
    telemetry.shutdown()


def read_back(base: str) -> dict:
    body = json.dumps({"query": QUERY}).encode()
    for _ in range(30):  # Phoenix inserts spans asynchronously, about a second after export
        req = urllib.request.Request(f"{base}/graphql", body, {"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            data = json.load(resp)
        if data.get("errors"):
            raise SystemExit(f"Phoenix GraphQL error: {data['errors']}")
        for edge in data["data"]["projects"]["edges"]:
            if edge["node"]["name"] == PROJECT and edge["node"]["traceCount"] == 4:
                return edge["node"]
        time.sleep(0.5)
    raise SystemExit(f"project {PROJECT} with 4 traces never appeared in Phoenix")


def main() -> None:
    base = (sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:6006").rstrip("/")
    send(base)
    project = read_back(base)
    spans = [e["node"] for e in project["spans"]["edges"]]
    kinds = {s["name"].split(" ")[0]: s["spanKind"] for s in spans}
    assert kinds == {
        "invoke_agent": "agent",
        "step": "chain",
        "chat": "llm",
        "execute_tool": "tool",
    }, kinds
    sessions = {e["node"]["sessionId"]: e["node"] for e in project["sessions"]["edges"]}
    assert sessions.get(S1, {}).get("numTraces") == 3, sessions
    assert sessions[S1]["tokenUsage"]["total"] == 6 * 1100, sessions
    chats = [s for s in spans if s["spanKind"] == "llm"]
    for s in chats:
        assert (s["tokenCountPrompt"], s["tokenCountCompletion"]) == (1000, 100), s
        assert json.loads(s["attributes"])["llm"]["provider"] == "openai", s
    priced = [s["costSummary"]["total"]["cost"] for s in chats if s["name"] == "chat gpt-4o-mini"]
    unpriced = [s["costSummary"] for s in chats if s["name"] == "chat acme-unpriced-1"]
    assert priced and all(c is not None and c < 0.01 for c in priced), priced  # not our $1
    assert all(c is None or c["total"]["cost"] is None for c in unpriced), unpriced
    stopped = [s for s in spans if s["spanKind"] == "agent" and s["statusCode"] == "ERROR"]
    assert len(stopped) == 1, stopped
    print(
        f"ok: project {PROJECT}: {len(spans)} spans, kinds {sorted(set(kinds.values()))}, "
        f"sessions {sorted(sessions)}, Phoenix cost per gpt-4o-mini call {priced[0]:.6f} "
        f"(loopwatch said 1.0), unpriced model cost None"
    )


if __name__ == "__main__":
    main()
