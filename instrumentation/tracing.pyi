"""Old import path, kept working: the code now lives in
:mod:`loopwatch.instrumentation.telemetry.tracing`.
"""

from loopwatch.instrumentation.telemetry.tracing import (
    INSTRUMENTATION_SCOPE as INSTRUMENTATION_SCOPE,
)
from loopwatch.instrumentation.telemetry.tracing import (
    OTelObserverFactory as OTelObserverFactory,
)
from loopwatch.instrumentation.telemetry.tracing import (
    OTelRunObserver as OTelRunObserver,
)
from loopwatch.instrumentation.telemetry.tracing import (
    budget_attributes as budget_attributes,
)
from loopwatch.instrumentation.telemetry.tracing import (
    cap_content as cap_content,
)
from loopwatch.instrumentation.telemetry.tracing import (
    capture_content_enabled as capture_content_enabled,
)
from loopwatch.instrumentation.telemetry.tracing import (
    input_messages as input_messages,
)
from loopwatch.instrumentation.telemetry.tracing import (
    is_error_outcome as is_error_outcome,
)
from loopwatch.instrumentation.telemetry.tracing import (
    redact_content as redact_content,
)
from loopwatch.instrumentation.telemetry.tracing import (
    resolve_content_max_chars as resolve_content_max_chars,
)
from loopwatch.instrumentation.telemetry.tracing import (
    run_span_attributes as run_span_attributes,
)
from loopwatch.instrumentation.telemetry.tracing import (
    system_instructions as system_instructions,
)
from loopwatch.instrumentation.telemetry.tracing import (
    tool_definitions as tool_definitions,
)

__all__ = [
    "INSTRUMENTATION_SCOPE",
    "OTelObserverFactory",
    "OTelRunObserver",
    "budget_attributes",
    "cap_content",
    "capture_content_enabled",
    "input_messages",
    "is_error_outcome",
    "redact_content",
    "resolve_content_max_chars",
    "run_span_attributes",
    "system_instructions",
    "tool_definitions",
]
