"""Old import path, kept working: the code now lives in
:mod:`loopwatch.instrumentation.runtime.outcomes`.
"""

from loopwatch.instrumentation.runtime.outcomes import (
    UNKNOWN_ERROR as UNKNOWN_ERROR,
)
from loopwatch.instrumentation.runtime.outcomes import (
    ErrorResult as ErrorResult,
)
from loopwatch.instrumentation.runtime.outcomes import (
    ToolErrorInfo as ToolErrorInfo,
)
from loopwatch.instrumentation.runtime.outcomes import (
    tool_error as tool_error,
)

__all__ = [
    "UNKNOWN_ERROR",
    "ErrorResult",
    "ToolErrorInfo",
    "tool_error",
]
