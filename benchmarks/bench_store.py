"""Store ingest speed and exporter memory, measured side by side in one run.

1. Ingest: the same batches of finished SDK spans (realistic loopwatch attributes) stored three
   ways: by the exporter's ``inline`` writer (``Store.write``: conversion + Arrow insert
   + runs rows, one transaction per batch), by its ``process`` writer (conversion here, insert
   in the writer process, the next batch converted while the last commits), and by the raw
   Arrow insert of the very same rows, prebuilt, into an identical file. Blocks of batches go
   to every side, the sides taking turns going first, so machine noise hits all alike.
   Targets: >= 100k spans/s, and >= 0.5x the raw rate.
2. Memory: an agent producing spans faster than the store writes them, through
   ``CountingBatchSpanProcessor`` + ``DuckDBSpanExporter``: peak spans held stays within the
   queue size, the overflow is counted as dropped (``queue_full``), and traced memory stays flat.

    python benchmarks/bench_store.py [--quick] [--spans N] [--batch B] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import pstats
import random
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Final

import duckdb
import pyarrow as pa
from loopwatch.instrumentation import semconv as sc
from loopwatch.instrumentation.runtime.drops import dropped, reset_drops
from loopwatch.queries.store.database import (
    SpanBatch,
    Store,
    records_from_spans,
    runs_table,
    spans_table,
)
from loopwatch.queries.store.exporter import (
    STORE_CHECKPOINT_MB,
    STORE_MAX_EXPORT_BATCH_SIZE,
    STORE_MAX_QUEUE_SIZE,
    STORE_THREADS,
    CountingBatchSpanProcessor,
    DuckDBSpanExporter,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, Status, StatusCode

TOOLS = ("read_file", "search", "list_dir", "http_get", "run_tests")
TASKS = ("support_ticket", "code_fix", "research", "triage")
REASONS = (("completed", "success", None), ("max_steps", "limit", "steps"))


class _Collect(SpanProcessor):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.spans.append(span)


def _budget(step: int, calls: int, tools: int, tokens: int) -> dict[str, float | int]:
    used = {"steps": step, "model_calls": calls, "tool_calls": tools, "tokens": tokens}
    attrs: dict[str, float | int] = {sc.budget_used(k): v for k, v in used.items()}
    attrs[sc.budget_used("cost_usd")] = tokens * 2e-6
    attrs[sc.budget_used("wall_s")] = step * 1.7
    attrs[sc.budget_limit("steps")] = 8
    attrs[sc.budget_limit("tokens")] = 50_000
    attrs[sc.budget_limit("wall_s")] = 300.0
    attrs[sc.BUDGET_MAX_UTILIZATION] = step / 8
    return attrs


def emit_runs(tracer_provider: TracerProvider, n_spans: int, rng: random.Random) -> None:
    """End at least ``n_spans`` spans shaped like an instrumented loop's (docs/telemetry.md)."""
    tracer = tracer_provider.get_tracer("bench")
    made = 0
    while made < n_spans:
        run_id = f"{rng.getrandbits(64):016x}"
        task = rng.choice(TASKS)
        common = {sc.RUN_ID: run_id, sc.TASK_TYPE: task}
        steps = rng.randint(1, 8)
        calls = tools = tokens = 0
        with tracer.start_as_current_span(
            "invoke_agent bench-agent",
            kind=SpanKind.INTERNAL,
            attributes={
                sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT,
                sc.GEN_AI_AGENT_NAME: "bench-agent",
                sc.LIMITS_VERSION: "a1b2c3d4",
                **common,
            },
        ) as run:
            for step in range(1, steps + 1):
                with tracer.start_as_current_span(f"step {step}") as step_span:
                    step_span.set_attributes({sc.STEP_INDEX: step, **common})
                    calls += 1
                    with tracer.start_as_current_span("chat gpt-4o", kind=SpanKind.CLIENT) as chat:
                        t_in, t_out = rng.randint(500, 4000), rng.randint(20, 400)
                        tokens += t_in + t_out
                        chat.set_attributes(
                            {
                                sc.GEN_AI_OPERATION_NAME: sc.OP_CHAT,
                                sc.STEP_INDEX: step,
                                sc.GEN_AI_REQUEST_MODEL: "gpt-4o",
                                sc.GEN_AI_RESPONSE_FINISH_REASONS: ["tool_calls"],
                                sc.GEN_AI_USAGE_INPUT_TOKENS: t_in,
                                sc.GEN_AI_USAGE_OUTPUT_TOKENS: t_out,
                                sc.COST_USD: (t_in + t_out) * 2e-6,
                                **common,
                                **_budget(step, calls, tools, tokens),
                            }
                        )
                    made += 2
                    for _ in range(rng.randint(0, 2)):
                        tools += 1
                        tool = rng.choice(TOOLS)
                        ok = rng.random() < 0.8
                        with tracer.start_as_current_span(f"execute_tool {tool}") as ts:
                            attrs: dict[str, object] = {
                                sc.GEN_AI_OPERATION_NAME: sc.OP_EXECUTE_TOOL,
                                sc.GEN_AI_TOOL_NAME: tool,
                                sc.GEN_AI_TOOL_CALL_ID: f"call_{rng.getrandbits(48):012x}",
                                sc.TOOL_FINGERPRINT: f"{rng.getrandbits(48):012x}",
                                sc.RESULT_FINGERPRINT: f"{rng.getrandbits(48):012x}",
                                sc.TOOL_STATUS: "ok" if ok else "error",
                                sc.TOOL_RETRIES: 0,
                                sc.STEP_INDEX: step,
                                **common,
                                **_budget(step, calls, tools, tokens),
                            }
                            if not ok:
                                attrs[sc.ERROR_TYPE] = "NOT_FOUND"
                                attrs[sc.ERROR_CODE] = "NOT_FOUND"
                                attrs[sc.ERROR_FINGERPRINT] = f"{tool}:NOT_FOUND"
                                ts.set_status(Status(StatusCode.ERROR, "NOT_FOUND"))
                                ts.add_event(sc.EVENT_RETRY, {"attempt": 1, "delay_s": 0.2})
                            ts.set_attributes(attrs)  # type: ignore[arg-type]
                        made += 1
                    step_span.set_attributes(
                        {
                            sc.GUARD_DECISION: "continue" if step < steps else "completed",
                            **_budget(step, calls, tools, tokens),
                        }
                    )
            reason, outcome, limit = rng.choice(REASONS)
            run_attrs: dict[str, object] = {
                sc.STOP_REASON: reason,
                sc.OUTCOME: outcome,
                sc.STOP_EXPLANATION: f"Stopped at step {steps}: it's done ('quoted').",
                sc.GEN_AI_USAGE_INPUT_TOKENS: tokens,
                sc.GEN_AI_USAGE_OUTPUT_TOKENS: tokens // 10,
                sc.COST_USD: tokens * 2e-6,
                sc.PROGRESS_RECENT_NEW_CALLS: 2,
                sc.PROGRESS_MAX_SAME_ERROR: 1,
                sc.PROGRESS_MAX_SAME_CALL: 1,
                **_budget(steps, calls, tools, tokens),
            }
            if limit:
                run_attrs[sc.LIMIT] = limit
                run_attrs[sc.ERROR_TYPE] = reason
            run.set_attributes(run_attrs)  # type: ignore[arg-type]
        made += 1


