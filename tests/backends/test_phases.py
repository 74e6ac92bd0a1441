"""Phase-ordered delivery, inbox order, no write sharing, eligibility and random streams."""

from __future__ import annotations

import gc
import random
import sys
from pathlib import Path
from typing import Any

import pytest

from simulacra import (
    Agent,
    AgentActionError,
    ConfigError,
    ContextClosed,
    LocalBackend,
    Model,
    Phase,
    SeedTree,
    Sequence,
    ThreadPoolBackend,
    UnknownRecipient,
)

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import _engine_models as models  # noqa: E402


def _probe_model(backend: Any = "local") -> Model:
    model = Model(seed=1, backend=backend)
    ids = ["c", "a", "b"]
    for agent_id in ids:
        model.add(models.Probe, agent_id, peers=[p for p in ids if p != agent_id] + [agent_id])
    return model


def test_messages_of_phase_n_arrive_in_phase_n_plus_1_and_not_before() -> None:
    result = _probe_model().run(models.PROBE_SEQUENCE, steps=2)
    log = result.state("a")["log"]

    (s0_first, s0_second, s1_first, s1_second) = log
    assert s0_first == (0, "Probe.first", [])  # nothing was sent before the first phase
    # Phase 1 (second) sees exactly what phase 0 (first) sent, and nothing else.
    assert {m[3] for m in s0_second[2]} == {"first", "first-again"}
    assert all(m[0] == 0 and m[4].endswith("@0") for m in s0_second[2])
    # The first phase of step 1 sees what the last phase of step 0 sent.
    assert {m[3] for m in s1_first[2]} == {"second"}
    assert all(m[0] == 1 and m[4] == 0 for m in s1_first[2])
    # ...and the previous inbox is gone: no "first" messages of step 0 linger.
    assert {m[3] for m in s1_second[2]} == {"first", "first-again"}
    assert all(m[4].endswith("@1") for m in s1_second[2])


@pytest.mark.parametrize("backend", ["local", "threaded"])
def test_inbox_is_in_total_order_phase_sender_seq(backend: str) -> None:
    """Senders added as c, a, b; the inbox lists a, b, c, each sender's messages by seq."""
    result = _probe_model(backend).run(models.PROBE_SEQUENCE, steps=1)
    inbox = result.state("c")["log"][1][2]

    keys = [(phase, sender, seq) for phase, sender, seq, _, _ in inbox]
    assert keys == sorted(keys)
    assert [sender for _, sender, _, _, _ in inbox] == ["a", "a", "b", "b", "c", "c"]
    # seq counts each sender's messages in the phase: "c" comes last in the peers of
    # "c" itself, so its messages to itself are its 5th and 6th (seq 4 and 5).
    assert [(sender, seq) for _, sender, seq, _, _ in inbox] == [
        ("a", 0), ("a", 1), ("b", 0), ("b", 1), ("c", 4), ("c", 5)]
    assert [topic for _, _, _, topic, _ in inbox][:2] == ["first", "first-again"]


def test_a_sent_payload_is_not_shared_with_the_sender_or_other_recipients() -> None:
    model = Model(seed=0)
    model.add(models.Sharer, 0, peers=[1, 2])
    model.add(models.Sharer, 1, peers=[2, 0])
    model.add(models.Sharer, 2, peers=[0, 1])
    result = model.run(Sequence(models.Sharer.give, models.Sharer.take), steps=1)

    for agent_id in (0, 1, 2):
        state = result.state(agent_id)
        # The sender's later mutation (99) reached nobody, and each recipient's own
        # mutation ("written by") reached no other recipient of the same broadcast.
        assert state["book"] == {"items": [1, 2, 3, 99]}
        assert state["received"], agent_id
        assert all(text == "{'items': [1, 2, 3]}" for text in state["received"]), state


