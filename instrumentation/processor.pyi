"""Old import path, kept working: the code now lives in
:mod:`loopwatch.instrumentation.telemetry.processor`.
"""

from loopwatch.instrumentation.telemetry.processor import (
    BATCH_SIZE_ENV as BATCH_SIZE_ENV,
)
from loopwatch.instrumentation.telemetry.processor import (
    DEFAULT_MAX_EXPORT_BATCH_SIZE as DEFAULT_MAX_EXPORT_BATCH_SIZE,
)
from loopwatch.instrumentation.telemetry.processor import (
    DEFAULT_MAX_QUEUE_SIZE as DEFAULT_MAX_QUEUE_SIZE,
)
from loopwatch.instrumentation.telemetry.processor import (
    DEFAULT_SHUTDOWN_TIMEOUT_MS as DEFAULT_SHUTDOWN_TIMEOUT_MS,
)
from loopwatch.instrumentation.telemetry.processor import (
    DROP_EXPORT_FAILED as DROP_EXPORT_FAILED,
)
from loopwatch.instrumentation.telemetry.processor import (
    DROP_QUEUE_FULL as DROP_QUEUE_FULL,
)
from loopwatch.instrumentation.telemetry.processor import (
    DROP_SHUTDOWN as DROP_SHUTDOWN,
)
from loopwatch.instrumentation.telemetry.processor import (
    EXPORT_TIMEOUT_ENV as EXPORT_TIMEOUT_ENV,
)
from loopwatch.instrumentation.telemetry.processor import (
    QUEUE_SIZE_ENV as QUEUE_SIZE_ENV,
)
from loopwatch.instrumentation.telemetry.processor import (
    SCHEDULE_DELAY_ENV as SCHEDULE_DELAY_ENV,
)
from loopwatch.instrumentation.telemetry.processor import (
    SHUTDOWN_TIMEOUT_ENV as SHUTDOWN_TIMEOUT_ENV,
)
from loopwatch.instrumentation.telemetry.processor import (
    CountingBatchSpanProcessor as CountingBatchSpanProcessor,
)
from loopwatch.instrumentation.telemetry.processor import (
    PipelinedSpanExporter as PipelinedSpanExporter,
)
from loopwatch.instrumentation.telemetry.processor import (
    QueueStats as QueueStats,
)
from loopwatch.instrumentation.telemetry.processor import (
    env_int as env_int,
)

__all__ = [
    "BATCH_SIZE_ENV",
    "DEFAULT_MAX_EXPORT_BATCH_SIZE",
    "DEFAULT_MAX_QUEUE_SIZE",
    "DEFAULT_SHUTDOWN_TIMEOUT_MS",
    "DROP_EXPORT_FAILED",
    "DROP_QUEUE_FULL",
    "DROP_SHUTDOWN",
    "EXPORT_TIMEOUT_ENV",
    "QUEUE_SIZE_ENV",
    "SCHEDULE_DELAY_ENV",
    "SHUTDOWN_TIMEOUT_ENV",
    "CountingBatchSpanProcessor",
    "PipelinedSpanExporter",
    "QueueStats",
    "env_int",
]
