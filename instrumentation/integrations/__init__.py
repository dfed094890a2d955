"""Framework integrations: the guard and loopwatch spans inside other agent loops.

One module per framework, each importing its framework only when used.
"""

__all__: list[str] = []
