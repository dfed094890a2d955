"""Speed and memory of ``loopwatch import``: messages/s replayed and stored, and peak memory.

Generates OpenAI-format conversations (a system prompt, 1-3 user messages each answered by a
run of tool calls and a final answer, usage on every assistant message; some runs loop on one
call, some repeat an error), writes them as a JSON array (or JSONL), and imports the file in a
child process (``loopwatch import``: the real reader, guard replay and DuckDB store), at two
sizes, so that peak memory can be compared across file sizes in one run.

    python benchmarks/bench_import.py                       # 1M messages, and 1/4 of that
    python benchmarks/bench_import.py --messages 200000 --layout jsonl

Prints, per size: file MB, messages, runs, seconds, messages/s, peak RSS (MB) of the importing
process; and the ratio of peak RSS between the sizes (≈ 1 means bounded by the file size).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

SYSTEM = {"role": "system", "content": "You are a support agent. Use the tools to help. " * 8}


def _conversation(rng: random.Random, n: int) -> tuple[dict[str, Any], int]:
    msgs: list[dict[str, Any]] = [SYSTEM]
    for u in range(rng.randint(1, 3)):
        msgs.append({"role": "user", "content": f"Request {u} of conversation {n}: " + "x" * 60})
        kind = rng.random()
        steps = rng.randint(1, 6)
        for s in range(steps):
            cid = f"call_{n}_{u}_{s}"
            if kind < 0.05:  # loops on one call with the same result
                name, args, result = "get_status", {"order": n}, '{"status": "pending"}'
            elif kind < 0.10:  # the same error again and again
                name, args = "get_order", {"id": n * 10 + s}
                result = json.dumps({"error": f"order {n * 10 + s} not found", "code": "NOT_FOUND"})
            else:
                name, args = rng.choice(["search", "lookup", "update"]), {"q": f"{n}-{u}-{s}"}
                result = json.dumps({"items": [f"item-{n}-{s}-{i}" for i in range(3)]})
            msgs.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": cid,
                            "type": "function",
                            "function": {"name": name, "arguments": json.dumps(args)},
                        }
                    ],
                    "usage": {"prompt_tokens": 800 + 50 * s, "completion_tokens": 30},
                }
            )
            msgs.append({"role": "tool", "tool_call_id": cid, "content": result})
        msgs.append(
            {
                "role": "assistant",
                "content": "Done: " + "y" * 80,
                "usage": {"prompt_tokens": 900, "completion_tokens": 60},
            }
        )
    label = rng.random() < 0.6
    return {"id": f"conv-{n}", "success": label, "messages": msgs}, len(msgs)


def generate(path: Path, messages: int, layout: str, seed: int = 7) -> int:
    """Write conversations holding about ``messages`` messages; returns the exact count."""
    rng = random.Random(seed)
    total = 0
    n = 0
    with path.open("w") as f:
        out: TextIO = f
        if layout == "array":
            out.write("[\n")
        while total < messages:
            conv, count = _conversation(rng, n)
            if layout == "array" and n:
                out.write(",\n")
            out.write(json.dumps(conv))
            if layout == "jsonl":
                out.write("\n")
            total += count
            n += 1
        if layout == "array":
            out.write("\n]\n")
    return total


def run_import(path: Path, db: Path) -> tuple[dict[str, Any], float, float]:
    """Import in a child process: its summary, wall seconds and peak RSS (MB)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "loopwatch.dashboard.cli",
            "import",
            str(path),
            "--success",
            "success",
            "--db",
            str(db),
            "--json",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    # ru_maxrss of children is the largest child so far: sizes run from small to large.
    return json.loads(out.stdout), wall, max(peak, before) / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--layout", choices=("array", "jsonl"), default="array")
    args = ap.parse_args()
    sizes = [max(args.messages // 4, 1000), args.messages]
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for size in sizes:
            path = Path(tmp) / f"log-{size}.{'json' if args.layout == 'array' else 'jsonl'}"
            count = generate(path, size, args.layout)
            db = Path(tmp) / f"lw-{size}.duckdb"
            summary, wall, peak = run_import(path, db)
            assert summary["messages"] == count, (summary["messages"], count)
            rows.append((path.stat().st_size / 1e6, count, summary, wall, peak))
            path.unlink()
        print(
            f"{'file MB':>8} {'messages':>10} {'runs':>8} {'import s':>9} {'process s':>10} "
            f"{'msg/s':>9} {'peak RSS MB':>12}"
        )
        for mb, count, summary, wall, peak in rows:
            print(
                f"{mb:8.1f} {count:10,} {summary['runs']:8,} {summary['seconds']:9.1f} "
                f"{wall:10.1f} {count / summary['seconds']:9,.0f} {peak:12.0f}"
            )
        (_, c0, _, _, p0), (_, c1, _, _, p1) = rows
        print(f"file size ratio {c1 / c0:.1f}x, peak RSS ratio {p1 / p0:.2f}x")


if __name__ == "__main__":
    main()
