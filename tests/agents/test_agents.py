"""The model side of agent models: messages, phases, sequences, specs, copies and digests."""

from __future__ import annotations

import hashlib
import pickle
import sys
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from simulacra import (
    Agent,
    AgentActionError,
    AgentSpec,
    ConfigError,
    Message,
    Model,
    Phase,
    SeedTree,
    Sequence,
)
from simulacra.agents import (
    MessageDigest,
    Population,
    freeze_world,
    is_immutable,
    private_copy,
    state_digest,
)

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import _agent_models as m  # noqa: E402

# --------------------------------------------------------------------------- messages


def test_messages_are_immutable_slotted_and_ordered_by_phase_sender_seq() -> None:
    a = Message(0, 2, 1, 9, "t", [1])
    b = Message(0, 2, 0, 1, "z", None)
    c = Message(0, 1, 5, 3, "a", {"x": 1})
    d = Message(1, 0, 0, 0, "a", None)

    assert sorted([d, a, c, b]) == [c, b, a, d]
    assert not hasattr(a, "__dict__")
    with pytest.raises(AttributeError):
        a.payload = 2  # type: ignore[misc]
    assert (a.phase, a.sender, a.seq, a.recipient, a.topic, a.payload) == (0, 2, 1, 9, "t", [1])
    assert pickle.loads(pickle.dumps(a)) == a  # noqa: S301


@pytest.mark.parametrize("value", [None, True, 3, 2.5, 1j, "s", b"b", (1, ("a", 2.0)),
                                   frozenset({1, "x"}), ()])
def test_immutable_values_are_passed_as_they_are(value: object) -> None:
    assert is_immutable(value)
    assert private_copy(value) is value


@pytest.mark.parametrize("value", [[1], {"a": 1}, {1}, (1, [2]), frozenset({(1, 2)}) | {3},
                                   bytearray(b"x")])
def test_mutable_values_are_deep_copied(value: Any) -> None:
    if isinstance(value, frozenset):  # a frozenset of immutables is immutable
        assert is_immutable(value)
        return
    copied = private_copy(value)
    assert not is_immutable(value)
    assert copied == value
    assert copied is not value


def test_a_tuple_subclass_is_not_trusted() -> None:
    class Pair(tuple):  # type: ignore[type-arg]
        pass

    assert not is_immutable(Pair((1, 2)))


# --------------------------------------------------------------------------- phases


def test_a_method_action_runs_on_its_class() -> None:
    phase = Phase(m.Bank.send_state)

    assert phase.only == (m.Bank,)
    assert phase.name == "Bank.send_state"
    assert phase.applies_to(m.SmallBank(1))
    assert not phase.applies_to(m.Household(1))
    assert not phase.receivers_only


def test_a_function_action_runs_on_every_agent() -> None:
    assert Phase(m.everyone).only is None
    assert Phase(m.Helpers.everyone).only is None  # Helpers is not an Agent class
    assert Phase(m.everyone, only=m.Household).only == (m.Household,)


def test_phase_options() -> None:
    phase = Phase(m.Bank.check, only=(m.SmallBank,), receivers_only=True, name="check small")

    assert (phase.only, phase.receivers_only, phase.name) == ((m.SmallBank,), True, "check small")
    assert phase == Phase(m.Bank.check, only=(m.SmallBank,), receivers_only=True,
                          name="check small")
    assert pickle.loads(pickle.dumps(phase)) == phase  # noqa: S301
    with pytest.raises(AttributeError):
        phase.name = "x"  # type: ignore[misc]


@pytest.mark.parametrize(("action", "expected"), [
    (lambda agent, ctx: None, "lambda"),
    (m.make_closure(), "defined inside a function"),
    (m.Bank(1).send_state, "bound method"),
    (m.wrong_arity, "must accept (agent, ctx)"),
    (42, "must be a function or an unbound method"),
    ("_agent_models:everyone", "must be a function or an unbound method"),
])
def test_actions_must_be_importable_functions_of_agent_and_ctx(action: Any,
                                                               expected: str) -> None:
    with pytest.raises(ConfigError, match="action") as info:
        Sequence(action)
    assert expected in str(info.value)


def test_a_phase_does_not_wrap_a_phase() -> None:
    with pytest.raises(ConfigError, match="action must be a function or an unbound method"):
        Phase(Phase(m.everyone))  # type: ignore[arg-type]


