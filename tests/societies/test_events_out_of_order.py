"""Out-of-order commit (``out_of_order``): turns committed ahead of the kernel, the same run.

A street of our own: each agent sees the last posts of the agents it watches
and its own mentions, and mentions (wakes) only agents that watch it. Post
ids are per author, so what an agent sees does not depend on turns far away.
With ``out_of_order=True`` the event-driven engine commits a turn to a forward
copy of the world as soon as no turn within two hops can precede it, and
starts an agent's next turns from that copy while a call far away is still
out. The run must be the sequential one, whatever the graph, the wall-clock
speed of each call and the wake-ups (Hypothesis); a world whose identities do
depend on the order of far-away turns is stopped with one clear error, never
a different run.
"""

from __future__ import annotations

import bisect
import hashlib
import random
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulacra import ConfigError, EventEngine, LatencyModel, World, load_config
from simulacra.agents import ActionSpec, AgentId
from simulacra.societies import run_society

LATENCY = LatencyModel(base=0.3, min_duration=0.3)


class Street(World):
    """Posts numbered per author; agent X sees the last posts of those it watches."""

    PLAIN_STATE = True

    def __init__(self, watches: Mapping[str, Sequence[str]], *, global_ids: bool = False) -> None:
        super().__init__()
        self.watches = {k: sorted(v) for k, v in watches.items()}
        self.posts: dict[str, list[str]] = {k: [] for k in watches}
        self.inbox: dict[str, list[list[Any]]] = {k: [] for k in watches}
        self.total = 0
        self._global_ids = global_ids

    _NOT_STATE = World._NOT_STATE | {"_global_ids"}

    def affected_by(self, agent_id: AgentId) -> Sequence[str]:
        return self.watches[str(agent_id)]

    def observation_for(self, agent_id: AgentId, snapshot: Any = None) -> tuple[Any, ...]:
        me = str(agent_id)
        seen = tuple((other, len(self.posts[other]), tuple(self.posts[other][-2:]))
                     for other in self.watches[me])
        inbox = tuple(tuple(m) for m in self.inbox[me][-3:])
        # A world that numbers posts with one counter for all: the order of far-away
        # turns shows.
        return (seen, inbox, self.total) if self._global_ids else (seen, inbox)

    def decide(self, agent_id: AgentId, action: Any, step: int,
               time: float) -> list[tuple[str, dict[str, Any], tuple[str, ...]]]:
        text, mentions = action
        return [("post", {"text": text, "mentions": list(mentions)}, tuple(mentions))]

    def apply(self, event: Any) -> None:
        super().apply(event)
        who = event.agent
        self.posts[who].append(event.data["text"])
        self.total += 1
        for name in event.data["mentions"]:
            self.inbox[name].append([who, len(self.posts[who]) - 1])


class SortedStreet(Street):
    """A street whose inboxes are in time order (then author, then post): its turns commute.

    *claim* alone (an inbox still in order of arrival) is a world that says its
    turns commute when they do not.
    """

    def __init__(self, watches: Mapping[str, Sequence[str]], *, claim_only: bool = False,
                 says: bool = True) -> None:
        super().__init__(watches)
        self._claim_only = claim_only
        self._says = says
        #: Each author's posts' times.
        self.stamps: dict[str, list[float]] = {k: [] for k in watches}

    _NOT_STATE = Street._NOT_STATE | {"_claim_only", "_says"}

    def commutes(self) -> bool:
        return self._says

    def apply(self, event: Any) -> None:
        World.apply(self, event)
        who = event.agent
        self.posts[who].append(event.data["text"])
        self.stamps[who].append(event.time)
        self.total += 1
        for name in event.data["mentions"]:
            line = [event.time, who, len(self.posts[who]) - 1]
            if self._claim_only:
                self.inbox[name].append(line)
            else:
                bisect.insort(self.inbox[name], line)


