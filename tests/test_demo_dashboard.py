"""End to end: ``loopwatch demo`` (serve + agent processes over OTLP) filling a store, every page
loaded in headless Chromium while it runs, then every page run by Streamlit's ``AppTest`` on the
store the demo left, checking the verdicts and the alert the demo is built to show.

One demo run serves the whole module (it takes about 40 s): the browser tests look at the live
dashboard during it; ``demo_store`` stops it with SIGINT (Ctrl-C) and hands the file to the
``AppTest`` tests. Screenshots land in ``$LOOPWATCH_ARTIFACTS`` (default
``build/test-artifacts``); with ``LOOPWATCH_SCREENSHOTS_DIR`` set, the Overview and Limits shots
are also written there (that is how ``docs/img/`` is made).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from loopwatch.dashboard.demo.fleet import TASK_TYPES, FleetPlan
from loopwatch.dashboard.demo.runner import demo_alert_env

from tests.browsing import chromium, settled

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "dashboard" / "app" / "streamlit_app.py"
PLAN = FleetPlan(seed=7, duration_s=40.0, rate=50.0, agents=3)
PAGES = ("overview", "limits", "loops", "runs", "history")
PATHS = {
    "overview": "/",
    "limits": "/limits?limit=code_review/max_steps",
    "loops": "/loops",
    "runs": "/runs",
    "history": "/history",
}
CHARTLESS = {"history"}
"""Pages that draw no chart over the demo's store: it holds no imported runs, no shadow limits."""
"""The Overview is the default page: Streamlit serves it at the root."""
HOSTILE = (
    "x'; DROP TABLE runs; --",
    '"><img src=x onerror="window.__pwned=1">',
    "<b>bold</b> **stars** `code` $x$ [link](http://example.com)",
    "tab\tnew\nline\x1b[31mred\\u0000",
)


