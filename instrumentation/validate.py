"""The one validator for option values: every option of loopwatch is checked here.

Messages name the option and show the value given, the same way everywhere, e.g.
``metrics_port must be an integer in 0..65535, got 70000``. Every check raises ``ValueError``
(``TypeError`` is kept for a wrong *kind* of object, such as a tracer provider).
"""

from __future__ import annotations

from collections.abc import Collection
from urllib.parse import urlsplit

__all__ = ["check_choice", "check_int", "check_number", "check_url"]


def _range(minimum: float | None, maximum: float | None) -> str:
    if minimum is not None and maximum is not None:
        return f" in {minimum}..{maximum}"
    if minimum is not None:
        return " ≥ 0" if minimum == 0 else f" ≥ {minimum}"
    if maximum is not None:
        return f" ≤ {maximum}"
    return ""


def check_int(
    name: str, value: object, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    """``value`` when it is an int (not a bool) within ``minimum..maximum``; else ``ValueError``
    ``"<name> must be an integer<range>, got <value>"``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or (minimum is not None and value < minimum)
        or (maximum is not None and value > maximum)
    ):
        raise ValueError(f"{name} must be an integer{_range(minimum, maximum)}, got {value!r}")
    return value


def check_number(
    name: str,
    value: object,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    exclusive_minimum: bool = False,
) -> float:
    """``value`` as a float when it is a finite number within range; else ``ValueError``."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    number = float(value) if ok else 0.0  # type: ignore[arg-type]
    if ok and number == number and number not in (float("inf"), float("-inf")):
        low_ok = minimum is None or (number > minimum if exclusive_minimum else number >= minimum)
        if low_ok and (maximum is None or number <= maximum):
            return number
    bound = f" > {minimum}" if exclusive_minimum and minimum is not None else ""
    raise ValueError(f"{name} must be a number{bound or _range(minimum, maximum)}, got {value!r}")


def check_choice(name: str, value: object, choices: Collection[str]) -> str:
    """``value`` when it is one of ``choices``; else ``ValueError`` naming them."""
    if not isinstance(value, str) or value not in choices:
        listed = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {listed}, got {value!r}")
    return value


def check_url(name: str, value: object, *, schemes: Collection[str] = ("http", "https")) -> str:
    """``value`` when it is an absolute URL with one of ``schemes`` and a host; else
    ``ValueError`` ``"<name> must be an http(s) URL such as http://127.0.0.1:4318, got ..."``."""
    parts = urlsplit(value) if isinstance(value, str) else None
    if parts is None or parts.scheme.lower() not in schemes or not parts.hostname:
        raise ValueError(
            f"{name} must be an http(s) URL such as http://127.0.0.1:4318, got {value!r}"
        )
    try:
        parts.port  # noqa: B018 (a port out of range raises here)
    except ValueError:
        raise ValueError(f"{name} has an invalid port, got {value!r}") from None
    return value  # type: ignore[return-value]
