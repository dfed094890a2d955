"""Import speed of coding agents' logs (``loopwatch import --format swe-agent|openhands|
claude-code``): generated sessions shaped like real ones (tens of steps, observations of a few
kB: file contents, test output), written to a temporary directory, imported into a fresh store.
Prints MB/s of log read, rebuilt, replayed and committed, per format, end to end (wall clock,
with the load average and the worker processes the import chose, ``--workers`` to choose) and
per CPU second of the process and its workers (DuckDB's threads included: the figure that holds
still on a shared machine); then, in this thread, MB per CPU second of each stage:
JSON parsing, the reader (spans, fingerprints of calls and results), runs (rebuild and replay),
rows (span records) and the Arrow batch. Target: >= 50 MB/s. Each format is imported twice,
side by side: with volatile-text normalization (as shipped) and with it off (every tool compared
as exact text, ``compare_exactly``); the ratio of MB per CPU second is printed.

    python benchmarks/bench_import_coding.py [--sessions N] [--steps S] [--observation-kb K]
        [--formats swe-agent,openhands,claude-code] [--workers N]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _observation(rng: random.Random, kb: int) -> str:
    lines = [
        f"{rng.randrange(10**6):>7} def function_{rng.randrange(999)}(x): return x"
        for _ in range(kb * 20)
    ]
    return "\n".join(lines)[: kb * 1024]


def swe_agent(rng: random.Random, steps: int, kb: int) -> Any:
    trajectory = []
    for i in range(steps):
        action = rng.choice(["cat src/a.py", "ls -F", "pytest -x", "grep -rn foo src"])
        trajectory.append(
            {
                "response": f"step {i}",
                "thought": f"step {i}",
                "action": action + "\n",
                "observation": _observation(rng, kb),
                "state": "{}",
            }
        )
    # As SWE-agent writes it: the whole conversation again under `history` (system prompt,
    # demonstration, then each step's action and observation).
    history: list[Any] = [
        {"role": "system", "content": "You are an autonomous programmer. " * 100},
        {"role": "user", "content": "DEMONSTRATION " + "x" * 6000, "is_demo": True},
    ]
    for step in trajectory:
        history.append({"role": "assistant", "content": step["response"], "action": step["action"]})
        history.append({"role": "user", "content": step["observation"]})
    return {
        "trajectory": trajectory,
        "history": history,
        "info": {
            "exit_status": "submitted",
            "model_stats": {"tokens_sent": 50_000, "tokens_received": 2_000},
        },
    }


def openhands(rng: random.Random, steps: int, kb: int) -> Any:
    events: list[Any] = [
        {"id": 0, "source": "user", "action": "message", "args": {"content": "fix"}}
    ]
    for i in range(steps):
        aid = len(events)
        events.append(
            {
                "id": aid,
                "source": "agent",
                "action": "run",
                "timestamp": "2026-03-01T10:00:00.000000",
                "message": "Running command: pytest",
                "args": {
                    "command": rng.choice(["ls", "pytest", "cat a.py"]),
                    "thought": "Let me check the tests before changing the parser. " * 4,
                    "is_input": False,
                    "blocking": False,
                },
                # OpenHands keeps the model's whole response with each action it asked for
                "tool_call_metadata": {
                    "function_name": "execute_bash",
                    "tool_call_id": f"t{i}",
                    "model_response": {
                        "id": f"r{i}",
                        "model": "claude-sonnet-4",
                        "object": "chat.completion",
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "tool_calls",
                                "message": {
                                    "role": "assistant",
                                    "content": "Let me check the tests before changing the parser. "
                                    * 4,
                                    "tool_calls": [
                                        {
                                            "id": f"t{i}",
                                            "type": "function",
                                            "function": {
                                                "name": "execute_bash",
                                                "arguments": '{"command": "pytest"}',
                                            },
                                        }
                                    ],
                                },
                            }
                        ],
                        "usage": {"prompt_tokens": 900, "completion_tokens": 50},
                    },
                    "total_calls_in_response": 1,
                },
            }
        )
        events.append(
            {
                "id": aid + 1,
                "source": "agent",
                "observation": "run",
                "cause": aid,
                "timestamp": "2026-03-01T10:00:01.000000",
                "message": "Command `pytest` executed with exit code 0.",
                "content": _observation(rng, kb),
                "extras": {
                    "command": "pytest",
                    "metadata": {
                        "exit_code": rng.choice([0, 0, 0, 1]),
                        "pid": -1,
                        "username": "openhands",
                        "hostname": "sandbox",
                        "working_dir": "/workspace",
                        "py_interpreter_path": "/openhands/poetry/bin/python",
                        "prefix": "",
                        "suffix": "\n[The command completed with exit code 0.]",
                    },
                    "hidden": False,
                },
            }
        )
    events.append(
        {
            "id": len(events),
            "source": "environment",
            "observation": "agent_state_changed",
            "extras": {"agent_state": "finished"},
        }
    )
    return events


_CC_META = {
    "cwd": "/home/dev/repo",
    "version": "2.0.14",
    "gitBranch": "main",
    "userType": "external",
    "sessionId": "0b6a3c52-6f0e-4d53-9f6e-2f8d1c1a7e10",
    "isSidechain": False,
}


def claude_code(rng: random.Random, steps: int, kb: int) -> str:
    lines = [{"type": "user", "message": {"role": "user", "content": "fix the test"}}]
    for i in range(steps):
        lines.append(
            {
                "type": "assistant",
                "message": {
                    "id": f"m{i}",
                    "role": "assistant",
                    "content": [
                        {
                            "type": "tool_use",
                            "id": f"t{i}",
                            "name": "Bash",
                            "input": {"command": rng.choice(["ls", "pytest", "cat a.py"])},
                        }
                    ],
                    "stop_reason": "tool_use",
                    "usage": {"input_tokens": 900, "output_tokens": 50},
                },
            }
        )
        lines.append(
            {
                "type": "user",
                "message": {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": f"t{i}",
                            "content": _observation(rng, kb),
                        }
                    ],
                },
            }
        )
    lines.append(
        {
            "type": "assistant",
            "message": {
                "id": "end",
                "role": "assistant",
                "content": [{"type": "text", "text": "done"}],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": 900, "output_tokens": 50},
            },
        }
    )
    for k, line in enumerate(lines):  # the metadata every line of a session carries
        line.update(_CC_META, uuid=f"u{k:08d}-1111-2222-3333", parentUuid=f"u{k - 1:08d}",
                    timestamp="2026-03-01T10:00:00.000Z")  # fmt: skip
        content = line["message"].get("content")
        if isinstance(content, list) and content and content[0].get("type") == "tool_result":
            # Claude Code keeps the tool's output a second time, as toolUseResult
            line["toolUseResult"] = {"stdout": content[0]["content"], "stderr": "",
                                     "interrupted": False}  # fmt: skip
    return "\n".join(json.dumps(line) for line in lines) + "\n"


def stages(fmt: str, texts: list[str]) -> dict[str, float]:
    """CPU seconds per stage of the import's path over ``texts`` in this thread: JSON, the
    reader (spans and fingerprints), runs (rebuild and replay), rows (records), Arrow batch."""
    from loopwatch.instrumentation.runtime.limits import resolve_limits
    from loopwatch.queries.ingest.foreign.reconstruct import runs_of_trace
    from loopwatch.queries.ingest.foreign.rows import run_record, span_records
    from loopwatch.queries.ingest.formats import coding
    from loopwatch.queries.store.columns import SpanBatch

    limits = resolve_limits(None, fmt)
    readers = {"swe-agent": coding.swe_agent, "openhands": coding.openhands}
    spent = dict.fromkeys(("JSON", "reader", "runs", "rows", "Arrow batch"), 0.0)
    records = []
    clock = time.thread_time
    for k, text in enumerate(texts):
        t0 = clock()
        if fmt == "claude-code":
            data: Any = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            data = json.loads(text)
        t1 = clock()
        builder = coding.LogBuilder(f"{fmt}:{k}", 10**18 + k * 10**9, fmt, fmt)
        if fmt == "claude-code":
            coding.claude_code(enumerate(data, 1), builder)
        else:
            readers[fmt](data, builder)
        t2 = clock()
        runs = runs_of_trace(builder.views, (coding.TASK_LABEL,), lambda _task: limits)
        t3 = clock()
        for run in runs:
            records.append(run_record(run))
            records += span_records(run)
        t4 = clock()
        for stage, seconds in zip(spent, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=False):
            spent[stage] += seconds
    t0 = clock()
    SpanBatch.from_records(records, source="import")
    spent["Arrow batch"] = clock() - t0
    return spent


def _children_cpu() -> float:
    """CPU seconds of this process's finished children (the import's worker processes)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


