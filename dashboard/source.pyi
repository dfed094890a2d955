"""Old import path, kept working: the code now lives in
:mod:`loopwatch.dashboard.app.source`.
"""

from loopwatch.dashboard.app.source import (
    DB_ENV as DB_ENV,
)
from loopwatch.dashboard.app.source import (
    DataSource as DataSource,
)
from loopwatch.dashboard.app.source import (
    clear_live_store as clear_live_store,
)
from loopwatch.dashboard.app.source import (
    current_source as current_source,
)
from loopwatch.dashboard.app.source import (
    gateway as gateway,
)
from loopwatch.dashboard.app.source import (
    set_live_store as set_live_store,
)

__all__ = [
    "DB_ENV",
    "DataSource",
    "clear_live_store",
    "current_source",
    "gateway",
    "set_live_store",
]