class TimedStreet(SortedStreet):
    """A SortedStreet that reads as of a time (World.observation_at); *ignores*: it says it
    does and returns the present."""

    def __init__(self, watches: Mapping[str, Sequence[str]], *, ignores: bool = False) -> None:
        super().__init__(watches)
        self._ignores = ignores

    _NOT_STATE = SortedStreet._NOT_STATE | {"_ignores"}

    def observation_at(self, agent_id: AgentId, time: float) -> tuple[Any, ...]:
        if self._ignores:
            return self.observation_for(agent_id)
        me = str(agent_id)
        seen = []
        for other in self.watches[me]:
            count = bisect.bisect_left(self.stamps[other], time)
            seen.append((other, count, tuple(self.posts[other][:count][-2:])))
        inbox = self.inbox[me][:bisect.bisect_left(self.inbox[me], [time])][-3:]
        return tuple(seen), tuple(tuple(m) for m in inbox)


class Walker:
    """Posts a digest of what it saw; mentions one of its watchers now and then."""

    def __init__(self, name: str, watchers: Sequence[str], *, sleeps: Sequence[float],
                 gate: Gate | None = None, mentions: bool = True) -> None:
        self.id = name
        self.watchers = list(watchers)
        self.sleeps = list(sleeps) or [0.0]
        self.seen: Any = None
        self.turns = 0
        self.gate = gate
        self.mentions = mentions

    def observe(self, observation: Any) -> None:
        self.seen = observation

    def act(self, spec: ActionSpec) -> Any:
        if self.gate is not None:
            self.gate.acted(self.id, spec.step)
        time.sleep(self.sleeps[spec.step % len(self.sleeps)])
        digest = hashlib.sha256(repr((self.id, spec.step, self.seen)).encode()).hexdigest()[:8]
        self.turns += 1
        picked: tuple[str, ...] = ()
        if self.mentions and self.watchers and int(digest, 16) % 3 == 0:
            picked = (self.watchers[int(digest, 16) % len(self.watchers)],)
        return f"{self.id}/{spec.step}/{digest}", picked

    def get_state(self) -> dict[str, Any]:
        return {"turns": self.turns, "seen": repr(self.seen)}

    def set_state(self, state: Mapping[str, Any]) -> None:
        self.turns = state["turns"]


class Shouter(Walker):
    """Mentions every agent that watches it, every turn: inboxes that fill from all sides."""

    def act(self, spec: ActionSpec) -> Any:
        text, _ = super().act(spec)
        return text, tuple(self.watchers)


class Gate:
    """Holds the first turn of one slow agent until the far agents have acted *needed* times."""

    def __init__(self, slow: str, far: set[str], needed: int, *, timeout: float) -> None:
        self.slow, self.far, self.needed, self.timeout = slow, far, needed, timeout
        self.lock = threading.Lock()
        self.far_acts = 0
        self.opened = threading.Event()
        #: Whether the far agents' turns released the slow one (not its timeout).
        self.in_time = False
        self.before = 0

    def acted(self, name: str, step: int) -> None:
        if name == self.slow and step == 0:
            self.in_time = self.opened.wait(self.timeout)
            with self.lock:
                self.before = self.far_acts  # the far turns acted while it was out
            return
        if name in self.far:
            with self.lock:
                self.far_acts += 1
                if self.far_acts >= self.needed:
                    self.opened.set()


def society(watches: Mapping[str, Sequence[str]], sleeps: Mapping[str, Sequence[float]], *,
            gate: Gate | None = None, global_ids: bool = False, mentions: bool = True,
            commutes: bool | str = False) -> tuple[Street, list[Walker]]:
    """A street and its walkers.

    *commutes*: a SortedStreet; ``"claim"``: one that only says its turns commute,
    ``"quiet"``: one whose turns commute and that does not say so; ``"as_of"``: a
    TimedStreet (it reads as of a time too), ``"ignores"``: one that only says so.
    """
    watchers = {n: sorted(o for o, seen in watches.items() if n in seen) for n in watches}
    agents = [Walker(n, watchers[n], sleeps=sleeps.get(n, ()), gate=gate, mentions=mentions)
              for n in sorted(watches)]
    world: Street
    if commutes in ("as_of", "ignores"):
        world = TimedStreet(watches, ignores=commutes == "ignores")
    elif commutes:
        world = SortedStreet(watches, claim_only=commutes == "claim", says=commutes != "quiet")
    else:
        world = Street(watches, global_ids=global_ids)
    return world, agents


