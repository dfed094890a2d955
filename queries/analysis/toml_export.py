"""Recommendations → a limits TOML that :class:`loopwatch.instrumentation.LimitPolicy` loads.

One ``[task_types.<name>]`` table per task type, with the six budget fields of ``LoopLimits``
(``max_steps``, ``max_model_calls``, ``max_tool_calls``, ``max_tokens``, ``max_cost_usd``,
``max_wall_s``): the analysis's ``proposed`` value where the limit is on (the recommendation
for ``too_tight``/``too_loose``, the current value otherwise) and ``"off"`` where it is off.
The detector thresholds (``max_same_call`` ...) are written where imported history measured
them (``detectors``: the threshold keeping false stops under the target, from
:func:`~loopwatch.queries.analysis.history.detector_thresholds`); elsewhere task types inherit
them from ``[defaults]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from loopwatch.instrumentation.runtime.limits import toml_key, toml_string, toml_value

from .history import DETECTOR_FIELDS
from .rates import RATE_FIELDS
from .recommend import file_summary
from .recommendations import BUDGET_FIELDS, LimitAnalysis

__all__ = ["file_settings", "file_toml", "limits_toml", "toml_key", "toml_string"]

_INT_BUDGETS = frozenset({"steps", "model_calls", "tool_calls", "tokens"})


def _value(budget: str, value: float | None) -> str:
    if value is None:
        return '"off"'
    if budget in _INT_BUDGETS:
        return str(round(value))
    return repr(float(value))


def _comment(text: str) -> str:
    return " ".join(text.split())


def limits_toml(
    analyses: Sequence[LimitAnalysis],
    *,
    defaults: Mapping[str, Any] | None = None,
    header: str | None = None,
    detectors: Mapping[str, Mapping[str, tuple[float, str]]] | None = None,
    comments: Mapping[str, Sequence[str]] | None = None,
) -> str:
    """The TOML text of a limits policy from :func:`~loopwatch.queries.analysis.analyze_limits`
    results (pass ``include_off=True`` there so that limits that are off stay off).

    ``defaults`` fills the ``[defaults]`` table (``LoopLimits`` field names → values; ``None``
    is written as ``"off"``); ``header`` becomes comment lines at the top. ``detectors`` maps a
    task type to detector threshold fields (``max_same_call`` ...) and spend rates and (value,
    note) to write; ``comments``, task type → comment lines written at the end of its table.
    """
    lines: list[str] = []
    if header:
        lines += [f"# {_comment(line)}".rstrip() for line in header.splitlines()]
    lines.append("[defaults]")
    for name, value in (defaults or {}).items():
        if value is not None and not isinstance(value, (int, float)):
            raise ValueError(f"defaults[{name!r}] must be a number, a bool or None, got {value!r}")
        lines.append(f"{toml_key(name)} = {toml_value(value)}")
    by_type: dict[str, dict[str, LimitAnalysis]] = {}
    for a in analyses:
        by_type.setdefault(a.task_type, {})[a.budget] = a
    for task_type in [*(detectors or {}), *(comments or {})]:
        by_type.setdefault(task_type, {})
    for task_type in sorted(by_type):
        lines += ["", f"[task_types.{toml_key(task_type)}]"]
        rows = by_type[task_type]
        for budget, field in BUDGET_FIELDS.items():
            row = rows.get(budget)
            if row is None or row.current_limit is None:
                lines.append(f'{field} = "off"')
                continue
            note: str = row.verdict or ""
            if row.proposed != row.current_limit:
                note += f" (was {_value(budget, row.current_limit)})"
            lines.append(f"{field} = {_value(budget, row.proposed)}  # {note}")
        for field, (value, note) in sorted(((detectors or {}).get(task_type) or {}).items()):
            shown = int(value) if float(value).is_integer() else float(value)
            lines.append(f"{toml_key(field)} = {shown!r}  # {_comment(note)}")
        lines += [f"# {_comment(c)}" for c in (comments or {}).get(task_type, ())]
    return "\n".join(lines) + "\n"


def file_settings(
    limits: Sequence[Mapping[str, Any]], file: Mapping[str, Any] | None
) -> list[tuple[str, str]]:
    """What a task type's limits file writes, as its TOML holds it: (setting, value) for each
    limit that is on (``limits``: its ``LimitAnalysis`` dicts; the ``proposed`` value) and each
    detector threshold the fit set (``file``: :func:`file_dict`; none when it was refused)."""
    out = [
        (str(d["field"]), _setting(str(d["field"]), d["proposed"]))
        for d in limits
        if d["current_limit"] is not None and d["proposed"] is not None
    ]
    if file and file.get("runs_needed") is None:
        for detector, value in (file.get("thresholds") or {}).items():
            field = DETECTOR_FIELDS.get(detector)
            if field and value is not None:
                out.append((field, str(int(value))))
    return out


def _setting(field: str, value: float) -> str:
    # as the TOML writes them: counts as integers, dollars and seconds as decimals
    return repr(float(value)) if field in ("max_cost_usd", "max_wall_s") else str(round(value))


def file_toml(
    analyses: Sequence[LimitAnalysis],
    files: Mapping[str, Mapping[str, Any] | None],
    *,
    header: str,
    spend_rates: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    """The recommended limits file: :func:`limits_toml` of ``analyses`` (with ``include_off``)
    with each task type's detector thresholds and spend rate from its fitted file (``files``:
    task type → :func:`~loopwatch.queries.analysis.recommend.file_dict`) and a header saying what
    each task type's file as a whole promises, what it cut in the window and in the back-test.
    ``spend_rates`` (task type → ``SpendRateAdvice.to_dict``): a spend rate the file does not
    hold stays off, its recommendation written as a comment."""
    lines = [
        header,
        "Load with LimitPolicy.from_toml(path). Each value: the recommendation where the verdict "
        'is too_tight or too_loose, else the current limit; "off" = no limit.',
        "Each task type's limits and detector thresholds are judged together (docs/queries.md):",
    ]
    detectors: dict[str, dict[str, tuple[float, str]]] = {}
    for task_type, f in sorted(files.items()):
        lines.append(f"  {task_type}: {file_summary(f)}.")
        if not f or f["runs_needed"] is not None:
            continue
        rates = {RATE_FIELDS[i]: f["values"].get(i) for i in f["items"] if i in RATE_FIELDS}
        for det, value in [*f["thresholds"].items(), *rates.items()]:
            field = DETECTOR_FIELDS.get(det) or (det if det in rates else None)
            if field is None or value is None:
                continue
            det = next((i for i, v in RATE_FIELDS.items() if v == det), det)
            bt = ((f["backtest"] or {}).get("per_item") or {}).get(det)
            back = "-" if bt is None else f"{bt * 100:.1f}%"
            detectors.setdefault(task_type, {})[field] = (
                value,
                f"with the file's other limits: cuts at most {f['target'] * 100:.1f}% of "
                f"successful runs; back-test {back}",
            )
    lines.append(
        "Detector thresholds (max_same_call ...) are written where imported history measured "
        "them; elsewhere set them in [defaults]. The spend-rate stop (max_cost_per_min) is "
        "written where the file holds it (it is on, or `report --spend-rate`), else it stays off."
    )
    rates_off = {t: d for t, d in (spend_rates or {}).items() if not d["in_file"] and d["field"]}
    comments = {
        t: [f"{d['field']} stays off; recommended if turned on: {d['recommended']!r} "
            f"({d['promise']}; `loopwatch report --format toml --spend-rate` writes it)"]
        for t, d in rates_off.items() if d["recommended"] is not None and d["current"] is None
    }  # fmt: skip
    for t, d in rates_off.items():  # on, but nothing to fit it on: kept, never turned off
        if d["current"] is not None:
            note = f"kept as served: {d['promise']}"
            detectors.setdefault(t, {})[d["field"]] = (d["current"], note)
    return limits_toml(analyses, header="\n".join(lines), detectors=detectors, comments=comments)
