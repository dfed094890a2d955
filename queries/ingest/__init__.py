"""Data into the store from outside a live agent: recorded chat logs (:mod:`.chatlogs`,
:mod:`.jsonstream`, :mod:`.importer`), OTLP requests (:mod:`.otlp`) and synthetic runs with
known ground truth (:mod:`.synthetic`).
"""

__all__: list[str] = []
