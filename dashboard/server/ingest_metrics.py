"""The receiver's own Prometheus metrics on ``loopwatch serve``'s ``/metrics`` (docs/serve.md).

Next to the span-derived metrics: what ``POST /v1/traces`` answered, the spans stored, the bytes
held, and whether the store commits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from .store_state import STATES, StoreHealth

if TYPE_CHECKING:
    from .ingest import Ingest

__all__ = ["IngestCollector", "IngestCounts"]


@dataclass(slots=True)
class IngestCounts:
    """Running totals since start-up (for ``/health`` and the serve's own metrics)."""

    requests: int = 0
    """Requests decoded or recognised (those refused before, e.g. 415 or 503, are not)."""
    spans_stored: int = 0
    spans_rejected: int = 0
    duplicates: int = 0
    """Requests recognised as retries of committed ones."""
    refused_busy: int = 0
    failures: int = 0
    """Requests whose commit failed."""
    answers: dict[int, int] = field(default_factory=dict)
    """``POST /v1/traces`` answers by HTTP status code."""


class IngestCollector:
    """The receiver's own Prometheus metrics, next to the span-derived ones on ``/metrics``:

    - ``loopwatch_ingest_requests_total{code}``: ``POST /v1/traces`` answers by HTTP status;
    - ``loopwatch_ingest_spans_total{result}``: spans ``stored`` or ``rejected``;
    - ``loopwatch_ingest_retries_total``: retried requests recognised (nothing stored again);
    - ``loopwatch_ingest_pending_bytes``: request bytes held, waiting for decoding and commit;
    - ``loopwatch_store_up``: 1 while the store commits, 0 while it fails or is unavailable;
    - ``loopwatch_store_state{state}``: 1 for the store's state (``ok``, ``failing``,
      ``unavailable``), 0 for the others;
    - ``loopwatch_store_failures_total``, ``loopwatch_store_reopens_total``: failed commits
      (and trial commits, reopens), and reopens of the store, since start-up.
    """

    def __init__(self, ingest: Ingest) -> None:
        self._ingest = ingest

    def describe(self) -> list[Metric]:
        return self._families(IngestCounts(), 0) + _store_families(StoreHealth("ok", "", 0.0, 0, 0))

    def collect(self) -> list[Metric]:
        counts, pending = self._ingest.snapshot()
        return self._families(counts, pending) + _store_families(self._ingest.store_health())

    @staticmethod
    def _families(counts: IngestCounts, pending: int) -> list[Metric]:
        requests = CounterMetricFamily(
            "loopwatch_ingest_requests",
            "OTLP export requests answered by loopwatch serve, by HTTP status code.",
            labels=("code",),
        )
        for code, n in sorted(counts.answers.items()):
            requests.add_metric((str(code),), n)
        spans = CounterMetricFamily(
            "loopwatch_ingest_spans",
            "Spans received by loopwatch serve: stored (committed) or rejected (partial success).",
            labels=("result",),
        )
        spans.add_metric(("stored",), counts.spans_stored)
        spans.add_metric(("rejected",), counts.spans_rejected)
        retries = CounterMetricFamily(
            "loopwatch_ingest_retries",
            "Retried requests recognised as already committed (their spans not stored again).",
        )
        retries.add_metric((), counts.duplicates)
        pending_bytes = GaugeMetricFamily(
            "loopwatch_ingest_pending_bytes",
            "Request bytes held by loopwatch serve, waiting to be decoded and committed.",
        )
        pending_bytes.add_metric((), pending)
        return [requests, spans, retries, pending_bytes]


def _store_families(health: StoreHealth) -> list[Metric]:
    up = GaugeMetricFamily(
        "loopwatch_store_up",
        "1 while loopwatch serve's store commits, 0 while commits fail or it is unavailable.",
    )
    up.add_metric((), 1 if health.state == "ok" else 0)
    state = GaugeMetricFamily(
        "loopwatch_store_state",
        "The store's state: 1 for the current one (ok, failing, unavailable), 0 for the others.",
        labels=("state",),
    )
    for name in STATES:
        state.add_metric((name,), 1 if health.state == name else 0)
    failures = CounterMetricFamily(
        "loopwatch_store_failures",
        "Failed commits, trial commits and reopens of the store since loopwatch serve started.",
    )
    failures.add_metric((), health.failures)
    reopens = CounterMetricFamily(
        "loopwatch_store_reopens",
        "Times loopwatch serve reopened its store after DuckDB invalidated it.",
    )
    reopens.add_metric((), health.reopens)
    return [up, state, failures, reopens]