def make_sample() -> list[ReadableSpan]:
    provider, collect = make_provider()
    emit_runs(provider, 10, random.Random(0))
    return collect.spans


def make_provider() -> tuple[TracerProvider, _Collect]:
    provider = TracerProvider(resource=Resource.create({"service.name": "bench"}))
    collect = _Collect()
    provider.add_span_processor(collect)
    return provider, collect


def _timed(fn: Callable[[], object], profiler: cProfile.Profile | None) -> float:
    if profiler:
        profiler.enable()
    t0 = time.perf_counter()
    fn()
    elapsed = time.perf_counter() - t0
    if profiler:
        profiler.disable()
    return elapsed


def _raw_insert(raw: duckdb.DuckDBPyConnection, spans: pa.Table, runs: pa.Table | None) -> None:
    """The reference: the same rows, already in Arrow, inserted with plain SQL in one commit."""
    raw.begin()
    raw.register("raw_spans", spans)
    raw.execute("INSERT INTO spans BY NAME SELECT * FROM raw_spans")
    if runs is not None:
        raw.register("raw_runs", runs)
        raw.execute(
            "INSERT INTO runs BY NAME SELECT *, make_timestamp(start_ns // 1000) AS started_at "
            "FROM raw_runs"
        )
    raw.commit()


