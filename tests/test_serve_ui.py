"""The dashboard served by ``loopwatch serve`` (live) and ``loopwatch dashboard PATH`` (file),
loaded in real headless Chromium; the page/source contract checked with Streamlit's AppTest."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from loopwatch.dashboard import source
from loopwatch.queries.store.columns import SpanBatch
from loopwatch.queries.store.database import Store, StoreLockedError

from tests.browsing import chromium
from tests.serving import ServeProcess, get, post_traces
from tests.test_serve import make_spans, protobuf_body

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


def _shows(browser: Any, url: str, text: str) -> None:
    """The Streamlit page at ``url`` renders, without an exception, and shows ``text``."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        page.goto(url, wait_until="domcontentloaded", timeout=60_000)
        page.wait_for_selector('[data-testid="stApp"]', timeout=60_000)
        page.get_by_text(text, exact=False).first.wait_for(timeout=60_000)
        assert page.locator('[data-testid="stException"]').count() == 0
    finally:
        page.close()


def test_serve_shows_the_live_store_in_chromium(browser: Any, tmp_path: Path) -> None:
    db = tmp_path / "live-ui-store.duckdb"
    server = ServeProcess(db, ui=True)
    try:
        assert post_traces(server.otlp, protobuf_body(make_spans(4)))[0] == 200
        status, _ = get(server.ports["ui"], "/_stcore/health")
        assert status == 200
        _shows(browser, f"http://127.0.0.1:{server.ports['ui']}/", db.name)
        # Ingest goes on while the page is open.
        assert post_traces(server.otlp, protobuf_body(make_spans(2, prefix="more")))[0] == 200
        assert server.health()["runs"] == 6
    finally:
        server.kill()


def _start_file_dashboard(path: Path) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopwatch.dashboard.cli", "dashboard", str(path), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        match = re.match(r"dashboard\s+http://127\.0\.0\.1:(\d+)/", line)
        if match:
            return proc, int(match[1])
    proc.kill()
    raise AssertionError(f"dashboard did not start: {proc.stderr.read() if proc.stderr else ''}")


def test_file_mode_dashboard_reads_a_file_read_only(browser: Any, tmp_path: Path) -> None:
    db = tmp_path / "file-ui-store.duckdb"
    with Store(db) as store:
        store.write(SpanBatch.from_sdk_spans(make_spans(3)))
    proc, port = _start_file_dashboard(db)
    try:
        _shows(browser, f"http://127.0.0.1:{port}/", db.name)
        # Read-only: between page runs the file is free, so a batch job could write it (the page
        # may still be running its queries when its first text shows: wait for it to finish).
        deadline = time.monotonic() + 30
        while True:
            try:
                store = Store(db)
            except StoreLockedError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
                continue
            with store:
                store.write(SpanBatch.from_sdk_spans(make_spans(1, prefix="later")))
            break
    finally:
        proc.terminate()
        proc.wait(30)


def test_file_mode_refuses_a_missing_file_and_one_serve_holds(tmp_path: Path) -> None:
    missing = subprocess.run(
        [sys.executable, "-m", "loopwatch.dashboard.cli", "dashboard", str(tmp_path / "no.duckdb")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    db = tmp_path / "held.duckdb"
    server = ServeProcess(db)
    try:
        held = subprocess.run(
            [sys.executable, "-m", "loopwatch.dashboard.cli", "dashboard", str(db)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert held.returncode == 2
        assert "is locked by" in held.stderr and "loopwatch serve" in held.stderr
    finally:
        server.kill()


def test_pages_read_the_live_store_through_the_source(tmp_path: Path) -> None:
    from streamlit.testing.v1 import AppTest

    script = tmp_path / "page.py"
    script.write_text(
        textwrap.dedent(
            """
            import streamlit as st
            from loopwatch.dashboard import source

            gw = source.gateway()
            try:
                runs = gw.run("recent_runs", top_n=1000)
            finally:
                gw.con.close()
            st.write(f"{source.current_source().mode}: {len(runs)} runs")
            """
        ),
        encoding="utf-8",
    )
    with Store(tmp_path / "contract.duckdb") as store:
        store.write(SpanBatch.from_sdk_spans(make_spans(5)))
        source.set_live_store(store)
        try:
            at = AppTest.from_file(str(script)).run(timeout=60)
            assert not at.exception
            assert at.markdown[0].value == "live: 5 runs"
        finally:
            source.clear_live_store()
    assert source.current_source().mode == "file"
