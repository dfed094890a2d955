"""How ``instrument(store=PATH)`` finds the store without importing the layer above it.

The telemetry layer never imports ``loopwatch.queries`` (imports point down only, see
docs/architecture.md). The store registers itself under the entry-point group
:data:`STORE_ENTRY_POINT_GROUP` in the distribution's metadata (``pyproject.toml``), and
:func:`find_store` loads it by name, the way OpenTelemetry finds exporters named in
``OTEL_TRACES_EXPORTER``. A caller who wants no lookup at all hands ``instrument()`` the
processor itself (``span_processors=[...]``), as the OpenTelemetry SDK does (docs/telemetry.md).
"""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path
from typing import Final, Protocol, runtime_checkable

from opentelemetry.sdk.trace import SpanProcessor

from ..runtime.extras import MissingExtraError

__all__ = ["DEFAULT_STORE", "STORE_ENTRY_POINT_GROUP", "StoreBackend", "StoreOutput", "find_store"]

STORE_ENTRY_POINT_GROUP: Final = "loopwatch.stores"
"""The entry-point group a store registers under (``pyproject.toml``)."""
DEFAULT_STORE: Final = "duckdb"
"""The store ``instrument(store=PATH)`` uses: the DuckDB file of ``loopwatch[store]``."""


@runtime_checkable
class StoreOutput(Protocol):
    """An opened store: the processor to add, and why it cannot write right now."""

    @property
    def processor(self) -> SpanProcessor:
        """The span processor that writes to the store (bounded, counting its losses)."""
        ...

    @property
    def error(self) -> str | None:
        """Why the store cannot be written now; ``None`` while it can."""
        ...


class StoreBackend(Protocol):
    """What a store entry point loads to: checks its settings, then opens a path."""

    def resolve_writer(self, value: str | None) -> str:
        """The writer setting to use (argument, else the environment); ``ValueError`` if bad."""
        ...

    def open(self, path: Path, *, writer: str) -> StoreOutput:
        """Open ``path`` for writing spans; an error to open is kept in ``error``, not raised."""
        ...


def find_store(name: str = DEFAULT_STORE) -> StoreBackend:
    """The store registered as ``name`` in :data:`STORE_ENTRY_POINT_GROUP`.

    Raises :class:`~loopwatch.instrumentation.runtime.extras.MissingExtraError` naming the ``store``
    extra when the store or its dependencies are not installed.
    """
    found = entry_points(group=STORE_ENTRY_POINT_GROUP, name=name)
    if not found:
        raise MissingExtraError("store", f"instrument(store=...) with store {name!r}", None)
    (entry,) = tuple(found)[:1]
    try:
        backend: StoreBackend = entry.load()
    except MissingExtraError:
        raise
    except ImportError as exc:
        raise MissingExtraError.of("store", entry.value, exc) from exc
    return backend
