"""Prompt memory with a token budget: what an agent saw and did, kept within a declared size.

An LLM agent that puts everything it has seen into its prompt grows its
context every turn until the run collapses. :class:`AgentMemory` keeps the
entries an agent wants to remember (one line each) and holds them to
``max_tokens`` by a declared, deterministic policy for the oldest ones:

* ``drop_oldest``: whole oldest entries are dropped until the rest fits;
* ``summarise``: the oldest entries are folded into one summary line (how many,
  the steps they span, a count per kind, and the newest folded entry, cut to
  fit): no model call, so it is deterministic and free.

Tokens are counted with :func:`simulacra.llm.approx_tokens` (4/3 tokens per
whitespace-separated word, rounded up), per line: the memory's size is the sum
over its lines, which is never less than the estimate of the lines joined.

The memory is a pure function of the entries added to it, in order, and its
budget and policy: no clock, no random draw, no global state. Its
:meth:`AgentMemory.get_state` is plain data, and :meth:`AgentMemory.set_state`
of it continues exactly as the memory it came from (checkpoints, digests).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal, final

from simulacra.errors import ConfigError

__all__ = ["MEMORY_POLICIES", "MIN_ENTRY_TOKENS", "AgentMemory", "min_memory_tokens"]

#: The policies :class:`AgentMemory` takes.
MEMORY_POLICIES: Final = ("drop_oldest", "summarise")
#: The size of one observation, the least room a budget must leave for an
#: entry: 16 tokens, 12 words (one feed line of the social demo, e.g.
#: ``#12 @ada03: Hot take: chess is underrated. What do you think, @ben01?``).
MIN_ENTRY_TOKENS: Final = 16
#: The least room the summary line of ``summarise`` gets (else a quarter of the budget).
_MIN_SUMMARY_TOKENS: Final = 16
#: Glued to the last word kept of an entry cut to fit.
_CUT: Final = "\u2026"

_COUNT: Callable[[str], int] | None = None


def _tokens(text: str) -> int:
    """simulacra.llm.approx_tokens (imported on first use: keeps the agents import light)."""
    global _COUNT  # noqa: PLW0603
    count = _COUNT
    if count is None:
        from simulacra.llm import approx_tokens  # noqa: PLC0415

        count = _COUNT = approx_tokens
    return count(text)


def min_memory_tokens(policy: str = "drop_oldest") -> int:
    """The smallest budget *policy* takes: room for one observation (and the summary line).

    ``drop_oldest``: :data:`MIN_ENTRY_TOKENS` (16); ``summarise``: 32, one
    observation and the summary line's least room.

    Raises:
        ConfigError: *policy* is not one of :data:`MEMORY_POLICIES`.
    """
    _check_policy(policy)
    return MIN_ENTRY_TOKENS + (_MIN_SUMMARY_TOKENS if policy == "summarise" else 0)


def _check_policy(policy: object) -> str:
    if policy == "summarize":
        return "summarise"
    if not isinstance(policy, str) or policy not in MEMORY_POLICIES:
        raise ConfigError(f"memory policy must be one of {', '.join(MEMORY_POLICIES)}, "
                          f"got {policy!r}")
    return policy


def _cut(text: str, limit: int) -> str:
    """*text* cut, word-wise, to at most *limit* tokens; a cut text ends with an ellipsis."""
    if _tokens(text) <= limit:
        return text
    keep = max(limit * 3 // 4, 1)  # ceil(4/3 * keep) <= limit
    while keep > 1 and _tokens(" ".join(text.split()[:keep])) > limit:
        keep -= 1  # only if approx_tokens ever counts differently
    return " ".join(text.split()[:keep]) + _CUT


def _line(text: object) -> str:
    return " ".join(str(text).split())


@final
class AgentMemory:
    """An agent's memory of past turns, held to a token budget by a declared policy.

    ::

        memory = AgentMemory(max_tokens=300, policy="summarise")
        memory.add("saw #12 @bob: sourdough tips?", kind="saw", step=3)
        memory.add("replied to #12: feed it daily", kind="replied", step=3)
        memory.render()   # "MEMORY:", then the lines, one per line

    Entries are single lines (whitespace runs become one space); the oldest
    come first. After every :meth:`add` the memory's :attr:`tokens` are at most
    ``max_tokens``, and it holds the newest entries that fit:

    * an entry larger than the room an entry has (``max_tokens``, less the
      summary line's room under ``summarise``) is cut, word-wise, to fit, and
      ends with an ellipsis; so the newest entry is always kept;
    * ``drop_oldest`` then drops whole oldest entries until the rest fit;
    * ``summarise`` folds them into the summary line instead, the first
      line: ``earlier: N entries folded, steps A-B (kind count, ...); last:
      <the newest folded entry>``, kinds in name order, cut to its room:
      a quarter of the budget, at least 16 tokens.

    ``max_tokens=None`` keeps every entry (no budget).

    Args:
        max_tokens: The budget, in :func:`simulacra.llm.approx_tokens` tokens,
            summed per line; at least :func:`min_memory_tokens` of the policy.
        policy: ``drop_oldest`` or ``summarise`` (``summarize`` is taken too).

    Raises:
        ConfigError: A budget below one observation, or an unknown policy.
    """

    __slots__ = ("_cache", "_entries", "_entry_room", "_kinds", "_last", "_steps",
                 "_summary_room", "_used", "dropped", "max_tokens", "policy")

    def __init__(self, max_tokens: int | None = None,
                 policy: Literal["drop_oldest", "summarise"] | str = "drop_oldest") -> None:
        self.policy: str = _check_policy(policy)
        budget: object = max_tokens
        if budget is not None:
            least = min_memory_tokens(self.policy)
            if not isinstance(budget, int) or isinstance(budget, bool) or budget < least:
                raise ConfigError(
                    f"memory max_tokens must be a whole number of tokens of at least {least} "
                    f"(one observation under policy {self.policy}), or None for no budget; "
                    f"got {max_tokens!r}")
        #: The budget in tokens, or None (no budget).
        self.max_tokens = max_tokens
        self._summary_room = 0
        self._entry_room: int | None = None
        if max_tokens is not None:
            if self.policy == "summarise":
                self._summary_room = max(_MIN_SUMMARY_TOKENS, max_tokens // 4)
            self._entry_room = max_tokens - self._summary_room
        self._entries: deque[tuple[str, int | None, str, int]] = deque()
        self._used = 0  # tokens of the entries
        #: How many entries were dropped or folded so far.
        self.dropped = 0
        self._kinds: dict[str, int] = {}  # entries folded, by kind
        self._steps: list[int | None] = [None, None]  # the steps the folded entries span
        self._last = ""  # the newest folded entry
        self._cache: tuple[str, int] | None = None  # the summary line and its tokens

    def add(self, text: object, *, kind: str = "entry", step: int | None = None) -> None:
        """Remember *text* (one line) as the newest entry, then hold the budget.

        Args:
            text: What to remember; whitespace runs become one space.
            kind: What it is (``"saw"``, ``"posted"``...): ``summarise`` counts by it.
            step: The step it happened in, or None: ``summarise`` gives the span.
        """
        line = _line(text)
        room = self._entry_room
        if room is not None:
            line = _cut(line, room)
        tokens = _tokens(line)
        self._entries.append((_line(kind), step, line, tokens))
        self._used += tokens
        if room is None:
            return
        budget = room + self._summary_room
        summarise = self.policy == "summarise"
        entries = self._entries
        while self._used + self._summary()[1] > budget and len(entries) > 1:
            kind_, step_, line_, tokens_ = entries.popleft()
            self._used -= tokens_
            self.dropped += 1
            if summarise:
                self._fold(kind_, step_, line_)

    def _fold(self, kind: str, step: int | None, line: str) -> None:
        if step is not None:
            first, last = self._steps
            self._steps = [step if first is None else min(first, step),
                           step if last is None else max(last, step)]
        self._kinds[kind] = self._kinds.get(kind, 0) + 1
        self._last = line
        self._cache = None

    def _summary(self) -> tuple[str, int]:
        """The summary line and its tokens (``""`` and 0 when nothing was folded)."""
        if not self._kinds:
            return "", 0
        cached = self._cache
        if cached is None:
            first, last = self._steps
            span = "" if first is None else (
                f", step {first}" if first == last else f", steps {first}-{last}")
            kinds = ", ".join(f"{k} {n}" for k, n in sorted(self._kinds.items()))
            folded = sum(self._kinds.values())
            line = (f"earlier: {folded} {'entry' if folded == 1 else 'entries'} folded{span} "
                    f"({kinds}); last: {self._last}")
            if self._summary_room:
                line = _cut(line, self._summary_room)
            cached = self._cache = (line, _tokens(line))
        return cached

    @property
    def tokens(self) -> int:
        """The memory's size: the tokens of its lines (summary and entries), summed."""
        return self._used + self._summary()[1]

    def lines(self) -> list[str]:
        """The summary line (under ``summarise``, once entries were folded), then the entries."""
        summary = self._summary()[0]
        return ([summary] if summary else []) + [entry[2] for entry in self._entries]

    def entries(self) -> list[tuple[str, int | None, str]]:
        """The entries kept, oldest first, as ``(kind, step, text)``."""
        return [(kind, step, line) for kind, step, line, _ in self._entries]

    def render(self, header: str = "MEMORY:") -> str:
        """*header* and the :meth:`lines`, one per line; ``""`` when the memory is empty."""
        lines = self.lines()
        return "\n".join([header, *lines]) if lines else ""

    def __len__(self) -> int:
        return len(self._entries)

    def get_state(self) -> dict[str, Any]:
        """The memory as plain data: the entries, and what was dropped or folded."""
        state: dict[str, Any] = {"entries": [[kind, step, line]
                                             for kind, step, line, _ in self._entries],
                                 "dropped": self.dropped}
        if self._kinds:
            state["folded"] = {"kinds": dict(sorted(self._kinds.items())),
                               "steps": list(self._steps), "last": self._last}
        return state

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore a state from :meth:`get_state` (of a memory with this budget and policy)."""
        self._entries = deque((str(kind), step, str(line), _tokens(str(line)))
                              for kind, step, line in state["entries"])
        self._used = sum(entry[3] for entry in self._entries)
        self.dropped = int(state.get("dropped", 0))
        folded = state.get("folded")
        self._kinds = {str(k): int(n) for k, n in folded["kinds"].items()} if folded else {}
        self._steps = list(folded["steps"]) if folded else [None, None]
        self._last = str(folded["last"]) if folded else ""
        self._cache = None

    def __repr__(self) -> str:
        budget = "no budget" if self.max_tokens is None else f"{self.tokens}/{self.max_tokens}"
        return (f"<AgentMemory {len(self._entries)} entries, {budget} tokens, "
                f"{self.policy}, {self.dropped} dropped>")
