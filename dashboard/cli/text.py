"""Text pieces the ``loopwatch`` subcommands share: numbers, shares, aligned tables, user data
made safe for a terminal, and the detector table (``report`` and ``import`` both print it)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["clean", "detector_lines", "num", "pct", "replay_table", "stops_text", "table"]


def pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


def num(x: float | None) -> str:
    if x is None:
        return "-"
    if float(x).is_integer():
        return f"{x:,.0f}"
    return f"{x:,.4g}" if abs(x) < 1 else f"{x:,.1f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*headers).rstrip(), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*row).rstrip() for row in rows]
    return lines


def clean(text: str) -> str:
    # task types are user data: keep control characters out of the terminal
    return "".join(c if c.isprintable() else "?" for c in text)


def stops_text(stops: Sequence[dict[str, Any]]) -> str:
    """``"max_steps 12, repeated_error 3"``: the stops a replay or a shadow limit would make."""
    return ", ".join(f"{s['reason']} {s['runs']:,}" for s in stops) or "-"


def replay_table(replays: Sequence[dict[str, Any]], *, limits_column: bool) -> list[str]:
    """The table of what the guard would have done on imported runs (``ImportedReplay``
    dicts); ``limits_column`` adds the limits versions each row was replayed under."""
    rows = []
    for r in replays:
        limits = [",".join(r["limits_versions"]) or "-"] if limits_column else []
        rows.append(
            [
                clean(r["task_type"]),
                *limits,
                f"{r['runs']:,}",
                f"{r['successful_cut']:,}/{r['successful_task_runs']:,}",
                f"{r['failed_stopped']:,}/{r['failed_task_runs']:,}",
                f"{num(r['saved_spend'])} {r['spend_measure']} ({pct(r['saved_share'])})",
                stops_text(r["stops"]),
            ]
        )
    return table(
        [
            "task type",
            *(["limits"] if limits_column else []),
            "runs",
            "successful cut",
            "failed stopped",
            "saved on failed",
            "would stop with",
        ],
        rows,
    )


def _alone(t: dict[str, Any], at: dict[int, Any], target: float) -> str:
    """The smallest threshold with false stops at or under ``target``, judged by itself."""
    if t["field"] is None:
        return "(fixed rule)"
    if t["suggested"] is not None:
        return str(t["suggested"])
    if t["successful_runs"] < math.ceil(1 / target) if target > 0 else True:
        return f"n/a ({t['successful_runs']} ok runs)"
    return f"> {max(at)}"


def detector_lines(
    detectors: Sequence[dict[str, Any]],
    current: Callable[[str], Any],
    label: str,
    in_file: Mapping[str, Mapping[str, int | None]] | None = None,
) -> list[str]:
    """The detector table; ``current(task_type)`` gives the limits the "at" columns use.

    With ``in_file`` (task type → detector → the threshold its limits file writes; ``report``),
    the numbers to act on are the file's: its threshold with the false stops and catches there,
    and the threshold each detector would get judged alone is shown last, labelled as context.
    """
    if not detectors:
        return []
    target = detectors[0]["target"]
    if in_file is None:
        head = f"suggested = smallest threshold with false stops <= {pct(target)}"
        extra = ["suggested", "false stops", "caught"]
    else:
        head = (
            "in the file = the threshold the limits file writes (fit together with its other "
            "limits; the TOML's value); alone = the smallest threshold with false stops <= "
            f"{pct(target)} judged by itself (context only: not written)"
        )
        extra = ["in the file", "false stops", "caught", "alone"]
    lines = [
        "",
        "Detectors on imported history: false stops = runs of successful tasks stopped, "
        f"caught = runs of failed tasks stopped; {head}",
    ]
    rows = []
    for t in detectors:
        at = {c[0]: c for c in t["curve"]}
        field = t["field"]
        now = 2 if field is None else getattr(current(t["task_type"]), field)
        point = at.get(now) if now is not None else None
        alone = _alone(t, at, target)
        if in_file is None:
            shown: Any = t["suggested"]
            cells = [alone]
        else:
            shown = (in_file.get(t["task_type"]) or {}).get(t["detector"])
            cells = ["(fixed rule)" if field is None else "-" if shown is None else str(shown)]
        there = at.get(shown) if field and shown is not None else None
        cells += [pct(there[1]) if there else "-", pct(there[2]) if there else "-"]
        if in_file is not None:
            cells.append(alone)
        rows.append(
            [
                clean(t["task_type"]),
                t["detector"],
                field or "-",
                "off" if now is None else str(now),
                pct(point[1]) if point else "-",
                pct(point[2]) if point else "-",
                *cells,
            ]
        )
    lines += table(
        ["task type", "detector", "setting", label, "false stops", "caught", *extra], rows
    )
    return lines
