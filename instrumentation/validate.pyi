"""Old import path, kept working: the code now lives in
:mod:`loopwatch.instrumentation.runtime.validate`.
"""

from loopwatch.instrumentation.runtime.validate import (
    check_choice as check_choice,
)
from loopwatch.instrumentation.runtime.validate import (
    check_int as check_int,
)
from loopwatch.instrumentation.runtime.validate import (
    check_number as check_number,
)
from loopwatch.instrumentation.runtime.validate import (
    check_url as check_url,
)

__all__ = [
    "check_choice",
    "check_int",
    "check_number",
    "check_url",
]
