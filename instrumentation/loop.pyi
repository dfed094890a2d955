"""Old import path, kept working: the code now lives in
:mod:`loopwatch.instrumentation.runtime.loop`.
"""

from loopwatch.instrumentation.runtime.loop import (
    LIMITS_ENV as LIMITS_ENV,
)
from loopwatch.instrumentation.runtime.loop import (
    AsyncModel as AsyncModel,
)
from loopwatch.instrumentation.runtime.loop import (
    AsyncTools as AsyncTools,
)
from loopwatch.instrumentation.runtime.loop import (
    Model as Model,
)
from loopwatch.instrumentation.runtime.loop import (
    RunConfig as RunConfig,
)
from loopwatch.instrumentation.runtime.loop import (
    Tools as Tools,
)
from loopwatch.instrumentation.runtime.loop import (
    arun as arun,
)
from loopwatch.instrumentation.runtime.loop import (
    resolve_limits as resolve_limits,
)
from loopwatch.instrumentation.runtime.loop import (
    run as run,
)

__all__ = [
    "LIMITS_ENV",
    "AsyncModel",
    "AsyncTools",
    "Model",
    "RunConfig",
    "Tools",
    "arun",
    "resolve_limits",
    "run",
]
