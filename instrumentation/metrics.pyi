"""Old import path, kept working: the code now lives in
:mod:`loopwatch.instrumentation.telemetry.metrics`.
"""

from loopwatch.instrumentation.telemetry.metrics import (
    COST_USD_BUCKETS as COST_USD_BUCKETS,
)
from loopwatch.instrumentation.telemetry.metrics import (
    DEFAULT_MAX_TASK_TYPES as DEFAULT_MAX_TASK_TYPES,
)
from loopwatch.instrumentation.telemetry.metrics import (
    DEFAULT_MAX_TOOLS as DEFAULT_MAX_TOOLS,
)
from loopwatch.instrumentation.telemetry.metrics import (
    DEFAULT_METRICS_PORT as DEFAULT_METRICS_PORT,
)
from loopwatch.instrumentation.telemetry.metrics import (
    DROP_METRICS_FAILED as DROP_METRICS_FAILED,
)
from loopwatch.instrumentation.telemetry.metrics import (
    DROP_METRICS_INVALID_SPAN as DROP_METRICS_INVALID_SPAN,
)
from loopwatch.instrumentation.telemetry.metrics import (
    DURATION_SECONDS_BUCKETS as DURATION_SECONDS_BUCKETS,
)
from loopwatch.instrumentation.telemetry.metrics import (
    GEN_AI_DURATION_BUCKETS as GEN_AI_DURATION_BUCKETS,
)
from loopwatch.instrumentation.telemetry.metrics import (
    GEN_AI_TOKEN_BUCKETS as GEN_AI_TOKEN_BUCKETS,
)
from loopwatch.instrumentation.telemetry.metrics import (
    LIMIT_METRICS as LIMIT_METRICS,
)
from loopwatch.instrumentation.telemetry.metrics import (
    MAX_MODELS_ENV as MAX_MODELS_ENV,
)
from loopwatch.instrumentation.telemetry.metrics import (
    MAX_TASK_TYPES_ENV as MAX_TASK_TYPES_ENV,
)
from loopwatch.instrumentation.telemetry.metrics import (
    MAX_TOOLS_ENV as MAX_TOOLS_ENV,
)
from loopwatch.instrumentation.telemetry.metrics import (
    METRICS_PORT_ENV as METRICS_PORT_ENV,
)
from loopwatch.instrumentation.telemetry.metrics import (
    OTHER as OTHER,
)
from loopwatch.instrumentation.telemetry.metrics import (
    SPAN_PREFIXES as SPAN_PREFIXES,
)
from loopwatch.instrumentation.telemetry.metrics import (
    STEPS_BUCKETS as STEPS_BUCKETS,
)
from loopwatch.instrumentation.telemetry.metrics import (
    TOKENS_BUCKETS as TOKENS_BUCKETS,
)
from loopwatch.instrumentation.telemetry.metrics import (
    TOOL_DURATION_BUCKETS as TOOL_DURATION_BUCKETS,
)
from loopwatch.instrumentation.telemetry.metrics import (
    UNKNOWN as UNKNOWN,
)
from loopwatch.instrumentation.telemetry.metrics import (
    UTILIZATION_BUCKETS as UTILIZATION_BUCKETS,
)
from loopwatch.instrumentation.telemetry.metrics import (
    MetricsServer as MetricsServer,
)
from loopwatch.instrumentation.telemetry.metrics import (
    MetricsServerError as MetricsServerError,
)
from loopwatch.instrumentation.telemetry.metrics import (
    MetricsSpanProcessor as MetricsSpanProcessor,
)
from loopwatch.instrumentation.telemetry.metrics import (
    serve_metrics as serve_metrics,
)

__all__ = [
    "COST_USD_BUCKETS",
    "DEFAULT_MAX_TASK_TYPES",
    "DEFAULT_MAX_TOOLS",
    "DEFAULT_METRICS_PORT",
    "DROP_METRICS_FAILED",
    "DROP_METRICS_INVALID_SPAN",
    "DURATION_SECONDS_BUCKETS",
    "GEN_AI_DURATION_BUCKETS",
    "GEN_AI_TOKEN_BUCKETS",
    "LIMIT_METRICS",
    "MAX_MODELS_ENV",
    "MAX_TASK_TYPES_ENV",
    "MAX_TOOLS_ENV",
    "METRICS_PORT_ENV",
    "OTHER",
    "SPAN_PREFIXES",
    "STEPS_BUCKETS",
    "TOKENS_BUCKETS",
    "TOOL_DURATION_BUCKETS",
    "UNKNOWN",
    "UTILIZATION_BUCKETS",
    "MetricsServer",
    "MetricsServerError",
    "MetricsSpanProcessor",
    "serve_metrics",
]
