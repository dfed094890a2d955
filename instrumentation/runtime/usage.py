"""What a run has spent: one value the guard adds to with :meth:`RunUsage.incr`.

A sub-run's usage is drawn from its parent's budgets as well as its own (docs/runtime.md,
"Sub-agents and outer loops"): a ``RunUsage`` made with ``parent=`` passes every ``incr`` up
the chain, so no caller adds to an ancestor by hand. Steps are not shared and are not here.
"""

from __future__ import annotations

from .types import Usage

__all__ = ["RunUsage"]


class RunUsage:
    """Model calls, tool calls, tokens and cost of one run, and its ancestors' through ``incr``.

    ``a + b`` is a new value holding both sums (no parent); ``spent`` counts the ``incr`` calls
    that reached this value, from this run or a sub-run, so a guard can tell whether anything
    was spent since it last checked its budgets.
    """

    __slots__ = (
        "cost_usd",
        "input_tokens",
        "model_calls",
        "output_tokens",
        "parent",
        "spent",
        "tool_calls",
    )

    def __init__(
        self,
        *,
        model_calls: int = 0,
        tool_calls: int = 0,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cost_usd: float = 0.0,
        parent: RunUsage | None = None,
    ) -> None:
        self.model_calls = model_calls
        self.tool_calls = tool_calls
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.cost_usd = cost_usd
        self.parent = parent
        """The usage of the run this one runs inside; ``incr`` adds to it too."""
        self.spent = 0

    @property
    def tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    @property
    def usage(self) -> Usage:
        """Tokens and cost as a :class:`~loopwatch.instrumentation.runtime.types.Usage`."""
        return Usage(self.input_tokens, self.output_tokens, self.cost_usd)

    def incr(
        self, *, model_calls: int = 0, tool_calls: int = 0, usage: Usage | None = None
    ) -> None:
        """Add to this run's usage and to every ancestor's."""
        u: RunUsage | None = self
        while u is not None:
            u.model_calls += model_calls
            u.tool_calls += tool_calls
            if usage is not None:
                u.input_tokens += usage.input_tokens
                u.output_tokens += usage.output_tokens
                u.cost_usd += usage.cost_usd
            u.spent += 1
            u = u.parent

    def add_model_call(self, usage: Usage) -> None:
        """One model call and its tokens and cost (``incr``'s common case, made cheap)."""
        u: RunUsage | None = self
        while u is not None:
            u.model_calls += 1
            u.input_tokens += usage.input_tokens
            u.output_tokens += usage.output_tokens
            u.cost_usd += usage.cost_usd
            u.spent += 1
            u = u.parent

    def add_tool_call(self) -> None:
        """One tool call started (``incr``'s other common case)."""
        u: RunUsage | None = self
        while u is not None:
            u.tool_calls += 1
            u.spent += 1
            u = u.parent

    def __add__(self, other: RunUsage) -> RunUsage:
        return RunUsage(
            model_calls=self.model_calls + other.model_calls,
            tool_calls=self.tool_calls + other.tool_calls,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cost_usd=self.cost_usd + other.cost_usd,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RunUsage):
            return NotImplemented
        return (
            self.model_calls,
            self.tool_calls,
            self.input_tokens,
            self.output_tokens,
            self.cost_usd,
        ) == (
            other.model_calls,
            other.tool_calls,
            other.input_tokens,
            other.output_tokens,
            other.cost_usd,
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return (
            f"RunUsage(model_calls={self.model_calls}, tool_calls={self.tool_calls}, "
            f"input_tokens={self.input_tokens}, output_tokens={self.output_tokens}, "
            f"cost_usd={self.cost_usd})"
        )
