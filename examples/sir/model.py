"""SIR on a network: people meet their neighbours; the contact graph is the shared world.

Discrete-time SIR (Reed-Frost on a graph). The contact network is part of the
model's shared world (``ctx.world["neighbours"]``: read-only, the same for every
agent on every backend), so agents do not store it. Each step has two phases:

1. ``Person.expose``: an infectious person sends one ``"contact"`` message to
   each neighbour.
2. ``Person.update``: a susceptible person who received ``k`` contacts becomes
   infectious with probability ``1 - (1 - beta) ** k``; an infectious person
   recovers with probability ``gamma``. One draw from ``ctx.rng`` decides
   either, so the epidemic is a pure function of the seed, the graph and the
   parameters -- whichever backend runs it.

The network is a seeded Erdős-Rényi graph by default; any adjacency (for
example a networkx graph's) can be passed instead.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence as AbstractSequence
from typing import Any

from simulacra import Agent, ConfigError, Context, Model, RunResult, SeedTree, Sequence

__all__ = ["Person", "STEP", "build", "curve", "network", "run"]


class Person(Agent):
    """One person: a state ``"S"``, ``"I"`` or ``"R"``, and when it last changed."""

    def __init__(self, id: int, *, state: str = "S") -> None:
        super().__init__(id)
        self.state = state
        self.infected_at = -1 if state == "S" else 0
        self.recovered_at = -1

    def expose(self, ctx: Context) -> None:
        if self.state == "I":
            world = ctx.world
            assert world is not None
            ctx.broadcast("contact", None, to=world["neighbours"][self.id])

    def update(self, ctx: Context) -> None:
        world = ctx.world
        assert world is not None
        if self.state == "S":
            contacts = len(ctx.payloads("contact"))
            if contacts and ctx.rng.random() < 1.0 - (1.0 - world["beta"]) ** contacts:
                self.state = "I"
                self.infected_at = ctx.step + 1
        elif self.state == "I" and ctx.rng.random() < world["gamma"]:
            self.state = "R"
            self.recovered_at = ctx.step + 1


#: One step: exposures are delivered before anyone updates.
STEP = Sequence(Person.expose, Person.update)


def network(seed: int | str, people: int, degree: float) -> list[tuple[int, ...]]:
    """A seeded Erdős-Rényi contact graph with mean degree *degree*, as sorted adjacency."""
    rng = random.Random(SeedTree(seed).child("sir", "network").seed)
    p = min(1.0, degree / max(1, people - 1))
    adjacency: list[list[int]] = [[] for _ in range(people)]
    for a in range(people):
        for b in range(a + 1, people):
            if rng.random() < p:
                adjacency[a].append(b)
                adjacency[b].append(a)
    return [tuple(sorted(n)) for n in adjacency]


def patients_zero(seed: int | str, people: int, count: int) -> list[int]:
    """The initially infectious people: a seeded sample."""
    rng = random.Random(SeedTree(seed).child("sir", "patients zero").seed)
    return sorted(rng.sample(range(people), count))


def build(seed: int | str = 0, *, people: int = 500, degree: float = 6.0, beta: float = 0.1,
          gamma: float = 0.2, infected: int = 5,
          neighbours: AbstractSequence[AbstractSequence[int]] | None = None,
          backend: Any = None) -> Model:
    """The model: *people* persons on a contact graph (seeded, or *neighbours*).

    Raises:
        ConfigError: A parameter is out of range; the message names it.
    """
    _check(people=people, degree=degree, beta=beta, gamma=gamma, infected=infected)
    adjacency = network(seed, people, degree) if neighbours is None else [
        tuple(n) for n in neighbours]
    if infected > len(adjacency):
        raise ConfigError(f"sir: infected must be at most the {len(adjacency)} people, "
                          f"got {infected!r}")
    world = {"neighbours": adjacency, "beta": beta, "gamma": gamma}
    model = Model(seed=seed, backend=backend, world=world)
    sick = set(patients_zero(seed, len(adjacency), infected))
    for person in range(len(adjacency)):
        model.add(Person, person, state="I" if person in sick else "S")
    return model


def _check(*, people: object, degree: object, beta: object, gamma: object,
           infected: object) -> None:
    for name, value, least in (("people", people, 1), ("infected", infected, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ConfigError(f"sir: {name} must be an int >= {least}, got {value!r}")
    for name, value, high in (("degree", degree, math.inf), ("beta", beta, 1.0),
                              ("gamma", gamma, 1.0)):
        if (isinstance(value, bool) or not isinstance(value, int | float)
                or not 0.0 <= value <= high or math.isnan(value)):
            expected = "a number >= 0" if high == math.inf else f"a number in [0, {high:g}]"
            raise ConfigError(f"sir: {name} must be {expected}, got {value!r}")


def curve(result: RunResult) -> list[tuple[int, int, int]]:
    """``(S, I, R)`` counts after each step 0..steps (step 0: the initial state)."""
    states = [state for _, state in result.agents.values()]
    points = []
    for t in range(result.steps + 1):
        s = sum(1 for p in states if p["infected_at"] == -1 or p["infected_at"] > t)
        r = sum(1 for p in states if 0 <= p["recovered_at"] <= t)
        points.append((s, len(states) - s - r, r))
    return points


def run(seed: int | str = 0, *, steps: int = 40, backend: Any = None,
        **params: Any) -> RunResult:
    """Run one epidemic for *steps* steps (see :func:`build` for the parameters)."""
    return build(seed, backend=backend, **params).run(STEP, steps=steps)
