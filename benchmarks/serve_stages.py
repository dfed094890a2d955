"""serve's path per span, stage by stage, in this process (used by ``bench_serve.py``).

The same steps as serve's decoder thread and writer thread, one after the other on the same
bodies, each timed in CPU seconds of this process (``time.process_time``: DuckDB's threads
included, other processes on the machine excluded), so that the figures hold still on a shared
machine where the end-to-end ones do not:

- decode: the OTLP body into columns (``decode_request``);
- Arrow batch: the store's Arrow tables (``SpanBatch.from_columns``);
- foreign views: the foreign spans as views (``views_of``; foreign streams only);
- commit: ``Store.write`` of the requests a writer pass takes together (``--per-commit``);
- metrics: the run and tool spans fed to the span-to-metrics derivation;
- foreign runs: the assembler taking each commit's views, the traces final after the grace
  rebuilt into runs and rows (``TraceAssembler.add`` / ``tables``), at most once per
  ``ForeignOptions.build_interval_s`` as serve's writer builds them;
- derived write: ``Store.write_derived`` of those rows.

The garbage collector is tuned as serve tunes it (``dashboard/server/collection.py``).

With ``housekeeping``, serve's housekeeping thread (retention, rollups every second, the
archive) runs on the same store meanwhile, as ``serve --rollup-every-s 1 --archive DIR`` runs
it: its CPU seconds count in the total (they are the cost it adds), and the commit stage shows
what it steals from the writer.
"""

from __future__ import annotations

import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any


def stage_rates(
    bodies: list[tuple[int, bytes]], *, foreign: bool, grace_s: float, per_commit: int = 4,
    housekeeping: bool = False,
) -> tuple[dict[str, float], float]:  # fmt: skip
    """(stage -> CPU seconds, total CPU seconds) for serve's path over ``bodies``."""
    from loopwatch.dashboard.server.collection import serving_collector
    from loopwatch.dashboard.server.housekeeping import Housekeeper
    from loopwatch.instrumentation.telemetry.metrics import SPAN_PREFIXES, MetricsSpanProcessor
    from loopwatch.queries.ingest.foreign import (
        DEFAULT_TASK_TYPE_KEYS,
        ForeignOptions,
        TraceAssembler,
        views_of,
    )
    from loopwatch.queries.ingest.otlp import decode_request
    from loopwatch.queries.store.archive import Archiver, ArchiveTarget
    from loopwatch.queries.store.columns import SpanBatch
    from loopwatch.queries.store.database import Store
    from loopwatch.queries.store.retention import RetentionPolicy

    spent: dict[str, float] = defaultdict(float)
    clock = time.process_time

    def timed(stage: str, work: Any, *args: Any, **kwargs: Any) -> Any:
        t0 = clock()
        out = work(*args, **kwargs)
        spent[stage] += clock() - t0
        return out

    metrics = MetricsSpanProcessor()
    assembler = TraceAssembler(ForeignOptions(grace_s=grace_s))
    with tempfile.TemporaryDirectory() as tmp, serving_collector():
        store = Store(Path(tmp) / "stages.duckdb")
        keeper = None
        if housekeeping:
            archiver = Archiver(ArchiveTarget.parse(str(Path(tmp) / "archive")), "bench")
            keeper = Housekeeper(store, RetentionPolicy(), lambda: True, rollup_interval_s=1.0,
                                 archiver=archiver)  # fmt: skip
            keeper.start()
        t_start = clock()
        try:
            for i in range(0, len(bodies), per_commit):
                batches, views, observed = [], [], []
                for k, (_, body) in enumerate(bodies[i : i + per_commit]):
                    cols = timed("decode", decode_request, body, "application/x-protobuf").columns
                    batches.append(timed("Arrow batch", SpanBatch.from_columns, cols,
                                         deliveries=(f"k{i + k}",)))  # fmt: skip
                    if foreign:
                        views += timed("foreign views", views_of, cols, DEFAULT_TASK_TYPE_KEYS)
                    observed += [
                        (cols.attributes[j], cols.start_ns[j], cols.end_ns[j], cols.trace_id[j])
                        for j, name in enumerate(cols.name)
                        if name.startswith(SPAN_PREFIXES)
                    ]
                timed("commit", store.write, SpanBatch.concat(batches))
                t0 = clock()
                for attributes, start, end, trace_id in observed:
                    metrics.observe_span_record(attributes, start_time_ns=start,
                                                end_time_ns=end, trace_id=trace_id)  # fmt: skip
                spent["metrics"] += clock() - t0
                if foreign:
                    timed("foreign runs", assembler.add, views)
                    _derive(timed, store, assembler, everything=False)
            if foreign:
                time.sleep(grace_s)
                _derive(timed, store, assembler, everything=True)
        finally:
            total = clock() - t_start
            if keeper is not None:
                keeper.stop()
                spent["(rollup passes)"] = keeper.rollups
                spent["(housekeeping errors)"] = keeper.errors
            store.close()
    return dict(spent), total


def _derive(timed: Any, store: Any, assembler: Any, *, everything: bool) -> None:
    # paced as serve's writer builds them: at most once per build_interval_s
    tables = timed("foreign runs", lambda: assembler.tables(everything=everything, paced=True))
    if tables is not None:
        timed("derived write", store.write_derived, *tables)


def print_stages(
    label: str, spans: int, spent: dict[str, float], total: float
) -> None:  # fmt: skip
    """One line per stage: spans per CPU second of that stage alone, and its share."""
    print(f"  {label}: {spans / total:,.0f} spans per CPU second over the whole path "
          f"({total:.2f} CPU s)")  # fmt: skip
    for stage, seconds in spent.items():
        if stage.startswith("("):
            print(f"    {stage:14} {seconds:>12,.0f}")
            continue
        rate = spans / seconds if seconds else float("inf")
        print(f"    {stage:14} {rate:>12,.0f} spans/CPU s  {100 * seconds / total:5.1f}%")
