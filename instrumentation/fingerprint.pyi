"""Old import path, kept working: the code now lives in
:mod:`loopwatch.instrumentation.runtime.fingerprint`.
"""

from loopwatch.instrumentation.runtime.fingerprint import (
    call_fingerprint as call_fingerprint,
)
from loopwatch.instrumentation.runtime.fingerprint import (
    call_key as call_key,
)
from loopwatch.instrumentation.runtime.fingerprint import (
    compare_exactly as compare_exactly,
)
from loopwatch.instrumentation.runtime.fingerprint import (
    error_fingerprint as error_fingerprint,
)
from loopwatch.instrumentation.runtime.fingerprint import (
    error_key as error_key,
)
from loopwatch.instrumentation.runtime.fingerprint import (
    exact_text_tools as exact_text_tools,
)
from loopwatch.instrumentation.runtime.fingerprint import (
    is_exact_text as is_exact_text,
)
from loopwatch.instrumentation.runtime.fingerprint import (
    normalize_arguments as normalize_arguments,
)
from loopwatch.instrumentation.runtime.fingerprint import (
    normalize_error as normalize_error,
)
from loopwatch.instrumentation.runtime.fingerprint import (
    normalize_volatile as normalize_volatile,
)
from loopwatch.instrumentation.runtime.fingerprint import (
    result_fingerprint as result_fingerprint,
)
from loopwatch.instrumentation.runtime.fingerprint import (
    short_hash as short_hash,
)
from loopwatch.instrumentation.runtime.fingerprint import (
    stable_json as stable_json,
)

__all__ = [
    "call_fingerprint",
    "call_key",
    "compare_exactly",
    "error_fingerprint",
    "error_key",
    "exact_text_tools",
    "is_exact_text",
    "normalize_arguments",
    "normalize_error",
    "normalize_volatile",
    "result_fingerprint",
    "short_hash",
    "stable_json",
]
