"""Old import path, kept working: the code now lives in
:mod:`loopwatch.instrumentation.runtime.tools`.
"""

from loopwatch.instrumentation.runtime.tools import (
    CIRCUIT_OPEN as CIRCUIT_OPEN,
)
from loopwatch.instrumentation.runtime.tools import (
    IDEMPOTENCY_KEY as IDEMPOTENCY_KEY,
)
from loopwatch.instrumentation.runtime.tools import (
    INVALID_ARGUMENTS as INVALID_ARGUMENTS,
)
from loopwatch.instrumentation.runtime.tools import (
    INVALID_RESULT as INVALID_RESULT,
)
from loopwatch.instrumentation.runtime.tools import (
    TOOL_CALL_ID as TOOL_CALL_ID,
)
from loopwatch.instrumentation.runtime.tools import (
    TOOL_NAME_PATTERN as TOOL_NAME_PATTERN,
)
from loopwatch.instrumentation.runtime.tools import (
    UNKNOWN_TOOL as UNKNOWN_TOOL,
)
from loopwatch.instrumentation.runtime.tools import (
    ErrorResult as ErrorResult,
)
from loopwatch.instrumentation.runtime.tools import (
    InvalidArguments as InvalidArguments,
)
from loopwatch.instrumentation.runtime.tools import (
    RetryEvent as RetryEvent,
)
from loopwatch.instrumentation.runtime.tools import (
    ToolOutcome as ToolOutcome,
)
from loopwatch.instrumentation.runtime.tools import (
    ToolRegistry as ToolRegistry,
)
from loopwatch.instrumentation.runtime.tools import (
    ToolSpec as ToolSpec,
)
from loopwatch.instrumentation.runtime.tools import (
    parse_arguments as parse_arguments,
)
from loopwatch.instrumentation.runtime.tools import (
    result_text as result_text,
)
from loopwatch.instrumentation.runtime.tools import (
    schema_from_function as schema_from_function,
)
from loopwatch.instrumentation.runtime.tools import (
    validate_arguments as validate_arguments,
)

__all__ = [
    "CIRCUIT_OPEN",
    "IDEMPOTENCY_KEY",
    "INVALID_ARGUMENTS",
    "INVALID_RESULT",
    "TOOL_CALL_ID",
    "TOOL_NAME_PATTERN",
    "UNKNOWN_TOOL",
    "ErrorResult",
    "InvalidArguments",
    "RetryEvent",
    "ToolOutcome",
    "ToolRegistry",
    "ToolSpec",
    "parse_arguments",
    "result_text",
    "schema_from_function",
    "validate_arguments",
]
