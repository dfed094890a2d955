"""Speed and memory of ``loopwatch import``: messages/s replayed and stored, and peak memory.

Generates OpenAI-format conversations (a system prompt, 1-3 user messages each answered by a
run of tool calls and a final answer, usage on every assistant message; some runs loop on one
call, some repeat an error), writes them as a JSON array (or JSONL), and imports the file in a
child process, at two sizes, so that peak memory can be compared across file sizes in one run.
Two ways per size: ``import``, the import itself (``import_chat_log``: the real reader, guard
replay and DuckDB store, what the issue's target is about), and ``cli``, ``loopwatch import``,
which after the import also runs the summary's queries over the imported runs. ``--variants
import exact`` adds the import alone with volatile-text normalization off (every tool compared as
exact text, ``LOOPWATCH_EXACT_TEXT_TOOLS``), side by side with it on, and prints the ratio.

    python benchmarks/bench_import.py                       # 1M messages, and 1/4 of that
    python benchmarks/bench_import.py --messages 5300000    # a 1 GB file, and 1/4 of that
    python benchmarks/bench_import.py --messages 200000 --layout jsonl
    python benchmarks/bench_import.py --variants import --compare-checkpoint duckdb 64

Prints, per size and way: file MB, messages, runs, seconds, messages/s, peak RSS (MB) of the
importing process; and the ratio of peak RSS between the sizes (≈ 1 means bounded by the file
size).
"""

from __future__ import annotations

import argparse
import json
import os
import random
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


# The import alone (no summary queries after it), under the importer's checkpoint threshold
# or a given one ("duckdb": DuckDB's own), for --compare-checkpoint.
_IMPORT_ONLY = """
import json, sys
from loopwatch.queries.ingest.chatlogs import ChatLogOptions
from loopwatch.queries.ingest.importer import ImportOptions, import_chat_log
from loopwatch.queries.store.database import Store
options = ImportOptions(chat=ChatLogOptions(success="success"))
if sys.argv[3] != "default":
    mb = None if sys.argv[3] == "duckdb" else int(sys.argv[3])
    options = ImportOptions(chat=options.chat, checkpoint_mb=mb)
with Store(sys.argv[2]) as store:
    print(json.dumps(import_chat_log(sys.argv[1], store, options).to_dict()))
"""


TOOLS = ("search", "lookup", "update", "get_status", "get_order")
"""The generated conversations' tools (all of them compared exactly for the ``exact`` way)."""


def run_import(
    path: Path, db: Path, checkpoint: str | None = None
) -> tuple[dict[str, Any], float, float]:
    """Import in a child process: its summary, wall seconds and peak RSS (MB).

    ``checkpoint`` None: through the CLI (``loopwatch import``, summary queries included);
    else the import alone with that checkpoint threshold (MB, ``duckdb`` for DuckDB's,
    ``default`` for the importer's).
    """
    env = dict(os.environ)
    if checkpoint == "exact":  # the import alone, normalization off for every tool
        env["LOOPWATCH_EXACT_TEXT_TOOLS"] = ",".join(TOOLS)
        checkpoint = "default"
    if checkpoint is None:
        cmd = [sys.executable, "-m", "loopwatch.dashboard.cli", "import", str(path)]
        cmd += ["--success", "success", "--db", str(db), "--json", "--no-progress"]
    else:
        cmd = [sys.executable, "-c", _IMPORT_ONLY, str(path), str(db), checkpoint]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        child = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=env)
        # wait4 gives this child's own peak RSS (RUSAGE_CHILDREN is the largest child so far).
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - t0
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if child.returncode:
            raise SystemExit(f"import failed ({child.returncode}): {err.read()}")
        return json.loads(out.read()), wall, usage.ru_maxrss / 1024


def _name(variant: str | None) -> str:
    if variant in (None, "default", "exact"):
        return {None: "cli", "default": "import", "exact": "exact"}[variant]
    return f"ckpt {variant}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--layout", choices=("array", "jsonl"), default="array")
    ap.add_argument(
        "--variants",
        nargs="+",
        choices=("import", "cli", "exact"),
        default=["import", "cli"],
        help="the import alone, the CLI with its summary queries, and/or the import alone with "
        "volatile-text normalization off (default: import cli)",
    )
    ap.add_argument(
        "--compare-checkpoint",
        metavar="MB",
        nargs="+",
        help="also the import alone under these checkpoint thresholds, side by side; 'duckdb' "
        "is DuckDB's own (16 MB), e.g. --compare-checkpoint duckdb 64",
    )
    args = ap.parse_args()
    sizes = [max(args.messages // 4, 1000), args.messages]
    variants: list[str | None] = []
    if "import" in args.variants:
        variants.append("default")
    if "cli" in args.variants:
        variants.append(None)
    if "exact" in args.variants:
        variants.append("exact")
    variants += list(args.compare_checkpoint or [])
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for size in sizes:
            path = Path(tmp) / f"log-{size}.{'json' if args.layout == 'array' else 'jsonl'}"
            count = generate(path, size, args.layout)
            for variant in variants:
                db = Path(tmp) / f"lw-{size}-{variant}.duckdb"
                summary, wall, peak = run_import(path, db, variant)
                assert summary["messages"] == count, (summary["messages"], count)
                rows.append((variant, path.stat().st_size / 1e6, count, summary, wall, peak))
                db.unlink()
            path.unlink()
        print(
            f"{'variant':>10} {'file MB':>8} {'messages':>10} {'runs':>8} {'import s':>9} "
            f"{'process s':>10} {'msg/s':>9} {'peak RSS MB':>12}"
        )
        for variant, mb, count, summary, wall, peak in rows:
            name = _name(variant)
            print(
                f"{name:>10} {mb:8.1f} {count:10,} {summary['runs']:8,} "
                f"{summary['seconds']:9.1f} {wall:10.1f} {count / summary['seconds']:9,.0f} "
                f"{peak:12.0f}"
            )
        n = len(variants)
        for k, variant in enumerate(variants):
            small, large = rows[k], rows[n + k]
            name = _name(variant)
            print(
                f"{name}: file size ratio {large[2] / small[2]:.1f}x, "
                f"peak RSS ratio {large[5] / small[5]:.2f}x"
            )
        if "default" in variants and "exact" in variants:
            on, off = variants.index("default"), variants.index("exact")
            for base in (0, n):
                a, b = rows[base + on], rows[base + off]
                rate_on, rate_off = a[2] / a[3]["seconds"], b[2] / b[3]["seconds"]
                same = a[3]["decisions"] == b[3]["decisions"]
                print(
                    f"{a[2]:,} messages: normalization on {rate_on:,.0f} msg/s, off "
                    f"{rate_off:,.0f} msg/s: on / off = {rate_on / rate_off:.2f} "
                    f"(same decisions: {same})"
                )


if __name__ == "__main__":
    main()
