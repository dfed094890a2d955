"""``loopwatch serve`` (live mode: the store's owner, OTLP in, /metrics and the dashboard out) and
``loopwatch dashboard`` (file mode: the dashboard over a store file, read-only)."""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from loopwatch.dashboard.cli.args import PROG, add_db_option, port, positive_float, positive_int
from loopwatch.instrumentation.runtime.settings import env_str
from loopwatch.queries.store.errors import resolve_db_path

__all__ = ["add_dashboard", "add_serve"]


def duration(text: str) -> str:
    """An argparse type: a retention window (``7d``, ``12h``, ``forever``), checked now."""
    from loopwatch.queries.store.retention import parse_duration

    try:
        parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    return text


def add_retention_options(p: argparse.ArgumentParser) -> None:
    """``--keep-spans`` and ``--keep-runs`` (docs/store.md, *Retention*)."""
    from loopwatch.queries.store.retention import DEFAULT_KEEP_RUNS, DEFAULT_KEEP_SPANS

    p.add_argument(
        "--keep-spans",
        type=duration,
        default=DEFAULT_KEEP_SPANS,
        metavar="AGE",
        help="delete spans older than this, in the background (7d, 12h, 'forever'; default: "
        "%(default)s)",
    )
    p.add_argument(
        "--keep-runs",
        type=duration,
        default=DEFAULT_KEEP_RUNS,
        metavar="AGE",
        help="delete runs older than this, in the background (default: %(default)s)",
    )


def add_serve(sub: Any) -> None:
    from loopwatch.dashboard.server.ports import (
        DEFAULT_METRICS_PORT,
        DEFAULT_OTLP_PORT,
        DEFAULT_UI_PORT,
    )

    p = sub.add_parser(
        "serve",
        help="live mode: own the store, receive OTLP from any number of agents, serve the "
        "dashboard and /metrics",
        description=(
            "Own a loopwatch store and receive spans over OTLP/HTTP (POST /v1/traces, protobuf "
            "or JSON) from any number of agents, answering only after they are committed; serve "
            "/metrics for Prometheus, a read-only JSON API under /api/v1/ and the dashboard. "
            "Port 0 picks a free port; the bound ports are printed at start-up. Stops cleanly "
            "on SIGTERM or Ctrl-C."
        ),
    )
    add_db_option(p)
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address every port binds (default: %(default)s; 0.0.0.0 exposes them to the "
        "network: set --token then)",
    )
    p.add_argument(
        "--otlp-port",
        type=port,
        default=DEFAULT_OTLP_PORT,
        metavar="PORT",
        help="OTLP/HTTP receiver, /health and the JSON API (default: %(default)s)",
    )
    p.add_argument(
        "--metrics-port",
        type=port,
        default=DEFAULT_METRICS_PORT,
        metavar="PORT",
        help="Prometheus /metrics (default: %(default)s)",
    )
    p.add_argument(
        "--ui-port",
        type=port,
        default=DEFAULT_UI_PORT,
        metavar="PORT",
        help="the dashboard (default: %(default)s)",
    )
    p.add_argument(
        "--token",
        default=None,
        help="require 'Authorization: Bearer TOKEN' on every request but GET /health "
        "(default: $LOOPWATCH_TOKEN, else none)",
    )
    p.add_argument(
        "--write-token",
        default=None,
        help="the bearer token the write endpoints (limits, feedback) and the dashboard's "
        "tuning actions need (default: $LOOPWATCH_WRITE_TOKEN, else --token; with neither, "
        "writes are taken only from this machine)",
    )
    p.add_argument(
        "--max-body-mb",
        type=positive_int,
        default=20,
        metavar="MB",
        help="largest request body, compressed or not; larger ones get 413 (default: %(default)s)",
    )
    _add_limits(p)
    p.set_defaults(handler=_serve)


