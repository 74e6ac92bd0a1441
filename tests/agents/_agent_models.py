"""Agent classes and actions for the agents-layer tests (importable by name)."""

from __future__ import annotations

from typing import Any

from simulacra import Agent, Context


class Bank(Agent):
    """A bank with some state."""

    def __init__(self, id: Any, *, capital: float = 1.0, links: list[Any] | None = None) -> None:
        super().__init__(id)
        self.capital = capital
        self.links = [] if links is None else links

    def send_state(self, ctx: Context) -> None:
        ctx.broadcast("state", self.capital, to=self.links)

    def check(self, ctx: Context) -> None:
        self.capital -= sum(ctx.payloads("state")) * 0.0


class SmallBank(Bank):
    """A subclass."""


class Household(Agent):
    """Another class."""

    def spend(self, ctx: Context) -> None:
        pass


class Forgetful(Agent):
    """Forgets to call super().__init__."""

    def __init__(self, id: Any) -> None:
        self.name = "forgot"


class Helpers:
    """Not an agent class: its functions are plain actions."""

    @staticmethod
    def everyone(agent: Agent, ctx: Context) -> None:
        pass


def everyone(agent: Agent, ctx: Context) -> None:
    """A module-level action."""


def wrong_arity(agent: Agent) -> None:
    """Takes no ctx."""


def make_closure() -> Any:
    def inner(agent: Agent, ctx: Context) -> None:
        pass

    return inner
