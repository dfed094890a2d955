"""Old import path, kept working: the code now lives in
:mod:`loopwatch.instrumentation.runtime.retry`.
"""

from loopwatch.instrumentation.runtime.retry import (
    BREAKER_ENV as BREAKER_ENV,
)
from loopwatch.instrumentation.runtime.retry import (
    RETRY_ENV as RETRY_ENV,
)
from loopwatch.instrumentation.runtime.retry import (
    TRANSIENT_STATUSES as TRANSIENT_STATUSES,
)
from loopwatch.instrumentation.runtime.retry import (
    BreakerState as BreakerState,
)
from loopwatch.instrumentation.runtime.retry import (
    BreakerUse as BreakerUse,
)
from loopwatch.instrumentation.runtime.retry import (
    CircuitBreaker as CircuitBreaker,
)
from loopwatch.instrumentation.runtime.retry import (
    Done as Done,
)
from loopwatch.instrumentation.runtime.retry import (
    ErrorInfo as ErrorInfo,
)
from loopwatch.instrumentation.runtime.retry import (
    RetryHooks as RetryHooks,
)
from loopwatch.instrumentation.runtime.retry import (
    RetryPolicy as RetryPolicy,
)
from loopwatch.instrumentation.runtime.retry import (
    RetryState as RetryState,
)
from loopwatch.instrumentation.runtime.retry import (
    Sleep as Sleep,
)
from loopwatch.instrumentation.runtime.retry import (
    ToolError as ToolError,
)
from loopwatch.instrumentation.runtime.retry import (
    acall_with_retries as acall_with_retries,
)
from loopwatch.instrumentation.runtime.retry import (
    call_with_retries as call_with_retries,
)
from loopwatch.instrumentation.runtime.retry import (
    classify as classify,
)
from loopwatch.instrumentation.runtime.retry import (
    is_transient_status as is_transient_status,
)

__all__ = [
    "BREAKER_ENV",
    "RETRY_ENV",
    "TRANSIENT_STATUSES",
    "BreakerState",
    "BreakerUse",
    "CircuitBreaker",
    "Done",
    "ErrorInfo",
    "RetryHooks",
    "RetryPolicy",
    "RetryState",
    "Sleep",
    "ToolError",
    "acall_with_retries",
    "call_with_retries",
    "classify",
    "is_transient_status",
]
