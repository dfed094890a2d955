"""Old import path, kept working: the code now lives in
:mod:`loopwatch.queries.ingest.otlp`.
"""

from loopwatch.queries.ingest.otlp import (
    CONTENT_TYPE_JSON as CONTENT_TYPE_JSON,
)
from loopwatch.queries.ingest.otlp import (
    CONTENT_TYPE_PROTOBUF as CONTENT_TYPE_PROTOBUF,
)
from loopwatch.queries.ingest.otlp import (
    DecodedRequest as DecodedRequest,
)
from loopwatch.queries.ingest.otlp import (
    OtlpDecodeError as OtlpDecodeError,
)
from loopwatch.queries.ingest.otlp import (
    decode_request as decode_request,
)
from loopwatch.queries.ingest.otlp import (
    encode_response as encode_response,
)

__all__ = [
    "CONTENT_TYPE_JSON",
    "CONTENT_TYPE_PROTOBUF",
    "DecodedRequest",
    "OtlpDecodeError",
    "decode_request",
    "encode_response",
]
