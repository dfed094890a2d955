"""Old import path, kept working: the code now lives in
:mod:`loopwatch.instrumentation.runtime.drops`.
"""

from loopwatch.instrumentation.runtime.drops import (
    dropped as dropped,
)
from loopwatch.instrumentation.runtime.drops import (
    record_drop as record_drop,
)
from loopwatch.instrumentation.runtime.drops import (
    reset_drops as reset_drops,
)

__all__ = [
    "dropped",
    "record_drop",
    "reset_drops",
]