def engine_for(world: Street, agents: list[Walker], *, mode: str = "threads",
               dependencies: bool = True, out_of_order: bool = False, reaction: float = 0.1,
               wake: float = 0.4, concurrency: int = 8) -> EventEngine:
    return EventEngine(world, agents, latency=LATENCY, mode=mode, concurrency=concurrency,
                       dependencies=dependencies, out_of_order=out_of_order,
                       wake_interval=wake, reaction_delay=reaction)


def ring(n: int, reach: int = 1) -> dict[str, list[str]]:
    names = [f"a{i:02d}" for i in range(n)]
    return {names[i]: sorted({names[(i + d) % n] for d in range(-reach, reach + 1)} - {names[i]})
            for i in range(n)}


@st.composite
def streets(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(3, 9))
    names = [f"a{i:02d}" for i in range(n)]
    watches = {}
    for name in names:
        others = [o for o in names if o != name]
        watches[name] = draw(st.lists(st.sampled_from(others), unique=True, max_size=3))
    sleeps = {name: draw(st.lists(st.sampled_from([0.0, 0.0, 0.001, 0.005, 0.02]), min_size=1,
                                  max_size=4)) for name in names}
    return {"watches": watches, "sleeps": sleeps,
            "reaction": draw(st.sampled_from([0.0, 0.05, 0.5, 2.0])),
            "wake": draw(st.sampled_from([0.05, 0.4, 1.5])),
            "turns": draw(st.integers(1, 5)), "concurrency": draw(st.sampled_from([1, 2, 8]))}


@settings(max_examples=25, deadline=None)
@given(street=streets(), mode=st.sampled_from(["threads", "asyncio"]),
       commutes=st.sampled_from([False, True, "as_of"]))
def test_out_of_order_changes_nothing_but_the_wall_clock(street: dict[str, Any], mode: str,
                                                          commutes: bool | str) -> None:
    """Whatever the street, and whatever the world says (its turns commute, it reads as of
    a time: three commit rules), out of order is the sequential run."""
    def digest(**options: Any) -> str:
        world, agents = society(street["watches"], street["sleeps"], commutes=commutes)
        engine = engine_for(world, agents, reaction=street["reaction"], wake=street["wake"],
                            concurrency=street["concurrency"], **options)
        return engine.run(max_turns=street["turns"]).digest

    reference = digest(mode="sequential")
    assert digest(mode=mode, out_of_order=True) == reference
    assert digest(mode=mode, dependencies=True) == reference


@pytest.mark.parametrize("mentions", [False, True])
def test_far_agents_run_further_ahead_of_a_slow_call_out_of_order(mentions: bool) -> None:
    """One slow first call; agents far from it act more turns while it is out.

    In timestamp order they cannot run more than one turn ahead: the kernel
    waits at the slow turn's resolution, and an agent's next turn starts only
    once its last one is resolved there. Out of order they commit their turns
    to the forward world, and each agent runs ahead as far as the agents
    within two hops of it let it (a turn waits for every earlier one near it).
    With mentions, a wake-up that a turn committed ahead gives an agent is
    folded into the wake-up predicted for it, as the kernel will fold it.
    """
    watches = ring(24)
    far = {f"a{i:02d}" for i in range(8, 17)}  # eight hops and more from a00
    turns = 4

    def run(out_of_order: bool) -> tuple[str, int]:
        gate = Gate("a00", far, needed=len(far) * turns, timeout=1.0)
        world, agents = society(watches, {}, gate=gate, mentions=mentions)
        engine = engine_for(world, agents, out_of_order=out_of_order, reaction=5.0, wake=0.2)
        result = engine.run(max_turns=turns)
        return result.digest, gate.before

    world, agents = society(watches, {}, mentions=mentions)
    reference = engine_for(world, agents, mode="sequential", reaction=5.0,
                           wake=0.2).run(max_turns=turns).digest
    ahead, further = run(True)
    in_order, nearer = run(False)
    assert ahead == in_order == reference
    assert nearer <= len(far)  # at most one turn each
    assert further > nearer


