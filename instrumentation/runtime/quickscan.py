"""Quick scans of text that let the slow path be skipped (docs/runtime.md, *What normalizing
costs*): whether text may be JSON at all, and whether ASCII text holds a digit next to what makes
volatile text volatile. Standard library only; each answer is a superset of the slow path's
(text they clear is text the slow path would leave as it is)."""

from __future__ import annotations

import re
from typing import Final

__all__ = ["CLASSES", "digit_classes", "holds_digit_pair", "may_be_json", "no_digit_pairs"]

# What JSON text (as json.loads reads it: NaN and Infinity too) can start with.
_JSON_FIRST: Final = frozenset('{["-0123456789tfnNI \t\n\r')


def may_be_json(text: str) -> bool:
    """``False`` when ``json.loads(text)`` would surely fail (by its first character): text
    that is not JSON then costs no raised and caught exception."""
    return bool(text) and text[0] in _JSON_FIRST


def _ascii_classes() -> bytes:
    classes = bytearray(range(256))
    for code in range(128):
        char = chr(code)
        if re.match(r"\d", char):
            classes[code] = ord("0")
        elif char in "abcdefABCDEFxX:|-\t":
            classes[code] = ord("a")  # what makes a digit next to it volatile
        elif char in "smunl":
            classes[code] = ord("s")  # units (0.5s, 12ms) and "lines" after a digit
        elif re.match(r"\s", char):
            classes[code] = ord(" ")
    return bytes(classes)


# Translated as bytes (about twice as fast as str.translate), searched as str: a substring test
# on bytes costs ~5 times one on str (the argument goes through the buffer protocol).
CLASSES: Final = _ascii_classes()
"""The translation table of :func:`digit_classes` (bytes: ASCII code -> class character)."""


def digit_classes(text: str) -> str | None:
    """``text`` with each ASCII character replaced by its class: ``0`` a digit, ``a`` a separator
    or hex letter, ``s`` a unit letter or one of ``lines``, `` `` whitespace, anything else
    itself; ``None`` for text that is not ASCII (not scanned)."""
    if not text.isascii():
        return None
    return text.encode("ascii").translate(CLASSES).decode("ascii")


def holds_digit_pair(classes: str) -> bool:
    """Whether :func:`digit_classes`' ``classes`` hold a digit next to a separator, a hex letter,
    a unit or ``lines`` (or after ``[``): ``0a``, ``a0``, ``0s``, ``0 s``, ``[0``."""
    return (
        "0a" in classes
        or "a0" in classes
        or "0s" in classes
        or "0 s" in classes
        or ("[0" in classes)
    )


def no_digit_pairs(text: str) -> bool:
    """``True`` when ``text`` is ASCII and no digit in it stands next to a separator, a hex
    letter, a unit or ``lines`` (nor after ``[``): :func:`holds_digit_pair` of its
    :func:`digit_classes`. ``False`` for text not ASCII (not scanned). A superset test of the
    volatile-text passes' digit patterns (tests/test_volatile.py)."""
    classes = digit_classes(text)
    return classes is not None and not holds_digit_pair(classes)
