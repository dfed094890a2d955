"""Old import path, kept working: the code now lives in
:mod:`loopwatch.queries.analysis.toml_export`.
"""

from loopwatch.queries.analysis.toml_export import (
    file_toml as file_toml,
)
from loopwatch.queries.analysis.toml_export import (
    limits_toml as limits_toml,
)
from loopwatch.queries.analysis.toml_export import (
    toml_key as toml_key,
)
from loopwatch.queries.analysis.toml_export import (
    toml_string as toml_string,
)

__all__ = [
    "file_toml",
    "limits_toml",
    "toml_key",
    "toml_string",
]
