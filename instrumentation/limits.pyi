"""Old import path, kept working: the code now lives in
:mod:`loopwatch.instrumentation.runtime.limits`.
"""

from loopwatch.instrumentation.runtime.limits import (
    BUDGET_LIMITS as BUDGET_LIMITS,
)
from loopwatch.instrumentation.runtime.limits import (
    LIMITS_ENV as LIMITS_ENV,
)
from loopwatch.instrumentation.runtime.limits import (
    LimitPolicy as LimitPolicy,
)
from loopwatch.instrumentation.runtime.limits import (
    LoopLimits as LoopLimits,
)
from loopwatch.instrumentation.runtime.limits import (
    resolve_limits as resolve_limits,
)
from loopwatch.instrumentation.runtime.limits import (
    resolve_shadow as resolve_shadow,
)
from loopwatch.instrumentation.runtime.limits import (
    toml_key as toml_key,
)
from loopwatch.instrumentation.runtime.limits import (
    toml_string as toml_string,
)
from loopwatch.instrumentation.runtime.limits import (
    toml_value as toml_value,
)

__all__ = [
    "BUDGET_LIMITS",
    "LIMITS_ENV",
    "LimitPolicy",
    "LoopLimits",
    "resolve_limits",
    "resolve_shadow",
    "toml_key",
    "toml_string",
    "toml_value",
]