def test_a_context_reaches_no_agent_object() -> None:
    """Everything reachable from a real Context (frame, inbox, payloads, world) is plain data."""
    model = Model(seed=0, world={"k": [1, 2]})
    model.add(models.Probe, "a", peers=["h"])
    model.add(models.Hoarder, "h")
    try:
        model.run(Sequence(models.Probe.first, models.Hoarder.keep), steps=1)
        ctx = models.Hoarder.kept
    finally:
        models.Hoarder.kept = None
    assert ctx.inbox()  # it has messages to look at
    assert ctx.world == {"k": (1, 2)}

    reachable: set[int] = set()
    todo: list[Any] = [ctx]
    found_agents = []
    while todo:
        obj = todo.pop()
        if id(obj) in reachable or isinstance(obj, type | type(sys)):
            continue
        reachable.add(id(obj))
        if isinstance(obj, Agent):
            found_agents.append(obj)
        todo.extend(gc.get_referents(obj))
        todo.extend(getattr(obj, slot) for slot in getattr(type(obj), "__slots__", ())
                    if hasattr(obj, slot))

    assert len(reachable) > 10  # the walk did walk
    assert found_agents == []


def test_a_context_refuses_to_send_after_its_action_returned() -> None:
    model = Model(seed=0)
    model.add_many(models.Hoarder, [1, 2])

    with pytest.raises(AgentActionError) as info:
        model.run(Sequence(models.Hoarder.keep, models.Hoarder.reuse), steps=1)

    assert isinstance(info.value.__cause__, ContextClosed)
    assert info.value.phase == "Hoarder.reuse"


def test_contexts_are_fresh_for_agents_that_keep_them() -> None:
    """A context one agent kept is closed and keeps its identity; the others are not mixed up."""
    model = Model(seed=0)
    model.add_many(models.Keeper, range(7))
    result = model.run(Sequence(models.Keeper.keep, models.Keeper.report), steps=2)

    for i in range(7):
        seen = result.state(i)["seen"]
        if i % 3 == 0:
            assert seen == [i, i, [0], i, i, i, [1], i]
        else:
            assert seen == [i, i, [0], i, i, [1]]
    with pytest.raises(AgentActionError) as info:
        model.run(Sequence(models.Keeper.keep, models.Keeper.late), steps=1)
    assert isinstance(info.value.__cause__, ContextClosed)
    assert info.value.agent == 0


def test_phases_run_on_the_class_that_defines_the_action_unless_told_otherwise() -> None:
    model = Model(seed=0)
    model.add(models.Probe, "p", peers=["p"])
    model.add(models.Quiet, "q")
    model.add(models.Drawer, "r")
    backend = LocalBackend()
    backend.start(model.specs, model.seed, None)

    assert backend.get_agents_for(Phase(models.Probe.first)) == ["p"]
    assert backend.get_agents_for(Phase(models.Quiet.rest)) == ["q"]
    assert backend.get_agents_for(Phase(models.count_everyone)) == ["p", "q", "r"]
    assert backend.get_agents_for(Phase(models.count_everyone,
                                        only=(models.Quiet, models.Drawer))) == ["q", "r"]
    assert backend.get_agents_for(Phase(models.Quiet.rest, only=models.Drawer)) == ["r"]
    # receivers_only: nobody has mail before the first boundary; then only recipients.
    receivers = Phase(models.count_everyone, receivers_only=True)
    assert backend.get_agents_for(receivers) == []
    backend.deliver_messages(backend.execute_action(Phase(models.Probe.first), 0, 0))
    assert backend.get_agents_for(receivers) == ["p"]
    backend.close()


def test_subclass_instances_run_the_phases_of_their_base_class() -> None:
    result = models.conformance_model().run(models.CONFORMANCE_SEQUENCE, steps=1)

    vip, plain = result.state(0), result.state(1)  # VipTrader 0 and Trader 1
    assert vip["seen"] or plain["seen"]
    assert result.agents[0][0] == "VipTrader"
    assert result.agents[1][0] == "Trader"


