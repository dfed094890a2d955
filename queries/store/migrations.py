"""Upgrading store files written by an earlier loopwatch, in place, when opened for writing.

Version 1 → 2 adds typed columns to ``runs`` for what the replay of an imported run found
(``replay_*``, ``peak_*``) and what a live run's shadow limits would have done (``shadow_*``),
filled from the run spans' ``attributes`` JSON where the old file kept them. The history queries
then read those columns instead of every run span's JSON (at 5 M imported runs: seconds and
~1 GB of DuckDB's cache, against milliseconds). One transaction: a failed upgrade leaves the file
as it was.

Version 2 → 3 adds ``runs.nudges``: how often the run's detectors nudged the model
(``loopwatch.nudges``, docs/runtime.md "Nudges"), filled from the run spans' JSON.

Version 3 → 4 adds the tables of the tuning loop: ``limit_versions`` (the limit sets serve holds)
and ``run_feedback`` (task-success labels that arrive after the run), both empty (docs/store.md).

Version 4 → 5 adds each run's peak spend rate (``rate_cost_per_min``, ``rate_tokens_per_min``,
:mod:`.spend_peaks`), filled from the stored model-call spans of every live run: one pass now
(at 1M runs and 10M spans, ~5 s) instead of one per ``loopwatch report``.
"""

from __future__ import annotations

from importlib import resources
from typing import Final

import duckdb

from .columns import RUN_ATTRIBUTE_COLUMNS
from .errors import UPGRADABLE_VERSIONS
from .spend_peaks import LIVE_RUNS, PEAK_COLUMNS, fill_peaks_sql

__all__ = ["V2_RUN_COLUMNS", "V3_RUN_COLUMNS", "V4_TABLES", "upgrade"]

V4_TABLES: Final = ("limit_versions", "run_feedback")
"""The tables version 4 added."""

V2_RUN_COLUMNS: Final = tuple(
    (column, attribute, kind)
    for column, attribute, kind in RUN_ATTRIBUTE_COLUMNS
    if column.startswith(("replay_", "peak_", "shadow_"))
)
"""The ``runs`` columns version 2 added, with the run-span attribute each is read from."""

V3_RUN_COLUMNS: Final = tuple(
    (column, attribute, kind) for column, attribute, kind in RUN_ATTRIBUTE_COLUMNS
    if column == "nudges"
)  # fmt: skip
"""The ``runs`` columns version 3 added."""

_SQL_TYPE: Final = {"str": "VARCHAR", "int32": "INTEGER", "float": "DOUBLE"}


def _v1_to_v2() -> str:
    adds = [f"ALTER TABLE runs ADD COLUMN {c} {_SQL_TYPE[k]}" for c, _, k in V2_RUN_COLUMNS]
    # The attribute names are loopwatch's own constants, not input: they are written into the
    # JSON paths as they are.
    values = ", ".join(
        f"TRY_CAST(attributes->>'$.\"{a}\"' AS {_SQL_TYPE[k]}) AS {c}" for c, a, k in V2_RUN_COLUMNS
    )
    sets = ", ".join(f"{c} = s.{c}" for c, _, _ in V2_RUN_COLUMNS)
    backfill = (
        f"UPDATE runs SET {sets} FROM ("
        f"SELECT DISTINCT ON (run_id, start_ns) run_id AS _run_id, start_ns AS _start_ns, {values} "
        "FROM spans WHERE operation = 'invoke_agent' "
        "AND (contains(attributes, 'loopwatch.replay.') "
        "OR contains(attributes, 'loopwatch.shadow.'))"
        ") s WHERE runs.run_id = s._run_id AND runs.start_ns = s._start_ns"
    )
    return "; ".join([*adds, backfill, "UPDATE schema_version SET version = 2"])


def _v2_to_v3() -> str:
    # IF NOT EXISTS: a file whose version says 1 or 2 but whose runs table was made by a later
    # schema.sql already has the column.
    adds = [
        f"ALTER TABLE runs ADD COLUMN IF NOT EXISTS {c} {_SQL_TYPE[k]}"
        for c, _, k in V3_RUN_COLUMNS
    ]
    values = ", ".join(
        f"TRY_CAST(attributes->>'$.\"{a}\"' AS {_SQL_TYPE[k]}) AS {c}" for c, a, k in V3_RUN_COLUMNS
    )
    sets = ", ".join(f"{c} = s.{c}" for c, _, _ in V3_RUN_COLUMNS)
    backfill = (
        f"UPDATE runs SET {sets} FROM ("
        f"SELECT DISTINCT ON (run_id, start_ns) run_id AS _run_id, start_ns AS _start_ns, {values} "
        "FROM spans WHERE operation = 'invoke_agent' AND contains(attributes, 'loopwatch.nudges')"
        ") s WHERE runs.run_id = s._run_id AND runs.start_ns = s._start_ns"
    )
    return "; ".join([*adds, backfill, "UPDATE schema_version SET version = 3"])


def _v3_to_v4() -> str:
    # The statements of schema.sql that create the version-4 tables (CREATE ... IF NOT EXISTS).
    text = resources.files(__package__).joinpath("schema.sql").read_text(encoding="utf-8")
    schema = "\n".join(line.split("--", 1)[0] for line in text.splitlines())
    creates = [
        statement.strip()
        for statement in schema.split(";")
        if any(f"TABLE IF NOT EXISTS {t} " in statement for t in V4_TABLES)
    ]
    return "; ".join([*creates, "UPDATE schema_version SET version = 4"])


def _v4_to_v5() -> str:
    adds = [f"ALTER TABLE runs ADD COLUMN IF NOT EXISTS {c} DOUBLE" for c in PEAK_COLUMNS]
    return "; ".join([*adds, fill_peaks_sql(LIVE_RUNS), "UPDATE schema_version SET version = 5"])


def upgrade(con: duckdb.DuckDBPyConnection, found: int) -> None:
    """Bring a file of schema version ``found`` (one of ``UPGRADABLE_VERSIONS``) to the current one,
    in one transaction. Raises ``duckdb.Error`` when it fails (then nothing changed)."""
    if found not in UPGRADABLE_VERSIONS:
        raise ValueError(f"cannot upgrade store schema version {found}")
    con.execute("BEGIN TRANSACTION")
    try:
        if found == 1:
            con.execute(_v1_to_v2())
        if found <= 2:
            con.execute(_v2_to_v3())
        if found <= 3:
            con.execute(_v3_to_v4())
        con.execute(_v4_to_v5())
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
