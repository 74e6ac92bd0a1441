"""The agents' planning policy: rank candidate plans with a CPU-heavy pure-Python score.

:func:`score_plans` is what the model offloads. It is a pure function of its
arguments (plain tuples of numbers in, an int out), defined at module level so
that a worker process can import it by name: the two things
:func:`simulacra.offload` needs to run it anywhere and still give the same
result as inline.

The score of a plan is a made-up but honest amount of work: each plan is
"rolled out" ``work`` times through a chaotic logistic map seeded by its
features, and the mean of the rollout is the plan's estimated success. The
plan with the best estimated success net of its expected cost wins. IEEE-754
arithmetic makes the result bit-identical in every process.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["TOOLS", "Plan", "Tool", "score_plans"]


class Tool:
    """A tool an agent can call: its name, latency and failure multipliers."""

    __slots__ = ("failure", "latency", "name")

    def __init__(self, name: str, latency: float, failure: float) -> None:
        self.name = name
        #: Multiplies the model's mean tool latency.
        self.latency = latency
        #: Multiplies the model's base failure probability.
        self.failure = failure

    def __repr__(self) -> str:
        return f"Tool({self.name!r}, latency={self.latency}, failure={self.failure})"


#: The tools, by index (plans refer to tools by index: plans are plain data).
TOOLS: tuple[Tool, ...] = (
    Tool("search", latency=0.6, failure=0.5),
    Tool("code", latency=2.0, failure=1.0),
    Tool("browse", latency=1.2, failure=2.0),
)

Plan = tuple[int, float, float]
"""A candidate plan: ``(tool index, relevance in (0, 1), expected output tokens / 1000)``."""


def score_plans(plans: Sequence[Plan], work: int) -> int:
    """The index of the best plan in *plans* (the first of equally good ones).

    Args:
        plans: Candidate plans, ``(tool, relevance, tokens_k)`` each.
        work: Rollout steps per plan; the cost is about ``len(plans) * work``
            iterations of pure Python.
    """
    best = 0
    best_score = float("-inf")
    for index, (tool, relevance, tokens_k) in enumerate(plans):
        # Logistic-map rollout: chaotic, so no step can be skipped or cached.
        x = 0.05 + 0.9 * relevance
        total = 0.0
        for _ in range(work):
            x = 3.9 * x * (1.0 - x)
            total += x
        success = 0.5 * relevance + 0.5 * (total / work)
        risk = 0.1 * TOOLS[tool].failure + 0.05 * TOOLS[tool].latency
        score = success - risk - 0.2 * tokens_k
        if score > best_score:
            best, best_score = index, score
    return best
