"""What ``import loopwatch.instrumentation`` costs an agent process at start-up.

Starts a fresh interpreter N times for each of: nothing (``pass``), ``import
loopwatch.instrumentation`` (every name is lazy: this loads nothing else), the runtime names an
agent uses (``run``, ``LoopGuard``, ``LoopLimits``, ``ToolRegistry``), and the telemetry entry
point (``instrument``, which loads OpenTelemetry and prometheus_client when the ``otel``
extra is installed), interleaved, and prints the medians and the import's own cost (the
difference with the bare interpreter). Target: the runtime import ≤ 50 ms. Also says which heavy
modules the runtime import pulled in (none expected).

    python benchmarks/bench_startup.py [--rounds N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

VARIANTS = {
    "bare interpreter": "pass",
    "import loopwatch.instrumentation": "import loopwatch.instrumentation",
    "+ the runtime (run, LoopGuard, ...)": (
        "from loopwatch.instrumentation import LoopGuard, LoopLimits, ToolRegistry, run"
    ),
    "+ instrument (otel extra)": "import loopwatch.instrumentation as li; li.instrument",
}
HEAVY = ("opentelemetry", "prometheus_client", "duckdb", "pyarrow", "streamlit", "pandas")


def _time(code: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(args.rounds):
        for name, code in VARIANTS.items():
            times[name].append(_time(code))
    bare = statistics.median(times["bare interpreter"])
    print(f"median of {args.rounds} fresh interpreters each, interleaved")
    for name, samples in times.items():
        median = statistics.median(samples)
        print(f"{name:36} {median * 1e3:7.1f} ms   (+{(median - bare) * 1e3:6.1f} ms)")
    own = statistics.median(times["import loopwatch.instrumentation"]) - bare
    print(
        f"import loopwatch.instrumentation costs {own * 1e3:.1f} ms (target <= 50 ms):"
        f" {'PASS' if own <= 0.05 else 'OVER'}"
    )
    probe = subprocess.run(
        [sys.executable, "-c",
         "import sys, loopwatch.instrumentation; "
         f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r}))"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    print(f"heavy modules loaded by the runtime import: {probe.stdout.strip()}")


if __name__ == "__main__":
    main()
