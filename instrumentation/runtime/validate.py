"""The one validator for option values: every numeric or choice option of loopwatch is checked
here, with one phrasing.

Messages name the option and show the value given::

    max_steps must be a positive integer or None, got 0
    metrics_port must be an integer in 0..65535, got 70000
    base_delay_s must be a finite number >= 0, got -1
    max_cost_usd must be a positive number or None, got nan
    jitter must be one of 'full', 'none', got 'some'

Booleans are never numbers here (``True`` is an ``int`` to Python, not a count to a user). Every
check raises ``ValueError``.
"""

from __future__ import annotations

import math
from collections.abc import Collection

__all__ = ["check_choice", "check_int", "check_number", "check_url"]


def _int_phrase(minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f"an integer in {minimum}..{maximum}"
    if minimum == 1:
        return "a positive integer"
    if minimum is not None:
        return f"an integer >= {minimum}"
    if maximum is not None:
        return f"an integer <= {maximum}"
    return "an integer"


def check_int(
    name: str,
    value: object,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    optional: bool = False,
) -> int:
    """``value`` when it is an int (not a bool) within ``minimum..maximum`` (``None`` passes when
    ``optional``; the caller keeps it); else ``ValueError``."""
    if optional and value is None:
        return value  # type: ignore[return-value]
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or (minimum is not None and value < minimum)
        or (maximum is not None and value > maximum)
    ):
        phrase = _int_phrase(minimum, maximum) + (" or None" if optional else "")
        raise ValueError(f"{name} must be {phrase}, got {value!r}")
    return value


def check_number(
    name: str,
    value: object,
    *,
    minimum: float = 0.0,
    positive: bool = False,
    maximum: float | None = None,
    optional: bool = False,
) -> float:
    """``value`` as a float when it is a finite number (not a bool) ``>= minimum`` (``> 0`` when
    ``positive``) and ``<= maximum``; ``None`` passes when ``optional``; else ``ValueError``."""
    if optional and value is None:
        return value  # type: ignore[return-value]
    ok = (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and (value > 0 if positive else value >= minimum)
        and (maximum is None or value <= maximum)
    )
    if not ok:
        if positive and maximum is not None:
            phrase = f"a number in (0, {maximum:g}]"
        elif positive:
            phrase = "a positive number"
        elif maximum is not None:
            phrase = f"a number in [{minimum:g}, {maximum:g}]"
        else:
            phrase = f"a finite number >= {minimum:g}"
        raise ValueError(f"{name} must be {phrase}{' or None' if optional else ''}, got {value!r}")
    return float(value)  # type: ignore[arg-type]


def check_choice(name: str, value: object, choices: Collection[str]) -> str:
    """``value`` when it is one of ``choices``; else ``ValueError`` naming them."""
    if not isinstance(value, str) or value not in choices:
        listed = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {listed}, got {value!r}")
    return value


def check_url(name: str, value: object, *, schemes: Collection[str] = ("http", "https")) -> str:
    """``value`` when it is an absolute URL with one of ``schemes`` and a host; else
    ``ValueError`` ``"<name> must be an http(s) URL such as http://127.0.0.1:4318, got ..."``."""
    from urllib.parse import urlsplit  # only URL options pay for it

    parts = urlsplit(value) if isinstance(value, str) else None
    if parts is None or parts.scheme.lower() not in schemes or not parts.hostname:
        raise ValueError(
            f"{name} must be an http(s) URL such as http://127.0.0.1:4318, got {value!r}"
        )
    try:
        parts.port  # noqa: B018 (a port out of range raises here)
    except ValueError:
        raise ValueError(f"{name} has an invalid port, got {value!r}") from None
    return str(value)
