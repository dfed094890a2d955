"""The dashboard's parts without a browser: filters in the URL, text escaping, charts, settings,
and every page under Streamlit's ``AppTest`` over small real stores (synthetic runs, an empty
store, a missing file, a file locked by another process, the live store of this process)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from loopwatch.dashboard import charts, settings
from loopwatch.dashboard.app.filters import (
    DEFAULT_WINDOW,
    MAX_TASK_TYPES,
    MAX_TEXT,
    Filters,
    bucket_seconds,
    filters_from_params,
    filters_to_params,
)
from loopwatch.dashboard.app.pagekit import md_text
from loopwatch.dashboard.app.summary import firing_spans, lead_verdicts
from loopwatch.dashboard.app.theme import fmt_budget, fmt_usd
from loopwatch.dashboard.demo.fleet import FleetPlan
from loopwatch.dashboard.demo.runner import demo_alert_env
from loopwatch.queries.analysis.alerts import AlertThresholds
from loopwatch.queries.analysis.recommendations import Evidence, LimitAnalysis
from loopwatch.queries.ingest.synthetic import generate_fleet
from loopwatch.queries.store.database import Store

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "dashboard" / "app" / "streamlit_app.py"
PAGES = ("app_pages/limits.py", "app_pages/loops.py", "app_pages/runs.py")
HOSTILE = [
    "x'; DROP TABLE runs; --",
    '"><script>alert(1)</script>',
    "<b>bold</b> **stars** _u_ `code` $x$ [l](http://e.com) # h",
    "esc\x1b[31m\\n\ttab\r\n",
]


# --- filters -----------------------------------------------------------------------------------
def test_filters_round_trip_through_url_params() -> None:
    f = Filters(window="6h", task_types=("a", "b c"))
    params = filters_to_params(f)
    assert params == {"window": "6h", "task_type": ["a", "b c"]}
    assert filters_from_params(params) == f
    assert filters_to_params(Filters()) == {}


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_task_types_are_kept_as_data(hostile: str) -> None:
    f = filters_from_params({"task_type": [hostile, hostile, ""]})
    assert f.task_types == (hostile,)
    assert f.params(datetime(2026, 1, 1))["task_types"] == [hostile]
    assert f.problems == ()


def test_bad_window_falls_back_and_says_so() -> None:
    f = filters_from_params({"window": "'; DROP TABLE runs; --"})
    assert f.window == DEFAULT_WINDOW
    assert "Unknown time window" in f.problems[0]
    assert filters_from_params({"window": "90m"}).window_delta == timedelta(minutes=90)
    assert filters_from_params({"window": "all"}).since() is None


def test_filter_values_are_capped_and_lose_nul() -> None:
    f = filters_from_params({"task_type": [f"t{i}" for i in range(MAX_TASK_TYPES + 5)]})
    assert len(f.task_types) == MAX_TASK_TYPES and f.problems
    f = filters_from_params({"task_type": "a\x00b" + "x" * 500})
    assert f.task_types[0].startswith("ab") and len(f.task_types[0]) == MAX_TEXT


def test_bucket_seconds_are_round_and_bounded() -> None:
    assert bucket_seconds(timedelta(seconds=30)) == 1
    assert bucket_seconds(timedelta(hours=1)) == 60
    assert bucket_seconds(timedelta(hours=24)) == 1800
    assert bucket_seconds(timedelta(days=3650)) == 86400


# --- text and charts -----------------------------------------------------------------------------
@pytest.mark.parametrize("hostile", HOSTILE)
def test_md_text_leaves_no_markup(hostile: str) -> None:
    out = md_text(hostile)
    for ch in "*_`[]<>#$":
        assert ch not in out.replace("\\" + ch, "")
    assert "\n" not in out and "\x1b" not in out


def test_chart_labels_are_escaped() -> None:
    mix = [
        {
            "task_type": "<b>x</b>",
            "outcome": "success",
            "stop_reason": "completed",
            "runs": 3,
            "share": 0.75,
        },
        {
            "task_type": "<b>x</b>",
            "outcome": "limit",
            "stop_reason": "max_steps",
            "runs": 1,
            "share": 0.25,
        },
    ]
    fig = charts.stop_mix_figure(mix)
    assert list(fig.data[0].y) == ["&lt;b&gt;x&lt;/b&gt;"]
    assert [t.name for t in fig.data] == ["completed", "max_steps"]


def test_limit_change_markers_name_what_changed() -> None:
    t0 = datetime(2026, 1, 1)
    rows = [
        {
            "task_type": "a",
            "limits_version": "v1",
            "first_run": t0,
            "limit_steps": 10.0,
            "limit_tokens": None,
            "limit_share": 0.1,
        },
        {
            "task_type": "a",
            "limits_version": "v2",
            "first_run": t0 + timedelta(hours=1),
            "limit_steps": 12.0,
            "limit_tokens": None,
            "limit_share": 0.0,
        },
        {
            "task_type": "b",
            "limits_version": "v3",
            "first_run": t0,
            "limit_steps": 5.0,
            "limit_tokens": None,
            "limit_share": 0.0,
        },
    ]
    (m,) = charts.limit_change_markers(rows)
    assert m["task_type"] == "a" and m["at"] == t0 + timedelta(hours=1)
    assert m["label"] == "max_steps 10 steps → 12 steps"


def test_firing_spans_merge_consecutive_evaluations() -> None:
    t0 = datetime(2026, 1, 1)
    rows = [
        {"task_type": "a", "evaluated_at": t0 + timedelta(seconds=i), "firing": f}
        for i, f in enumerate([False, True, True, False, True])
    ]
    spans = firing_spans(rows)
    assert [(s.start.second, s.end.second, s.ongoing) for s in spans] == [
        (1, 2, False),
        (4, 4, True),
    ]


def _analysis(t: str, budget: str, verdict: str | None) -> LimitAnalysis:
    ev = Evidence(
        runs=1,
        hits=0,
        hit_rate=0.0,
        hits_progressing=0,
        hits_looping=0,
        progressing_share=None,
        successes=1,
        success_p50=1.0,
        success_p95=1.0,
        success_max=1.0,
        p95_share_of_limit=0.1,
    )
    return LimitAnalysis(
        task_type=t,
        budget=budget,
        field=f"max_{budget}",
        current_limit=10.0,
        recommended=2.0,
        proposed=2.0,
        verdict=verdict,  # type: ignore[arg-type]
        sentence="s",
        evidence=ev,
    )


def test_lead_verdict_is_the_most_pressing_one() -> None:
    lead = lead_verdicts(
        [
            _analysis("a", "tokens", "too_loose"),
            _analysis("a", "steps", "stuck_not_tight"),
            _analysis("b", "steps", "ok"),
            _analysis("b", "tokens", None),
        ]
    )
    assert lead["a"].verdict == "stuck_not_tight" and lead["b"].verdict == "ok"


def test_units_are_shown() -> None:
    assert fmt_budget("steps", 12.0) == "12 steps"
    assert fmt_budget("wall_s", 31.25) == "31.2 s"
    assert fmt_budget("wall_s", 0.04) == "0.04 s"
    assert fmt_budget("cost_usd", 0.04) == "$0.0400"
    assert fmt_budget("tokens", None) == "off"
    assert fmt_usd(0) == "$0" and fmt_usd(1234.5) == "$1,234.50"


# --- settings and the demo's scaling ---------------------------------------------------------
def test_alert_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert settings.alert_thresholds() == AlertThresholds()
    monkeypatch.setenv(settings.ALERT_SHORT_ENV, "10s")
    monkeypatch.setenv(settings.ALERT_BASELINE_ENV, "60s")
    monkeypatch.setenv(settings.ALERT_MIN_RUNS_ENV, "7")
    t = settings.alert_thresholds()
    assert (t.short_window, t.baseline_window, t.min_runs) == ("10s", "60s", 7)
    monkeypatch.setenv(settings.ALERT_BASELINE_ENV, "5s")
    with pytest.raises(settings.SettingsError, match="baseline_window must be longer"):
        settings.alert_thresholds()
    monkeypatch.setenv(settings.ALERT_MIN_RUNS_ENV, "many")
    with pytest.raises(settings.SettingsError, match="LOOPWATCH_ALERT_MIN_RUNS='many'"):
        settings.alert_thresholds()
    monkeypatch.setenv(settings.REFRESH_ENV, "0.1")
    assert settings.refresh_seconds() == 1.0


@pytest.mark.parametrize(("duration", "rate"), [(20, 10), (60, 12), (300, 12), (3600, 50)])
def test_demo_alert_windows_scale_with_the_duration(
    duration: float, rate: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = FleetPlan(duration_s=duration, rate=rate)
    for key, value in demo_alert_env(plan).items():
        monkeypatch.setenv(key, value)
    t = settings.alert_thresholds()
    from loopwatch.queries.analysis.gateway import parse_duration

    short = parse_duration(t.short_window).total_seconds()
    # the outage fills the short window, and the baseline reaches back before the outage
    assert 5 <= short <= plan.outage_end - plan.outage_start
    assert parse_duration(t.baseline_window).total_seconds() >= plan.outage_start
    assert 5 <= t.min_runs <= 20


def test_fleet_plan_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="duration must be positive"):
        FleetPlan(duration_s=0)
    with pytest.raises(ValueError, match="rate must be positive"):
        FleetPlan(rate=-1)
    with pytest.raises(ValueError, match="outage_from and outage_to"):
        FleetPlan(outage_from=0.8, outage_to=0.2)


def test_demo_cli_rejects_bad_flags(capsys: pytest.CaptureFixture[str]) -> None:
    from loopwatch.dashboard.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["demo", "--duration", "-3"])
    assert exc.value.code == 2
    assert "invalid number '-3': must be positive" in capsys.readouterr().err


# --- pages under AppTest -------------------------------------------------------------------
@pytest.fixture(scope="module")
def synthetic_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("dash") / "synthetic.duckdb"
    generate_fleet(path, runs_per_type=120, seed=3, spans=True, span=timedelta(hours=6))
    return path


def _app(**params: Any) -> Any:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP), default_timeout=60)
    for k, v in params.items():
        at.query_params[k] = v
    return at


def _all_text(at: Any) -> str:
    parts: list[str] = []
    for kind in (
        "title",
        "subheader",
        "markdown",
        "error",
        "warning",
        "info",
        "success",
        "caption",
        "code",
    ):
        parts += [str(e.value) for e in getattr(at, kind)]
    return "\n".join(parts)


def _run_every_page(at: Any) -> list[str]:
    at.run()
    assert not at.exception, at.exception
    texts = [_all_text(at)]
    for page in PAGES:
        at.switch_page(page)
        at.run()
        assert not at.exception, (page, at.exception)
        texts.append(_all_text(at))
    return texts


def test_pages_over_the_synthetic_fleet(
    synthetic_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOPWATCH_DB", str(synthetic_store))
    overview, _limits, _loops, runs = _run_every_page(_app())
    assert "too tight · max_steps" in overview
    assert "stuck, not tight · max_steps" in overview
    assert "One run, step by step" in runs


def test_window_and_task_type_filters_come_from_the_url(
    synthetic_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOPWATCH_DB", str(synthetic_store))
    at = _app(window="7d", task_type=["tight"])
    at.run()
    assert not at.exception
    assert at.selectbox(key="loopwatch.window").value == "7d"
    assert at.multiselect(key="loopwatch.task_types").value == ["tight"]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Runs"] == "120"
    table = next(m.value for m in at.markdown if "lw-types" in str(m.value))
    assert "<b>tight</b>" in table and "<b>loose</b>" not in table
    # changing the widget updates the address
    at.multiselect(key="loopwatch.task_types").set_value(["tight", "loose"]).run()
    assert at.query_params["task_type"] == ["tight", "loose"]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Runs"] == "240"


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_filters_change_only_the_filter(
    hostile: str, synthetic_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOPWATCH_DB", str(synthetic_store))
    for text in _run_every_page(_app(window="7d", task_type=[hostile])):
        assert "No runs in the window" in text
        assert md_text(hostile) in text
    # the store is untouched and the same view without the filter still has every run
    at = _app(window="7d")
    at.run()
    assert {m.label: m.value for m in at.metric}["Runs"] == "492"


def test_hostile_run_search_is_plain_text(
    synthetic_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOPWATCH_DB", str(synthetic_store))
    at = _app(window="7d")
    at.switch_page("app_pages/runs.py")
    at.run()
    for hostile in [*HOSTILE, "%", "_"]:
        at.text_input(key="loopwatch.runs.text").set_value(hostile).run()
        assert not at.exception
        assert "No run matches these filters" in _all_text(at)
    at.text_input(key="loopwatch.runs.text").set_value("").run()
    assert "No run matches" not in _all_text(at)


def test_missing_store_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPWATCH_DB", str(tmp_path / "nope.duckdb"))
    for text in _run_every_page(_app()):
        assert "No store at" in text
        assert "loopwatch demo" in text and "loopwatch serve --db PATH" in text


def test_empty_store_shows_how_to_send_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "empty.duckdb"
    Store(path).close()
    monkeypatch.setenv("LOOPWATCH_DB", str(path))
    for text in _run_every_page(_app()):
        assert "No runs in" in text and "yet" in text
        assert 'instrument(otlp_endpoint="http://127.0.0.1:4318")' in text


@pytest.fixture
def locked_store(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "locked.duckdb"
    Store(path).close()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import sys, duckdb
                con = duckdb.connect({str(path)!r})
                print("held", flush=True)
                sys.stdin.read()
                """
            ),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    try:
        yield path
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(10)


