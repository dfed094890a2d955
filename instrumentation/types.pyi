"""Old import path, kept working: the code now lives in
:mod:`loopwatch.instrumentation.runtime.types`.
"""

from loopwatch.instrumentation.runtime.types import (
    Message as Message,
)
from loopwatch.instrumentation.runtime.types import (
    ModelResponse as ModelResponse,
)
from loopwatch.instrumentation.runtime.types import (
    Role as Role,
)
from loopwatch.instrumentation.runtime.types import (
    RunResult as RunResult,
)
from loopwatch.instrumentation.runtime.types import (
    Step as Step,
)
from loopwatch.instrumentation.runtime.types import (
    ToolCall as ToolCall,
)
from loopwatch.instrumentation.runtime.types import (
    Usage as Usage,
)

__all__ = [
    "Message",
    "ModelResponse",
    "Role",
    "RunResult",
    "Step",
    "ToolCall",
    "Usage",
]
