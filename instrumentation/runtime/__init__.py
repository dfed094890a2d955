"""The runtime: limits, the guard, detectors, the reference loop, tools and retries.

Standard library only; the public names are re-exported by :mod:`loopwatch.instrumentation`.
"""

__all__: list[str] = []
