"""How long to wait before retrying: exponential backoff with full jitter, ``Retry-After``
honoured up to its own cap (docs/tools.md, *Retrying: backoff with full jitter*).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .settings import env_str
from .validate import check_choice, check_int, check_number

__all__ = ["RETRY_ENV", "Jitter", "RetryPolicy", "env_number"]

Jitter = Literal["full", "none"]

# Environment variables read by `RetryPolicy.from_env`, by field.
RETRY_ENV: Mapping[str, str] = {
    "max_attempts": "LOOPWATCH_RETRY_MAX_ATTEMPTS",
    "base_delay_s": "LOOPWATCH_RETRY_BASE_DELAY_S",
    "max_delay_s": "LOOPWATCH_RETRY_MAX_DELAY_S",
    "max_retry_after_s": "LOOPWATCH_RETRY_MAX_RETRY_AFTER_S",
}

# Beyond this exponent the backoff is far past any sane cap; stops float overflow.
_MAX_EXPONENT = 62


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """How a transient tool failure is retried.

    Defaults follow a production agent SDK's: 3 attempts, 100 ms base, 3 s cap, full jitter.
    ``RetryPolicy(max_attempts=1)`` switches retrying off.
    """

    max_attempts: int = 3
    """Attempts per logical call, the first one included (1 = never retry)."""
    base_delay_s: float = 0.1
    """Backoff before the second attempt, before jitter; it doubles on each further attempt."""
    max_delay_s: float = 3.0
    """Cap on one backoff wait, before jitter."""
    max_retry_after_s: float = 30.0
    """Cap on a server's ``Retry-After``: a longer one is cut to this."""
    jitter: Jitter = "full"
    """``full``: wait uniformly in ``[0, backoff]``; ``none``: wait the backoff itself."""

    def __post_init__(self) -> None:
        check_int("max_attempts", self.max_attempts, minimum=1)
        for name in ("base_delay_s", "max_delay_s", "max_retry_after_s"):
            check_number(name, getattr(self, name))
        check_choice("jitter", self.jitter, ("full", "none"))

    def backoff(self, attempt: int) -> float:
        """The wait after failed attempt ``attempt`` (1-based), before jitter.

        ``min(max_delay_s, base_delay_s * 2**(attempt-1))``.
        """
        exponent = min(max(attempt - 1, 0), _MAX_EXPONENT)
        return min(self.max_delay_s, self.base_delay_s * 2.0**exponent)

    def delay(
        self,
        attempt: int,
        retry_after: float | None = None,
        rng: Callable[[], float] = random.random,
    ) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1-based).

        With ``retry_after`` (the server said how long), that value capped at
        ``max_retry_after_s``; otherwise full jitter: uniform in ``[0, backoff(attempt)]``,
        drawn as ``rng() * backoff(attempt)``. Always within ``[0, cap]``, whatever ``rng`` returns.
        """
        if retry_after is not None and not math.isnan(retry_after):
            return min(max(float(retry_after), 0.0), self.max_retry_after_s)
        ceiling = self.backoff(attempt)
        if self.jitter == "none":
            return ceiling
        fraction = rng()
        if not 0.0 <= fraction <= 1.0:  # NaN too: a broken rng must not break the bound
            fraction = 1.0 if fraction > 1.0 else 0.0
        return ceiling * fraction

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> RetryPolicy:
        """A policy from ``LOOPWATCH_RETRY_*`` variables (see :data:`RETRY_ENV`); ``overrides`` win.

        A variable that is set but not a number raises ``ValueError`` naming the variable.
        """
        values: dict[str, Any] = {}
        for field_name, var in RETRY_ENV.items():
            raw = env_str(var, environ)
            if raw is not None:
                values[field_name] = env_number(var, raw, integer=field_name == "max_attempts")
        values.update(overrides)
        return cls(**values)


def env_number(var: str, raw: str, *, integer: bool) -> float | int:
    """``raw`` (the value of ``var``) as an int or a float; ``ValueError`` naming ``var``."""
    try:
        return int(raw) if integer else float(raw)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise ValueError(f"{var} must be {kind}, got {raw!r}") from None
