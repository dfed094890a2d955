"""The demo fleet: ``loopwatch demo`` (:mod:`.runner`) and the scripted agents it runs
(:mod:`.fleet`). ``python -m loopwatch.dashboard.demo agent ...`` runs one agent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loopwatch.instrumentation.runtime.lazy import lazy_names

if TYPE_CHECKING:
    from .runner import (
        DemoError,
        DemoOptions,
        agent_main,
        demo_alert_env,
        run_demo,
    )

__all__ = [
    "DemoError",
    "DemoOptions",
    "agent_main",
    "demo_alert_env",
    "run_demo",
]

# Imported on first use, like the package above it.
_LAZY: dict[str, str] = dict.fromkeys(__all__, ".runner")

__getattr__, __dir__ = lazy_names(globals(), _LAZY, __all__)