def _pipelined(exporter: DuckDBSpanExporter, batches: Sequence[Sequence[ReadableSpan]]) -> None:
    """Export as CountingBatchSpanProcessor does: begin batch N+1, then wait for batch N."""
    pending: Callable[[], SpanExportResult] | None = None
    for batch in batches:
        started = exporter.begin_export(batch)
        if pending is not None and pending() is not SpanExportResult.SUCCESS:
            raise RuntimeError("an export failed")
        pending = started
    if pending is not None and pending() is not SpanExportResult.SUCCESS:
        raise RuntimeError("an export failed")


def _write_sdk(store: Store) -> Callable[[Sequence[ReadableSpan]], int]:
    return lambda spans: store.write(SpanBatch.from_sdk_spans(spans))


def _each(fn: Callable[..., object], calls: Sequence[tuple[Any, ...]]) -> None:
    for args in calls:
        fn(*args)


SIDES: Final = ("inline", "process", "raw")
"""The ingest sides: inline store writes, the writer process, the raw Arrow insert."""


def bench_ingest(
    total: int, batch: int, workdir: Path, profile: bool, per_block: int = 20
) -> dict[str, float]:
    """Spans/s of each side over the same batches, block by block, sides taking turns first.

    inline: ``Store.write`` per batch, as ``DuckDBSpanExporter(writer="inline")`` does.
    process: ``DuckDBSpanExporter(writer="process")`` driven as the processor drives it (the
    next batch converted while the writer process commits the last), through the block.
    raw: the block's rows, prebuilt in Arrow, inserted with plain SQL, one commit per batch.
    """
    provider, collect = make_provider()
    rng = random.Random(7)
    # All files opened the way DuckDBSpanExporter opens its store: same schema, same settings.
    store = Store(
        workdir / "store.duckdb", threads=STORE_THREADS, checkpoint_mb=STORE_CHECKPOINT_MB
    )
    raw = Store(
        workdir / "raw.duckdb", threads=STORE_THREADS, checkpoint_mb=STORE_CHECKPOINT_MB
    ).connection
    exporter = DuckDBSpanExporter(workdir / "process.duckdb", writer="process")
    spent = dict.fromkeys(SIDES, 0.0)
    done = rounds = 0
    profiler = cProfile.Profile() if profile else None
    warm_up = True  # the first block pays one-time imports and allocations on every side
    while done < total:
        block = []
        for _ in range(per_block):
            collect.spans.clear()
            emit_runs(provider, batch, rng)
            block.append(collect.spans[:batch])
        # The raw side inserts the same rows, already in Arrow (built outside the timing).
        prebuilt = []
        for spans in block:
            records = records_from_spans(spans)
            prebuilt.append((spans_table(records), runs_table(records)))
        del records
        sides: dict[str, Callable[[], object]] = {
            "inline": partial(_each, _write_sdk(store), [(spans,) for spans in block]),
            "process": partial(_pipelined, exporter, block),
            "raw": partial(_each, partial(_raw_insert, raw), prebuilt),
        }
        # Rotate which side goes first: the first writes after a block is made run slower
        # (cold caches), whichever side they are.
        order = SIDES[rounds % 3 :] + SIDES[: rounds % 3]
        rounds += 1
        timed: dict[str, float] = {}
        for side in order:
            gc.collect()
            gc.disable()  # a collection in a timed region would be charged to it
            try:
                timed[side] = _timed(sides[side], profiler if side == "inline" else None)
            finally:
                gc.enable()
        if warm_up:
            warm_up = False
            continue
        for side, dt in timed.items():
            spent[side] += dt
        done += sum(map(len, block))
    store.close()
    raw.close()
    exporter.shutdown()
    if profiler:
        pstats.Stats(profiler).sort_stats(os.environ.get("BENCH_SORT", "cumulative")).print_stats(
            25
        )
    return {side: done / spent[side] for side in SIDES}


