"""The demo fleet's tools (docs/dashboard.md): real functions with the state an agent changes,
among them ``lookup_order``, the tool that has the outage."""

from __future__ import annotations

import random

from loopwatch.instrumentation.runtime.retry import RetryPolicy, ToolError
from loopwatch.instrumentation.runtime.tools import ToolRegistry

__all__ = ["OUTAGE_CODE", "OUTAGE_TOOL", "DemoTools"]

OUTAGE_TOOL = "lookup_order"
OUTAGE_CODE = "UPSTREAM_UNAVAILABLE"


class DemoTools:
    """Real tools with state the agent changes: the outage switch and the deploys' answers."""

    def __init__(self, rng: random.Random) -> None:
        self.outage = False
        self.live_deploys: set[str] = set()
        self._rng = rng

    def registry(self) -> ToolRegistry:
        # no breaker: the outage should show as repeated errors, not as open circuits
        reg = ToolRegistry(breaker=None, retry=RetryPolicy(max_attempts=2, base_delay_s=0.005))
        reg.register(self.lookup_order, name="lookup_order")
        reg.register(self.search_kb, name="search_kb")
        reg.register(self.check_policy, name="check_policy")
        reg.register(self.read_file, name="read_file")
        reg.register(self.fetch_page, name="fetch_page")
        reg.register(self.check_status, name="check_status", repeat_exempt=True)
        return reg

    def lookup_order(self, order_id: str) -> str:
        """Find an order by its id."""
        if self.outage:
            raise ToolError(
                OUTAGE_CODE,
                "order service unavailable "
                f"(upstream 503, request {self._rng.getrandbits(32):08x})",
                status=503,
            )
        if self._rng.random() < 0.03:
            raise ToolError("NOT_FOUND", f"no order {order_id}", transient=False)
        return f"order {order_id}: shipped"

    def search_kb(self, query: str) -> str:
        """Search the help-centre articles."""
        return f"3 articles for {query!r}"

    def check_policy(self, rule: str) -> str:
        """Check a refund rule."""
        return f"{rule}: allowed"

    def read_file(self, path: str) -> str:
        """Read a source file."""
        return f"# {path}\n..."

    def fetch_page(self, url: str) -> str:
        """Fetch a documentation page."""
        return f"<page {url}>"

    def check_status(self, deploy_id: str) -> str:
        """Ask whether a deploy has finished."""
        return "pending"
