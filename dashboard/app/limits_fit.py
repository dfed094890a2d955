"""The window's recommended limits files, as every page that shows them reads them
(docs/dashboard.md, "Speed"): the Overview's verdicts, the Limits page, the History page's
back-test and the spend-rate advice. The successful runs of the window are read once
(``success_usage``) and serve both the limits file and its spend-rate fit; both are kept per
window and store version (:meth:`~.pagekit.PageContext.memo`), so pages and sessions share them."""

from __future__ import annotations

from loopwatch.queries.analysis.columnar import QueryColumns
from loopwatch.queries.analysis.recommend import TaskFit, read_usage
from loopwatch.queries.analysis.recommendations import (
    AnalysisThresholds,
    LimitAnalysis,
    analyze_file,
)

from .pagekit import PageContext

__all__ = ["limits_file", "window_usage"]


def window_usage(ctx: PageContext) -> QueryColumns:
    """The window's successful runs, column by column (``recommend.read_usage``), read once per
    window and store version."""
    return ctx.memo(
        "success-usage",
        lambda: read_usage(
            ctx.gw.con, since=ctx.window()["since"], task_types=ctx.filters.task_type_list
        ),
    )


def limits_file(
    ctx: PageContext, t: AnalysisThresholds | None = None
) -> tuple[list[LimitAnalysis], dict[str, TaskFit]]:
    """:func:`analyze_file` for the window (every budget, off ones included), once per window and
    store version: a slider move or another page on the same data reuses it."""
    th = t if t is not None else AnalysisThresholds()
    return ctx.memo(
        f"limits-file:{th!r}",
        lambda: analyze_file(
            ctx.gw.con,
            since=ctx.window()["since"],
            task_types=ctx.filters.task_type_list,
            thresholds=th,
            include_off=True,
            usage=window_usage(ctx),
        ),
    )
