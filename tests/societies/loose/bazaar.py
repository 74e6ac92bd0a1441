"""A society of our own, in a folder that is not a package: traders at a bazaar.

Each trader asks the model what to do and turns the reply into a ``Deed`` (a
class of this file). The world accepts only ``Deed`` objects (an ``isinstance``
check), so a resume that executes this file twice, and so holds two ``Deed``
classes, fails turns instead of continuing the run. ``crash_at`` kills the
process after that step, as a crash would.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

from simulacra import InvalidAction
from simulacra.agents import ActionSpec, LLMAgent, World
from simulacra.llm import Completion, CompletionRequest


@dataclass(frozen=True)
class Deed:
    verb: str
    amount: int


class Bazaar(World):
    def __init__(self, names: list[str], crash_at: int | None) -> None:
        super().__init__()
        self.names = sorted(names)
        self.stock = dict.fromkeys(self.names, 10)
        self.ledger: list[tuple[str, str, int]] = []
        self.crash_at = crash_at

    _NOT_STATE = World._NOT_STATE | {"crash_at"}

    def observation_for(self, agent_id: Any, snapshot: Any = None) -> Any:
        return (str(agent_id), self.stock[str(agent_id)], tuple(self.ledger[-3:]))

    def decide(self, agent_id: Any, action: Any, step: int,
               time: float) -> list[tuple[str, dict[str, Any], tuple[str, ...]]]:
        who = str(agent_id)
        if not isinstance(action, Deed):
            raise InvalidAction(f"{who} returned {type(action).__name__}, not a Deed")
        if action.verb == "sell" and self.stock[who] < action.amount:
            return [("idle", {"reason": "not enough stock"}, ())]
        peer = self.names[(self.names.index(who) + 1 + action.amount) % len(self.names)]
        return [(action.verb, {"amount": action.amount, "peer": peer}, (peer,))]

    def apply(self, event: Any) -> None:
        super().apply(event)
        if event.kind in ("buy", "sell"):
            sign = 1 if event.kind == "buy" else -1
            self.stock[event.agent] += sign * event.data["amount"]
            self.ledger.append((event.agent, event.kind, event.data["amount"]))

    def probe(self, step: int) -> dict[str, Any]:
        if self.crash_at is not None and step == self.crash_at:
            sys.stdout.flush()
            os._exit(9)
        return {"trades": len(self.ledger)}

    def summary(self) -> dict[str, Any]:
        return {"traders": len(self.names), "trades": len(self.ledger)}


class Trader(LLMAgent):
    def prompt(self, spec: ActionSpec) -> CompletionRequest:
        me, stock, recent = self.observation
        return CompletionRequest.chat(
            f"You are trader {me} with {stock} goods; recent trades: {recent}. "
            "Say buy or sell and how many.", max_tokens=32)

    def parse(self, completion: Completion | None, spec: ActionSpec) -> Deed:
        text = "" if completion is None else completion.text
        verb = "buy" if len(text) % 2 else "sell"
        return Deed(verb, 1 + len(text) % 4)


def build(*, agents: int, seed: Any, llm: dict[str, Any],
          crash_at: int | None = None) -> tuple[Bazaar, list[Trader]]:
    names = [f"v{i:02d}" for i in range(agents)]
    return Bazaar(names, crash_at), [Trader(name) for name in names]
