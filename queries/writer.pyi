"""Old import path, kept working: the code now lives in
:mod:`loopwatch.queries.store.writer`.
"""

from loopwatch.queries.store.writer import (
    HEADER as HEADER,
)
from loopwatch.queries.store.writer import (
    MAGIC as MAGIC,
)
from loopwatch.queries.store.writer import (
    WriterProcess as WriterProcess,
)
from loopwatch.queries.store.writer import (
    main as main,
)

__all__ = [
    "HEADER",
    "MAGIC",
    "WriterProcess",
    "main",
]
