"""Old import path, kept working: the code now lives in
:mod:`loopwatch.instrumentation.runtime.guard`.
"""

from loopwatch.instrumentation.runtime.guard import (
    LAST_STEP_NOTICE as LAST_STEP_NOTICE,
)
from loopwatch.instrumentation.runtime.guard import (
    Action as Action,
)
from loopwatch.instrumentation.runtime.guard import (
    Approver as Approver,
)
from loopwatch.instrumentation.runtime.guard import (
    Cancel as Cancel,
)
from loopwatch.instrumentation.runtime.guard import (
    Decision as Decision,
)
from loopwatch.instrumentation.runtime.guard import (
    Guardrail as Guardrail,
)
from loopwatch.instrumentation.runtime.guard import (
    LoopGuard as LoopGuard,
)
from loopwatch.instrumentation.runtime.guard import (
    ProgressSignal as ProgressSignal,
)
from loopwatch.instrumentation.runtime.guard import (
    RunConfig as RunConfig,
)
from loopwatch.instrumentation.runtime.guard import (
    StepReport as StepReport,
)
from loopwatch.instrumentation.runtime.guard import (
    ToolOutcomeLike as ToolOutcomeLike,
)
from loopwatch.instrumentation.runtime.guard import (
    Verifier as Verifier,
)
from loopwatch.instrumentation.runtime.guard import (
    describe_call as describe_call,
)
from loopwatch.instrumentation.runtime.guard import (
    stop_reason_of as stop_reason_of,
)

__all__ = [
    "LAST_STEP_NOTICE",
    "Action",
    "Approver",
    "Cancel",
    "Decision",
    "Guardrail",
    "LoopGuard",
    "ProgressSignal",
    "RunConfig",
    "StepReport",
    "ToolOutcomeLike",
    "Verifier",
    "describe_call",
    "stop_reason_of",
]
