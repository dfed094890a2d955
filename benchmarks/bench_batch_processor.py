"""The SDK's ``BatchSpanProcessor`` and loopwatch's ``CountingBatchSpanProcessor``, side by side.

Spans are ended faster than a slow exporter drains them (it sleeps per batch and refuses every
third batch), then the processor is shut down with a short timeout while spans are still queued.
For each processor it prints:

- peak held: the most ended spans alive at once (counted exactly: a finalizer on every span;
  a span being refused is alive while it is refused, hence loopwatch's queue size + 1);
- counted losses: what the processor reports (loopwatch: ``loopwatch_telemetry_dropped_total``
  by reason; the SDK: its ``otel.sdk.processor.span.processed`` metric with ``error.type``,
  read with internal metrics switched on);
- actual losses: spans ended minus spans the exporter accepted.

A processor "counts every loss" when counted equals actual. The findings are written down in
docs/telemetry.md (*The SDK's batch processor*).

    python benchmarks/bench_batch_processor.py [--spans N] [--delay-ms N]
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

os.environ["OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED"] = "true"  # before the SDK reads it

from importlib.metadata import version

from loopwatch.instrumentation.runtime.drops import dropped, reset_drops
from loopwatch.instrumentation.telemetry.processor import CountingBatchSpanProcessor
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

QUEUE, BATCH, SCHEDULE_MS = 2048, 512, 50
SHUTDOWN_MS = 100


class SlowExporter(SpanExporter):
    """Sleeps per batch, refuses every third batch; remembers what it accepted."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.batches = 0
        self.accepted = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        time.sleep(self.delay_s)
        self.batches += 1
        if self.batches % 3 == 0:
            return SpanExportResult.FAILURE
        self.accepted += len(spans)
        return SpanExportResult.SUCCESS


class HeldCounter(SpanProcessor):
    """Counts ended spans still alive (a finalizer per span): what the pipeline holds."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.ended = 0
        self.alive = 0
        self.peak = 0

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            self.ended += 1
            self.alive += 1
            self.peak = max(self.peak, self.alive)
        weakref.finalize(span, self._gone)

    def _gone(self) -> None:
        with self._lock:
            self.alive -= 1


@dataclass
class Result:
    name: str
    ended: int
    peak_held: int
    counted: dict[str, int]
    actual: int


def _push(provider: TracerProvider, n: int) -> None:
    tracer = provider.get_tracer("bench")
    for i in range(n):
        tracer.start_span(f"s{i}").end()


def _measure(
    name: str, make: Callable[[SlowExporter], SpanProcessor], n: int, delay: float
) -> Result:
    reset_drops()
    exporter = SlowExporter(delay)
    held = HeldCounter()
    provider = TracerProvider()
    provider.add_span_processor(held)
    processor = make(exporter)
    provider.add_span_processor(processor)
    _push(provider, n)
    processor.shutdown()
    time.sleep(delay * 2)  # an export still running after shutdown gave up may finish
    return Result(name, held.ended, held.peak, {}, held.ended - exporter.accepted)


def _sdk_losses(reader: InMemoryMetricReader) -> dict[str, int]:
    losses: dict[str, int] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name != "otel.sdk.processor.span.processed":
                    continue
                for point in metric.data.data_points:  # type: ignore[union-attr]
                    kind = (point.attributes or {}).get("error.type")
                    if kind is not None:
                        losses[str(kind)] = losses.get(str(kind), 0) + int(point.value)
    return losses


def run(n: int, delay_ms: float) -> list[Result]:
    delay = delay_ms / 1000
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])

    def sdk(exporter: SlowExporter) -> SpanProcessor:
        return BatchSpanProcessor(
            exporter, QUEUE, SCHEDULE_MS, BATCH, SHUTDOWN_MS, meter_provider=meters
        )

    def ours(exporter: SlowExporter) -> SpanProcessor:
        return CountingBatchSpanProcessor(
            exporter, QUEUE, SCHEDULE_MS, BATCH, shutdown_timeout_millis=SHUTDOWN_MS
        )

    # The SDK's BatchSpanProcessor.shutdown() takes no timeout: it waits OTEL_BSP_EXPORT_TIMEOUT.
    os.environ["OTEL_BSP_EXPORT_TIMEOUT"] = str(SHUTDOWN_MS)
    theirs = _measure(f"SDK BatchSpanProcessor {version('opentelemetry-sdk')}", sdk, n, delay)
    theirs.counted = _sdk_losses(reader)
    mine = _measure("loopwatch CountingBatchSpanProcessor", ours, n, delay)
    mine.counted = dropped()
    return [theirs, mine]


def _print(results: list[Result]) -> None:
    print(f"queue {QUEUE}, batch {BATCH}, shutdown wait {SHUTDOWN_MS} ms")
    print(
        f"{'processor':40} {'ended':>7} {'peak held':>10} {'counted':>8} {'actual':>7}  by reason"
    )
    for r in results:
        counted = sum(r.counted.values())
        reasons = ", ".join(f"{k}={v}" for k, v in sorted(r.counted.items())) or "-"
        print(f"{r.name:40} {r.ended:>7} {r.peak_held:>10} {counted:>8} {r.actual:>7}  {reasons}")
    theirs, mine = results
    print(
        f"peak held, SDK / loopwatch: {theirs.peak_held / max(mine.peak_held, 1):.2f}; "
        f"losses counted, SDK {sum(theirs.counted.values())} of {theirs.actual}, "
        f"loopwatch {sum(mine.counted.values())} of {mine.actual}"
    )


def main(argv: list[str] | None = None) -> int:
    logging.getLogger("opentelemetry").setLevel(logging.ERROR)  # "Queue full" once per span
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spans", type=int, default=20_000, help="spans ended (default 20000)")
    parser.add_argument("--delay-ms", type=float, default=50.0, help="export time per batch")
    parser.add_argument("--shutdown-ms", type=int, default=SHUTDOWN_MS, help="shutdown wait")
    args = parser.parse_args(argv)
    globals()["SHUTDOWN_MS"] = args.shutdown_ms
    _print(run(args.spans, args.delay_ms))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
