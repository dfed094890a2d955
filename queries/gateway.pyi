"""Old import path, kept working: the code now lives in
:mod:`loopwatch.queries.analysis.gateway`.
"""

from loopwatch.queries.analysis.gateway import (
    DEFAULT_MAX_ROWS as DEFAULT_MAX_ROWS,
)
from loopwatch.queries.analysis.gateway import (
    DEFAULT_TIMEOUT_S as DEFAULT_TIMEOUT_S,
)
from loopwatch.queries.analysis.gateway import (
    MAX_DURATION as MAX_DURATION,
)
from loopwatch.queries.analysis.gateway import (
    SUCCESSFUL_RUN_SQL as SUCCESSFUL_RUN_SQL,
)
from loopwatch.queries.analysis.gateway import (
    ParamSpec as ParamSpec,
)
from loopwatch.queries.analysis.gateway import (
    QueryError as QueryError,
)
from loopwatch.queries.analysis.gateway import (
    QueryFailedError as QueryFailedError,
)
from loopwatch.queries.analysis.gateway import (
    QueryGateway as QueryGateway,
)
from loopwatch.queries.analysis.gateway import (
    QueryParameterError as QueryParameterError,
)
from loopwatch.queries.analysis.gateway import (
    QueryResult as QueryResult,
)
from loopwatch.queries.analysis.gateway import (
    QuerySpec as QuerySpec,
)
from loopwatch.queries.analysis.gateway import (
    QueryTimeoutError as QueryTimeoutError,
)
from loopwatch.queries.analysis.gateway import (
    UnknownQueryError as UnknownQueryError,
)
from loopwatch.queries.analysis.gateway import (
    bind_params as bind_params,
)
from loopwatch.queries.analysis.gateway import (
    parse_duration as parse_duration,
)
from loopwatch.queries.analysis.gateway import (
    parse_spec as parse_spec,
)
from loopwatch.queries.analysis.gateway import (
    query_names as query_names,
)
from loopwatch.queries.analysis.gateway import (
    query_spec as query_spec,
)
from loopwatch.queries.analysis.gateway import (
    run_query as run_query,
)
from loopwatch.queries.analysis.gateway import (
    run_spec as run_spec,
)

__all__ = [
    "DEFAULT_MAX_ROWS",
    "DEFAULT_TIMEOUT_S",
    "MAX_DURATION",
    "SUCCESSFUL_RUN_SQL",
    "ParamSpec",
    "QueryError",
    "QueryFailedError",
    "QueryGateway",
    "QueryParameterError",
    "QueryResult",
    "QuerySpec",
    "QueryTimeoutError",
    "UnknownQueryError",
    "bind_params",
    "parse_duration",
    "parse_spec",
    "query_names",
    "query_spec",
    "run_query",
    "run_spec",
]
