"""``loopwatch serve``: the OTLP/HTTP receiver (:mod:`.serve`), the ingest thread
(:mod:`.ingest`), the JSON API (:mod:`.api`) and the default ports (:mod:`.ports`).
"""

__all__: list[str] = []