class _SlowExporter(DuckDBSpanExporter):
    """The real exporter on a slow disk: every batch also waits ``delay`` seconds."""

    def __init__(self, path: Path, delay: float, writer: str) -> None:
        super().__init__(path, writer=writer)
        self.delay = delay

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        time.sleep(self.delay)
        return super().export(spans)

    def begin_export(self, spans: Sequence[ReadableSpan]) -> Callable[[], SpanExportResult]:
        time.sleep(self.delay)
        return super().begin_export(spans)


EXPORT_DELAY_S = 1.0
"""Extra time every export takes in the memory run: a store far slower than the agent."""


class _Count(SpanProcessor):
    def __init__(self) -> None:
        self.ended = 0

    def on_end(self, span: ReadableSpan) -> None:
        self.ended += 1


def bench_memory(
    total: int,
    workdir: Path,
    name: str,
    make: Callable[[SpanExporter], SpanProcessor],
    writer: str = "inline",
) -> dict[str, float]:
    """Spans ended, stored, counted as dropped, peak held and traced memory for one processor."""
    reset_drops()
    path = workdir / f"mem-{name}.duckdb"
    provider = TracerProvider(resource=Resource.create({"service.name": "bench"}))
    ended = _Count()
    processor = make(_SlowExporter(path, delay=EXPORT_DELAY_S, writer=writer))
    provider.add_span_processor(ended)
    provider.add_span_processor(processor)
    peak = 0
    stop = threading.Event()

    def watch() -> None:
        nonlocal peak
        while not stop.is_set():
            if isinstance(processor, CountingBatchSpanProcessor):
                peak = max(peak, processor.held)
            time.sleep(0.001)

    watcher = threading.Thread(target=watch, daemon=True)
    # One-time imports (pyarrow pulls in pandas on first use) are not queue memory.
    spans_table(records_from_spans(make_sample()))
    gc.collect()
    tracemalloc.start()
    watcher.start()
    emit_runs(provider, total // 4, random.Random(1))
    _, first_peak = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    emit_runs(provider, total - total // 4, random.Random(2))
    _, rest_peak = tracemalloc.get_traced_memory()
    stop.set()
    watcher.join()
    tracemalloc.stop()
    provider.shutdown()
    if isinstance(processor, CountingBatchSpanProcessor):
        peak = max(peak, processor.stats().peak_held)
    with Store(path, read_only=True) as st:
        row = st.connection.execute("SELECT count(*) FROM spans").fetchone()
        stored = int(row[0]) if row else 0
    return {
        "ended": ended.ended,
        "stored": stored,
        "counted": sum(dropped().values()),
        "peak_held": peak,
        "first_peak_mb": first_peak / 1e6,
        "rest_peak_mb": rest_peak / 1e6,
    }


def _meets(rate: float, raw_rate: float) -> bool:
    return rate >= 100_000 and rate >= 0.5 * raw_rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run (~20k spans)")
    parser.add_argument("--spans", type=int, default=200_000)
    parser.add_argument("--batch", type=int, nargs="*", default=[512, 2048])
    parser.add_argument("--profile", action="store_true", help="cProfile the store side")
    parser.add_argument(
        "--block",
        type=int,
        default=20,
        help="batches per block: the writer process's pipeline fills and drains once a block "
        "(a running exporter's does not)",
    )
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--skip-ingest", action="store_true")
    args = parser.parse_args()
    total = 20_000 if args.quick else args.spans
    with tempfile.TemporaryDirectory(prefix="bench_store_") as tmp:
        workdir = Path(tmp)
        print(
            f"store ingest, {total:,} spans per batch size, blocks of {args.block} batches "
            f"(cpus: {os.cpu_count()})"
        )
        print(
            f"{'batch':>6} {'inline spans/s':>15} {'process spans/s':>16} {'raw spans/s':>12} "
            f"{'inline/raw':>11} {'process/raw':>12}  verdict (>=100k/s, >=0.5x raw)"
        )
        for batch in [] if args.skip_ingest else args.batch:
            for f in workdir.glob("*.duckdb*"):
                f.unlink()
            rates = bench_ingest(total, batch, workdir, args.profile, args.block)
            verdicts = [
                f"{side} {'ok' if _meets(rates[side], rates['raw']) else 'BELOW TARGET'}"
                for side in ("inline", "process")
            ]
            print(
                f"{batch:>6} {rates['inline']:>15,.0f} {rates['process']:>16,.0f} "
                f"{rates['raw']:>12,.0f} {rates['inline'] / rates['raw']:>11.2f} "
                f"{rates['process'] / rates['raw']:>12.2f}  {', '.join(verdicts)}"
            )
        if args.skip_memory:
            return
        queue, batch = STORE_MAX_QUEUE_SIZE, STORE_MAX_EXPORT_BATCH_SIZE
        mem_total = 20_000 if args.quick else 60_000
        print(
            f"\nexporter memory, {mem_total:,} spans from an agent faster than the store "
            f"(each export also waits {EXPORT_DELAY_S * 1000:.0f} ms), "
            f"queue {queue}, batch {batch}:"
        )
        print(
            f"{'processor':<34} {'ended':>7} {'stored':>7} {'counted':>8} {'uncounted':>10} "
            f"{'peak held':>10} {'MB 1st quarter':>15} {'MB rest':>8}"
        )
        processors: list[tuple[str, Callable[[SpanExporter], SpanProcessor]]] = [
            (
                "CountingBatchSpanProcessor",
                lambda e: CountingBatchSpanProcessor(
                    e, max_queue_size=queue, max_export_batch_size=batch, schedule_delay_millis=50
                ),
            ),
            (
                "same, writer process (pipelined)",
                lambda e: CountingBatchSpanProcessor(
                    e, max_queue_size=queue, max_export_batch_size=batch, schedule_delay_millis=50
                ),
            ),
            (
                "SDK BatchSpanProcessor",
                lambda e: BatchSpanProcessor(
                    e, max_queue_size=queue, max_export_batch_size=batch, schedule_delay_millis=50
                ),
            ),
            (
                "unbounded queue (reference)",
                lambda e: CountingBatchSpanProcessor(
                    e, max_queue_size=10**9, max_export_batch_size=batch, schedule_delay_millis=50
                ),
            ),
        ]
        for i, (label, make) in enumerate(processors):
            writer = "process" if "writer process" in label else "inline"
            m = bench_memory(mem_total, workdir, str(i), make, writer)
            uncounted = m["ended"] - m["stored"] - m["counted"]
            held = f"{m['peak_held']:,.0f}" if m["peak_held"] else "n/a"
            print(
                f"{label:<34} {m['ended']:>7,.0f} {m['stored']:>7,.0f} {m['counted']:>8,.0f} "
                f"{uncounted:>10,.0f} {held:>10} {m['first_peak_mb']:>15.1f} "
                f"{m['rest_peak_mb']:>8.1f}"
            )
        print(
            "  bounded = peak held <= queue size and the MB flat after the first quarter; "
            "every span is either stored or counted (uncounted 0)."
        )


if __name__ == "__main__":
    main()
