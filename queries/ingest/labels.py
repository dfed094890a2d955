"""What an import says about its labels and loop ends (docs/import.md, "Rough edges, settled"):
a ``--success`` field no record has is refused before anything is written, and a run without a
final answer is named for what happened."""

from __future__ import annotations

from typing import Any

from loopwatch.instrumentation.runtime.reasons import StopReason

from .chatlogs import ChatLogOptions, RecordedRun, field_value

__all__ = ["ImportOptionError", "end_label"]


def end_label(run: RecordedRun, last_in_record: bool) -> str:
    """What ended a recorded run, for the import summary: its stop reason, or for a run with no
    final answer, which of the two ways it ended (see ``RecordedRun.loop_end``)."""
    reason, _ = run.loop_end(last_in_record)
    if reason is StopReason.CANCELLED:
        return (
            "no final answer, recording ends"
            if last_in_record
            else "no final answer, user moved on"
        )
    return reason.value


class ImportOptionError(ValueError):
    """An import option names something the file does not have (nothing was written)."""


class SuccessField:
    """Whether any record has the ``--success`` field. A field no record has would leave every
    run unlabelled and count every completed run as successful: refused, naming the keys of the
    first conversation, before the first batch is written (``check``), so nothing is stored."""

    def __init__(self, options: ChatLogOptions) -> None:
        self.field = options.success
        self.seen = self.field is None
        self.keys = ""

    def note(self, record: Any) -> None:
        if self.seen or not isinstance(record, dict):
            return
        if not self.keys:
            self.keys = ", ".join(repr(k) for k in list(record)[:12]) or "none"
        self.seen = field_value(record, self.field or "")[0]

    def check(self) -> None:
        if not self.seen and self.keys:
            raise ImportOptionError(
                f"--success {self.field!r}: no conversation read has a field of that name (the "
                f"first one's keys: {self.keys}); name the field holding each task's label"
            )
