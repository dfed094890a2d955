"""Old import path, kept working: the code now lives in
:mod:`loopwatch.queries.analysis.alerts`.
"""

from loopwatch.queries.analysis.alerts import (
    RULES_FILE as RULES_FILE,
)
from loopwatch.queries.analysis.alerts import (
    AlertState as AlertState,
)
from loopwatch.queries.analysis.alerts import (
    AlertThresholds as AlertThresholds,
)
from loopwatch.queries.analysis.alerts import (
    render_rules as render_rules,
)
from loopwatch.queries.analysis.alerts import (
    repeated_error_alerts as repeated_error_alerts,
)
from loopwatch.queries.analysis.alerts import (
    rules_path as rules_path,
)

__all__ = [
    "RULES_FILE",
    "AlertState",
    "AlertThresholds",
    "render_rules",
    "repeated_error_alerts",
    "rules_path",
]
