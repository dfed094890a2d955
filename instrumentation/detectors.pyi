"""Old import path, kept working: the code now lives in
:mod:`loopwatch.instrumentation.runtime.detectors`.
"""

from loopwatch.instrumentation.runtime.detectors import (
    DETECTORS as DETECTORS,
)
from loopwatch.instrumentation.runtime.detectors import (
    CallEntry as CallEntry,
)
from loopwatch.instrumentation.runtime.detectors import (
    CallTally as CallTally,
)
from loopwatch.instrumentation.runtime.detectors import (
    Detector as Detector,
)
from loopwatch.instrumentation.runtime.detectors import (
    Detectors as Detectors,
)
from loopwatch.instrumentation.runtime.detectors import (
    Finding as Finding,
)
from loopwatch.instrumentation.runtime.detectors import (
    NoProgress as NoProgress,
)
from loopwatch.instrumentation.runtime.detectors import (
    RecordedCall as RecordedCall,
)
from loopwatch.instrumentation.runtime.detectors import (
    RecordedStep as RecordedStep,
)
from loopwatch.instrumentation.runtime.detectors import (
    RepeatedAction as RepeatedAction,
)
from loopwatch.instrumentation.runtime.detectors import (
    RepeatedError as RepeatedError,
)
from loopwatch.instrumentation.runtime.detectors import (
    RepeatedToolCall as RepeatedToolCall,
)
from loopwatch.instrumentation.runtime.detectors import (
    ToolEvent as ToolEvent,
)
from loopwatch.instrumentation.runtime.detectors import (
    ToolFailures as ToolFailures,
)
from loopwatch.instrumentation.runtime.detectors import (
    comparable_arguments as comparable_arguments,
)
from loopwatch.instrumentation.runtime.detectors import (
    error_key as error_key,
)
from loopwatch.instrumentation.runtime.detectors import (
    normalize_error as normalize_error,
)
from loopwatch.instrumentation.runtime.detectors import (
    parse_arguments as parse_arguments,
)
from loopwatch.instrumentation.runtime.detectors import (
    replay as replay,
)
from loopwatch.instrumentation.runtime.detectors import (
    replay_peaks as replay_peaks,
)

__all__ = [
    "DETECTORS",
    "CallEntry",
    "CallTally",
    "Detector",
    "Detectors",
    "Finding",
    "NoProgress",
    "RecordedCall",
    "RecordedStep",
    "RepeatedAction",
    "RepeatedError",
    "RepeatedToolCall",
    "ToolEvent",
    "ToolFailures",
    "comparable_arguments",
    "error_key",
    "normalize_error",
    "parse_arguments",
    "replay",
    "replay_peaks",
]
