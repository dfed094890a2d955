"""Old import path, kept working: the code now lives in
:mod:`loopwatch.queries.ingest.synthetic`.
"""

from loopwatch.queries.ingest.synthetic import (
    BudgetTruth as BudgetTruth,
)
from loopwatch.queries.ingest.synthetic import (
    FleetTruth as FleetTruth,
)
from loopwatch.queries.ingest.synthetic import (
    SyntheticRun as SyntheticRun,
)
from loopwatch.queries.ingest.synthetic import (
    SyntheticSpan as SyntheticSpan,
)
from loopwatch.queries.ingest.synthetic import (
    TaskTypeTruth as TaskTypeTruth,
)
from loopwatch.queries.ingest.synthetic import (
    connect_store as connect_store,
)
from loopwatch.queries.ingest.synthetic import (
    generate_fleet as generate_fleet,
)
from loopwatch.queries.ingest.synthetic import (
    percentile as percentile,
)
from loopwatch.queries.ingest.synthetic import (
    write_runs as write_runs,
)
from loopwatch.queries.ingest.synthetic import (
    write_spans as write_spans,
)

__all__ = [
    "BudgetTruth",
    "FleetTruth",
    "SyntheticRun",
    "SyntheticSpan",
    "TaskTypeTruth",
    "connect_store",
    "generate_fleet",
    "percentile",
    "write_runs",
    "write_spans",
]
