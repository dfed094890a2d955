"""Error rules found in recorded runs (docs/import.md, "When no tool result is an error").

Tools that report failures as plain text (``/bin/bash: line 62215: javac: command not found``)
are successes to the guard unless an ``--error-prefix`` rule says otherwise; then the
``repeated_error`` and ``tool_failures`` rows of a replay measure nothing. :class:`ErrorRuleScan`
counts the tool results an import classified as errors and collects candidate rules: the leading
text of tool results that came right before the model made the same call again (a retry is what
a model does after a failure), with volatile parts cut off so that one rule covers them all.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from loopwatch.instrumentation.runtime.fingerprint import call_fingerprint, normalize_volatile

from .chatlogs import RecordedRun

__all__ = ["ALMOST_NONE", "ErrorRuleScan", "leading_text"]

ALMOST_NONE = 0.001
"""At or under this share of tool results classified as errors, the error detectors are said
to measure nothing."""

_MAX_PREFIX = 40


def leading_text(content: str) -> str | None:
    """The rule a result suggests: its first line up to and including the first ``:`` (or its
    first 40 characters, cut at a word), stopping before any volatile part. ``None`` for empty
    results and JSON bodies (error bodies are classified already)."""
    line = next((ln.strip() for ln in content.splitlines() if ln.strip()), "")
    if not line or line[0] in "{[":
        return None
    text = normalize_volatile(line)
    cut = text.find("<")
    if cut >= 0:
        text = text[:cut]
    colon = text.find(":")
    if 0 < colon < _MAX_PREFIX:
        text = text[: colon + 1]
    elif len(text) > _MAX_PREFIX:
        text = text[:_MAX_PREFIX].rsplit(" ", 1)[0] + " "
    return text if len(text.strip()) >= 4 else None


@dataclass(slots=True)
class ErrorRuleScan:
    """Tool results seen, those classified as errors, and candidate ``--error-prefix`` rules."""

    tool_results: int = 0
    errors: int = 0
    candidates: Counter[str] = field(default_factory=Counter)

    def add(self, run: RecordedRun) -> None:
        """Count one recorded run's tool results and the candidates among them."""
        calls = [t for turn in run.turns for t in turn.tools]  # the answered calls
        keys = [call_fingerprint(t.call) for t in calls]
        for i, t in enumerate(calls):
            self.tool_results += 1
            if t.error_code is not None:
                self.errors += 1
            elif keys[i] in keys[i + 1 :] and t.content:
                prefix = leading_text(t.content)
                if prefix is not None:
                    self.candidates[prefix] += 1

    @property
    def almost_none(self) -> bool:
        """No (or almost no) tool result was classified as an error."""
        return self.tool_results > 0 and self.errors <= ALMOST_NONE * self.tool_results

    def to_dict(self, top: int = 5) -> dict[str, Any]:
        return {
            "tool_results": self.tool_results,
            "errors": self.errors,
            "almost_none": self.almost_none,
            "candidates": [[p, n] for p, n in self.candidates.most_common(top)],
        }

    def sentence(self) -> str:
        """What to tell the user when the error detectors measure nothing (else empty)."""
        if not self.almost_none:
            return ""
        text = (
            f"Only {self.errors:,} of {self.tool_results:,} tool results were classified as "
            "errors, so repeated_error and tool_failures measure nothing here (their 0% rows "
            "are not evidence)."
        )
        if self.candidates:
            rules = ", ".join(
                f"--error-prefix {p!r} ({n:,} results before a repeat of the same call)"
                for p, n in self.candidates.most_common(3)
            )
            text += f" Error rules found in the data: {rules}."
        else:
            text += " Add an error rule with --error-prefix TEXT."
        return text