def _artifacts() -> Path:
    path = Path(os.environ.get("LOOPWATCH_ARTIFACTS", ROOT / "build" / "test-artifacts"))
    path = path / "screenshots"
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class Demo:
    proc: subprocess.Popen[str]
    db: Path
    lines: list[str] = field(default_factory=list)
    dashboard: str | None = None
    stopped_code: int | None = None

    def wait_for(self, pattern: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        seen = 0
        while time.monotonic() < deadline:
            for line in self.lines[seen:]:
                if re.search(pattern, line):
                    return line
            seen = len(self.lines)
            if self.proc.poll() is not None and seen == len(self.lines):
                break
            time.sleep(0.1)
        raise AssertionError(
            f"the demo printed no line matching {pattern!r}; it printed:\n" + "\n".join(self.lines)
        )

    def stop(self) -> int:
        if self.stopped_code is None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
            self.stopped_code = self.proc.wait(90)
        return self.stopped_code


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    db = tmp_path_factory.mktemp("demo") / "demo.duckdb"
    cmd = [
        sys.executable,
        "-m",
        "loopwatch.dashboard.cli",
        "demo",
        "--db",
        str(db),
        "--seed",
        str(PLAN.seed),
        "--duration",
        str(PLAN.duration_s),
        "--rate",
        str(PLAN.rate),
        "--agents",
        str(PLAN.agents),
        "--otlp-port",
        "0",
        "--metrics-port",
        "0",
        "--ui-port",
        "0",
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT
    )
    d = Demo(proc, db)

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            d.lines.append(line.rstrip("\n"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        line = d.wait_for(r"dashboard\s+http://", 90)
        m = re.search(r"(http://\S+?)/?\s", line + " ")
        assert m is not None
        d.dashboard = m[1]
        yield d
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        reader.join(5)


@pytest.fixture(scope="module")
def demo_store(demo: Demo) -> Path:
    """The store the demo filled, after the fleet finished and Ctrl-C stopped the demo."""
    demo.wait_for(r"fleet done", PLAN.duration_s + 60)
    code = demo.stop()
    assert code == 0, "\n".join(demo.lines)
    return demo.db


# --- the real browser ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


def _load(page: Any, url: str, *, charts: bool = True) -> None:
    page.goto(url, wait_until="domcontentloaded")
    page.wait_for_selector("h1", timeout=60_000)
    if charts:
        page.wait_for_selector(".js-plotly-plot .main-svg", timeout=60_000)
    settled(page)  # the page's script has finished


def test_every_page_renders_its_charts_in_chromium_while_the_demo_runs(
    demo: Demo, browser: Any
) -> None:
    out = _artifacts()
    keep = os.environ.get("LOOPWATCH_SCREENSHOTS_DIR")
    page = browser.new_page(viewport={"width": 1440, "height": 1500})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    # a served dashboard never calls out (usage statistics, icons): every request stays local
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    # during the outage the open Overview, refreshing by itself, shows the alert firing; the
    # page's text and picture are taken at that moment (the next refresh may already differ)
    _load(page, f"{demo.dashboard}/")
    demo.wait_for(r"lookup_order is down", PLAN.duration_s + 30)
    seen = page.wait_for_function(
        """() => {
            const main = document.querySelector('[data-testid="stMain"]');
            const text = main ? main.innerText : "";
            return text.includes("Alert firing") && text.includes("stuck, not tight") ? text : null;
        }""",
        timeout=(PLAN.outage_end - PLAN.outage_start + 15) * 1000,
        polling=100,
    )
    body = str(seen.json_value())
    # the picture once this refresh has drawn everything (both charts, the link to Loops)
    page.wait_for_function(
        """() => document.querySelectorAll('.js-plotly-plot .main-svg').length >= 2
            && !document.querySelector('[data-testid="stStatusWidget"]')
            && document.querySelector('[data-testid="stMain"]').innerText
                .includes("Open Loops & errors")""",
        timeout=30_000,
        polling=100,
    )
    page.wait_for_timeout(300)  # Plotly's first draw
    page.screenshot(path=str(out / "overview.png"), full_page=True)
    assert "Alert firing" in body and "support_ticket" in body, body[:2000]
    # live mode refreshes the page by itself (st.fragment(run_every=...)): the run count grows
    runs_metric = page.locator('[data-testid="stMetricValue"]').first
    before = int(runs_metric.inner_text().replace(",", ""))
    page.wait_for_function(
        "n => parseInt(document.querySelector('[data-testid=\"stMetricValue\"]')"
        ".innerText.replace(/,/g, '')) > n",
        arg=before,
        timeout=20_000,
    )
    for name in PAGES:
        if name != "overview":
            _load(page, demo.dashboard + PATHS[name], charts=name not in CHARTLESS)
        if name not in CHARTLESS:
            assert page.locator(".js-plotly-plot").count() >= 1, name
        assert page.locator('[data-testid="stException"]').count() == 0, name
        assert page.locator(".stException").count() == 0, name
        title = page.locator("h1").first.inner_text()
        assert title.strip() in {"Overview", "Limits", "Loops & errors", "Runs", "History & shadow"}
        assert page.get_by_text("Page not found").count() == 0, name
        # an ops tool does not offer to deploy to Streamlit Cloud (toolbar mode "viewer")
        assert page.locator('[data-testid="stAppDeployButton"]').count() == 0, name
        assert page.get_by_role("button", name="Deploy", exact=True).count() == 0, name
        shot = out / f"{name}.png"
        if name != "overview":
            page.wait_for_timeout(800)  # let Plotly finish its transitions for the picture
            page.screenshot(path=str(shot), full_page=True)
        if name == "overview":
            assert "too tight" in body and "too loose" in body and "stuck, not tight" in body
        if keep and name in ("overview", "limits"):
            Path(keep).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(shot, Path(keep) / f"{name}.png")
    assert errors == []
    outside = [u for u in requests if not u.startswith(demo.dashboard or "")]
    assert outside == [], outside[:5]
    page.close()


def test_hostile_task_type_in_the_url_is_only_a_filter_and_shows_as_text(
    demo: Demo, browser: Any
) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.on("dialog", lambda d: d.dismiss())
    for hostile in HOSTILE:
        _load(page, f"{demo.dashboard}/?task_type={quote(hostile)}", charts=False)
        page.get_by_text("No runs in the window").wait_for(timeout=60_000)
        main = page.locator("[data-testid='stMain']").first
        text = main.inner_text()
        assert page.locator('[data-testid="stException"]').count() == 0
        assert "No runs in the window" in text, text[:1500]
        assert page.evaluate("() => window.__pwned === undefined")
        assert main.locator("img[src='x']").count() == 0
        assert main.locator("b", has_text="bold").count() == 0
        first_word = hostile.split("\t")[0].split("<")[0].split("'")[0].strip()
        if first_word:
            assert first_word in text
        # the rest of the dashboard still works: the same page without the filter has charts
        _load(page, f"{demo.dashboard}/")
        assert page.locator(".js-plotly-plot").count() >= 1
    page.close()


def test_ctrl_c_stops_the_demo_cleanly(demo_store: Path, demo: Demo) -> None:
    text = "\n".join(demo.lines)
    assert demo.stopped_code == 0
    assert "stopped (serve exited with 0)" in text
    assert re.search(r"fleet done, \d+ runs", text)
    assert "an agent exited" not in text
    assert demo_store.exists()


# --- AppTest over the demo's store ---------------------------------------------------------------
@pytest.fixture
def app_env(demo_store: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LOOPWATCH_DB", str(demo_store))
    for key, value in demo_alert_env(PLAN).items():
        monkeypatch.setenv(key, value)
    return demo_store


def _app() -> Any:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params["window"] = "all"
    return at


def _texts(at: Any) -> str:
    parts: list[str] = []
    for kind in ("markdown", "error", "warning", "info", "success", "caption"):
        parts += [str(e.value) for e in getattr(at, kind)]
    return "\n".join(parts)


def test_every_page_runs_in_apptest_without_an_exception(app_env: Path) -> None:
    at = _app()
    at.run()
    assert not at.exception, at.exception
    for page in ("app_pages/limits.py", "app_pages/loops.py", "app_pages/runs.py"):
        at.switch_page(page)
        at.run()
        assert not at.exception, (page, at.exception)
        # error boxes are verdicts and stop explanations, never a failed query or store
        failures = [e.value for e in at.error if "failed" in e.value or "store" in e.value]
        assert not failures, (page, failures)


def test_overview_flags_each_task_type_as_the_demo_built_it(app_env: Path) -> None:
    at = _app()
    at.run()
    table = next(m.value for m in at.markdown if "lw-types" in str(m.value))
    rows = re.findall(
        r'<tr><td class="type" title="[^"]*"><b>([^<]+)</b></td><td><span[^>]*>([^<]+)</span>',
        table,
    )
    verdicts = {t: v for t, v in rows}
    expected = {p.name: p.expected for p in TASK_TYPES}
    assert verdicts["code_review"] == "too tight · max_steps"
    assert verdicts["summarize_doc"].startswith("too loose")
    assert verdicts["deploy_watch"] == "stuck, not tight · max_steps"
    assert verdicts["support_ticket"] == "ok"
    assert expected["code_review"] == "too_tight"
    metrics = {m.label: m.value for m in at.metric}
    assert int(metrics["Runs"].replace(",", "")) >= 0.8 * PLAN.duration_s * PLAN.rate
    # the demo labels a share of its live runs (task-success feedback): the rate is shown
    assert metrics["Task success rate"].endswith("%"), metrics


def test_the_alert_fired_during_the_outage_and_resolved(app_env: Path) -> None:
    at = _app()
    at.run()
    text = _texts(at)
    # the demo is over: nothing fires now, the Overview says when it fired
    assert re.search(r"fired earlier in this window and resolved: support\\_ticket", text), text
    at.switch_page("app_pages/loops.py")
    at.run()
    warnings = [w.value for w in at.warning]
    assert any("support\\_ticket" in w and "then resolved" in w for w in warnings), warnings
    assert not any("code\\_review" in w for w in warnings)


def test_limits_page_verdicts_lower_bound_and_toml(app_env: Path) -> None:
    from loopwatch.instrumentation.runtime.limits import LimitPolicy

    at = _app()
    at.switch_page("app_pages/limits.py")
    at.run()
    assert not at.exception
    # the first pick is the most pressing verdict; choose the tight one explicitly
    at.selectbox(key="loopwatch.limits.pick").set_value("code_review\x1fsteps").run()
    assert not at.exception
    warning = " ".join(w.value for w in at.warning)
    assert "too tight" in warning and "lower bound" in warning
    table = next(df.value for df in at.dataframe if "verdict" in df.value.columns)
    # next to the download: each task type's file judged as a whole, fit and back-test
    files = next(df.value for df in at.dataframe if "promise" in df.value.columns)
    loose = files[files["task type"] == "summarize_doc"].iloc[0]
    assert loose["cuts (fit)"] <= 0.02
    assert (
        "cut at most 2% of successful runs" in loose["promise"] and "back-test" in loose["promise"]
    )
    verdict = dict(zip(table["task type"] + "/" + table["limit"], table["verdict"], strict=True))
    assert verdict["code_review/max_steps"] == "too tight"
    assert verdict["summarize_doc/max_steps"] == "too loose"
    assert verdict["deploy_watch/max_steps"] == "stuck, not tight"
    rec = dict(zip(table["task type"] + "/" + table["limit"], table["recommended"], strict=True))
    assert (
        rec["code_review/max_steps"].startswith("≥ ")
        and "lower bound" in rec["code_review/max_steps"]
    )
    # the what-if slider: at the current limit nothing successful is cut
    slider = at.slider(key="loopwatch.whatif.code_review\x1fsteps")
    slider.set_value(8).run()
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Successful runs it would cut"] == "0.0%"
    slider = at.slider(key="loopwatch.whatif.code_review\x1fsteps")
    slider.set_value(2).run()
    metrics = {m.label: m.value for m in at.metric}
    assert float(metrics["Successful runs it would cut"].rstrip("%")) > 50
    # the download is a TOML that LimitPolicy loads, raising the tight limit
    toml = next(c.value for c in at.code if "[task_types" in c.value)
    path = app_env.parent / "limits.toml"
    path.write_text(toml)
    policy = LimitPolicy.from_toml(path)
    assert policy.for_task("code_review").max_steps > 8
    assert policy.for_task("summarize_doc").max_steps < 40
    assert policy.for_task("deploy_watch").max_steps == 12
    # one set of numbers: the file table lists what the TOML sets, the verdict table the same
    import tomllib

    written = tomllib.loads(toml)["task_types"]
    for _, row in files.iterrows():
        sets = dict(p.split(" = ") for p in row["sets"].split(", "))
        on = {k: str(v) for k, v in written[row["task type"]].items() if v != "off"}
        assert sets == on, (row["task type"], sets, on)
    shown = dict(zip(table["task type"] + "/" + table["limit"], table["in the file"], strict=True))
    assert shown["deploy_watch/max_steps"] == "12 steps"


def test_the_demo_tells_the_tuning_story(demo_store: Path, demo: Demo) -> None:
    """Served limits, a shadow candidate promoted and followed by the agents, labelled runs and
    the spend alert firing once (dashboard/demo/story.py)."""
    import duckdb
    from loopwatch.queries.store.limit_versions import version_history

    out = "\n".join(demo.lines)
    assert "shadow candidate for summarize_doc" in out and "promoted: summarize_doc" in out
    assert out.count("ALERT firing: spend per run rising for support_ticket") == 1, out
    con = duckdb.connect(str(demo_store), read_only=True)
    try:
        versions = version_history(con)
        assert [v.action for v in versions] == ["promote", "shadow", "apply"]
        promoted = versions[0].limits_version_for("summarize_doc")
        under = con.execute(
            "SELECT count(*) FROM runs WHERE task_type = 'summarize_doc' AND limits_version = ?",
            [promoted],
        ).fetchone()
        assert under is not None and under[0] > 0  # the agents took the promoted version
        shadowed = con.execute(
            "SELECT count(*) FROM runs WHERE shadow_decision IS NOT NULL"
        ).fetchone()
        assert shadowed is not None and shadowed[0] > 0  # the candidate was evaluated
        labelled = con.execute("SELECT count(*), count(task_success) FROM runs").fetchone()
        assert labelled is not None and 0.1 < labelled[1] / labelled[0] < 0.5
    finally:
        con.close()
