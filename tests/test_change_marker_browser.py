"""The hit-rate chart's limits-version markers in a real headless Chromium, against a real
``loopwatch serve``: clicking a version's marker on the plotly chart opens that version's
before/after report (docs/dashboard.md, "Overview").

Streamlit turns a click on a point into a selection event (``st.plotly_chart(...,
on_select="rerun", selection_mode="points")``: plotly's ``clickmode`` is ``event+select``), so
the click is a real mouse click on the marker's pixels, and what opens is read from the page.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from loopwatch.instrumentation.limits import LimitPolicy
from loopwatch.queries.ingest.synthetic import generate_fleet
from loopwatch.queries.store.database import Store
from loopwatch.queries.store.limit_versions import append_version

from tests.browsing import chromium_page, main_text, opened, settled
from tests.serving import ServeProcess

_MARKERS = """() => {
    const isMarkers = t => (t.name || '').startsWith('limits version');
    const gd = [...document.querySelectorAll('.js-plotly-plot')]
        .find(g => (g.data || []).some(isMarkers));
    if (!gd) return null;
    gd.scrollIntoView({block: 'center'});
    const uid = gd._fullData[gd.data.findIndex(isMarkers)].uid;
    return [...gd.querySelectorAll(`g.trace${uid} path.point`)].map(p => {
        const r = p.getBoundingClientRect();
        return [r.x + r.width / 2, r.y + r.height / 2];
    });
}"""


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ServeProcess]:
    path = tmp_path / "live.duckdb"
    with Store(path) as store:
        generate_fleet(store.connection, runs_per_type=60, seed=1, kinds=("tight", "loose"))
        (task,) = store.connection.execute(
            "SELECT task_type FROM runs GROUP BY 1 ORDER BY 1 LIMIT 1"
        ).fetchone()  # type: ignore[misc]
        tighter = LimitPolicy.from_toml(f"[task_types.{task}]\nmax_steps = 4\n")
        append_version(store, tighter, expected=0, action="apply", note="tighter", who="ana")
        looser = LimitPolicy.from_toml(f"[task_types.{task}]\nmax_steps = 30\n")
        append_version(store, looser, expected=1, action="apply", note="looser", who="bo")
        # hours apart inside the window, so that the two markers do not overlap
        now = datetime.now(UTC).replace(tzinfo=None)
        for version, hours in ((1, 14), (2, 4)):
            store.connection.execute(
                "UPDATE limit_versions SET created_at = ? WHERE version = ?",
                [now - timedelta(hours=hours), version],
            )
    server = ServeProcess(path, ui=True)
    yield server
    server.kill()


@pytest.fixture
def page(served: ServeProcess) -> Iterator[Any]:
    with chromium_page() as page:
        yield page


def test_clicking_a_version_marker_opens_its_before_after_report(
    served: ServeProcess, page: Any
) -> None:
    url = f"http://127.0.0.1:{served.ports['ui']}/?window=7d"
    # the newest version's report, by default
    errors = opened(page, url, ready=".js-plotly-plot", shows="v2 apply by bo: looser")
    page.wait_for_function(f"() => {{ const m = ({_MARKERS})(); return m && m.length == 2; }}")
    (x1, y1), (x2, _) = page.evaluate(_MARKERS)
    assert x1 < x2  # v1 is the older, left marker
    page.mouse.move(x1, y1)  # plotly picks the point under the pointer on hover, then the click
    page.mouse.click(x1, y1)
    main_text(page, "v1 apply by ana: tighter")
    # The picker follows the click (once the rerun has replaced the old picker: "1" alone).
    page.wait_for_function(
        "() => [...document.querySelectorAll("
        "'input[aria-label=\"Before and after limits version\"]')].map(e => e.value).join() == '1'",
        timeout=60_000,
    )
    settled(page)
    assert page.query_selector('[data-testid="stException"]') is None
    assert errors == []