def test_where_turns_commute_the_far_agents_run_further_still() -> None:
    """A world that says its turns commute lets a turn in without waiting two hops.

    The same street and the same slow first call as above (no mentions), with
    inboxes in time order: said (World.commutes), the far agents act more turns
    while the slow call is out than where the same world does not say it (43
    against 29 when written), and more again where it reads as of a time too
    (World.observation_at: 67). The run is the sequential one each time.
    """
    watches = ring(24)
    far = {f"a{i:02d}" for i in range(6, 19)}
    turns = 6

    def run(commutes: str | bool) -> tuple[str, int]:
        gate = Gate("a00", far, needed=len(far) * turns, timeout=1.0)
        world, agents = society(watches, {}, gate=gate, commutes=commutes, mentions=False)
        engine = engine_for(world, agents, out_of_order=True, reaction=5.0, wake=0.2)
        return engine.run(max_turns=turns).digest, gate.before

    def sequential(commutes: str | bool) -> str:
        world, agents = society(watches, {}, commutes=commutes, mentions=False)
        return engine_for(world, agents, mode="sequential", reaction=5.0,
                          wake=0.2).run(max_turns=turns).digest

    said, further = run(True)
    quiet, nearer = run("quiet")
    as_of, furthest = run("as_of")
    assert said == quiet == sequential(True)
    assert as_of == sequential("as_of")  # another class: another digest
    assert further > nearer, (further, nearer)
    assert furthest > further, (furthest, further)


def run_or_stop(engine: EventEngine, turns: int) -> tuple[str, ConfigError | None]:
    """The run's digest, or the ConfigError that stopped it (and an empty digest)."""
    try:
        return engine.run(max_turns=turns).digest, None
    except ConfigError as exc:
        return "", exc


def shouters(watches: Mapping[str, Sequence[str]], sleeps: Mapping[str, Sequence[float]],
             commutes: bool | str) -> tuple[Street, list[Walker]]:
    world, walkers = society(watches, sleeps, commutes=commutes)
    return world, [Shouter(w.id, w.watchers, sleeps=w.sleeps) for w in walkers]


@pytest.mark.parametrize("commutes", [True, "claim", "as_of", "ignores"])
def test_a_world_that_says_its_turns_commute_and_does_not_stops_never_wrong(
        commutes: bool | str) -> None:
    """Every turn mentions every watcher, so inboxes fill from several sides at once.

    Sorted by time (it commutes, and says so): the sequential run. In order of
    arrival while commutes() says True: the check stops it, by name, or (where
    no turn happened to go in out of order) it is the sequential run.
    """
    stopped = 0
    rnd = random.Random(7)
    for _ in range(4):
        watches = ring(12, reach=2)
        sleeps = {n: [rnd.choice([0.0, 0.0, 0.002, 0.01]) for _ in range(3)] for n in watches}
        world, agents = shouters(watches, sleeps, commutes)
        digest, caught = run_or_stop(
            engine_for(world, agents, out_of_order=True, reaction=0.05, wake=0.3), 6)
        if caught is not None:
            assert commutes in ("claim", "ignores"), caught
            assert f"{type(world).__name__}.commutes() is True while what it shows depends" in (
                str(caught))
            if commutes == "ignores":
                assert "its observation_at() shows turns of the time it is given" in str(caught)
            stopped += 1
            continue
        world, agents = shouters(watches, sleeps, commutes)
        assert digest == engine_for(world, agents, mode="sequential", reaction=0.05,
                                    wake=0.3).run(max_turns=6).digest
    if commutes in ("claim", "ignores"):
        assert stopped  # at least one of them was caught (twelve of twelve when tried)