def test_locked_store_says_what_to_do(locked_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPWATCH_DB", str(locked_store))
    for text in _run_every_page(_app()):
        assert "locked by another process" in text
        assert "loopwatch serve --db PATH" in text


def test_live_mode_reads_the_store_of_this_process_and_refreshes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loopwatch.dashboard.app.source import clear_live_store, set_live_store

    path = tmp_path / "live.duckdb"
    store = Store(path)
    generate_fleet(store.connection, runs_per_type=60, seed=1, kinds=("tight", "healthy"))
    monkeypatch.setenv("LOOPWATCH_DB", str(tmp_path / "elsewhere.duckdb"))
    set_live_store(store)
    try:
        at = _app()
        at.run()
        assert not at.exception
        assert at.toggle(key="loopwatch.auto_refresh").value is True
        assert "Live" in _all_text(at) or any("Live" in c.value for c in at.sidebar.caption)
        assert {m.label: m.value for m in at.metric}["Runs"] == "120"
        # new runs arrive in the live store: the next refresh shows them
        generate_fleet(store.connection, runs_per_type=60, seed=2, kinds=("loose",))
        at.run()
        assert {m.label: m.value for m in at.metric}["Runs"] == "180"
    finally:
        clear_live_store()
        store.close()


# --- the README's top ----------------------------------------------------------------------------
def test_readme_starts_with_the_demo_and_the_ci_test_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    top = readme[: readme.index("\n---\n")]
    blocks = re.findall(r"```sh\n(.*?)\n```", top, flags=re.S)
    assert blocks[0].endswith("loopwatch demo")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert blocks[1] == ci
    for image in re.findall(r"\((docs/img/[a-z]+\.png)\)", top):
        assert (ROOT / image).stat().st_size > 10_000, image


def test_limits_pick_comes_from_the_url(
    synthetic_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOPWATCH_DB", str(synthetic_store))
    at = _app(window="7d", limit="healthy/max_tokens")
    at.switch_page("app_pages/limits.py")
    at.run()
    assert not at.exception
    assert at.selectbox(key="loopwatch.limits.pick").value == "healthy\x1ftokens"
    at.selectbox(key="loopwatch.limits.pick").set_value("tight\x1fsteps").run()
    assert at.query_params["limit"] in ("tight/max_steps", ["tight/max_steps"])
    # an unknown or hostile value falls back to the most pressing limit
    at = _app(window="7d", limit="<b>x</b>/max_steps")
    at.switch_page("app_pages/limits.py")
    at.run()
    assert at.selectbox(key="loopwatch.limits.pick").value == "looping\x1fsteps"


def test_hit_rate_chart_leaves_out_buckets_with_few_runs() -> None:
    t0 = datetime(2026, 1, 1)
    rows = [
        {
            "bucket": t0,
            "task_type": "a",
            "limit_name": "any",
            "runs": 40,
            "hits": 4,
            "hit_rate": 0.1,
        },
        {
            "bucket": t0 + timedelta(minutes=1),
            "task_type": "a",
            "limit_name": "any",
            "runs": 1,
            "hits": 1,
            "hit_rate": 1.0,
        },
        {
            "bucket": t0,
            "task_type": "a",
            "limit_name": "steps",
            "runs": 40,
            "hits": 4,
            "hit_rate": 0.1,
        },
    ]
    fig = charts.hit_rate_figure(rows, [])
    assert list(fig.data[0].y) == [0.1]


# --- what the served app runs with -------------------------------------------------------------
def test_served_dashboards_never_phone_home_nor_offer_to_deploy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from loopwatch.dashboard.app.ui import TOOLBAR_MODE_ENV, streamlit_options

    monkeypatch.delenv(TOOLBAR_MODE_ENV, raising=False)
    opts = streamlit_options()
    assert opts["browser.gatherUsageStats"] is False
    assert opts["client.toolbarMode"] == "viewer"
    monkeypatch.setenv(TOOLBAR_MODE_ENV, "developer")
    assert streamlit_options()["client.toolbarMode"] == "developer"
    monkeypatch.setenv(TOOLBAR_MODE_ENV, "  ")  # blank: not given
    assert streamlit_options()["client.toolbarMode"] == "viewer"
    monkeypatch.setenv(TOOLBAR_MODE_ENV, "nonsense")  # given but invalid: said, not ignored
    with pytest.raises(ValueError, match=rf"^{TOOLBAR_MODE_ENV} must be one of 'auto'"):
        streamlit_options()
    monkeypatch.delenv(TOOLBAR_MODE_ENV)
    # what the served app runs with (STREAMLIT_* variables are not read outside `streamlit run`)
    code = (
        "import os; os.environ['STREAMLIT_BROWSER_GATHER_USAGE_STATS'] = 'true'\n"
        "from loopwatch.dashboard.app.ui import ui_app; ui_app()\n"
        "from streamlit import config\n"
        "print(config.get_option('browser.gatherUsageStats'), "
        "config.get_option('client.toolbarMode'))"
    )
    env = {k: v for k, v in os.environ.items() if k != TOOLBAR_MODE_ENV}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.split() == ["False", "viewer"]


def _rgb(color: str) -> tuple[int, int, int]:
    return int(color[1:3], 16), int(color[3:5], 16), int(color[5:7], 16)


def test_task_type_lines_never_take_an_outcomes_colour() -> None:
    """Red means stuck and amber a limit on every page: a task type drawn in either would be
    read as one. Twelve task types on both over-time charts: every line's colour is far (RGB
    distance > 60) from every outcome and stop-reason colour, and no two task types share both
    colour and marker."""
    import math

    from loopwatch.dashboard.app.theme import OUTCOME_COLORS, STOP_REASON_COLORS

    reserved = {*OUTCOME_COLORS.values(), *STOP_REASON_COLORS.values()}
    types = [f"type-{i:02}" for i in range(12)]
    at = datetime(2026, 1, 1)
    rates = [
        {"task_type": t, "limit_name": "any", "bucket": at, "runs": 10, "hits": 1, "hit_rate": 0.1}
        for t in types
    ]
    history = [
        {
            "task_type": t,
            "evaluated_at": at,
            "ratio_short": 0.1,
            "ratio_baseline": 0.05,
            "repeated_short": 1,
            "runs_short": 10,
            "firing": False,
        }
        for t in types
    ]
    figures = [
        charts.hit_rate_figure(rates, []),
        charts.repeated_error_figure(history, factor=2.0, min_ratio=0.05),
    ]
    for fig in figures:
        lines = [tr for tr in fig.data if tr.name in types]
        assert len(lines) == len(types)
        looks = {(tr.line.color, tr.marker.symbol) for tr in lines}
        assert len(looks) == len(types), looks
        for tr in lines:
            nearest = min(math.dist(_rgb(tr.line.color), _rgb(c)) for c in reserved)
            assert nearest > 60, (tr.name, tr.line.color)


def test_opening_a_run_by_id_is_not_hijacked_by_an_explanation_quoting_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The newer run's explanation quotes the older run's id: a substring lookup (the search
    # box's) would open the newer run for either id. Opening goes by exact id.
    import time as _time

    from loopwatch.instrumentation import semconv as sc
    from loopwatch.queries.analysis.gateway import run_query
    from loopwatch.queries.store import SpanBatch, SpanRecord

    now = _time.time_ns()
    victim_trace = "ab" * 16

    def run(run_id: str, trace: str, start: int, task_type: str, explanation: str) -> SpanRecord:
        return SpanRecord(
            trace,
            trace[:16],
            "invoke_agent a",
            start,
            start + 10**9,
            attributes={
                sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT,
                sc.RUN_ID: run_id,
                sc.TASK_TYPE: task_type,
                sc.STOP_REASON: "repeated_error",
                sc.STOP_EXPLANATION: explanation,
            },
        )

    path = tmp_path / "quoting.duckdb"
    with Store(path) as store:
        store.write(
            SpanBatch.from_records(
                [
                    run("victim-run", victim_trace, now - 120 * 10**9, "billing", "it looped"),
                    run(
                        "quoting-run",
                        "cd" * 16,
                        now - 60 * 10**9,
                        "triage",
                        "same error as victim-run and as " + victim_trace.upper(),
                    ),
                ]
            )
        )
        for wanted in ("victim-run", victim_trace, victim_trace.upper()):
            rows = run_query(store.connection, "run_by_id", {"id": wanted}).records()
            assert [r["run_id"] for r in rows] == ["victim-run"], wanted
        assert run_query(store.connection, "run_by_id", {"id": "victim"}).rows == []
        found = run_query(store.connection, "runs_search", {"text": "victim-run"}).records()
        assert {r["run_id"] for r in found} == {"victim-run", "quoting-run"}  # the search box
    monkeypatch.setenv("LOOPWATCH_DB", str(path))
    for wanted in ("victim-run", victim_trace):
        at = _app(window="7d", run=wanted)
        at.switch_page("app_pages/runs.py")
        at.run()
        assert not at.exception
        text = _all_text(at)
        assert f"run id {md_text('victim-run')}" in text, wanted
        assert "**billing**" in text and "**triage**" not in text


def test_a_ten_thousand_character_task_type_does_not_stretch_the_overview(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import html as _html
    import time as _time

    from loopwatch.instrumentation import semconv as sc
    from loopwatch.queries.store import SpanBatch, SpanRecord

    long_type = "".join(f"segment{i:05d}-" for i in range(770))[:10_000]
    now = _time.time_ns()
    records = [
        SpanRecord(
            f"{n + 1:032x}",
            f"{n + 1:016x}",
            "invoke_agent a",
            now - (n + 2) * 10**9,
            now - (n + 1) * 10**9,
            attributes={
                sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT,
                sc.RUN_ID: f"long-{n}",
                sc.TASK_TYPE: long_type,
                sc.STOP_REASON: "completed",
            },
        )
        for n in range(3)
    ]
    path = tmp_path / "long.duckdb"
    with Store(path) as store:
        store.write(SpanBatch.from_records(records))
    monkeypatch.setenv("LOOPWATCH_DB", str(path))
    at = _app(window="7d")
    at.run()
    assert not at.exception
    (table,) = [str(m.value) for m in at.markdown if "lw-types" in str(m.value)]
    cell = re.search(r'<td class="type" title="([^"]*)"><b>([^<]*)</b></td>', table)
    assert cell is not None
    assert _html.unescape(cell[1]) == long_type  # the whole value, as a tooltip
    shown = _html.unescape(cell[2])
    assert len(shown) <= 60 and shown.endswith("…") and long_type.startswith(shown[:-1])
    assert "overflow-wrap:anywhere" in table
