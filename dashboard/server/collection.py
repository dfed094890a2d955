"""The cyclic garbage collector tuned for ``loopwatch serve`` (docs/serve.md, "Throughput").

Ingest makes many short-lived objects without cycles (decoded spans, Arrow batches, foreign
spans' views and their runs), and serve holds many long-lived ones (its modules, and the views of
foreign traces kept for late spans). At Python's default threshold (a collection every 700
allocations) the collector walks them over and over: ~10-20% of the writer's CPU time on a
stream of foreign spans. Serving, it runs less often, and the objects alive once serve has
started are moved out of its reach (``gc.freeze``): they live as long as the process.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import Final

__all__ = ["SERVING_THRESHOLD", "serving_collector"]

SERVING_THRESHOLD: Final = 50_000
"""Allocations between two young-generation collections while serving (Python's: 700); every
50,000 still collects whatever cycles appear."""


@contextlib.contextmanager
def serving_collector() -> Iterator[None]:
    """Collect less often inside the block, with what is alive now frozen; the process's own
    threshold is put back, and the frozen objects released, after."""
    own = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(own[0], SERVING_THRESHOLD), *own[1:])
    try:
        yield
    finally:
        gc.set_threshold(*own)
        gc.unfreeze()