def test_a_world_whose_ids_are_global_stops_or_runs_right_never_wrong() -> None:
    watches = ring(10)
    sleeps = {"a00": [0.05, 0.0], "a05": [0.0, 0.03]}
    world, agents = society(watches, sleeps, global_ids=True)
    digest, stopped = run_or_stop(engine_for(world, agents, out_of_order=True), 4)
    if stopped is not None:
        assert "sees another world" in str(stopped)
    else:  # it ran: then it is the sequential run
        world, agents = society(watches, sleeps, global_ids=True)
        assert digest == engine_for(world, agents, mode="sequential").run(max_turns=4).digest


def test_a_checkpoint_keeps_every_turn_started_ahead() -> None:
    """Stop while far agents hold several turns started early; resume elsewhere: the same run."""
    watches = ring(24)
    far = {f"a{i:02d}" for i in range(8, 17)}
    world, agents = society(watches, {}, mentions=False)
    reference = engine_for(world, agents, mode="sequential", reaction=5.0,
                           wake=0.2).run(max_turns=4).digest
    gate = Gate("a00", far, needed=len(far) * 4, timeout=1.0)
    world, agents = society(watches, {}, gate=gate, mentions=False)
    engine = engine_for(world, agents, out_of_order=True, reaction=5.0, wake=0.2)
    # The kernel waits at the slow turn's end, before 0.4; turns start early up to 50.
    engine.run(max_turns=4, until=0.4, early_until=50.0)
    state = engine.state()
    assert state["early_more"]  # some agent holds more than one turn started early
    world, agents = society(watches, {}, mentions=False)
    resumed = engine_for(world, agents, out_of_order=True, reaction=5.0, wake=0.2)
    resumed.restore(state)
    assert resumed.run(max_turns=4).digest == reference


def test_out_of_order_is_a_step_option_and_must_be_a_boolean() -> None:
    base = ["sim.agents=6", "sim.world.local=true", "sim.engine.step.built_in=async_event",
            "sim.steps=3", "run.checkpoint_every=null"]
    config = load_config("examples/social/config.yaml",
                         [*base, "sim.engine.step.options.out_of_order=true"])
    assert config.sim.engine.step.options["out_of_order"] is True
    plain = load_config("examples/social/config.yaml", base)
    assert run_society(config, write=False).result.digest == run_society(
        plain, write=False).result.digest
    wrong = load_config("examples/social/config.yaml",
                        [*base, "sim.engine.step.options.out_of_order=maybe"])
    with pytest.raises(ConfigError, match=r"out_of_order must be true or false, got str 'maybe'"):
        run_society(wrong, write=False)
    with pytest.raises(ConfigError, match="out_of_order must be true or false"):
        EventEngine(Street({"a": []}), [], out_of_order=1)  # type: ignore[arg-type]


class Unsteady(Street):
    """A street that keeps a generator: it cannot be copied for the forward world."""

    def __init__(self, watches: Mapping[str, Sequence[str]]) -> None:
        super().__init__(watches)
        self.ticker = (i for i in range(10))

    _NOT_STATE = Street._NOT_STATE | {"ticker"}


class Unsure(Street):
    """A street whose commutes() answers neither True nor False."""

    def commutes(self) -> bool:
        return "yes"  # type: ignore[return-value]


@pytest.mark.parametrize(("kind", "size", "message"), [
    # The copy for the forward world is made first.
    (Unsteady, 8,
     r"^out_of_order: Unsteady cannot be copied for the forward world \(TypeError: "
     r".*generator"),
    (Unsure, 6,
     r"^Unsure\.commutes\(\) must return True or False, got str 'yes'$"),
], ids=["cannot be copied", "commutes not a boolean"])
def test_a_world_out_of_order_cannot_use_stops_before_any_turn(
        kind: type[Street], size: int, message: str) -> None:
    watches = ring(size)
    _, agents = society(watches, {})
    world = kind(watches)
    engine = engine_for(world, agents, out_of_order=True)
    with pytest.raises(ConfigError, match=message):
        engine.run(max_turns=3)
    assert world.events == 0  # no turn resolved, none paid