def test_rng_is_derived_from_the_seed_tree_path_agent_step_phase() -> None:
    """Pins the derivation: ("agent", id, "step", step, "phase", index) below the seed."""
    model = Model(seed=42)
    model.add_many(models.Drawer, [3, 8])
    model.add(models.Quiet, 9)
    sequence = Sequence(models.Quiet.rest, models.Drawer.draw)

    result = model.run(sequence, steps=2)

    root = SeedTree(42)
    for agent_id in (3, 8):
        expected = [
            random.Random(root.child("agent", agent_id, "step", step, "phase", 1).seed).random()
            for step in (0, 1)
        ]
        assert result.state(agent_id)["draws"] == expected
    assert result.state(3)["draws"] != result.state(8)["draws"]


def test_draws_do_not_depend_on_which_other_agents_exist() -> None:
    small = Model(seed=5)
    small.add_many(models.Drawer, [1])
    large = Model(seed=5)
    large.add_many(models.Drawer, [0, 1, 2, 3])

    a = small.run(models.Drawer.draw, steps=3).state(1)["draws"]
    b = large.run(models.Drawer.draw, steps=3).state(1)["draws"]

    assert a == b


def test_the_world_is_read_only_and_frozen_deeply() -> None:
    world = {"limit": 3, "nested": {"rates": [0.1, 0.2]}}
    model = Model(seed=0, world=world)
    model.add(models.WorldReader, 1)
    world["limit"] = 1000  # the model took a copy

    result = model.run(models.WorldReader.read, steps=1)

    assert result.state(1)["outcome"] == "read-only; limit=3; rates=(0.1, 0.2)"


def test_threads_run_agents_concurrently_with_the_reference_result() -> None:
    reference = models.conformance_model().run(models.CONFORMANCE_SEQUENCE, steps=3)
    backend = ThreadPoolBackend(8)  # more threads than some phases have agents
    try:
        result = models.conformance_model(backend).run(models.CONFORMANCE_SEQUENCE, steps=3)
    finally:
        backend.close()

    assert result.digest == reference.digest


def test_runs_can_skip_digests_and_keep_the_final_state() -> None:
    model = models.conformance_model()
    full = model.run(models.CONFORMANCE_SEQUENCE, steps=3)
    bare = model.run(models.CONFORMANCE_SEQUENCE, steps=3, digests=False, defer_gc=False)

    assert bare.state_digests == bare.message_digests == ()
    assert bare.message_counts == full.message_counts
    assert dict(bare.agents) == dict(full.agents)
    assert bare.final_state_digest == full.state_digests[-1] == full.final_state_digest


def test_zero_steps_returns_the_initial_state() -> None:
    model = Model(seed=0)
    model.add(models.Ring, 0, size=1)

    result = model.run(models.Ring.act, steps=0)

    assert result.steps == 0
    assert result.state(0) == {"id": 0, "size": 1, "total": 0}


@pytest.mark.parametrize(("mode", "error", "expected"), [
    ("single", ConfigError, "broadcast(to=...) takes an iterable of agent ids, got int 2"),
    ("topic", ConfigError, "topic must be a str, got int 7"),
    ("float-id", UnknownRecipient, "sent a message to 2.0, which is not an agent"),
    ("bool-id", UnknownRecipient, "sent a message to True, which is not an agent"),
    ("str-id", UnknownRecipient, "sent a message to '2', which is not an agent"),
])
def test_sends_are_checked(mode: str, error: type[Exception], expected: str) -> None:
    """Ids are exact: 2.0 == 2 and True == 1, but neither is an agent id."""
    model = Model(seed=0)
    model.add_many(models.Careless, [1, 2], mode=mode)

    with pytest.raises((AgentActionError, UnknownRecipient)) as info:
        model.run(models.Careless.act)

    raised = info.value.__cause__ if isinstance(info.value, AgentActionError) else info.value
    assert isinstance(raised, error)
    assert expected in str(raised)
