"""Test helpers: a real ``loopwatch serve`` subprocess on free 127.0.0.1 ports, and raw HTTP."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

_LINE = re.compile(r"^(OTLP/HTTP|metrics|dashboard)\s+http://[^:]+:(\d+)/")
_NAMES = {"OTLP/HTTP": "otlp", "metrics": "metrics", "dashboard": "ui"}


class ServeProcess:
    """`python -m loopwatch.dashboard.cli serve` in a child process; ports read from its output."""

    def __init__(
        self,
        db: Path,
        *extra: str,
        ui: bool = False,
        env: Mapping[str, str] | None = None,
        timeout_s: float = 60.0,
    ) -> None:
        self.db = db
        command = [
            sys.executable,
            "-m",
            "loopwatch.dashboard.cli",
            "serve",
            "--db",
            str(db),
            "--otlp-port",
            "0",
            "--metrics-port",
            "0",
            "--ui-port",
            "0",
            *extra,
        ]
        if not ui:
            command.append("--no-ui")
        self.proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self.ports: dict[str, int] = {}
        self.lines: list[str] = []
        self.stderr: list[str] = []
        want = {"otlp", "metrics"} | ({"ui"} if ui else set())
        assert self.proc.stdout is not None and self.proc.stderr is not None
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        deadline = time.monotonic() + timeout_s
        while not want <= self.ports.keys():
            line = self.proc.stdout.readline()
            if not line:
                self.proc.wait(10)
                raise AssertionError(
                    f"serve exited with {self.proc.returncode}: {''.join(self.stderr)}"
                )
            self.lines.append(line)
            match = _LINE.match(line)
            if match:
                self.ports[_NAMES[match[1]]] = int(match[2])
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"serve did not start: {self.lines}")
        threading.Thread(target=self._drain_stdout, daemon=True).start()
        status, body = get(self.otlp, "/health")
        assert status == 200, body

    def _drain_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)

    @property
    def otlp(self) -> int:
        return self.ports["otlp"]

    @property
    def metrics(self) -> int:
        return self.ports["metrics"]

    def health(self) -> dict[str, Any]:
        status, body = get(self.otlp, "/health")
        assert status == 200, body
        data: dict[str, Any] = json.loads(body)
        return data

    def stop(self, timeout_s: float = 60.0) -> int:
        """SIGTERM, then wait for the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout_s)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)


def request(
    port: int,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    timeout_s: float = 60.0,
) -> tuple[int, dict[str, str], bytes]:
    """One HTTP request on 127.0.0.1; (status, lower-cased headers, body)."""
    con = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        con.request(method, path, body=body, headers=dict(headers or {}))
        response = con.getresponse()
        data = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data
    finally:
        con.close()


def get(port: int, path: str, headers: Mapping[str, str] | None = None) -> tuple[int, bytes]:
    status, _, body = request(port, "GET", path, headers=headers)
    return status, body


def post_traces(
    port: int, body: bytes, content_type: str = "application/x-protobuf", **headers: str
) -> tuple[int, dict[str, str], bytes]:
    all_headers = {
        "Content-Type": content_type,
        **{k.replace("_", "-"): v for k, v in headers.items()},
    }
    return request(port, "POST", "/v1/traces", body, all_headers)


def metric_sum(port: int, name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include ``labels``."""
    status, body = get(port, "/metrics")
    assert status == 200
    total = 0.0
    for line in body.decode().splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
    return total


def store_rows(db: Path, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    from loopwatch.queries.store.database import connect_read_only

    con = connect_read_only(db)
    try:
        return [tuple(r) for r in con.execute(sql, list(params)).fetchall()]
    finally:
        con.close()