def _add_store_options(p: argparse.ArgumentParser) -> None:
    """The options of the store's checks and upkeep: verification, retention, archive, rollups."""
    p.add_argument(
        "--no-verify",
        dest="verify",
        action="store_false",
        help="skip reading every block of the store at start (a damaged file is then found by "
        "the first query or commit that reads the damage)",
    )
    add_retention_options(p)
    p.add_argument(
        "--archive",
        default=None,
        metavar="URL",
        help="write each sealed day of runs and spans as Parquet to this directory or "
        "s3://bucket/prefix (hive-partitioned by date and node; docs/store.md)",
    )
    p.add_argument(
        "--node",
        default=None,
        help="this server's name in the archive (default: the host name)",
    )
    p.add_argument(
        "--no-fleet-view",
        dest="fleet_view",
        action="store_false",
        help="with --archive: the UI and the API show this node's runs only, not the other "
        "nodes' archived days too (docs/deploy/README.md)",
    )
    p.add_argument(
        "--rollup-every-s",
        type=float,
        default=60.0,
        metavar="S",
        help="roll runs up per minute, hour and day this often; 0: no rollups (default: "
        "%(default)g)",
    )


def _add_limits(p: argparse.ArgumentParser) -> None:
    """The options that bound what serve holds and how it treats its store and senders."""
    p.add_argument(
        "--max-pending-mb",
        type=positive_int,
        default=64,
        metavar="MB",
        help="request bytes held while being decoded and committed; past it senders get 503 "
        "with Retry-After and retry (default: %(default)s)",
    )
    p.add_argument(
        "--decoders",
        type=int,
        default=0,
        metavar="N",
        help="decoder processes: 0 decodes in a thread of the server (default); N >= 1 decodes "
        "in N processes, on other cores, at ~120 MB each",
    )
    p.add_argument(
        "--memory-mb",
        type=positive_int,
        default=1024,
        metavar="MB",
        help="cap on DuckDB's memory (cached blocks of the store, query working memory; large "
        "queries spill to disk) (default: %(default)s)",
    )
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="without --token, requests are served only when their Host header is an IP "
        "address, localhost or the --host name (a guard against DNS rebinding); add a name "
        "agents or Prometheus use to reach this server (repeatable)",
    )
    p.add_argument(
        "--checkpoint-mb",
        type=positive_int,
        default=None,
        metavar="MB",
        help="write-ahead log DuckDB lets grow before folding it into the store file "
        "(default: DuckDB's 16)",
    )
    p.add_argument(
        "--body-timeout-s",
        type=positive_float,
        default=60.0,
        metavar="S",
        help="a request body not arrived whole within this many seconds gets 408 and its "
        "bytes are freed (default: %(default)g)",
    )
    _add_store_options(p)
    _add_foreign_options(p)
    p.add_argument(
        "--no-ui",
        dest="ui",
        action="store_false",
        help="no dashboard: only OTLP, /health, the JSON API and /metrics",
    )


def _add_foreign_options(p: Any) -> None:
    """``--foreign-*``: how other instrumentations' spans become runs (docs/foreign.md)."""
    p.add_argument(
        "--foreign-task-type",
        default=None,
        metavar="KEYS",
        help="span attributes (comma-separated, first found; service.name = the resource's) "
        "giving runs rebuilt from other instrumentations' spans their task type (default: "
        "$LOOPWATCH_FOREIGN_TASK_TYPE, else gen_ai.agent.name,agent.name,"
        "traceloop.workflow.name,service.name)",
    )
    p.add_argument(
        "--foreign-grace-s",
        type=float,
        default=None,
        metavar="S",
        help="a foreign trace is final once its run span arrived and no span came for S "
        "seconds (default: $LOOPWATCH_FOREIGN_GRACE_S, else 5)",
    )
    p.add_argument(
        "--no-foreign",
        dest="foreign",
        action="store_false",
        help="store other instrumentations' spans as received, without rebuilding their runs",
    )