TOOLS = ("cat", "ls", "pytest", "grep", "execute_bash", "run", "Bash")
"""The generated sessions' tools (compared exactly when normalization is off)."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sessions", type=int, default=300)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--observation-kb", type=int, default=2)
    parser.add_argument("--formats", default="swe-agent,openhands,claude-code")
    parser.add_argument(
        "--workers", type=int, default=None, help="worker processes (default: the import's own "
        "choice, one per core for 8 MB or more; 0: read in the importing process)"
    )  # fmt: skip
    args = parser.parse_args()
    from loopwatch.instrumentation.runtime.fingerprint import compare_exactly
    from loopwatch.queries.ingest.formats.importing import import_recorded
    from loopwatch.queries.ingest.formats.sessions import workers_for
    from loopwatch.queries.store.database import Store

    makers = {
        "swe-agent": (swe_agent, ".traj"),
        "openhands": (openhands, ".json"),
        "claude-code": (claude_code, ".jsonl"),
    }
    failed = False
    for fmt in args.formats.split(","):
        make, suffix = makers[fmt]
        rng = random.Random(1)
        with tempfile.TemporaryDirectory() as tmp:
            logs = Path(tmp) / "logs"
            logs.mkdir()
            size = 0
            texts = []
            for k in range(args.sessions):
                data = make(rng, args.steps, args.observation_kb)
                text = data if isinstance(data, str) else json.dumps(data)
                texts.append(text)
                path = logs / f"session-{k}{suffix}"
                path.write_text(text)
                size += path.stat().st_size
            cpu_rates = {}
            for mode in ("on", "off"):
                compare_exactly(TOOLS, exact=mode == "off")
                load = _load()
                with Store(Path(tmp) / f"s-{mode}.duckdb") as store:
                    t0, c0, w0 = time.perf_counter(), time.process_time(), _children_cpu()
                    summary = import_recorded(logs, store, fmt, workers=args.workers)
                    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
                    in_workers = _children_cpu() - w0
                compare_exactly(TOOLS, exact=False)
                rate, cpu_rate = size / 1e6 / elapsed, size / 1e6 / (cpu + in_workers)
                cpu_rates[mode] = cpu_rate
                workers = workers_for(sorted(logs.iterdir()), args.workers)
                print(
                    f"{fmt:12} normalization {mode:3}: {args.sessions} sessions, "
                    f"{size / 1e6:.1f} MB, {summary.runs} runs, {summary.messages:,} spans in "
                    f"{elapsed:.2f} s = {rate:.0f} MB/s with {workers} worker processes "
                    f"(load average {load}){'' if rate >= 50 else ' (below the 50 MB/s target)'}; "
                    f"{cpu:.2f} CPU s here + {in_workers:.2f} in workers = "
                    f"{cpu_rate:.0f} MB per CPU second"
                )
                failed |= summary.runs != args.sessions
            print(
                f"{fmt:12} normalization on / off (MB per CPU second): "
                f"{cpu_rates['on'] / cpu_rates['off']:.2f}"
            )
            spent = stages(fmt, texts)
            print("              in process, one thread, MB per CPU second of each stage: "
                  + ", ".join(f"{k} {size / 1e6 / v:,.0f}" for k, v in spent.items())
                  + f"; all {size / 1e6 / sum(spent.values()):,.0f}")  # fmt: skip
            failed |= summary.runs != args.sessions
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
