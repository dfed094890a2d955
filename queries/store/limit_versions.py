"""The limit sets ``loopwatch serve`` holds, one version per change (docs/serve.md, "Limits held
by serve").

Every change — apply, set a shadow candidate, promote it, roll back — appends a version with the
whole limits file (``LimitPolicy.to_toml``), who made it, when, the note and the recommendation it
came from; nothing is ever updated or deleted, so the history is the table. The current set is the
highest version. Writes are compare-and-set: the caller names the version it saw, and a version
that moved meanwhile refuses the write (:class:`VersionMoved`) with nothing changed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import duckdb
from loopwatch.instrumentation.runtime.limits import LimitPolicy, LoopLimits

from .database import Store

__all__ = [
    "ACTIONS",
    "LimitChange",
    "LimitVersion",
    "VersionMoved",
    "append_version",
    "current_version",
    "diff_policies",
    "get_version",
    "parse_document",
    "task_versions",
    "version_history",
]

ACTIONS: Final = ("apply", "shadow", "promote", "rollback")
"""What a version records: a set applied, a shadow candidate set, a candidate promoted, a roll
back to an earlier version."""

_COLUMNS: Final = (
    "version, action, document, task_versions, created_at, who, note, recommendation, based_on"
)


class VersionMoved(Exception):
    """The current version is not the one the writer saw: someone changed the limits meanwhile."""

    def __init__(self, expected: int, current: int) -> None:
        super().__init__(
            f"the limits moved: you saw version {expected}, the current version is {current}; "
            "reload, look at what changed, and apply again"
        )
        self.expected = expected
        self.current = current


@dataclass(frozen=True, slots=True)
class LimitVersion:
    """One version of the served limits."""

    version: int
    action: str
    document: str
    """The limits file, TOML."""
    task_versions: Mapping[str, str]
    """``loopwatch.limits.version`` of each listed task type's limits; ``"*"``: the defaults'."""
    created_at: datetime
    """UTC (naive, as DuckDB returns it)."""
    who: str | None = None
    note: str | None = None
    recommendation: Any = None
    """The recommendation the change came from (JSON), if any."""
    based_on: int | None = None
    """For a roll back: the version restored."""

    @property
    def etag(self) -> str:
        """The HTTP entity tag of this version (quoted, as the header carries it)."""
        return f'"lw-{self.version}-{self.task_versions.get("*", "")[:8]}"'

    def policy(self) -> LimitPolicy:
        """The limits as a policy."""
        return LimitPolicy.from_toml(self.document)

    def limits_version_for(self, task_type: str) -> str:
        """The ``loopwatch.limits.version`` a run of ``task_type`` records under this version."""
        return self.task_versions.get(task_type) or self.task_versions["*"]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: every field, ``created_at`` as ISO 8601 UTC with ``Z``."""
        return {
            "version": self.version,
            "action": self.action,
            "created_at": self.created_at.replace(tzinfo=None).isoformat() + "Z",
            "who": self.who,
            "note": self.note,
            "recommendation": self.recommendation,
            "based_on": self.based_on,
            "task_versions": dict(self.task_versions),
            "etag": self.etag,
            "toml": self.document,
        }


@dataclass(frozen=True, slots=True)
class LimitChange:
    """One value that differs between two limit sets."""

    task_type: str
    """``"*"`` for the defaults."""
    field: str
    before: Any
    after: Any
    shadow: bool = False
    """A shadow candidate's override, not an enforced limit."""


def parse_document(document: str | Mapping[str, Any]) -> LimitPolicy:
    """A limits document (TOML text, or the mapping a parsed TOML file gives) as a policy;
    ``ValueError`` naming what is wrong otherwise."""
    if isinstance(document, str):
        if not document.strip():
            raise ValueError("the limits document is empty")
        return LimitPolicy.from_toml(document if "\n" in document else document + "\n")
    if isinstance(document, Mapping):
        return LimitPolicy.from_mapping(document)
    raise ValueError(f"a limits document is TOML text or an object, got {type(document).__name__}")


def task_versions(policy: LimitPolicy) -> dict[str, str]:
    """``loopwatch.limits.version`` per listed task type, ``"*"`` for the defaults."""
    out = {"*": policy.defaults.version}
    out.update({name: limits.version for name, limits in sorted(policy.task_types.items())})
    return out