def foreign_options(args: argparse.Namespace) -> Any:
    """The ``--foreign-*`` flags (else their environment variables) as ``ForeignOptions``."""
    from loopwatch.queries.ingest.foreign import DEFAULT_TASK_TYPE_KEYS, ForeignOptions

    keys = args.foreign_task_type or env_str("LOOPWATCH_FOREIGN_TASK_TYPE")
    grace = args.foreign_grace_s
    if grace is None:
        text = env_str("LOOPWATCH_FOREIGN_GRACE_S")
        grace = float(text) if text else 5.0
    return ForeignOptions(
        task_type_keys=tuple(k.strip() for k in keys.split(",") if k.strip())
        if keys
        else DEFAULT_TASK_TYPE_KEYS,
        grace_s=grace,
    )


def _serve(args: argparse.Namespace, out: TextIO) -> int:
    from loopwatch.dashboard.server.housekeeping import HousekeepingOptions
    from loopwatch.dashboard.server.ingest import IngestOptions
    from loopwatch.dashboard.server.serve import ServeOptions, serve
    from loopwatch.queries.store.retention import RetentionPolicy

    token = args.token if args.token is not None else env_str("LOOPWATCH_TOKEN")
    options = ServeOptions(
        db=resolve_db_path(args.db),
        host=args.host,
        otlp_port=args.otlp_port,
        metrics_port=args.metrics_port,
        ui_port=args.ui_port,
        token=token,
        write_token=args.write_token
        if args.write_token is not None
        else env_str("LOOPWATCH_WRITE_TOKEN"),
        ui=args.ui,
        max_body_bytes=args.max_body_mb << 20,
        memory_mb=args.memory_mb,
        checkpoint_mb=args.checkpoint_mb,
        body_timeout_s=args.body_timeout_s,
        verify=args.verify,
        allowed_hosts=tuple(args.allow_host),
        housekeeping=HousekeepingOptions(
            retention=RetentionPolicy.parse(args.keep_spans, args.keep_runs),
            archive=args.archive,
            node=args.node,
            fleet_view=args.fleet_view,
            rollup_every_s=args.rollup_every_s if args.rollup_every_s > 0 else None,
        ),
        ingest=IngestOptions(
            max_pending_bytes=args.max_pending_mb << 20,
            decoders=max(0, args.decoders),
            foreign=foreign_options(args) if args.foreign else None,
        ),
    )
    try:
        return serve(options, out=out)
    except OSError as exc:
        print(f"{PROG} serve: {exc.strerror or exc}", file=sys.stderr)
        return 2


def add_dashboard(sub: Any) -> None:
    from loopwatch.dashboard.server.ports import DEFAULT_UI_PORT

    p = sub.add_parser(
        "dashboard",
        help="file mode: the dashboard over a store file no process is writing (read-only)",
        description=(
            "Serve the dashboard over a loopwatch store file, opened read-only. The file must "
            "not be held by a writer (DuckDB lets no other process open it meanwhile): for a "
            "store that agents are writing, use `loopwatch serve`, which serves the dashboard "
            "itself."
        ),
    )
    p.add_argument("path", metavar="PATH", nargs="?", default=None, help="the store file")
    p.add_argument(
        "--archive",
        metavar="URL",
        default=None,
        help="show the whole fleet from its archive (a directory or s3:// URL written by "
        "serve --archive), loaded into a local reader store first",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    p.add_argument(
        "--port",
        type=port,
        default=DEFAULT_UI_PORT,
        help="dashboard port (default: %(default)s; 0: any free)",
    )
    p.set_defaults(handler=_dashboard)


def _dashboard(args: argparse.Namespace, out: TextIO) -> int:
    from pathlib import Path

    from loopwatch.dashboard.app.ui import run_file_dashboard

    if (args.path is None) == (args.archive is None):
        print(
            f"{PROG} dashboard: give a store PATH or --archive URL (one of them)", file=sys.stderr
        )
        return 2
    try:
        if args.archive is not None:
            from loopwatch.queries.store.archive import reader_store

            path = reader_store(args.archive)
        else:
            path = Path(args.path)
        return run_file_dashboard(path, host=args.host, port=args.port, out=out)
    except OSError as exc:
        print(f"{PROG} dashboard: {exc}", file=sys.stderr)
        return 2
