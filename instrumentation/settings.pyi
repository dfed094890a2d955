"""Old import path, kept working: the code now lives in
:mod:`loopwatch.instrumentation.runtime.settings`.
"""

from loopwatch.instrumentation.runtime.settings import (
    ENVIRONMENT as ENVIRONMENT,
)
from loopwatch.instrumentation.runtime.settings import (
    env_bool as env_bool,
)
from loopwatch.instrumentation.runtime.settings import (
    env_int as env_int,
)
from loopwatch.instrumentation.runtime.settings import (
    env_str as env_str,
)
from loopwatch.instrumentation.runtime.settings import (
    otel_env_int as otel_env_int,
)

__all__ = [
    "ENVIRONMENT",
    "env_bool",
    "env_int",
    "env_str",
    "otel_env_int",
]
