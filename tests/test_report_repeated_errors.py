"""``loopwatch report`` says which tool, error code and message are behind repeated_error stops."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from loopwatch.dashboard.cli import main
from loopwatch.instrumentation.runtime.limits import LoopLimits
from loopwatch.instrumentation.runtime.loop import run
from loopwatch.instrumentation.runtime.reasons import StopReason
from loopwatch.instrumentation.runtime.retry import ToolError
from loopwatch.instrumentation.runtime.tools import ToolRegistry
from loopwatch.instrumentation.runtime.types import ToolCall
from loopwatch.instrumentation.telemetry.pipeline import instrument
from loopwatch.instrumentation.testing import FakeModel
from opentelemetry.sdk.trace import TracerProvider


def _registry() -> ToolRegistry:
    reg = ToolRegistry(sleep=lambda s: None)

    def get_order(order_id: int) -> dict[str, Any]:
        raise ToolError("NOT_FOUND", f"order {order_id} not found", transient=False)

    def charge(amount: int) -> dict[str, Any]:
        raise ToolError("DECLINED", f"card declined for {amount} USD", transient=False)

    reg.register(get_order, name="get_order")
    reg.register(charge, name="charge")
    return reg


def _calls(tool: str, key: str, n: int, base: int) -> list[Any]:
    return [ToolCall(f"{tool}{i}", tool, {key: base + i}) for i in range(n)]


@pytest.mark.parametrize("capture", [True, False], ids=["capture", "no-capture"])
def test_the_report_names_tool_code_and_message(tmp_path: Path, capsys: Any, capture: bool) -> None:
    db = tmp_path / "live.duckdb"
    handle = instrument(tracer_provider=TracerProvider(), store=db, capture_content=capture)
    limits = LoopLimits(max_same_error=3, max_consecutive_failures=None, max_steps=20)
    try:
        results = [
            run(
                FakeModel(_calls("get_order", "order_id", 5, 100 * k)),
                _registry(),
                "go",
                limits=limits,
                task_type="support",
                raise_on_stop=False,
            )
            for k in range(3)
        ]
        results.append(
            run(
                FakeModel(_calls("charge", "amount", 5, 10)),
                _registry(),
                "go",
                limits=limits,
                task_type="support",
                raise_on_stop=False,
            )
        )
        assert handle.force_flush()
    finally:
        handle.shutdown()
    assert all(r.stop_reason is StopReason.REPEATED_ERROR for r in results)
    code = main(["report", "--db", str(db)])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("Behind the repeated_error"))
    rows = [ln.split(None, 5) for ln in lines[start + 3 : start + 5]]
    assert rows[0][:5] == ["support", "get_order", "NOT_FOUND", "3", "75.0%"]
    # the message is tool output: it leaves the process only with the content opt-in
    message = "'order 202 not found'" if capture else "'…'"
    assert rows[0][5].startswith(
        f"get_order failed 3 times with the same error, NOT_FOUND: {message}"
    )
    assert rows[1][:5] == ["support", "charge", "DECLINED", "1", "25.0%"]
    assert ("card declined for" in rows[1][5]) is capture
    code = main(["report", "--db", str(db), "--format", "json"])
    data = json.loads(capsys.readouterr()[0])
    assert [(r["tool"], r["error_code"], r["runs"]) for r in data["repeated_errors"]] == [
        ("get_order", "NOT_FOUND", 3),
        ("charge", "DECLINED", 1),
    ]
