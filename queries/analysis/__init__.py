"""What the store says about limits: the named queries and their gateway, limit analysis
(:mod:`.recommendations`), imported history, alerts and the TOML export; ``sql/`` and
``rules/`` are package data.

The names below are what ``loopwatch.queries.analysis`` exported before it became a package;
they are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loopwatch.instrumentation.runtime.lazy import lazy_names

if TYPE_CHECKING:
    from .recommendations import (
        BUDGET_FIELDS,
        AnalysisThresholds,
        DetectorReplay,
        Evidence,
        LimitAnalysis,
        Verdict,
        WhatIfPoint,
        analyze_file,
        analyze_limits,
        default_candidates,
        judge,
        replay_detectors,
        round_up,
        what_if,
    )

__all__ = [
    "BUDGET_FIELDS",
    "AnalysisThresholds",
    "DetectorReplay",
    "Evidence",
    "LimitAnalysis",
    "Verdict",
    "WhatIfPoint",
    "analyze_file",
    "analyze_limits",
    "default_candidates",
    "judge",
    "replay_detectors",
    "round_up",
    "what_if",
]

# Imported on first use, like the package above it.
_LAZY: dict[str, str] = dict.fromkeys(__all__, ".recommendations")

__getattr__, __dir__ = lazy_names(globals(), _LAZY, __all__)
