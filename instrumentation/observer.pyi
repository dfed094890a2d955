"""Old import path, kept working: the code now lives in
:mod:`loopwatch.instrumentation.runtime.observer`.
"""

from loopwatch.instrumentation.runtime.observer import (
    NOOP_OBSERVER as NOOP_OBSERVER,
)
from loopwatch.instrumentation.runtime.observer import (
    BudgetSnapshot as BudgetSnapshot,
)
from loopwatch.instrumentation.runtime.observer import (
    NoOpObserver as NoOpObserver,
)
from loopwatch.instrumentation.runtime.observer import (
    ObserverFactory as ObserverFactory,
)
from loopwatch.instrumentation.runtime.observer import (
    RunInfo as RunInfo,
)
from loopwatch.instrumentation.runtime.observer import (
    RunObserver as RunObserver,
)
from loopwatch.instrumentation.runtime.observer import (
    ToolRecord as ToolRecord,
)
from loopwatch.instrumentation.runtime.observer import (
    get_observer_factory as get_observer_factory,
)
from loopwatch.instrumentation.runtime.observer import (
    observer_for as observer_for,
)
from loopwatch.instrumentation.runtime.observer import (
    set_observer_factory as set_observer_factory,
)

__all__ = [
    "NOOP_OBSERVER",
    "BudgetSnapshot",
    "NoOpObserver",
    "ObserverFactory",
    "RunInfo",
    "RunObserver",
    "ToolRecord",
    "get_observer_factory",
    "observer_for",
    "set_observer_factory",
]
