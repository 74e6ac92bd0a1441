"""The fast paths of the agent hot path give what the general paths give.

Building agents, checking ids, snapshots and delivery each have a fast path
for the common case (plain ids in order, immutable state, fan-outs only);
these tests pin that they agree with the general path and still refuse what
it refuses.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from simulacra import Agent, AgentSpec, ConfigError, Context, Model, Phase, SeedTree
from simulacra.agents import Population, expand_entries, is_immutable, sorted_ids

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))  # _agent_models, named in specs below

MODULE = __name__


class ClassId(Agent):
    """Forgets super().__init__, but its class has an ``id``: vars() has none."""

    id = 1

    def __init__(self, id: Any) -> None:
        self.name = "forgot"


class Lookup(Agent):
    """Forgets super().__init__; __getattr__ would answer any attribute."""

    def __init__(self, id: Any) -> None:
        self.name = "forgot"

    def __getattr__(self, name: str) -> Any:
        return 1


class Holder(Agent):
    """Holds state of every kind the snapshot copies differently."""

    def __init__(self, id: int, *, flat: tuple[int, ...], nested: tuple[Any, ...],
                 items: list[int]) -> None:
        super().__init__(id)
        self.flat = flat
        self.nested = nested
        self.items = items
        self.total = 0.0


class Mixed(Agent):
    """Sends one message, broadcasts a fan-out and a copied payload."""

    def __init__(self, id: int, *, others: tuple[int, ...]) -> None:
        super().__init__(id)
        self.others = others
        self.seen: list[Any] = []

    def act(self, ctx: Context) -> None:
        self.seen.append([(msg.sender, msg.seq, msg.payload) for msg in ctx.inbox()])
        ctx.send(self.others[0], "one", self.id)
        ctx.broadcast("many", (self.id, "x"), to=self.others)
        ctx.broadcast("copied", [self.id], to=self.others)


@pytest.mark.parametrize("cls", [ClassId, Lookup])
def test_build_still_finds_an_agent_without_its_own_id(cls: type[Agent]) -> None:
    with pytest.raises(ConfigError, match=r"must call super\(\).__init__\(id\)"):
        AgentSpec(f"{MODULE}:{cls.__qualname__}", 1).build()
    with pytest.raises(ConfigError, match=r"must call super\(\).__init__\(id\)"):
        AgentSpec("_agent_models:Forgetful", 1).build()


def test_build_passes_immutable_state_as_is_and_copies_the_rest() -> None:
    flat, nested, items = (1, 2), ((1, "a"), frozenset({2})), [3]
    spec = AgentSpec(f"{MODULE}:Holder", 4, {"flat": flat, "nested": nested, "items": items})

    agent = spec.build()

    assert isinstance(agent, Holder)
    assert agent.flat is flat
    assert agent.nested is nested
    assert agent.items == items
    assert agent.items is not items


def test_is_immutable_flat_and_nested() -> None:
    assert is_immutable((1, 2.0, "a", None, b"x"))
    assert is_immutable(((1, 2), frozenset({(3,)})))
    assert not is_immutable((1, [2]))
    assert not is_immutable(((1,), ([],)))
    assert not is_immutable((True, object()))


@pytest.mark.parametrize(("ids", "expected"), [
    ([3, 1, 2], [1, 2, 3]),
    (["b", "a"], ["a", "b"]),
    ([], []),
])
def test_sorted_ids_sorts(ids: list[Any], expected: list[Any]) -> None:
    assert sorted_ids(ids) == expected


@pytest.mark.parametrize(("ids", "message"), [
    ([2, 1, 2], "ids: agent id 2 appears twice"),
    (["a", "a"], "ids: agent id 'a' appears twice"),
    ([1, "a"], "must have one type, got int 1 and str 'a'"),
    ([1, True], r"ids\[1\] must be an int or a str, got bool True"),
    ([1, 2.0], r"ids\[1\] must be an int or a str, got float 2.0"),
])
def test_sorted_ids_refuses(ids: list[Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        sorted_ids(ids)


def test_snapshot_copies_only_what_is_mutable() -> None:
    flat, nested, items = (1, 2), ((1, "a"),), [3]
    population = Population(
        [AgentSpec(f"{MODULE}:Holder", 0, {"flat": flat, "nested": nested, "items": items})],
        SeedTree(0))

    first = population.snapshot()[0][1]
    first["items"].append(4)
    second = population.snapshot()[0][1]

    assert second == {"id": 0, "flat": (1, 2), "nested": ((1, "a"),), "items": [3],
                      "total": 0.0}
    assert second["flat"] is flat
    assert second["nested"] is nested
    assert second["items"] is not first["items"]


@pytest.mark.parametrize("first", [0, 5])
def test_delivery_by_position_equals_delivery_by_id(first: int) -> None:
    # Ids from 0 take the fan-out-only fast path when nothing else is sent; ids
    # from 5 and the dict inboxes of a partial population take the general one.
    ids = list(range(first, first + 6))
    specs = [AgentSpec(f"{MODULE}:Mixed", i, {"others": (ids[(n + 1) % 6], ids[(n + 3) % 6],
                                                         ids[(n + 1) % 6])})
             for n, i in enumerate(ids)]
    whole = Population(specs, SeedTree(0))
    part = Population(specs, SeedTree(0), all_ids=[*ids, first + 100])  # inboxes by id
    phase = Phase(Mixed.act)
    for step in range(3):
        entries = whole.run_entries(phase, step, 0)
        assert expand_entries(entries) == expand_entries(part.run_entries(phase, step, 0))
        assert whole.deliver(entries) == part.deliver(expand_entries(entries)) == 6 * 7
    assert whole.snapshot() == part.snapshot()
    entries = whole.run_entries(phase, 3, 0)
    part.run_entries(phase, 3, 0)
    fanouts = [entry for entry in entries if type(entry) is tuple]
    assert whole.deliver(fanouts) == part.deliver(fanouts) == 6 * 3
    whole.run_entries(phase, 4, 0)
    part.run_entries(phase, 4, 0)
    assert whole.snapshot() == part.snapshot()


def test_a_model_of_fanouts_only_matches_its_expanded_messages() -> None:
    # LocalBackend delivers fan-outs as they are; ThreadPoolBackend joins the
    # outboxes of its threads: the digests must be equal.
    def run(backend: str) -> str:
        model = Model(seed=3, backend=backend)
        for i in range(40):
            model.add(Mixed, i, others=((i * 7 + 1) % 40, (i * 3 + 2) % 40))
        return model.run(Mixed.act, steps=4).digest

    assert run("local") == run("threaded")
