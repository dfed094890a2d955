"""Results the pages share across sessions while the store stays the same (docs/dashboard.md,
"Speed").

The limits file fit (the successful runs of the window, the joint judgement, the back-test) is
the costliest thing a page computes, and every viewer of the same window would compute the same
answer. :func:`shared` keeps the few newest results per process, keyed by what they were
computed from: the page's key (filters, the window's runs per task type) and the store's
*version*, :func:`store_version`, which changes with every committed write (the store file and
its write-ahead log change size or time), feedback labels included.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, Final, TypeVar

__all__ = ["SHARED_ENTRIES", "clear_shared", "shared", "store_version"]

T = TypeVar("T")

SHARED_ENTRIES: Final = 16
"""Results kept per process (the newest; a few windows and filters of a few stores)."""

_lock = threading.Lock()
_entries: OrderedDict[Hashable, Any] = OrderedDict()


def store_version(path: Path) -> tuple[int, ...]:
    """Size and modification time of the store file and its write-ahead log (``-1`` where one
    is missing): a committed write changes them."""
    out: list[int] = []
    for p in (path, Path(f"{path}.wal")):
        try:
            st = os.stat(p)
        except OSError:
            out += [-1, -1]
        else:
            out += [st.st_size, st.st_mtime_ns]
    return tuple(out)


def shared(key: Hashable, compute: Callable[[], T]) -> T:
    """``compute()``, or what it returned for ``key`` before in this process. Two sessions
    asking at once may both compute; the later answer is kept."""
    with _lock:
        if key in _entries:
            _entries.move_to_end(key)
            hit: T = _entries[key]
            return hit
    value = compute()
    with _lock:
        _entries[key] = value
        while len(_entries) > SHARED_ENTRIES:
            _entries.popitem(last=False)
    return value


def clear_shared() -> None:
    """Forget every shared result (benchmarks measure a first computation with it)."""
    with _lock:
        _entries.clear()
