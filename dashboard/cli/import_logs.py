"""``loopwatch import``: recorded chat logs into a store as runs, replayed through the guard,
with a summary of what the guard would have done."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable
from typing import Any, TextIO

from loopwatch.dashboard.cli.args import (
    PROG,
    UsageError,
    add_db_option,
    positive_int,
    share,
    worker_count,
)
from loopwatch.dashboard.cli.text import (
    clean,
    detector_lines,
    replay_table,
)
from loopwatch.queries.analysis.recommendations import AnalysisThresholds
from loopwatch.queries.store.errors import resolve_db_path

__all__ = ["add_import"]


def _add_record_options(p: Any) -> None:
    """The options that say where each record keeps its task type, label, id and errors."""
    p.add_argument(
        "--task-type",
        metavar="FIELD|VALUE",
        default=None,
        help="the field holding each conversation's task type, or, when the first "
        "conversation has no such field, the task type of all (default: 'default')",
    )
    p.add_argument(
        "--success",
        metavar="FIELD",
        default=None,
        help="the field holding the task's success label: true/false, a number (success at or "
        "above --success-min), or a word like passed/failed",
    )
    p.add_argument(
        "--success-min",
        metavar="X",
        type=float,
        default=1.0,
        help="a numeric label counts as success at or above this (default: %(default)s)",
    )
    p.add_argument(
        "--id",
        dest="id_field",
        metavar="FIELD",
        default=None,
        help="the field holding the conversation id (default: conversation_id or id if "
        "present, else the record's key, else a digest of the record)",
    )
    p.add_argument(
        "--error-prefix",
        metavar="TEXT",
        action="append",
        default=None,
        help="tool results starting with TEXT are failures, e.g. 'Error:' (repeat for several; "
        'results with {"error": ...} bodies or is_error are failures anyway)',
    )


def add_import(sub: Any) -> None:
    from loopwatch.queries.ingest.chatlogs import FORMATS as LOG_FORMATS
    from loopwatch.queries.ingest.formats import RECORDED_FORMATS

    p = sub.add_parser(
        "import",
        help="import recorded chat logs as runs, replayed through the guard under given limits",
        description=(
            "Read recorded conversations (JSON array, JSONL, or a JSON object of conversations; "
            ".gz too) in the OpenAI chat or Anthropic Messages format, split each into one run "
            "per user message, replay every run through the guard under --limits, and store "
            "the runs (source 'import') with their recorded usage, loop end, task label and "
            "what the guard would have done. Importing the same file again replaces its runs. "
            "Malformed records are reported with their position and skipped."
        ),
    )
    p.add_argument("file", metavar="FILE", help="the log file (.json, .jsonl, .ndjson, .gz)")
    p.add_argument(
        "--format",
        dest="log_format",
        choices=(*LOG_FORMATS, *RECORDED_FORMATS),
        default="openai-chat",
        help="the messages' format (default: %(default)s); swe-agent, openhands and "
        "claude-code read coding agents' logs (FILE may be a directory of them), otlp-json "
        "OTLP/JSON trace files (a Collector's file exporter output)",
    )
    p.add_argument(
        "--messages",
        metavar="KEY",
        default="messages",
        help="the key each conversation keeps its messages under; a dotted path reaches into "
        "nested objects (default: %(default)s)",
    )
    _add_record_options(p)
    p.add_argument(
        "--limits",
        metavar="TOML",
        default=None,
        help="the limits to replay under, a LimitPolicy TOML file (default: $LOOPWATCH_LIMITS, "
        "else the built-in defaults)",
    )
    add_db_option(p)
    p.add_argument(
        "--layout",
        choices=("auto", "jsonl", "array", "object"),
        default="auto",
        help="how records are laid out in the file (default: decided from its name and start)",
    )
    p.add_argument(
        "--false-stop-target",
        metavar="SHARE",
        type=share,
        default=AnalysisThresholds().false_stop_target,
        help="detector thresholds suggested keep false stops on runs of successful tasks at or "
        "under this share (default: %(default)s)",
    )
    p.add_argument(
        "--memory-mb",
        metavar="MB",
        type=positive_int,
        help="DuckDB's memory limit while importing, so that the import's memory does not grow "
        "with the file (default: ImportOptions.memory_mb, 192)",
    )
    p.add_argument(
        "--workers",
        metavar="N",
        type=worker_count,
        default=None,
        help="processes that read coding-agent logs (0: read in this process; default: one per "
        "core, at most 4, when the logs hold 8 MB or more; Linux only)",
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON instead of text")
    p.add_argument(
        "--no-progress", action="store_true", help="no progress bar (it shows only on a terminal)"
    )
    p.set_defaults(handler=_import)


def _progress_bar(stream: TextIO) -> Callable[[int, int, int], None]:
    def show(done: int, total: int, runs: int) -> None:
        share = done / total if total else 1.0
        filled = int(share * 30)
        bar = "#" * filled + "-" * (30 - filled)
        stream.write(
            f"\rimporting [{bar}] {share * 100:5.1f}%  {done / 1e6:,.1f}/{total / 1e6:,.1f} MB"
            f"  {runs:,} runs"
        )
        if done >= total:
            stream.write("\n")
        stream.flush()

    return show


def _input(args: argparse.Namespace) -> tuple[Any, bool]:
    """The file (or, for coding agents' logs and trace files, directory) to read, and whether
    its format is one of those (docs/import.md)."""
    from pathlib import Path

    from loopwatch.queries.ingest.formats import RECORDED_FORMATS

    file = Path(args.file)
    recorded = args.log_format in RECORDED_FORMATS
    if not (file.is_file() or (recorded and file.is_dir())):
        raise UsageError(f"{file} does not exist or is not a file.")
    return file, recorded


def _import(args: argparse.Namespace, out: TextIO) -> int:
    from loopwatch.instrumentation.runtime.limits import LimitPolicy, resolve_limits
    from loopwatch.queries.analysis.history import detector_thresholds, imported_replay
    from loopwatch.queries.ingest.chatlogs import ChatLogOptions
    from loopwatch.queries.ingest.formats.importing import import_recorded
    from loopwatch.queries.ingest.importer import ImportOptionError, ImportOptions, import_chat_log

    file, recorded = _input(args)
    limits = None
    if args.limits is not None:
        try:
            limits = LimitPolicy.from_toml(args.limits)
        except (OSError, ValueError) as exc:
            raise UsageError(f"--limits: {exc}") from None
    try:
        chat = ChatLogOptions(
            format="openai-chat" if recorded else args.log_format,
            messages_key=args.messages,
            task_type=args.task_type,
            success=args.success,
            success_min=args.success_min,
            id_field=args.id_field,
            error_prefixes=tuple(p for p in (args.error_prefix or ()) if p),
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    options = ImportOptions(chat=chat, limits=limits, layout=args.layout)
    if args.memory_mb is not None:
        options = dataclasses.replace(options, memory_mb=args.memory_mb)
    show = None
    if not args.no_progress and sys.stderr.isatty():
        show = _progress_bar(sys.stderr)
    path = resolve_db_path(args.db)
    with _open_store(path) as store:
        try:
            summary = (
                import_recorded(
                    file,
                    store,
                    args.log_format,
                    task_type=args.task_type,
                    limits=limits,
                    workers=args.workers,
                )
                if recorded
                else import_chat_log(file, store, options, progress=show)
            )
        except OSError as exc:
            raise UsageError(f"cannot read {file}: {exc}") from None
        except ImportOptionError as exc:
            raise UsageError(str(exc)) from None
        con = store.cursor()
        try:
            types = sorted(summary.task_types)
            replays = imported_replay(con, task_types=types) if types else []
            detectors = (
                detector_thresholds(con, task_types=types, target=args.false_stop_target)
                if types
                else []
            )
        finally:
            con.close()
    data = summary.to_dict()
    data["store"] = str(path)
    data["replay"] = [r.to_dict() for r in replays]
    data["detectors"] = [d.to_dict() for d in detectors]
    if args.json:
        json.dump(data, out, indent=2, default=str)
        out.write("\n")
    else:
        out.write(_import_text(data, lambda task_type: resolve_limits(limits, task_type)))
    for line in summary.bad_records:
        print(f"{PROG} import: skipped {clean(line)}", file=sys.stderr)
    if summary.bad > len(summary.bad_records) and not summary.hint:
        print(
            f"{PROG} import: ... and {summary.bad - len(summary.bad_records)} more skipped records",
            file=sys.stderr,
        )
    if summary.conversations == 0:
        why = summary.hint or "check --format and --messages"
        print(f"{PROG} import: no conversation imported from {file}: {why}.", file=sys.stderr)
        return 1
    return 0


def _open_store(path: Any) -> Any:
    """The store to import into; a store another process writes is a usage error that says
    what to do."""
    from loopwatch.queries.store.database import Store, StoreLockedError

    try:
        return Store(path)
    except StoreLockedError as exc:
        holder = f" ({exc.program}, PID {exc.pid})" if exc.pid is not None else ""
        raise UsageError(
            f"{path} is held by another process{holder}: DuckDB lets one process write a store. "
            "Import into another file (--db) and open both, or stop that process and import "
            "again."
        ) from None


def _import_text(d: dict[str, Any], current: Callable[[str], Any]) -> str:
    lines = [
        f"Imported {d['conversations']:,} conversations ({d['runs']:,} runs, "
        f"{d['messages']:,} messages) from {clean(d['path'])} into {clean(d['store'])} "
        f"in {d['seconds']:.1f} s ({d['layout']}).",
    ]
    if d["replaced"]:
        lines.append(
            f"{d['replaced']:,} runs were already in the store (imported before) and were replaced."
        )
    labels = d["labels"]
    lines.append(
        f"Task labels: {labels.get('success', 0):,} successful, {labels.get('failure', 0):,} "
        f"failed, {labels.get('unlabeled', 0):,} unlabeled conversations; task type from "
        f"{clean(d['task_type_source'])}."
    )
    ends = ", ".join(f"{k} {v:,}" for k, v in sorted(d["loop_ends"].items()))
    lines.append(f"Recorded loop ends: {ends or '-'}.")
    if d["bad"]:
        lines.append(
            f"Skipped {d['bad']:,} malformed records (listed on stderr)"
            + (
                f" — the file ends early (truncated?): the {d['runs']:,} runs read before that "
                "point are kept."
                if d["truncated"]
                else "."
            )
        )
    if d["problems"]:
        lines.append(f"Skipped {d['problems']:,} odd messages inside conversations, e.g.:")
        lines += [f"  {clean(p)}" for p in d["problem_list"][:5]]
    rules = d.get("error_rules") or {}
    if rules.get("almost_none"):
        lines.append(_error_rules_text(rules))
    lines += ["", "What the guard would have done (replayed under the limits given)"]
    lines += replay_table(d["replay"], limits_column=False)
    lines += detector_lines(d["detectors"], current, "replayed")
    return "\n".join(lines) + "\n"


def _error_rules_text(rules: dict[str, Any]) -> str:
    text = (
        f"Only {rules['errors']:,} of {rules['tool_results']:,} tool results were classified as "
        "errors, so repeated_error and tool_failures measure nothing here (their 0% rows are not "
        "evidence)."
    )
    if rules["candidates"]:
        found = ", ".join(
            f"--error-prefix {clean(repr(p))} ({n:,} results before a repeat of the same call)"
            for p, n in rules["candidates"][:3]
        )
        return text + f" Error rules found in the data: {found}."
    return text + " Add an error rule with --error-prefix TEXT."
