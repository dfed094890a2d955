"""Quick scans of text that let the slow path be skipped (docs/runtime.md, *What normalizing
costs*): whether text may be JSON at all, and whether ASCII text holds a digit next to what makes
volatile text volatile. Standard library only; each answer is a superset of the slow path's
(text they clear is text the slow path would leave as it is)."""

from __future__ import annotations

import re
from typing import Final

__all__ = ["may_be_json", "no_digit_pairs"]

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


# As bytes: translate and search run about twice as fast as on str.
_CLASSES: Final = _ascii_classes()


def no_digit_pairs(text: str) -> bool:
    """``True`` when ``text`` is ASCII and no digit in it stands next to a separator, a hex
    letter, a unit or ``lines`` (nor after ``[``): one translate into character classes and five
    substring tests (``0a`` digit then separator or hex letter, ``a0`` hex letter then digit,
    ``0s`` / ``0 s`` a unit or ``lines``, ``[0`` a prompt counter). ``False`` for text not ASCII
    (not scanned). A superset test of the volatile-text passes' digit patterns
    (tests/test_volatile.py)."""
    if not text.isascii():
        return False
    c = text.encode("ascii").translate(_CLASSES)
    return not (b"0a" in c or b"a0" in c or b"0s" in c or b"0 s" in c or b"[0" in c)