def _values(limits: LoopLimits) -> dict[str, Any]:
    return {f: getattr(limits, f) for f in LoopLimits.__dataclass_fields__}


def diff_policies(before: LimitPolicy | None, after: LimitPolicy) -> list[LimitChange]:
    """Every enforced value and shadow override that differs, task type by task type."""
    old = before or LimitPolicy()
    changes: list[LimitChange] = []
    names = sorted(set(old.task_types) | set(after.task_types))
    for name, a, b in [("*", old.defaults, after.defaults)] + [
        (n, old.for_task(n), after.for_task(n)) for n in names
    ]:
        va, vb = _values(a), _values(b)
        changes += [LimitChange(name, f, va[f], vb[f]) for f in va if va[f] != vb[f]]
    shadows_a = {"*": dict(old.shadow_defaults), **{k: dict(v) for k, v in old.shadow.items()}}
    shadows_b = {"*": dict(after.shadow_defaults), **{k: dict(v) for k, v in after.shadow.items()}}
    for name in sorted(set(shadows_a) | set(shadows_b)):
        sa, sb = shadows_a.get(name, {}), shadows_b.get(name, {})
        for f in sorted(set(sa) | set(sb)):
            if sa.get(f) != sb.get(f):
                changes.append(LimitChange(name, f, sa.get(f), sb.get(f), shadow=True))
    return changes


def _row_version(row: tuple[Any, ...]) -> LimitVersion:
    version, action, document, tasks, created, who, note, rec, based_on = row
    return LimitVersion(
        version=int(version),
        action=str(action),
        document=str(document),
        task_versions=json.loads(tasks),
        created_at=created,
        who=who,
        note=note,
        recommendation=json.loads(rec) if rec is not None else None,
        based_on=based_on,
    )


def current_version(con: duckdb.DuckDBPyConnection) -> LimitVersion | None:
    """The current (highest) version, or ``None`` before the first."""
    row = con.execute(
        f"SELECT {_COLUMNS} FROM limit_versions ORDER BY version DESC LIMIT 1"
    ).fetchone()
    return _row_version(row) if row is not None else None


def get_version(con: duckdb.DuckDBPyConnection, version: int) -> LimitVersion | None:
    """One version, or ``None`` when there is no such version."""
    row = con.execute(
        f"SELECT {_COLUMNS} FROM limit_versions WHERE version = ?", [version]
    ).fetchone()
    return _row_version(row) if row is not None else None


def version_history(con: duckdb.DuckDBPyConnection, limit: int = 500) -> list[LimitVersion]:
    """The versions, newest first (at most ``limit``)."""
    rows = con.execute(
        f"SELECT {_COLUMNS} FROM limit_versions ORDER BY version DESC LIMIT ?", [limit]
    ).fetchall()
    return [_row_version(r) for r in rows]


def append_version(
    store: Store,
    policy: LimitPolicy,
    *,
    expected: int,
    action: str,
    who: str | None = None,
    note: str | None = None,
    recommendation: Any = None,
    based_on: int | None = None,
) -> LimitVersion:
    """Store ``policy`` as version ``expected + 1`` if the current version is ``expected``
    (0: none yet); else raise :class:`VersionMoved` and store nothing."""
    if action not in ACTIONS:
        raise ValueError(f"action must be one of {', '.join(ACTIONS)}, got {action!r}")
    document = policy.to_toml()
    tasks = json.dumps(task_versions(policy))
    rec = json.dumps(recommendation, sort_keys=True) if recommendation is not None else None
    created = datetime.now(UTC).replace(tzinfo=None)

    def work(con: duckdb.DuckDBPyConnection) -> LimitVersion:
        row = con.execute("SELECT coalesce(max(version), 0) FROM limit_versions").fetchone()
        current = int(row[0]) if row is not None else 0
        if current != expected:
            raise VersionMoved(expected, current)
        values = [expected + 1, action, document, tasks, created, who, note, rec, based_on]
        con.execute(
            f"INSERT INTO limit_versions ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", values
        )
        return _row_version(tuple(values))

    return store.run_write(work)