def test_out_of_order_without_dependencies_is_refused() -> None:
    world, agents = society(ring(4), {})
    with pytest.raises(ConfigError, match="out_of_order needs dependencies"):
        engine_for(world, agents, dependencies=False, out_of_order=True)
    config = load_config("examples/social/config.yaml",
                         ["sim.agents=6", "sim.world.local=true",
                          "sim.engine.step.built_in=async_event", "sim.steps=2",
                          "sim.engine.step.options.out_of_order=true",
                          "sim.engine.step.options.dependencies=false"])
    with pytest.raises(ConfigError, match=r"^sim\.engine\.step\.options\.out_of_order needs "
                                          r"sim\.engine\.step\.options\.dependencies"):
        run_society(config, write=False)


class Caller(Walker):
    """A walker that mentions every agent that watches it (*every*), or one now and then."""

    def __init__(self, name: str, watchers: Sequence[str], *, sleeps: Sequence[float],
                 every: bool) -> None:
        super().__init__(name, watchers, sleeps=sleeps)
        self.every = every

    def act(self, spec: ActionSpec) -> Any:
        text, picked = super().act(spec)
        return text, tuple(self.watchers) if self.every else picked


def callers(draw_seed: int) -> tuple[dict[str, Any], Any]:
    """A ring of callers drawn from *draw_seed*, and a maker of its world and agents."""
    rnd = random.Random(draw_seed)
    watches = ring(rnd.choice([12, 24, 40]), reach=rnd.choice([1, 2]))
    sleeps = {k: [rnd.choice([0.0, 0.0, 0.002, 0.01, 0.03]) for _ in range(3)] for k in watches}
    shape = {"commutes": rnd.choice([True, "as_of"]), "every": rnd.random() < 0.5,
             "reaction": rnd.choice([0.05, 0.2, 0.5]), "wake": rnd.choice([0.3, 1.0])}

    def make(sleep: bool = True) -> tuple[Street, list[Walker]]:
        """The world and its callers; *sleep* False: calls that take no wall-clock time
        (a sequential reference: its digest does not depend on them)."""
        world, walkers = society(watches, {}, commutes=shape["commutes"])
        return world, [Caller(w.id, w.watchers, sleeps=sleeps[w.id] if sleep else (),
                              every=shape["every"]) for w in walkers]

    return shape, make


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_streets_whose_turns_commute_run_the_sequential_run_whatever_wakes_whom(
        seed: int) -> None:
    """Rings of 12 to 40 agents whose turns commute (said, or read as of a time too), each
    mentioning every watcher or now and then: out of order is the sequential run, and no
    check stops it (a run of these once stopped: a wake-up folded into a turn committed
    ahead lowers the agent's next bound to that turn's end, which the bounds now count)."""
    shape, make = callers(seed)
    world, agents = make()
    ahead = engine_for(world, agents, out_of_order=True, reaction=shape["reaction"],
                       wake=shape["wake"], concurrency=16).run(max_turns=6).digest
    world, agents = make(sleep=False)
    assert ahead == engine_for(world, agents, mode="sequential", reaction=shape["reaction"],
                               wake=shape["wake"]).run(max_turns=6).digest


def test_a_turn_starts_early_at_a_wake_up_another_agent_gives_it_between_its_turns(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Woken by a neighbour's turn before its own next wake-up, an agent's next turn is
    predicted at that wake-up and starts early; the kernel then pushes that very wake-up
    (``_Runner.foreseen``) rather than refusing it, and the run is the sequential one."""
    from simulacra.societies import _events

    hits: list[bool] = []
    foreseen = _events._Runner.foreseen

    def counted(self: Any, *args: Any) -> bool:
        hits.append(foreseen(self, *args))
        return hits[-1]

    monkeypatch.setattr(_events._Runner, "foreseen", counted)
    for seed in range(8):
        shape, make = callers(seed)
        world, agents = make()
        ahead = engine_for(world, agents, out_of_order=True, reaction=shape["reaction"],
                           wake=shape["wake"], concurrency=16).run(max_turns=6).digest
        world, agents = make(sleep=False)
        assert ahead == engine_for(world, agents, mode="sequential",
                                   reaction=shape["reaction"],
                                   wake=shape["wake"]).run(max_turns=6).digest
    assert any(hits)  # some turn started early at such a wake-up
