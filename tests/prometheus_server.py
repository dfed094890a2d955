"""Test helper: a real Prometheus server on a free 127.0.0.1 port, in a folder of the test's own.

``PrometheusServer(folder, config)`` writes ``config`` as ``prometheus.yml`` there, starts the
``prometheus`` program (``require_program``: skipped on a laptop without it, a failure with
``CI=true``), and returns once ``/-/ready`` answers 200. While it starts Prometheus answers a
plain-text 503 (not JSON), or refuses the connection: both mean "not ready yet", here and in
:meth:`PrometheusServer.wait_for`. A server that exits or never gets ready fails the test with
the end of its log.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest
import yaml
from conftest import require_program


def free_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape_config(
    targets: Sequence[str], *, job: str = "loopwatch", rule_files: Sequence[str | Path] = ()
) -> dict[str, Any]:
    """A config scraping ``targets`` (``host:port``) every second, rules evaluated as often."""
    return {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(r) for r in rule_files],
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": list(targets)}]}],
    }


class PrometheusServer:
    """A ``prometheus`` process serving ``base``; stop it with :meth:`stop` (or ``with``)."""

    def __init__(
        self,
        folder: Path,
        config: Mapping[str, Any],
        *,
        flags: Sequence[str] = (),
        ready_s: float = 60.0,
    ) -> None:
        exe = require_program("prometheus")
        self.folder = folder
        (folder / "prometheus.yml").write_text(yaml.safe_dump(dict(config)), encoding="utf-8")
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        self.log_path = folder / "prometheus.log"
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen(
            [
                exe,
                f"--config.file={folder / 'prometheus.yml'}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                *flags,
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=folder,
        )
        try:
            self.wait_for(self._ready, ready_s, "ready")
        except BaseException:
            self.stop()
            raise

    def _ready(self) -> bool:
        with urllib.request.urlopen(f"{self.base}/-/ready", timeout=2) as resp:
            return bool(resp.status == 200)

    def wait_for(self, done: Callable[[], bool], timeout_s: float, what: str) -> None:
        """Poll ``done`` until it is true; while Prometheus starts (refused, a plain-text 503)
        it counts as not yet. Fails the test, with the log's end, if the server exits or
        ``timeout_s`` passes."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if done():
                    return
            except (OSError, ValueError):  # refused, or a 503 (HTTPError) whose body is not JSON
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"prometheus not {what}:\n{self.log_tail()}")
            time.sleep(0.25)

    def get_json(self, path: str) -> Any:
        """``GET base + path`` as JSON (an error answer's JSON body too)."""
        try:
            with urllib.request.urlopen(f"{self.base}{path}", timeout=5) as resp:
                return json.loads(resp.read().decode())
        except urllib.error.HTTPError as exc:
            return json.loads(exc.read().decode())  # ValueError when plain text (starting)

    def query(self, expr: str) -> list[Any]:
        """An instant query's ``data.result``; AssertionError with Prometheus's error if it
        fails."""
        body = self.get_json("/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        assert body["status"] == "success", f"{expr}\n-> {body.get('error')}"
        result: list[Any] = body["data"]["result"]
        return result

    def results(self, expr: str) -> list[Any]:
        """Like :meth:`query`, but ``[]`` while Prometheus cannot answer yet."""
        try:
            return self.query(expr)
        except (OSError, ValueError):
            return []

    def log_tail(self) -> str:
        """The last 3,000 characters of the server's log."""
        self._log.flush()
        return self.log_path.read_text(encoding="utf-8", errors="replace")[-3000:]

    def stop(self) -> None:
        """Terminate the server (kill it after 15 s) and close its log."""
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=15)
        self._log.close()

    def __enter__(self) -> PrometheusServer:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