@pytest.mark.parametrize(("options", "expected"), [
    ({"only": int}, "only must be an Agent subclass"),
    ({"only": ()}, "only must be an Agent subclass or a non-empty tuple"),
    ({"receivers_only": 1}, "receivers_only must be a bool, got int 1"),
    ({"name": ""}, "name must be a non-empty str"),
])
def test_phase_options_are_checked(options: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        Phase(m.everyone, **options)


def test_sequences_flatten_and_compose() -> None:
    a, b, c = Phase(m.Bank.send_state), Phase(m.Bank.check), Phase(m.everyone)
    nested = Sequence(Sequence(m.Bank.send_state, m.Bank.check), m.everyone)

    assert nested.phases == (a, b, c)
    assert nested == Sequence(a, Sequence(b, Sequence(c)))
    assert list(nested) == [a, b, c]
    assert nested[1] == b
    assert len(nested) == 3
    assert Sequence.of(m.everyone) == Sequence(c)
    assert Sequence.of(nested) is nested
    with pytest.raises(ConfigError, match="at least one"):
        Sequence()


# --------------------------------------------------------------------------- specs and ids


def test_a_spec_builds_its_agent_with_private_copies_of_mutable_state() -> None:
    shared = [1, 2]
    spec = AgentSpec("_agent_models:Bank", 3, {"capital": 2.0, "links": shared})

    one, two = spec.build(), spec.build()

    assert isinstance(one, m.Bank)
    assert (one.id, one.capital, one.links) == (3, 2.0, [1, 2])
    assert one.links is not shared  # type: ignore[attr-defined]
    assert one.links is not two.links  # type: ignore[attr-defined]
    assert pickle.loads(pickle.dumps(spec)) == spec  # noqa: S301


def test_a_spec_names_what_is_wrong() -> None:
    with pytest.raises(ConfigError, match="no module named 'nowhere'"):
        AgentSpec("nowhere:Bank", 1).build()
    with pytest.raises(ConfigError, match=r"must name a subclass of simulacra\.Agent"):
        AgentSpec("_agent_models:Helpers", 1).build()
    with pytest.raises(ConfigError, match=r"must call super\(\).__init__\(id\)"):
        AgentSpec("_agent_models:Forgetful", 1).build()
    with pytest.raises(AgentActionError, match="building agent 1 \\(Bank\\) raised TypeError"):
        AgentSpec("_agent_models:Bank", 1, {"colour": "red"}).build()


@pytest.mark.parametrize(("ids", "expected"), [
    ([1, "a"], "ids[1] must be an int like the model's other agent ids"),
    ([True], "ids[0] must be an int or a str, got bool True (bool is ambiguous"),
    ([1.5], "ids[0] must be an int or a str, got float 1.5"),
    ([None], "ids[0] must be an int or a str, got NoneType None"),
    ([3, 3], "ids[1]: the model already has an agent with id 3"),
])
def test_model_ids_are_checked(ids: list[Any], expected: str) -> None:
    model = Model(seed=0)

    with pytest.raises(ConfigError) as info:
        model.add_many(m.Bank, ids)

    assert expected in str(info.value)


def test_model_add_checks_the_class_and_the_state() -> None:
    model = Model(seed=0)
    with pytest.raises(ConfigError, match=r"cls must be a subclass of simulacra\.Agent"):
        model.add(m.Helpers, 1)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"Bank\(id, \*\*state\) cannot take state \['colour'\]"):
        model.add(m.Bank, 1, colour="red")
    model.add(m.Bank, "a")
    with pytest.raises(ConfigError, match="id must be a str like the model's other agent ids"):
        model.add(m.Bank, 2)

    class Local(Agent):
        pass

    with pytest.raises(ConfigError, match="defined inside a function"):
        model.add(Local, "b")
    assert model.agent_ids == ("a",)


def test_population_refuses_mixed_or_repeated_ids() -> None:
    specs = [AgentSpec("_agent_models:Household", i) for i in (1, 2, 1)]
    with pytest.raises(ConfigError, match="agent id 1 appears twice"):
        Population(specs, SeedTree(0))


# --------------------------------------------------------------------------- world


def test_the_world_is_frozen() -> None:
    world = freeze_world({"a": [1, {"b": {2, 3}}], "c": (4,)})

    assert isinstance(world, MappingProxyType)
    assert world == {"a": (1, {"b": frozenset({2, 3})}), "c": (4,)}
    with pytest.raises(TypeError):
        world["a"] = 1  # type: ignore[index]
    with pytest.raises(TypeError):
        world["a"][1]["b"] = 2
    assert freeze_world(None) is None


@pytest.mark.parametrize(("world", "expected"), [
    ({"graph": object()}, "world['graph'] must be plain data"),
    ({"a": [1, {"b": m.Bank(1)}]}, "world['a'][1]['b'] must be plain data"),
    ([1], "world must be a mapping"),
    ({(1, 2): 3}, "has a key of type tuple"),
])
def test_a_world_that_is_not_plain_data_is_refused(world: Any, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        Model(seed=0, world=world)
    assert expected in str(info.value)


# --------------------------------------------------------------------------- digests


def test_state_digest_known_answer() -> None:
    """Pins the encoding: a change must come with a new STATE_SCHEME."""
    snapshot = {2: ("Bank", {"id": 2, "capital": 0.1, "links": [1]}),
                1: ("Bank", {"id": 1, "capital": -0.0, "links": {3, 2}})}

    digest = state_digest(snapshot)

    assert digest == state_digest(dict(reversed(list(snapshot.items()))))  # order-free
    lines = (b"simulacra.agents.state.v1\n"
             b'[1,"Bank",{"capital":-0.0,"id":1,"links":[2,3]}]\n'
             b'[2,"Bank",{"capital":0.1,"id":2,"links":[1]}]\n')
    assert digest == hashlib.sha256(lines).hexdigest()
    assert digest == "24322a8464caf867f88e17ee67adc8461d7e34efb32fddc6dbe34e201108eb40"


def test_message_digest_known_answer() -> None:
    digest = MessageDigest()
    digest.update([Message(0, 1, 0, 2, "state", (1.5, "x")), Message(0, 1, 1, 3, "state", None)])

    assert digest.count == 2
    lines = (b"simulacra.agents.messages.v1\n"
             b'[0,1,0,2,"state",[1.5,"x"]]\n'
             b'[0,1,1,3,"state",null]\n')
    assert digest.hexdigest() == hashlib.sha256(lines).hexdigest()
    assert digest.hexdigest() == "d4b44d9be4de5f1434a86021a544fc92ab25b2a618b085a9f32b3e82493badea"
